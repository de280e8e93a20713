"""Generation's stride bookkeeping (``hf_ralm.core.strides``) held to the documented semantics of
``hf_ralm.generation``: a stride starts after ``j·s`` generated tokens (``j = 0`` included), generates
``s_j = min(s, tokens still to generate)`` tokens, queries with the last ``ℓ`` tokens of ``x``, and keeps
``x[a_j:]`` with ``a_j = max(0, len(x) + s_j + len(d_j) - L)``."""

from __future__ import annotations

import pytest

from hf_ralm.core.strides import Strides, query_tokens, stride_start


@pytest.mark.parametrize("stride,total", [(1, 5), (3, 10), (4, 8), (4, 9), (7, 3)])
def test_strides_cover_the_generation_once(stride, total):
    strides = Strides(stride, total)
    starts = [g for g in range(total) if strides.starts(g)]
    assert starts == list(range(0, total, stride))
    lengths = [strides.length(g) for g in starts]
    assert sum(lengths) == total and all(0 < n <= stride for n in lengths)
    assert lengths[:-1] == [stride] * (len(starts) - 1)  # only the last one is cut short
    assert [strides.index(g) for g in range(total)] == [g // stride for g in range(total)]
    assert strides.count(total) == len(starts)
    assert [strides.index(g) for g in starts] == list(range(len(starts)))


def test_a_stride_without_a_known_total_counts_s_tokens_and_never_fewer_than_one():
    assert [Strides(4).length(g) for g in (0, 4, 400)] == [4, 4, 4]
    assert Strides(4, total=6).length(8) == 1  # a generation run past its total goes on a token at a time
    assert Strides(4).count(0) == 0 and Strides(4).count(1) == 1


def test_the_query_is_the_last_query_length_tokens():
    ids = list(range(10))
    assert query_tokens(ids, 3) == [7, 8, 9]
    assert query_tokens(ids, 10) == ids and query_tokens(ids, 32) == ids
    assert query_tokens((), 4) == []


@pytest.mark.parametrize("num_tokens,stride_tokens,prefix,max_length",
                         [(30, 4, 10, 32), (5, 4, 10, 32), (28, 4, 0, 32), (100, 1, 31, 32)])
def test_the_context_holds_the_whole_stride_within_max_length(num_tokens, stride_tokens, prefix, max_length):
    start = stride_start(num_tokens, stride_tokens, prefix, max_length)
    assert start == max(0, num_tokens + stride_tokens + prefix - max_length)
    assert prefix + (num_tokens - start) + stride_tokens <= max_length or start == 0
