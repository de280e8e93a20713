"""What retrieved passages put in front of the text: the token ids written over the first positions of a window
(evaluation) or of a context (generation), within the window length the plan resolved
(:func:`~hf_ralm.core.plan.window_length`). One rule serves both, so
evaluation and generation see the same inputs.

Which of a window's retrieved passages go in context is :func:`context_indices` (``num_passages`` of them, the chosen
one first), and what they put there :func:`context_prefix`: ``[d_n; ...; d_2; d_1]``, the most relevant nearest
the text, each encoded as one passage alone is (:func:`passage_prefix`).

Example:
    >>> context_indices(chosen=0, num_found=5, num_passages=3), context_indices(2, 5, 3), context_indices(-1, 5, 3)
    ([0, 1, 2], [2, 0, 1], [])
    >>> prefix = context_prefix(tokenizer, [passage], config)   # one passage: passage_prefix   # doctest: +SKIP
    >>> place_passage(window_ids, prefix)   # hf_ralm.config.windows: the window's input                # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from ..config.configuration_ralm import RalmConfig
from ..config.passages import Passage
from ..config.windows import Window


PASSAGE_SEPARATOR = "\n\n"
"""What separates two passages in one context (the blank line that separates passages in QA prompts too), encoded
without special tokens."""


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


def context_indices(chosen: int, num_found: int, num_passages: int) -> list[int]:
    """Which of a window's ``num_found`` retrieved passages go in context, most relevant first: ``chosen``
    (retrieval's top, 0, or a reranker's choice), then the others in retrieval order, ``num_passages`` in all (all of
    them when fewer were found); none when ``chosen`` is negative (no passage chosen, or the gate closed).

    Example:
        >>> context_indices(1, num_found=2, num_passages=3)
        [1, 0]
    """
    if chosen < 0 or chosen >= num_found:
        return []
    return [chosen] + [i for i in range(num_found) if i != chosen][: num_passages - 1]


def context_prefix(tokenizer, passages: Sequence[Passage], config: RalmConfig) -> list[int]:
    """What ``passages`` (most relevant first) put in front of the text: ``[d_n; sep; ...; sep; d_1]``, each
    ``d_i`` its :func:`passage_prefix` (the tokenizer's special tokens included, cut to ``max_doc_tokens``) and
    ``sep`` the tokens of :data:`PASSAGE_SEPARATOR`, so the most relevant passage is nearest the text. No passage
    puts :func:`passage_prefix` of none, one passage exactly its :func:`passage_prefix`.

    ``config.context_doc_tokens`` (``max_context_doc_tokens``, at most and by default ``num_passages ×
    max_doc_tokens``) caps the whole: passages are taken from the most relevant on, each with the separator after
    it, while they fit; the first that does not fit whole is cut to the room left, keeping its beginning (as
    ``max_doc_tokens`` cuts a passage), and the rest are left out.

    Example::

        context_prefix(tokenizer, [rome, music], config)   # music's tokens, sep, rome's
    """
    if not passages:
        return passage_prefix(tokenizer, None, config)
    separator = tokenizer.encode(PASSAGE_SEPARATOR, add_special_tokens=False) if len(passages) > 1 else []
    room = config.context_doc_tokens
    prefix: list[int] = []
    for i, passage in enumerate(passages):
        part = (passage_prefix(tokenizer, passage, config) + (separator if i else []))[:room]
        room -= len(part)
        prefix = part + prefix
        if room == 0:
            break
    return prefix


def window_prefixes(
    tokenizer,
    windows: Sequence[Window],
    passages: Sequence[list[Passage]],
    config: RalmConfig,
    chosen: Sequence[int] | None = None,
) -> list[list[int]]:
    """What overwrites the start of each window: :func:`context_prefix` of its passages in context
    (:func:`context_indices` of ``chosen[w.index]``, by default its top passage, with ``config.num_passages``;
    a negative index or no passage: none; window 0 has none)."""
    def in_context(w: Window) -> list[Passage]:
        if not w.has_retrieval:
            return []
        found = passages[w.index]
        indices = context_indices(0 if chosen is None else chosen[w.index], len(found), config.num_passages)
        return [found[i] for i in indices]

    return [context_prefix(tokenizer, in_context(w), config) for w in windows]
