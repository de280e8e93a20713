"""The rules of docs/conventions.md written out plainly, one small function each, for the plain loops of
[`hf_ralm.testing`][hf_ralm.testing]. None of them comes from the code they check: the passage encoding here is its own,
not [`hf_ralm.core.model_inputs.passage_prefix`][hf_ralm.passage_prefix]; the ranking span, the ties, the no-passage
margin and the random choice are not [`hf_ralm.selection`][hf_ralm.selection]'s. Only values and arithmetic are shared
([`Passage`][hf_ralm.Passage], [`Window`][hf_ralm.Window], [`RalmConfig`][hf_ralm.RalmConfig]'s settings).

Examples:
    >>> from hf_ralm.core.windows import plan_windows
    >>> window = plan_windows(100, max_length=32, stride=4)[3]   # tokens [12, 44), scores [40, 44)
    >>> ranking_positions(window, 16), ranking_positions(window, 50), target_positions(window)
    (range(24, 40), range(13, 40), range(40, 44))
    >>> write_over([5, 6, 7, 8], [2, 9]), spec_choice([3.0, 1.5, 1.5]), spec_choice([3.0, 2.0, 2.5], margin=1.0)
    ([2, 9, 7, 8], 1, 2)
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..config.configuration_ralm import RalmConfig
from ..core.passages import Passage
from ..core.windows import Window

PASSAGE_SEPARATOR = "\n\n"
"""Between two passages in one context: the tokens of a blank line, encoded without special tokens."""

LM_GATE_MARGIN = 2.0
"""The lm gate's margin in nats when ``gate_threshold`` is ``None`` (docs/conventions.md, "Retrieval gates")."""


def spec_passage_ids(tokenizer, passage: Passage | None, config: RalmConfig) -> list[int]:
    """What one passage puts in front of the text, as docs/conventions.md says.

    Args:
        tokenizer: the reader's tokenizer.
        passage: the passage (``None``: none).
        config: ``passage_template``, ``max_doc_tokens`` and ``bos_every_window``.

    Returns:
        Its text (``title + "\\n" + text`` through ``config.passage_template``, the text alone without a title)
            encoded with the tokenizer's default special tokens and truncated to ``max_doc_tokens`` by the tokenizer (as
            the paper's code does); nothing for no passage. With ``bos_every_window``, whatever does not start with the
            tokenizer's BOS gets one in front (no passage: a lone BOS), still within ``max_doc_tokens``.

    Examples:
        ```python
        spec_passage_ids(tokenizer, Passage("1", "rome", "the city"), RalmConfig(max_doc_tokens=2))
        # [<bos>, rome] with a tokenizer that adds a BOS, [rome, the] without
        ```
    """
    ids: list[int] = []
    if passage is not None:
        text = config.passage_template.format(title=passage.title, text=passage.text) if passage.title else passage.text
        ids = tokenizer(text, max_length=config.max_doc_tokens, truncation=True)["input_ids"]
    bos = tokenizer.bos_token_id
    if config.bos_every_window and bos is not None and ids[:1] != [bos]:
        ids = ([bos] + ids)[: config.max_doc_tokens]
    return ids


def spec_prefix(tokenizer, passages: Sequence[Passage], config: RalmConfig,
                separator: str = PASSAGE_SEPARATOR) -> list[int]:
    """What several passages put in front of the text: ``[d_n; sep; ...; sep; d_1]``.

    Each ``d_i`` is one passage's [`spec_passage_ids`][hf_ralm.testing.spec.spec_passage_ids]; their total,
    separators included, is capped by ``max_context_doc_tokens`` (at most and by default ``num_passages ×
    max_doc_tokens``): taken from the most relevant on, each with the separator after it, the first that does not fit
    cut to the room left, the rest left out.

    Args:
        tokenizer: the reader's tokenizer.
        passages: the passages, most relevant first.
        config: the settings of the passages' encoding and cap.
        separator: the text between two passages.

    Returns:
        The token ids; for no passage, [`spec_passage_ids`][hf_ralm.testing.spec.spec_passage_ids] of none.
    """
    if not passages:
        return spec_passage_ids(tokenizer, None, config)
    sep = tokenizer(separator, add_special_tokens=False)["input_ids"]
    cap = config.num_passages * config.max_doc_tokens
    cap = cap if config.max_context_doc_tokens is None else min(cap, config.max_context_doc_tokens)
    kept: list[list[int]] = []
    used = 0
    for i, passage in enumerate(passages):  # most relevant first
        if used >= cap:
            break
        kept.append((spec_passage_ids(tokenizer, passage, config) + (sep if i > 0 else []))[: cap - used])
        used += len(kept[-1])
    return [t for segment in reversed(kept) for t in segment]


def write_over(text: Sequence[int], prefix: Sequence[int]) -> list[int]:
    """A window's input with its prefix.

    Args:
        text: the window's tokens.
        prefix: what overwrites its first positions.

    Returns:
        The input, as long as ``text``.
    """
    return (list(prefix) + list(text[len(prefix) :]))[: len(text)]


def ranking_positions(window: Window, rerank_tokens: int) -> range:
    """The text positions an LM ranks a window's candidates on.

    Args:
        window: the window.
        rerank_tokens: ``s'``, the ranking tokens.

    Returns:
        The last ``rerank_tokens`` positions before its first scored token, never the window's first token (each
            needs the one before it in the window).
    """
    return range(max(window.begin + 1, window.score_begin - rerank_tokens), window.score_begin)


def target_positions(window: Window) -> range:
    """The tokens a window scores (what the oracle ranks on).

    Args:
        window: the window.

    Returns:
        Their positions.
    """
    return range(window.score_begin, window.end)


def spec_choice(nlls: Sequence[float], margin: float | None = None) -> int:
    """The candidate with the lowest summed NLL, ties going to the better retrieval rank (the earlier one).

    Args:
        nlls: the candidates' summed NLLs, in retrieval order.
        margin: when given, the last candidate is no passage: the best passage is chosen over it only when it saves
            at least ``margin`` nats (``NLL(no passage) - NLL(passage) >= margin``).

    Returns:
        The chosen candidate's index.
    """
    passages = len(nlls) - (margin is not None)
    best = min(range(passages), key=lambda i: (nlls[i], i))
    return best if margin is None or nlls[-1] - nlls[best] >= margin else len(nlls) - 1


def spec_random_choice(seed: int, key: int, num_candidates: int) -> int:
    """``rerank="random"``'s choice, whatever the batching.

    Args:
        seed: ``rerank_seed``.
        key: the window's index in evaluation (in generation, ``crc32(prompt ids) · 2**32 + stride index``).
        num_candidates: ``k``.

    Returns:
        ``numpy.random.default_rng([seed, key]).integers(num_candidates)``.
    """
    return int(np.random.default_rng([seed, key]).integers(num_candidates))


def lm_gate_margin(config: RalmConfig) -> float:
    """The nats a passage must save over none for the lm gate to keep it.

    Args:
        config: the settings.

    Returns:
        ``gate_threshold``, or 2 nats when it is ``None``.
    """
    return LM_GATE_MARGIN if config.gate_threshold is None else config.gate_threshold
