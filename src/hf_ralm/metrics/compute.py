"""What the ``ralm_perplexity`` metric computes, kept in the package so the metric script stays a thin shell."""

from __future__ import annotations

import math
import warnings
from typing import Sequence

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..config.configuration_ralm import RalmConfig
from ..core.data import join_rows
from ..errors import RalmWarning, setting
from ..core.plan import tokenize_text
from ..utils.checks import check_texts

JOINED_KEYS = ("nll_sum", "num_tokens", "num_scored", "num_words", "token_ppl", "word_ppl")
"""The figures of the predictions joined into one text, as ``hf-ralm eval-lm`` reports them."""


def prediction_perplexity(model, text: str, **kwargs) -> tuple[float, int | None]:
    """One prediction's perplexity on its own, as ``evaluate``'s ``perplexity`` defines it, with In-Context RALM's
    retrieval inside the text.

    Args:
        model: the RALM.
        text: the prediction.
        **kwargs: what [`evaluate_perplexity`][hf_ralm.RetrievalAugmentedModel.evaluate_perplexity] takes
            (``max_eval_tokens`` cuts the prediction first).

    Returns:
        ``exp`` of the mean NLL of its scored tokens (every token after its first), and its windows with a passage in
            context; ``(nan, None)`` for a prediction with nothing to score (fewer than two tokens, or only whitespace).
    """
    max_eval_tokens = kwargs.pop("max_eval_tokens", None)
    ids = tokenize_text(model.tokenizer, text, max_eval_tokens) if text.strip() else []
    if len(ids) < 2:
        return float("nan"), None
    figures = model.evaluate_perplexity(ids, **kwargs).figures
    return math.exp(figures["nll_sum"] / figures["num_scored"]), figures["num_windows_with_passage"]


def compute_ralm_perplexity(
    predictions: Sequence[str],
    model_id: str,
    retriever: str = "none",
    index_dir: str | None = None,
    corpus: str | None = None,
    *,
    forbidden_titles: str | None = None,
    stride: int = RalmConfig.retrieval_stride,
    query_length: int | None = None,
    max_length: int | None = None,
    max_doc_tokens: int = RalmConfig.max_doc_tokens,
    max_eval_tokens: int | None = None,
    dtype: str = "float32",
    batch_size: int = DEFAULT_BATCH_SIZE,
    bos_every_window: bool = RalmConfig.bos_every_window,
    device: str | None = None,
) -> dict:
    """The figures of In-Context RALM perplexity: what the ``ralm_perplexity`` metric computes.

    Args:
        predictions: the texts.
        model_id: the reader (a Hub id or a folder).
        retriever: the retriever's name (``"none"``: no retrieval).
        index_dir: its index folder.
        corpus: its corpus (an index is built from it when missing).
        forbidden_titles: the titles never retrieved (a file, or a known name such as ``wikitext-103``).
        stride: ``retrieval_stride``.
        query_length: ``ℓ`` (``None``: the retriever's default).
        max_length: the window length (``None``: the model's maximum).
        max_doc_tokens: a passage's most tokens.
        max_eval_tokens: evaluate only the first this many tokens.
        dtype: the reader's precision, a torch dtype's name.
        batch_size: the windows scored in one forward pass.
        bos_every_window: a BOS at the start of every window.
        device: where the reader runs (``None``: the accelerator when there is one).

    Returns:
        The figures of ``predictions`` joined into one text ([`JOINED_KEYS`][hf_ralm.metrics.compute.JOINED_KEYS], the
            paper's), and of each prediction on its own (``perplexities``,
            [`prediction_perplexity`][hf_ralm.metrics.compute.prediction_perplexity]) with their mean over the
            predictions that have one (``mean_perplexity``; NaN when none has), as ``evaluate``'s ``perplexity`` gives
            them.

    Raises:
        InputTypeError: ``predictions`` are no list of texts (``None``, a single text, an item that is no text),
            refused in one line before the model is loaded ([`check_texts`][hf_ralm.utils.checks.check_texts]).
        SettingError: ``predictions`` is empty, or a setting is wrong.
    """
    import torch

    from ..modeling_ralm import RetrievalAugmentedModel

    predictions = check_texts("predictions", predictions)  # before a model is loaded

    model = RetrievalAugmentedModel.from_pretrained(
        model_id, retriever=retriever, index_dir=index_dir, corpus=corpus, forbidden_titles=forbidden_titles,
        retrieval_stride=stride, query_length=query_length, max_length=max_length, max_doc_tokens=max_doc_tokens,
        bos_every_window=bos_every_window, dtype=getattr(torch, dtype), device=device,
    )
    settings = {"max_eval_tokens": max_eval_tokens, "batch_size": batch_size, "show_progress": False}
    result = model.evaluate_perplexity(join_rows(predictions), **settings)
    with warnings.catch_warnings():  # a short prediction's "no retrieval happened": said once for all, below
        warnings.simplefilter("ignore", RalmWarning)
        scored = [prediction_perplexity(model, text, **settings) for text in predictions]
    without = sum(1 for _, with_passage in scored if with_passage == 0)
    if retriever != "none" and without:
        warnings.warn(RalmWarning(f"{without} of {len(predictions)} predictions had no passage in context (a text's "
                                  f"first window, {setting('max_length')} tokens, retrieves nothing): their "
                                  "perplexities are the plain model's."), stacklevel=2)
    perplexities = [perplexity for perplexity, _ in scored]
    finite = [p for p in perplexities if not math.isnan(p)]
    return {**{k: result.figures[k] for k in JOINED_KEYS}, "perplexities": perplexities,
            "mean_perplexity": sum(finite) / len(finite) if finite else float("nan")}
