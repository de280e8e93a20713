"""Exact BM25 top-k for streams of queries, over the bm25 backend's score matrix (bm25s's CSC: ``data`` float32 term
scores, ``indices`` passage ids, ``indptr`` one column per term).

In-Context RALM asks every 4 tokens with the last 32: consecutive queries of one text share most of their terms. A
``BM25Stream`` keeps, per stream, every passage's score of the last query (float64) and that query's term counts; the
next query's scores are the last ones plus, for each term whose count changed by ``Δ``, ``Δ`` times its column (a tile
of passages at a time, so that the scores being changed stay in the core's cache). The stored scores are float32, so a
float64 sum of a few dozen of them is exact (``BM25Stream.exact_terms`` says how many): the scores do not depend on the
order terms came and went, and equal a plain sum over the query's terms. The top-k reads few passages: the scores are
cut in blocks of ``2**BLOCK_SHIFT`` passages, each with an upper bound of its scores (raised when a score rises, left
loose when one falls, made exact when the block is read). The last query's top-k, scored for this query, are k
passages at least as good as the worst of them, so no passage below that floor can be in this top-k: only the blocks
whose bound reaches it are read, highest bound first, until the next bound is below the k-th best score found.
Forbidden passages hold ``-inf``, which no term lifts.

Examples:
    >>> import numpy as np
    >>> stream = BM25Stream(np.array([1.0, 2.0, 0.5], np.float32), np.array([0, 1, 1], np.int32),
    ...                     np.array([0, 2, 3], np.int32), num_docs=2)
    >>> ids, scores, counts = stream.search([{0: 1, 1: 2}, {0: 1}, {}], k=2)
    >>> ids[0, :counts[0]].tolist(), scores[0, :counts[0]].tolist(), counts.tolist()
    ([1, 0], [3.0, 1.0], [2, 2, 0])
"""

from __future__ import annotations

import math
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numba
import numpy as np

BLOCK_SHIFT = 8
"""Passages per block of score bounds, as a power of two: 256 (at 666k passages 2,603 bounds, at 21M some 82,000,
each looked at once per query)."""
TILE_SIZE = 1 << 17
"""The passages whose scores a query's changes are applied to together (1 MiB of float64 scores): a tile's scores
stay in the core's cache while every changed column's postings within it are added."""
MIN_QUERIES_PER_THREAD = 16
"""A batch is split over threads in contiguous runs of at least this many queries: each run starts its stream from
a state that followed other queries, which costs about one exhaustive query."""
RESET_COST_PER_PASSAGE = 0.25
"""What clearing one passage's score costs beside adding one posting (a sequential write against a scattered
read-modify-write): a stream starts again from zero when that is cheaper than taking the last query's terms out."""


def _jit(function):
    """``numba.njit`` without the GIL, compiled when first called, its machine code cached on disk where numba can
    write (beside this file, or numba's cache folder); compiled anew in each process where it cannot."""
    try:
        return numba.njit(cache=True, nogil=True)(function)
    except RuntimeError:  # no writable cache location
        return numba.njit(nogil=True)(function)


@_jit
def _positive_range(data) -> tuple[float, float]:
    """The smallest and the largest score above 0 (``(inf, 0.0)`` when none is): one pass, no copy of the scores."""
    smallest, largest = np.inf, 0.0
    for value in data:
        if value > 0.0:
            smallest = min(smallest, value)
            largest = max(largest, value)
    return smallest, largest


@_jit
def _worse(score, passage, other_score, other_passage) -> bool:
    """Ranks below the other: a lower score, or the same score and a higher passage id."""
    return score < other_score or (score == other_score and passage > other_passage)


@_jit
def _sift_down(heap_scores, heap_ids, size, value, passage) -> None:
    """Put ``(value, passage)`` at the root of the heap's first ``size`` entries (whose root, its worst entry, is
    dropped) and down to its place."""
    i = 0
    while 2 * i + 1 < size:
        child = 2 * i + 1
        if child + 1 < size and _worse(heap_scores[child + 1], heap_ids[child + 1], heap_scores[child],
                                       heap_ids[child]):
            child += 1
        if _worse(value, passage, heap_scores[child], heap_ids[child]):
            break
        heap_scores[i], heap_ids[i] = heap_scores[child], heap_ids[child]
        i = child
    heap_scores[i], heap_ids[i] = value, passage


