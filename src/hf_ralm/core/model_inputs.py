"""What retrieved passages put in front of the text: the token ids written over the first positions of a window
(evaluation) or of a context (generation), within the window length the plan resolved
([`window_length`][hf_ralm.core.plan.window_length]). One rule serves both, so
evaluation and generation see the same inputs.

Which of a window's retrieved passages go in context is [`context_indices`][hf_ralm.core.model_inputs.context_indices]
(``num_passages`` of them, the chosen one first), and what they put there
[`context_prefix`][hf_ralm.core.model_inputs.context_prefix]: ``[d_n; ...; d_2; d_1]``, the most relevant nearest the
text, each encoded as one passage alone is ([`passage_prefix`][hf_ralm.passage_prefix]).

Examples:
    >>> context_indices(chosen=0, num_found=5, num_passages=3), context_indices(2, 5, 3), context_indices(-1, 5, 3)
    ([0, 1, 2], [2, 0, 1], [])
    >>> prefix = context_prefix(tokenizer, [passage], config)   # one passage: passage_prefix   # doctest: +SKIP
    >>> place_passage(window_ids, prefix)   # hf_ralm.core.windows: the window's input                # doctest: +SKIP
"""

from __future__ import annotations

from typing import Sequence

from ..config.configuration_ralm import RalmConfig
from .passages import Passage
from .windows import Window


PASSAGE_SEPARATOR = "\n\n"
"""What separates two passages in one context (the blank line that separates passages in QA prompts too), encoded
without special tokens."""


def passage_prefix(tokenizer, passage: Passage | None, config: RalmConfig) -> list[int]:
    """What one passage puts in front of the text.

    Args:
        tokenizer: the reader's tokenizer.
        passage: the passage, or ``None`` for none.
        config: the settings: ``passage_template`` makes the passage's text, ``max_doc_tokens`` cuts it and
            ``bos_every_window`` puts a BOS in front.

    Returns:
        The passage's text encoded with the tokenizer's default special tokens and cut to ``max_doc_tokens`` tokens
            (as the reference does); for no passage nothing, or a lone BOS when ``config.bos_every_window`` is set
            (which also puts a BOS before a passage that lacks one).

    Examples:
        ```python
        passage_prefix(tokenizer, Passage(id="1", title="Rome", text="Rome is ..."), RalmConfig(max_doc_tokens=8))
        ```
    """
    prefix: list[int] = []
    if passage is not None:
        text = config.passage_text(passage.title, passage.text)
        prefix = tokenizer.encode(text, max_length=config.max_doc_tokens, truncation=True)
    bos = tokenizer.bos_token_id if config.bos_every_window else None
    if bos is not None and (not prefix or prefix[0] != bos):
        prefix = [bos] + prefix[: config.max_doc_tokens - 1] if prefix else [bos]
    return prefix


def context_indices(chosen: int, num_found: int, num_passages: int) -> list[int]:
    """Which of a window's retrieved passages go in context, most relevant first.

    Args:
        chosen: the passage chosen: retrieval's top (0) or a reranker's choice; negative for none (no passage chosen,
            or the gate closed).
        num_found: the passages retrieved for the window.
        num_passages: how many go in context (``num_passages``, or ``ensemble_size`` for an ensemble's members).

    Returns:
        The indices of the passages in context: ``chosen``, then the others in retrieval order, ``num_passages`` in
            all (all of them when fewer were found); none when ``chosen`` is negative or not among those found.

    Examples:
        >>> context_indices(1, num_found=2, num_passages=3)
        [1, 0]
    """
    if chosen < 0 or chosen >= num_found:
        return []
    return [chosen] + [i for i in range(num_found) if i != chosen][: num_passages - 1]


def context_prefix(tokenizer, passages: Sequence[Passage], config: RalmConfig) -> list[int]:
    """What ``passages`` put in front of the text: ``[d_n; sep; ...; sep; d_1]``, the most relevant nearest the text.

    Each ``d_i`` is its [`passage_prefix`][hf_ralm.passage_prefix] (the tokenizer's special tokens included, cut to
    ``max_doc_tokens``) and ``sep`` the tokens of a blank line (``PASSAGE_SEPARATOR``, encoded without special
    tokens). No passage puts [`passage_prefix`][hf_ralm.passage_prefix] of none, one passage exactly its
    [`passage_prefix`][hf_ralm.passage_prefix].

    ``config.context_doc_tokens`` (``max_context_doc_tokens``, at most and by default ``num_passages ×
    max_doc_tokens``) caps the whole: passages are taken from the most relevant on, each with the separator after
    it, while they fit; the first that does not fit whole is cut to the room left, keeping its beginning (as
    ``max_doc_tokens`` cuts a passage), and the rest are left out.

    Args:
        tokenizer: the reader's tokenizer.
        passages: the passages in context, most relevant first
            ([`context_indices`][hf_ralm.core.model_inputs.context_indices] picks them).
        config: the settings (``passage_template``, ``max_doc_tokens``, ``max_context_doc_tokens``,
            ``bos_every_window``).

    Returns:
        The token ids written over the first positions of the window or context.

    Examples:
        ```python
        context_prefix(tokenizer, [rome, music], config)   # music's tokens, sep, rome's
        ```
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
    """What overwrites the start of each window: the prefix of its passages in context.

    Args:
        tokenizer: the reader's tokenizer.
        windows: the windows.
        passages: each window's retrieved passages, by window index.
        config: the settings (``num_passages`` and what [`context_prefix`][hf_ralm.core.model_inputs.context_prefix]
            reads).
        chosen: per window index, the passage chosen (a reranker's; negative: none); by default each window's top.

    Returns:
        Per window, [`context_prefix`][hf_ralm.core.model_inputs.context_prefix] of its passages in context
            ([`context_indices`][hf_ralm.core.model_inputs.context_indices] of its chosen passage, ``num_passages`` in
            all); window 0, and a window without a passage, get the prefix of none.

    Examples:
        ```python
        prefixes = window_prefixes(tokenizer, plan.windows, plan.candidates(plan.windows, 1), config)
        nll = score_windows(model, plan.ids, plan.windows, prefixes)
        ```
    """
    def in_context(w: Window) -> list[Passage]:
        if not w.has_retrieval:
            return []
        found = passages[w.index]
        indices = context_indices(0 if chosen is None else chosen[w.index], len(found), config.num_passages)
        return [found[i] for i in indices]

    return [context_prefix(tokenizer, in_context(w), config) for w in windows]
