"""The arithmetic of In-Context RALM evaluation, as pure functions over token counts and id lists.

Everything here follows the paper's reference evaluation (``eval_lm.py`` of In-Context RALM):

* a text of ``n`` tokens is cut into windows that start every ``stride`` tokens and hold at most ``max_length``
  tokens; each window scores only the tokens the previous window did not reach, so every token but the first is
  scored exactly once;
* window 0 is evaluated without retrieval; every later window's query is the last ``query_length`` tokens before
  the first token it scores;
* a retrieved passage overwrites the first positions of the window, so the input keeps its length.

Examples:
    >>> [(w.begin, w.end, w.score_begin) for w in plan_windows(10, max_length=6, stride=2)]
    [(0, 6, 1), (2, 8, 6), (4, 10, 8)]
    >>> query_span(plan_windows(10, max_length=6, stride=2)[1], query_length=4)
    (2, 6)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from ..config.window_checks import check_window_overlap
from ..utils.checks import check_count
from .strides import query_start


@dataclass(frozen=True)
class Window:
    """One evaluation window: input tokens ``[begin, end)``, scored tokens ``[score_begin, end)``.

    Token 0 has no left context and is never scored, hence ``score_begin = max(prev_end, 1)``.

    Attributes:
        index: the window's place in its text's plan (window 0 is evaluated without retrieval).
        begin: the first input token.
        end: one past the last input token (and the last scored one).
        prev_end: the previous window's ``end`` (0 for the first window): the reference's ``begin_location``.

    Examples:
        >>> window = Window(index=1, begin=2, end=8, prev_end=6)
        >>> window.length, window.score_begin, window.num_scored, window.has_retrieval
        (6, 6, 2, True)
    """

    index: int
    begin: int
    end: int
    prev_end: int

    @property
    def length(self) -> int:
        """The input tokens: ``end - begin``."""
        return self.end - self.begin

    @property
    def score_begin(self) -> int:
        """The first scored token: ``max(prev_end, 1)``."""
        return max(self.prev_end, 1)

    @property
    def num_scored(self) -> int:
        """The tokens the window scores: ``end - score_begin``."""
        return self.end - self.score_begin

    @property
    def has_retrieval(self) -> bool:
        """Whether the window retrieves: every window but window 0, which is evaluated on the text alone, as in the
        paper."""
        return self.index > 0


def plan_windows(num_tokens: int, max_length: int, stride: int) -> list[Window]:
    """Cut ``num_tokens`` tokens into the reference's sliding windows.

    For ``begin`` in ``0, stride, 2*stride, ...``: ``end = min(begin + max_length, num_tokens)`` and the window
    scores ``[prev_end, end)``; planning stops after the window that reaches ``num_tokens``.

    Args:
        num_tokens: the text's tokens.
        max_length: the window length actually used (a config's ``max_length`` capped at the model's maximum:
            [`window_length`][hf_ralm.core.plan.window_length]).
        stride: ``s``, the tokens between two windows' starts (``retrieval_stride``).

    Returns:
        The windows, in order.

    Raises:
        SettingError: ``stride`` or ``max_length`` is not a count, or ``max_length`` is not larger than ``stride``
            (the windows would skip tokens).
        ValueError: fewer than 2 tokens (nothing to score).

    Examples:
        >>> [(w.begin, w.end, w.score_begin) for w in plan_windows(10, max_length=6, stride=2)]
        [(0, 6, 1), (2, 8, 6), (4, 10, 8)]
    """
    check_count("stride", stride)
    check_count("max_length", max_length)
    check_window_overlap(max_length, stride)
    if num_tokens < 2:
        raise ValueError(f"Need at least 2 tokens to score anything, got {num_tokens}. Is the dataset empty?")
    windows: list[Window] = []
    prev_end = 0
    for begin in range(0, num_tokens, stride):
        end = min(begin + max_length, num_tokens)
        windows.append(Window(index=len(windows), begin=begin, end=end, prev_end=prev_end))
        prev_end = end
        if end == num_tokens:
            break
    return windows


def plan_settings(ends: Sequence[int]) -> tuple[int | None, int | None, int] | None:
    """The plan whose windows end where a retrieval file's do: how the file says what it was made with.

    Args:
        ends: the windows' ends, in order.

    Returns:
        ``(stride, max_length, num_tokens)`` of the [`plan_windows`][hf_ralm.plan_windows] whose windows end at
            ``ends``, as far as they tell: one window leaves the stride and length open (``None``), two the stride;
            ``None`` when no plan gives these ends (they are not sliding windows).

    Examples:
        >>> plan_settings([w.end for w in plan_windows(30, max_length=10, stride=4)])
        (4, 10, 30)
        >>> plan_settings([10, 30]), plan_settings([5, 3])
        ((None, 10, 30), None)
    """
    if not ends:
        return None
    num_tokens = ends[-1]
    if len(ends) == 1:
        return None, None, num_tokens
    max_length = ends[0]
    if len(ends) == 2:
        return (None, max_length, num_tokens) if 0 < max_length < num_tokens else None
    stride = ends[1] - ends[0]
    if not 0 < stride < max_length or num_tokens < 2:
        return None
    planned = [w.end for w in plan_windows(num_tokens, max_length, stride)]
    return (stride, max_length, num_tokens) if planned == list(ends) else None


def query_span(window: Window, query_length: int) -> tuple[int, int] | None:
    """The tokens of a window's retrieval query.

    Args:
        window: the window.
        query_length: ``ℓ``, the query's tokens: the last before the window's first scored token.

    Returns:
        Their span ``[start, stop)``, or ``None`` for window 0 (no retrieval).

    Raises:
        SettingError: ``query_length`` is not a count.

    Examples:
        >>> query_span(plan_windows(10, max_length=6, stride=2)[1], query_length=4)
        (2, 6)
    """
    check_count("query_length", query_length)
    if not window.has_retrieval:
        return None
    return query_start(window.prev_end, query_length), window.prev_end


def place_passage(window_ids: Sequence[int], passage_ids: Sequence[int]) -> list[int]:
    """Overwrite the first positions of a window with the passage, keeping the window's length.

    A passage longer than the window would fill the whole window; evaluation never gives one, since its window
    length holds a passage and a stride ([`check_prefix_room`][hf_ralm.config.window_checks.check_prefix_room]).

    Args:
        window_ids: the window's tokens.
        passage_ids: the prefix written over its first positions.

    Returns:
        The window's input, as long as the window.

    Examples:
        >>> place_passage([5, 6, 7, 8], [1, 2])
        [1, 2, 7, 8]
    """
    width = min(len(passage_ids), len(window_ids))
    return list(passage_ids[:width]) + list(window_ids[width:])
