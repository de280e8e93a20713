"""BM25 top-k written from the formula, one query and one term at a time, for the tests of the bm25 backend's search
(and its benchmark's exhaustive scorer): it reads the index's score matrix as stored (bm25s's CSC: ``data`` float32
term scores, Lucene's ``idf · tf / (tf + k1 · (1 - b + b · dl / avgdl))``; ``indices`` passage ids; ``indptr`` one
column per term), and nothing of [`hf_ralm.retrieval`][hf_ralm.retrieval].

A passage's score is the sum, over the query's terms found in the vocabulary, each as often as it occurs in the
query, of its score in the term's column, summed in float64; the top ``k`` by score descending, ties by passage id
ascending; passages scoring 0 (no term matched) and forbidden ones are never returned.

Examples:
    >>> import numpy as np
    >>> matrix = {"data": np.array([1.0, 2.0, 0.5], np.float32), "indices": np.array([0, 1, 1], np.int32),
    ...           "indptr": np.array([0, 2, 3], np.int32), "num_docs": 3}
    >>> reference_bm25_top_k(matrix, {"rome": 0, "sea": 1}, [["rome", "sea", "sea"], ["sky"], []], k=2)
    [[(1, 3.0), (0, 1.0)], [], []]
"""

from __future__ import annotations

from typing import Collection, Mapping, Sequence

import numpy as np


def reference_bm25_scores(matrix: Mapping, vocab: Mapping[str, int], terms: Sequence[str]) -> np.ndarray:
    """Every passage's score for one query.

    Args:
        matrix: the index's score matrix, as stored (``data``, ``indices``, ``indptr``, ``num_docs``).
        vocab: term → column.
        terms: the query's analysed terms (unknown ones ignored; a repeated one counts again).

    Returns:
        The float64 scores, one per passage.
    """
    scores = np.zeros(int(matrix["num_docs"]), dtype=np.float64)
    indptr = matrix["indptr"]
    for term in terms:  # a repeated term adds its column again
        column = vocab.get(term)
        if column is None or column >= len(indptr) - 1:
            continue
        start, stop = int(indptr[column]), int(indptr[column + 1])
        # a column holds each passage once, so a fancy-indexed add adds each of its scores once
        scores[np.asarray(matrix["indices"][start:stop], dtype=np.int64)] += matrix["data"][start:stop]
    return scores


def reference_bm25_top_k(matrix: Mapping, vocab: Mapping[str, int], queries: Sequence[Sequence[str]], k: int,
                         forbidden: Collection[int] = ()) -> list[list[tuple[int, float]]]:
    """Each query's top passages, every passage scored
    ([`reference_bm25_scores`][hf_ralm.testing.bm25.reference_bm25_scores]).

    Args:
        matrix: the index's score matrix, as stored.
        vocab: term → column.
        queries: each query's analysed terms.
        k: the passages per query.
        forbidden: passage ids never returned.

    Returns:
        Per query, its top ``k`` ``(passage id, score)``, sorted by ``(-score, id)``, zeros and ``forbidden`` ids
            dropped.
    """
    forbidden = np.fromiter(forbidden, dtype=np.int64)
    found = []
    for terms in queries:
        scores = reference_bm25_scores(matrix, vocab, terms)
        kept = np.flatnonzero(scores > 0)
        kept = kept[~np.isin(kept, forbidden)]
        order = np.lexsort((kept, -scores[kept]))[:k]  # the last key sorts first: score descending, then id
        found.append([(int(i), float(scores[i])) for i in kept[order]])
    return found
