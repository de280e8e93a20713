"""The stride bookkeeping of In-Context RALM's generation, once: when a row retrieves anew, how many tokens the stride
then generates, which stride a generated token is in, the query, and where a row's text starts in its context.

Every ``s`` = ``retrieval_stride`` generated tokens (``j·s`` tokens generated, ``j = 0`` included) a stride starts: the
row retrieves with its decoded last ``ℓ`` = ``query_length`` tokens, and the stride generates ``s_j = min(s, tokens
still to generate)`` tokens (at least one). ``ralm_generate``, the
[`RalmLogitsProcessor`][hf_ralm.RalmLogitsProcessor], generation on an engine reader and lm-eval's model all count
strides here. (Evaluation's windows, whose queries end before a window's first scored token, are
[`plan_windows`][hf_ralm.plan_windows] and ``hf_ralm.core.windows.query_span``.)

Examples:
    >>> strides = Strides(stride=4, total=10)
    >>> [g for g in range(10) if strides.starts(g)], [strides.length(g) for g in (0, 4, 8)]
    ([0, 4, 8], [4, 4, 2])
    >>> strides.index(9), strides.count(10), query_tokens([5, 6, 7, 8], query_length=3)
    (2, 3, [6, 7, 8])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True)
class Strides:
    """The strides of one generation.

    Attributes:
        stride: ``s``, the generated tokens between two retrievals (``retrieval_stride``).
        total: the tokens to generate, which cut the last stride short; ``None`` when unknown (a logits processor
            not told ``max_new_tokens``): then every stride counts ``s`` tokens.

    Examples:
        >>> Strides(stride=4).length(8), Strides(stride=4, total=10).length(8)
        (4, 2)
    """

    stride: int
    total: int | None = None

    def starts(self, generated: int) -> bool:
        """Whether a stride starts (a new retrieval is due) after ``generated`` generated tokens."""
        return generated % self.stride == 0

    def length(self, generated: int) -> int:
        """``s_j``: the tokens of the stride that starts after ``generated`` generated tokens, at most ``stride``,
        at most what is left of ``total``, and at least one (a generation run past ``total`` goes on a token at a
        time)."""
        left = self.stride if self.total is None else self.total - generated
        return max(1, min(self.stride, left))

    def index(self, generated: int) -> int:
        """``j``: the stride that generated token number ``generated`` (counted from 0) is in."""
        return generated // self.stride

    def count(self, generated: int) -> int:
        """How many strides ``generated`` generated tokens took (a stride cut short by a stop counted)."""
        return -(-generated // self.stride)


def query_start(end: int, query_length: int) -> int:
    """Where a query that ends before token ``end`` starts: its last ``query_length`` tokens, all of them when there
    are fewer. Generation's strides and evaluation's windows
    (``hf_ralm.core.windows.query_span``) both cut their queries here.

    Examples:
        >>> query_start(10, query_length=4), query_start(3, query_length=4)
        (6, 0)
    """
    return max(0, end - query_length)


def query_tokens(ids: Sequence[int], query_length: int) -> list[int]:
    """A stride's query: the last ``query_length`` tokens of a row's text (all of them when it is shorter).

    Examples:
        >>> query_tokens([5, 6, 7], query_length=8)
        [5, 6, 7]
    """
    return list(ids[query_start(len(ids), query_length):])


def stride_start(num_tokens: int, stride_tokens: int, prefix_length: int, max_length: int) -> int:
    """``a_j``: how many of the oldest tokens of ``x`` stay out of context during a stride of ``stride_tokens`` tokens
    that starts with ``len(x) = num_tokens``, so that ``[passage; x[a_j:]]`` never exceeds ``max_length``.

    Examples:
        >>> stride_start(num_tokens=30, stride_tokens=4, prefix_length=10, max_length=32)
        12
    """
    return max(0, num_tokens + stride_tokens + prefix_length - max_length)