@_jit
def _read_block(scores, bounds, b, shift, k, floor, size, heap_scores, heap_ids) -> int:
    """Every passage of block ``b`` at or above ``floor`` into the heap of ``size`` entries (its new size returned);
    the block's bound made exact."""
    best = -np.inf
    for d in range(b << shift, min((b + 1) << shift, scores.shape[0])):
        value = scores[d]
        if value > best:
            best = value
        if value < floor or value <= 0.0 or (size == k and _worse(value, d, heap_scores[0], heap_ids[0])):
            continue
        if size < k:  # sift up from the end
            i = size
            size += 1
            while i > 0 and _worse(value, d, heap_scores[(i - 1) >> 1], heap_ids[(i - 1) >> 1]):
                heap_scores[i], heap_ids[i] = heap_scores[(i - 1) >> 1], heap_ids[(i - 1) >> 1]
                i = (i - 1) >> 1
            heap_scores[i], heap_ids[i] = value, d
        else:  # in place of the root
            _sift_down(heap_scores, heap_ids, size, value, d)
    bounds[b] = best
    return size


@_jit
def _top_k(scores, bounds, seen, shift, k, seeds, heap_scores, heap_ids, blocks, block_bounds, work) -> int:
    """The top ``k`` passages above 0 into the heap (its size returned; the root is its worst entry: the lowest
    score, the highest id among equal scores). ``seeds``, the last query's top, are scored first: when they are at
    least ``k``, the worst of their scores is a floor under the k-th one, below which no passage is looked at. Their
    blocks are read first; then the other blocks whose bound reaches the floor and the heap's worst score, highest
    bound first, until the next bound is below the heap's worst score. ``seen[b]``: the stamp of the last query that
    read block ``b`` (the last entry: the last stamp)."""
    floor = np.inf if seeds.shape[0] >= k else 0.0  # at least k passages score at least the worst seed
    for d in seeds:
        floor = min(floor, max(scores[d], 0.0))
    stamp = seen[-1] + 1
    seen[-1] = stamp
    size = 0
    for d in seeds:
        b = d >> shift
        if seen[b] != stamp:
            seen[b] = stamp
            work[1] += 1
            size = _read_block(scores, bounds, b, shift, k, floor, size, heap_scores, heap_ids)
    n = 0
    for b in range(bounds.shape[0]):
        if (seen[b] != stamp and bounds[b] > 0.0 and bounds[b] >= floor
                and not (size == k and bounds[b] < heap_scores[0])):
            blocks[n], block_bounds[n] = b, -bounds[b]
            n += 1
    for i in np.argsort(block_bounds[:n]):
        b = blocks[i]
        if size == k and bounds[b] < heap_scores[0]:  # a bound equal to the worst score may hide a lower id
            break
        work[1] += 1
        size = _read_block(scores, bounds, b, shift, k, floor, size, heap_scores, heap_ids)
    return size


