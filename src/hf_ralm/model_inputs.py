"""What a retrieved passage puts in front of the text: the token ids written over the first positions of a window
(evaluation) or of a context (generation), and the window length that must hold it. One rule serves both, so
evaluation and generation see the same inputs.

Example:
    >>> passage = Passage("7", "Rome", "Rome is the capital of Italy.")
    >>> prefix = passage_prefix(tokenizer, passage, config)   # doctest: +SKIP
    >>> place_passage(window_ids, prefix)   # hf_ralm.windows: the window's input   # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from .configuration_ralm import RalmConfig
from .modeling_utils import resolve_max_length
from .retrieval.base import Passage
from .windows import Window, check_passage_room


def window_length(model, config: RalmConfig) -> int:
    """The window length ``L`` of ``model`` under ``config``: ``config.max_length`` capped at the model's maximum
    (the model's maximum when ``None``), refused (a ``ValueError`` naming the settings) when it cannot hold a passage
    of ``max_doc_tokens`` tokens and a stride (:func:`~hf_ralm.windows.check_passage_room`). Evaluation, generation
    and ``rerank-data`` all take ``L`` from here, so none puts a passage where the text it scores or generates should
    be.

    Example:
        >>> window_length(model, RalmConfig(max_length=512))        # doctest: +SKIP
        512
    """
    max_length = resolve_max_length(model, config.max_length)
    model_max = max_length if config.max_length is None or max_length < config.max_length else None
    check_passage_room(max_length, config.max_doc_tokens, config.retrieval_stride, model_max)
    return max_length


def passage_prefix(tokenizer, passage: Passage | None, config: RalmConfig) -> list[int]:
    """What a passage puts in front of the text: the passage encoded with the tokenizer's default special tokens and
    cut to ``max_doc_tokens`` (as the reference does); no passage puts nothing, or a lone BOS when
    ``config.bos_every_window`` is set (which also puts a BOS before a passage that lacks one)."""
    prefix: list[int] = []
    if passage is not None:
        text = config.passage_text(passage.title, passage.text)
        prefix = tokenizer.encode(text, max_length=config.max_doc_tokens, truncation=True)
    bos = tokenizer.bos_token_id if config.bos_every_window else None
    if bos is not None and (not prefix or prefix[0] != bos):
        prefix = [bos] + prefix[: config.max_doc_tokens - 1] if prefix else [bos]
    return prefix


def window_prefixes(
    tokenizer,
    windows: Sequence[Window],
    passages: Sequence[list[Passage]],
    config: RalmConfig,
    chosen: Sequence[int] | None = None,
) -> list[list[int]]:
    """What overwrites the start of each window: :func:`passage_prefix` of its passage ``chosen[w.index]`` (by
    default its top passage; a negative index or no passage: none; window 0 has none)."""
    def passage(w: Window) -> Passage | None:
        choice = 0 if chosen is None else chosen[w.index]
        found = passages[w.index]
        return found[choice] if w.has_retrieval and 0 <= choice < len(found) else None

    return [passage_prefix(tokenizer, passage(w), config) for w in windows]
