"""Exhaustive tests of the window arithmetic (hf_ralm.core.windows), checked against the paper's ``eval_lm.py``
loop."""

from __future__ import annotations

import math
import re

import pytest

from hf_ralm.core.windows import Window, place_passage, plan_windows, query_span
from hf_ralm.utils.checks import check_count
from hf_ralm.core.perplexity import count_words, perplexity_figures
from hf_ralm.core.data import join_rows


def reference_loop(n: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """The paper's loop, transcribed: ``(begin_loc, end_loc, prev_end_loc)`` of every window."""
    out = []
    prev_end_loc = 0
    for begin_loc in range(0, n, stride):
        end_loc = min(begin_loc + max_length, n)
        out.append((begin_loc, end_loc, prev_end_loc))
        prev_end_loc = end_loc
        if end_loc == n:
            break
    return out


@pytest.mark.parametrize("L", range(2, 13))
def test_plan_windows_exhaustive(L):
    for n in range(2, 41):
        for s in range(1, L):
            windows = plan_windows(n, max_length=L, stride=s)
            where = f"n={n} L={L} s={s}"
            assert windows, where
            # indices, starts at 0, s, 2s, ...
            assert [w.index for w in windows] == list(range(len(windows))), where
            assert [w.begin for w in windows] == [i * s for i in range(len(windows))], where
            # end = min(begin + L, n); length <= L; last window ends at n, and only the last one
            for w in windows:
                assert w.end == min(w.begin + L, n), where
                assert w.length == w.end - w.begin <= L, where
                assert w.length >= 1, where
            assert windows[-1].end == n, where
            assert all(w.end < n for w in windows[:-1]), where
            # prev_end chaining
            assert windows[0].prev_end == 0, where
            for prev, w in zip(windows, windows[1:]):
                assert w.prev_end == prev.end, where
                assert w.end > prev.end, where  # every window scores something
            # every token but token 0 is scored exactly once
            counts = [0] * n
            for w in windows:
                assert w.score_begin == max(w.prev_end, 1), where
                assert w.num_scored == w.end - w.score_begin >= 1, where
                # scored tokens have at least one token of context inside the window
                assert w.begin < w.score_begin, where
                for t in range(w.score_begin, w.end):
                    counts[t] += 1
            assert counts == [0] + [1] * (n - 1), where
            assert sum(w.num_scored for w in windows) == n - 1, where
            # the same windows as the reference's loop
            assert [(w.begin, w.end, w.prev_end) for w in windows] == reference_loop(n, L, s), where
            # only window 0 is evaluated without retrieval
            assert [w.has_retrieval for w in windows] == [False] + [True] * (len(windows) - 1), where


def test_plan_windows_docstring_example():
    windows = plan_windows(10, max_length=6, stride=2)
    assert [(w.begin, w.end, w.score_begin) for w in windows] == [(0, 6, 1), (2, 8, 6), (4, 10, 8)]
    assert windows[1].num_scored == 2
    assert windows[0].num_scored == 5


def test_text_shorter_than_window_is_one_window():
    windows = plan_windows(5, max_length=12, stride=4)
    assert len(windows) == 1
    w = windows[0]
    assert (w.begin, w.end, w.prev_end, w.score_begin, w.num_scored) == (0, 5, 0, 1, 4)
    assert not w.has_retrieval


def test_window_is_frozen():
    w = Window(index=0, begin=0, end=4, prev_end=0)
    with pytest.raises(Exception):
        w.end = 5  # type: ignore[misc]


@pytest.mark.parametrize("L", range(2, 13))
def test_query_span_exhaustive(L):
    for n in range(2, 41):
        for s in range(1, L):
            windows = plan_windows(n, L, s)
            for ql in (1, 2, 3, 5, 32):
                assert query_span(windows[0], ql) is None
                for w in windows[1:]:
                    span = query_span(w, ql)
                    assert span == (max(0, w.prev_end - ql), w.prev_end)
                    start, stop = span
                    # the query ends right before the first scored token and never looks into the future
                    assert stop == w.score_begin
                    assert stop - start == min(ql, w.prev_end)


def test_query_span_values():
    windows = plan_windows(10, max_length=6, stride=2)
    assert query_span(windows[1], 4) == (2, 6)
    assert query_span(windows[1], 100) == (0, 6)
    assert query_span(windows[2], 1) == (7, 8)


@pytest.mark.parametrize("bad", [0, -1, -32])
def test_query_span_rejects_bad_query_length(bad):
    w = plan_windows(10, 6, 2)[1]
    with pytest.raises(ValueError, match=rf"^query_length must be at least 1, got {bad}\.$"):
        query_span(w, bad)


def test_query_span_rejects_bad_query_length_even_for_window_0():
    with pytest.raises(ValueError, match="query_length"):
        query_span(plan_windows(10, 6, 2)[0], 0)


def test_place_passage_overwrites_and_keeps_length():
    window = [10, 11, 12, 13, 14, 15]
    assert place_passage(window, [1, 2]) == [1, 2, 12, 13, 14, 15]
    assert place_passage(window, []) == window
    assert place_passage(window, [7] * 6) == [7] * 6
    # a passage longer than the window fills the whole window (its first tokens)
    assert place_passage(window, list(range(100, 110))) == [100, 101, 102, 103, 104, 105]
    # inputs are not modified, tuples and ranges accepted
    assert window == [10, 11, 12, 13, 14, 15]
    assert place_passage((1, 2, 3), range(5, 6)) == [5, 2, 3]


def test_place_passage_exhaustive_lengths():
    for width in range(1, 10):
        window = list(range(100, 100 + width))
        for plen in range(0, 14):
            passage = list(range(plen))
            out = place_passage(window, passage)
            assert len(out) == width
            k = min(plen, width)
            assert out[:k] == passage[:k]
            assert out[k:] == window[k:]


def test_join_rows():
    assert join_rows(["a b", "", "c"]) == "a b \nc"
    assert join_rows(["", ""]) == " \n \n"
    assert join_rows([]) == ""
    assert join_rows(iter([" = Title = \n", "", " text .\n"])) == " = Title = \n \n text .\n"


def test_count_words_counts_spaces():
    assert count_words("") == 0
    assert count_words("word") == 0
    assert count_words("a b c") == 2
    assert count_words(" a  b ") == 4
    assert count_words("a\nb\tc") == 0  # only spaces count, as in the reference
    assert count_words(join_rows(["x y", ""])) == 2


def test_perplexity_figures_formulas():
    f = perplexity_figures(nll_sum=12.5, num_tokens=10, num_scored=9, num_words=5)
    assert f == {
        "nll_sum": 12.5,
        "num_tokens": 10,
        "num_scored": 9,
        "num_words": 5,
        "token_ppl": pytest.approx(math.exp(1.25)),
        "word_ppl": pytest.approx(math.exp(2.5)),
    }
    # both divide by counts of the *whole* text, not by the scored tokens
    assert f["token_ppl"] != pytest.approx(math.exp(12.5 / 9))
    assert isinstance(f["nll_sum"], float) and isinstance(f["num_tokens"], int)


def test_perplexity_figures_without_words_is_nan():
    f = perplexity_figures(3.0, 4, 3, 0)
    assert math.isnan(f["word_ppl"])
    assert f["token_ppl"] == pytest.approx(math.exp(0.75))


def test_perplexity_figures_zero_nll():
    f = perplexity_figures(0.0, 7, 6, 3)
    assert f["token_ppl"] == 1.0 and f["word_ppl"] == 1.0


@pytest.mark.parametrize("stride", [0, -1, -5])
def test_plan_windows_rejects_bad_stride(stride):
    with pytest.raises(ValueError, match=r"^stride must be at least 1, got " + str(stride)):
        plan_windows(10, 6, stride)


@pytest.mark.parametrize("stride", [1.5, "2", None])
def test_plan_windows_rejects_non_int_stride(stride):
    with pytest.raises(ValueError, match="stride"):
        plan_windows(10, 6, stride)


@pytest.mark.parametrize("max_length", [0, -3])
def test_plan_windows_rejects_bad_max_length(max_length):
    with pytest.raises(ValueError, match=r"^max_length must be at least 1"):
        plan_windows(10, max_length, 1)


@pytest.mark.parametrize("max_length,stride", [(4, 4), (3, 4), (1, 1), (2, 2)])
def test_plan_windows_rejects_max_length_not_above_stride(max_length, stride):
    with pytest.raises(ValueError) as info:
        plan_windows(10, max_length, stride)
    message = str(info.value)
    assert f"max_length ({max_length}) must be larger than stride ({stride})" in message
    assert "lower stride or raise max_length" in message


@pytest.mark.parametrize("n", [0, 1])
def test_plan_windows_rejects_too_few_tokens(n):
    with pytest.raises(ValueError, match=rf"Need at least 2 tokens to score anything, got {n}\. Is the dataset empty"):
        plan_windows(n, 6, 2)


def test_check_count_messages():
    check_count("x", 1)
    with pytest.raises(ValueError, match=r"^x must be at least 1, got 0\.$"):
        check_count("x", 0)
    with pytest.raises(ValueError, match=r"^num_docs must be at least 0, got -2\.$"):
        check_count("num_docs", -2, minimum=0)
    check_count("num_docs", 0, minimum=0)
    for bad in (1.5, "2", None, True):
        with pytest.raises(ValueError, match="^" + re.escape(f"x must be an integer, got {bad!r}.") + "$"):
            check_count("x", bad)