@_jit
def _search_run(data, indices, indptr, scores, bounds, seen, forbidden, shift, tile_size, offsets, terms, counts,
                last_terms, last_counts, exact_terms, reset_cost_per_passage, k, seed_ids, out_ids, out_scores,
                out_counts, work):
    """Queries ``q`` of a run, in order, on one stream's ``scores`` and ``bounds``: query ``q`` holds the terms
    ``terms[offsets[q]:offsets[q + 1]]`` (ascending) ``counts[...]`` times; the stream's last query before the run,
    ``last_terms`` ``last_counts`` times. Each term whose count changed by ``Δ`` adds ``Δ`` times its column (or the
    stream starts again from zero, the forbidden at ``-inf``, when that is cheaper or the sums would not be exact),
    then the top ``k`` (score descending, id ascending, scores above 0) goes to ``out_*[q]`` (``_top_k``, from the
    last query's top: ``seed_ids`` before the run). ``work[q]``: the postings added, the blocks read, whether it
    started again."""
    num_docs = scores.shape[0]
    num_blocks = bounds.shape[0]
    heap_scores = np.empty(k, np.float64)
    heap_ids = np.empty(k, np.int64)
    most = offsets[1:] - offsets[:-1]
    room = (most.max() if most.shape[0] else 0) + max(last_terms.shape[0], most.max() if most.shape[0] else 0)
    changed = np.empty(room, np.int64)
    blocks = np.empty(num_blocks, np.int64)
    block_bounds = np.empty(num_blocks, np.float64)
    change = np.empty(room, np.float64)
    for q in range(offsets.shape[0] - 1):
        new_terms, new_counts = terms[offsets[q]:offsets[q + 1]], counts[offsets[q]:offsets[q + 1]]
        if q == 0:
            old_terms, old_counts = last_terms, last_counts
        else:
            old_terms, old_counts = terms[offsets[q - 1]:offsets[q]], counts[offsets[q - 1]:offsets[q]]
        # the count changes: a merge of the two queries' ascending terms
        size, cost, i, j = 0, 0, 0, 0
        while i < old_terms.shape[0] or j < new_terms.shape[0]:
            if j == new_terms.shape[0] or (i < old_terms.shape[0] and old_terms[i] < new_terms[j]):
                term, delta = old_terms[i], -old_counts[i]
                i += 1
            elif i == old_terms.shape[0] or new_terms[j] < old_terms[i]:
                term, delta = new_terms[j], new_counts[j]
                j += 1
            else:
                term, delta = new_terms[j], new_counts[j] - old_counts[i]
                i += 1
                j += 1
            if delta != 0:
                changed[size], change[size] = term, delta
                size += 1
                cost += indptr[term + 1] - indptr[term]
        fresh = reset_cost_per_passage * num_docs + forbidden.shape[0]
        for j in range(new_terms.shape[0]):
            fresh += indptr[new_terms[j] + 1] - indptr[new_terms[j]]
        reset = fresh < cost or max(new_counts.sum(), old_counts.sum()) > exact_terms
        if reset:
            scores[:] = 0.0
            for d in forbidden:
                scores[d] = -np.inf
            bounds[:] = 0.0
            size = new_terms.shape[0]
            changed[:size] = new_terms
            change[:size] = new_counts
        work[q, 2] = reset
        # a tile of passages at a time, every changed column's postings within it: the scores being changed stay
        # in the core's cache; per passage, falls first: every partial sum is one of the old or the new query's
        for tile in range(0, num_docs, tile_size):
            for rising in (False, True):
                for c in range(size):
                    delta = change[c]
                    if (delta > 0) != rising:
                        continue
                    start, stop = indptr[changed[c]], indptr[changed[c] + 1]
                    if tile_size < num_docs:
                        column = indices[start:stop]
                        start, stop = (start + np.searchsorted(column, tile),
                                       start + np.searchsorted(column, tile + tile_size))
                    work[q, 0] += stop - start
                    if rising:  # a score that rises raises its block's bound
                        for p in range(start, stop):
                            d = indices[p]
                            value = scores[d] + delta * data[p]
                            scores[d] = value
                            if value > bounds[d >> shift]:
                                bounds[d >> shift] = value
                    else:  # one that falls leaves it valid
                        for p in range(start, stop):
                            scores[indices[p]] += delta * data[p]
        seeds = out_ids[q - 1, : out_counts[q - 1]] if q > 0 else seed_ids
        size = _top_k(scores, bounds, seen, shift, k, seeds, heap_scores, heap_ids, blocks, block_bounds, work[q])
        out_counts[q] = size
        while size > 0:  # the worst out first, written from the back
            size -= 1
            out_scores[q, size], out_ids[q, size] = heap_scores[0], heap_ids[0]
            _sift_down(heap_scores, heap_ids, size, heap_scores[size], heap_ids[size])


def _pairs(pairs: list[tuple[int, int]]) -> tuple[np.ndarray, np.ndarray]:
    """``(term id, count)`` pairs as two int64 arrays."""
    return (np.fromiter((t for t, _ in pairs), np.int64, len(pairs)),
            np.fromiter((c for _, c in pairs), np.int64, len(pairs)))


@dataclass(eq=False)  # a stream is itself: compared by identity
class _State:
    """One stream: every passage's score of its last query, the blocks' bounds, that query's term counts and top."""

    scores: np.ndarray
    bounds: np.ndarray
    seen: np.ndarray  # per block, the stamp of the last query that read it (the last entry: the last stamp)
    counts: dict[int, int] = field(default_factory=dict)
    top: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))


