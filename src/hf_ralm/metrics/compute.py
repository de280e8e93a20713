"""What the ``ralm_perplexity`` metric computes, kept in the package so the metric script stays a thin shell."""

from __future__ import annotations

from typing import Sequence

from ..configuration_ralm import RalmConfig
from ..data import join_rows


def compute_ralm_perplexity(
    predictions: Sequence[str],
    model_id: str,
    retriever: str = "none",
    index_dir: str | None = None,
    corpus: str | None = None,
    forbidden_titles: str | None = None,
    stride: int = RalmConfig.retrieval_stride,
    query_length: int | None = None,
    max_length: int | None = None,
    max_doc_tokens: int = RalmConfig.max_doc_tokens,
    max_eval_tokens: int | None = None,
    dtype: str = "float32",
    batch_size: int = 8,
    bos_every_window: bool = RalmConfig.bos_every_window,
    device: str | None = None,
) -> dict:
    """The figures of In-Context RALM perplexity for ``predictions`` joined into one text. The settings are
    :class:`RalmConfig`'s (``stride`` is ``retrieval_stride``; ``query_length=None``: the retriever's default)."""
    import torch

    from ..modeling_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(
        model_id, retriever=retriever, index_dir=index_dir, corpus=corpus, forbidden_titles=forbidden_titles,
        retrieval_stride=stride, query_length=query_length, max_length=max_length, max_doc_tokens=max_doc_tokens,
        bos_every_window=bos_every_window, dtype=getattr(torch, dtype),
    )
    model.language_model.to(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    result = model.evaluate_perplexity(join_rows(predictions), max_eval_tokens=max_eval_tokens,
                                       batch_size=batch_size, show_progress=False)
    keys = ("nll_sum", "num_tokens", "num_scored", "num_words", "token_ppl", "word_ppl")
    return {k: result.figures[k] for k in keys}
