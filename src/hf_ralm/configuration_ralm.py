"""``RalmConfig``: the few settings In-Context RALM adds on top of a frozen causal LM."""

from __future__ import annotations

from huggingface_hub.dataclasses import strict
from transformers import AutoConfig, PreTrainedConfig

from .retrieval.base import PASSAGE_TEMPLATE, passage_text


@strict
class RalmConfig(PreTrainedConfig):
    r"""Settings of In-Context RALM (Ram et al., 2023); the defaults are the paper's.

    Args:
        base_model_name_or_path: Hub id or folder of the wrapped causal LM (its weights are never copied).
        retrieval_stride: ``s``, retrieve every this many tokens (the paper's best trade-off: 4).
        query_length: ``ℓ``, the retrieval query is the last this many tokens of the prefix (32 for BM25).
        max_doc_tokens: a passage is cut to this many tokens before it is put in context.
        max_length: window length ``L``; ``None`` means the base model's maximum.
        num_docs: passages retrieved per query (the top one is put in context).
        passage_template: how a passage with a title becomes text; a passage without a title is its text alone.
        bos_every_window: put the tokenizer's BOS at the start of *every* window, retrieved or not. The reference
            (default ``False``) gives only windows with a passage a BOS (the passage is encoded with special tokens),
            which flatters retrieval for BOS-sensitive models such as Gemma.

    Example:
        >>> config = RalmConfig(base_model_name_or_path="facebook/opt-125m", retrieval_stride=8)
        >>> config.query_length
        32
    """

    model_type = "ralm"

    base_model_name_or_path: str | None = None
    retrieval_stride: int = 4
    query_length: int = 32
    max_doc_tokens: int = 256
    max_length: int | None = None
    num_docs: int = 1
    passage_template: str = PASSAGE_TEMPLATE
    bos_every_window: bool = False

    def validate_ralm_settings(self) -> None:
        for name, flag in (
            ("retrieval_stride", "--stride"),
            ("query_length", "--query-length"),
            ("max_doc_tokens", "--max-doc-tokens"),
            ("num_docs", "--num-docs"),
        ):
            value = getattr(self, name)
            if value < 1:
                raise ValueError(f"{name} ({flag}) must be at least 1, got {value}.")
        if self.max_length is not None and self.max_length <= self.retrieval_stride:
            raise ValueError(
                f"max_length ({self.max_length}) must be larger than retrieval_stride ({self.retrieval_stride})."
            )

    def passage_text(self, title: str | None, text: str) -> str:
        """The text put in context for a passage (``title + "\\n" + text`` by default)."""
        return passage_text(title, text, self.passage_template)


AutoConfig.register("ralm", RalmConfig)

RALM_FIELDS = frozenset(
    (
        "base_model_name_or_path",
        "retrieval_stride",
        "query_length",
        "max_doc_tokens",
        "max_length",
        "num_docs",
        "passage_template",
        "bos_every_window",
    )
)
