"""benchmarks/tables/datastore_tables.py: each size's rows from its windows' NLLs: the perplexities, the paired
change against no retrieval and its interval, the windows with a passage."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks.tables.datastore_tables import (NONE_TOLERANCE, STRATEGIES, SizePass, no_retrieval_spread, size_rows,
                                                table)


def size(shift_top1: float, shift_gate: float, windows: int = 65, stride: int = 4) -> SizePass:
    rng = np.random.default_rng(0)
    none = rng.uniform(1.0, 3.0, windows) * stride
    none[0] = 2.0 * 100  # the first window scores its whole length, never with a passage
    nll = np.stack([none, none + shift_top1 * stride, none + shift_gate * stride], axis=1)
    nll[0] = none[0]
    counts = np.full(windows, stride)
    counts[0] = 100
    return SizePass(nll, counts, int(counts.sum()) + 1, 7714, np.array([0, windows - 1, 5]), windows - 1)


def test_rows_hold_the_paired_change_and_its_interval():
    rows = size_rows(1, "text", size(0.1, 0.0))
    assert [r["strategy"] for r in rows] == list(STRATEGIES)
    none, top1, gate = rows
    assert "vs_none" not in none
    assert none["token_ppl_low"] <= none["token_ppl"] <= none["token_ppl_high"]
    # +0.1 nats on every token after the first window, 8 whole blocks of 8 windows: the same change in every draw
    scored_later = 64 * 4
    expected = np.expm1(0.1 * scored_later / (scored_later + 100 + 1))
    assert top1["vs_none"] == pytest.approx(expected)
    assert top1["vs_none_low"] == pytest.approx(expected) and top1["vs_none_high"] == pytest.approx(expected)
    assert gate["vs_none"] == pytest.approx(0.0) and gate["vs_none_low"] == pytest.approx(0.0)
    assert top1["retrieved_fraction"] == 1.0 and gate["retrieved_fraction"] == pytest.approx(5 / 64)
    assert {r["num_passages"] for r in rows} == {7714}


def test_a_noisy_change_has_an_interval_around_it():
    sized = size(0.0, 0.0)
    rng = np.random.default_rng(1)
    sized.nll[1:, 1] = sized.nll[1:, 0] + rng.normal(0.0, 0.5, len(sized.nll) - 1)
    top1 = size_rows(3, "text", sized)[1]
    assert top1["vs_none_low"] < top1["vs_none"] < top1["vs_none_high"]


def test_the_table_has_a_line_per_size_in_order():
    rows = size_rows(3, "text", size(0.1, 0.0)) + size_rows(1, "text", size(-0.1, -0.05))
    lines = table(rows, "text")
    assert lines[3].startswith("| 1% | 7,714 |") and lines[4].startswith("| 3% | 7,714 |")
    assert len(lines) == 5 and "| -6." in lines[3] and "| +7." in lines[4]


def test_the_no_retrieval_row_may_move_only_within_the_tolerance():
    base = size(0.1, 0.0)
    moved = size(0.1, 0.0)
    moved.nll[1:, 0] += 1e-5  # a bfloat16 rounding elsewhere: a little on each window
    spread = no_retrieval_spread("text", {1: base, 3: moved})
    expected = np.exp((moved.nll[:, 0].sum() - base.nll[:, 0].sum()) / base.num_tokens) - 1
    assert spread == pytest.approx(expected) and 0 < spread < NONE_TOLERANCE
    assert no_retrieval_spread("text", {1: base, 3: size(0.1, 0.0)}) == 0.0
    assert no_retrieval_spread("text", {}) == 0.0
    other = size(0.1, 0.0)
    other.nll[1:, 0] *= 1.5  # another reader or dtype
    with pytest.raises(SystemExit, match=r"text: the no-retrieval token perplexity differs .*\(1%: .*, 3%: "):
        no_retrieval_spread("text", {1: base, 3: other})