class BM25Stream:
    """Exact top-k of queries given as ``{term id: count}`` over a CSC score matrix, each query's scores updated from
    the last one of a stream (see the module's docstring).

    Args:
        data: the matrix's float32 term scores.
        indices: their int32 passage ids.
        indptr: where each term's column starts (one more than the terms).
        num_docs: the passages.
        forbidden: passage ids never returned.
        n_threads: a batch is cut into that many contiguous runs at most, searched in parallel, each on a stream of its
            own (``num_docs`` float64 scores each: 8 bytes a passage).
        tile_size: the passages whose scores a query's changes are applied to together (default
            ``TILE_SIZE``); any size gives the same results, only the speed differs.
    """

    def __init__(self, data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, num_docs: int,
                 forbidden: np.ndarray | None = None, *, n_threads: int = 1, tile_size: int | None = None):
        self.data, self.indices, self.indptr = data, indices, indptr
        self.num_docs = int(num_docs)
        self.num_terms = len(indptr) - 1
        self.forbidden = np.zeros(0, np.int64) if forbidden is None else np.asarray(forbidden, np.int64)
        self.n_threads = max(1, int(n_threads))
        self.tile_size = TILE_SIZE if tile_size is None else int(tile_size)
        if self.tile_size < 1:
            raise ValueError(f"tile_size must be at least 1 passage, got {tile_size}")
        self.num_blocks = max(1, -(-self.num_docs >> BLOCK_SHIFT))  # the last one may be partial
        self._states: list[_State] = []
        self._exact_terms: int | None = None

    def exact_terms(self) -> int:
        """How many term occurrences a query may hold (counted with repeats, and the last query's too while it is
        being replaced) for every float64 sum of its scores to be exact: all stored scores are multiples of the
        smallest one's last bit, and a sum stays exact while it is under 2**53 of those. Past it, a query is
        summed from zero in term order (deterministic, within float64 rounding of the exact sum)."""
        if self._exact_terms is None:
            smallest, largest = _positive_range(self.data)
            if largest <= 0.0:
                self._exact_terms = 2**62
            else:
                last_bit = math.frexp(smallest)[1] - 24  # float32: 24 bits of mantissa
                self._exact_terms = int(2.0 ** (53 + last_bit) / largest)
        return self._exact_terms

    def _new_state(self) -> _State:
        scores = np.zeros(self.num_docs, np.float64)
        scores[self.forbidden] = -np.inf
        return _State(scores, np.zeros(self.num_blocks, np.float64), np.zeros(self.num_blocks + 1, np.int64))

    def postings(self, query: dict[int, int]) -> int:
        """The postings of ``query``'s terms: what scoring it from zero adds."""
        return self._changed_postings({}, query)

    def _changed_postings(self, last: dict[int, int], query: dict[int, int]) -> int:
        """The postings that turn a stream's last query into ``query``: the columns whose count changes."""
        changed = [t for t in last.keys() | query.keys() if query.get(t, 0) != last.get(t, 0)]
        ids = np.asarray(changed, np.int64)
        return int((self.indptr[ids + 1] - self.indptr[ids]).sum()) if changed else 0

    def _run(self, state: _State, queries: list[dict[int, int]], k: int, out_ids, out_scores, out_counts,
             work) -> None:
        terms = [sorted(query.items()) for query in queries]  # each query's terms ascending, as the merge needs
        offsets = np.zeros(len(queries) + 1, np.int64)
        np.cumsum([len(query) for query in terms], out=offsets[1:])
        term_ids, counts = _pairs([pair for query in terms for pair in query])
        last_ids, last_counts = _pairs(sorted(state.counts.items()))
        _search_run(self.data, self.indices, self.indptr, state.scores, state.bounds, state.seen, self.forbidden,
                    BLOCK_SHIFT, self.tile_size, offsets, term_ids, counts, last_ids, last_counts, self.exact_terms(),
                    RESET_COST_PER_PASSAGE, k, state.top, out_ids, out_scores, out_counts, work)
        state.counts = queries[-1]
        state.top = out_ids[-1, : out_counts[-1]].copy()

    def search(self, queries: list[dict[int, int]], k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per query, its top ``min(k, num_docs)``: best first, ties by id ascending, scores above 0 only.

        Args:
            queries: per query, ``{term id: count}`` (ids outside the matrix are ignored).
            k: the passages per query.

        Returns:
            ``(ids, scores, counts)``: ``ids`` and ``scores`` (float64) of shape ``(len(queries), k)``, row ``q``'s
                first ``counts[q]`` filled.
        """
        queries = [{t: c for t, c in query.items() if 0 <= t < self.num_terms and c > 0} for query in queries]
        k = max(0, min(int(k), self.num_docs))
        ids = np.zeros((len(queries), k), np.int64)
        scores = np.zeros((len(queries), k), np.float64)
        counts = np.zeros(len(queries), np.int64)
        self.work = np.zeros((len(queries), 3), np.int64)
        if not queries or k == 0:
            return ids, scores, counts
        runs = max(1, min(self.n_threads, len(queries) // MIN_QUERIES_PER_THREAD))
        cuts = [len(queries) * r // runs for r in range(runs + 1)]
        states = self._states_for([queries[cut] for cut in cuts[:-1]])
        jobs = [(states[r], queries[cuts[r]:cuts[r + 1]], k, ids[cuts[r]:cuts[r + 1]],
                 scores[cuts[r]:cuts[r + 1]], counts[cuts[r]:cuts[r + 1]], self.work[cuts[r]:cuts[r + 1]])
                for r in range(runs)]
        if runs == 1:
            self._run(*jobs[0])
        else:
            with ThreadPoolExecutor(runs) as pool:
                for done in [pool.submit(self._run, *job) for job in jobs]:
                    done.result()
        return ids, scores, counts

    def _states_for(self, firsts: list[dict[int, int]]) -> list[_State]:
        """A stream for each run, by its first query: the one whose last query is closest (fewest postings to
        change), new ones while fewer than the runs exist."""
        while len(self._states) < len(firsts):
            self._states.append(self._new_state())
        free = list(self._states)
        chosen = []
        for first in firsts:
            best = min(free, key=lambda state: self._changed_postings(state.counts, first))
            free.remove(best)
            chosen.append(best)
        return chosen
