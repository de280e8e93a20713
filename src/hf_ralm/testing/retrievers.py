"""A deterministic retriever for tests: what it finds depends on the query alone, and every query has a known
maximum attainable score (what the score gate divides by)."""

from __future__ import annotations

import random
import zlib
from typing import Sequence

from ..core.passages import Passage


class ScoredRetriever:
    """Passages of ``words`` drawn from a hash of the query, best first, with a known maximum score per query
    ([`max_scores`][hf_ralm.testing.retrievers.ScoredRetriever.max_scores]). The n-th distinct query it sees gets, by n
    mod 5, k passages, none, one, k, or k-1, and a top score of 0.9, 0.1, 0.6, 0.3 or 0.75 of its maximum: any
    evaluation of five windows or more meets every case (a gate that closes and one that opens, empty and short
    retrievals), and a plain loop that asks for the windows in order gets what the fast path got.

    Args:
        words: what the passages' texts are drawn from.
        seed: the draw's seed.
        max_words: the longest passage, in words.

    Attributes:
        calls: the queries and the ``k`` of each call, in order.

    Examples:
        >>> retriever = ScoredRetriever(["rome", "city", "the"], seed=1)
        >>> [len(found) for found in retriever.retrieve(["a", "b", "c", "d", "e"], k=3)]
        [3, 0, 1, 3, 2]
        >>> top = retriever.retrieve(["a"], k=3)[0][0]
        >>> round(top.score / retriever.max_scores(["a"])[0], 2)
        0.9
    """

    COUNTS = (lambda k: k, lambda k: 0, lambda k: 1, lambda k: k, lambda k: max(1, k - 1))
    TOP = (0.9, 0.1, 0.6, 0.3, 0.75)

    def __init__(self, words: Sequence[str], seed: int = 0, max_words: int = 12):
        self.words, self.seed, self.max_words = list(words), seed, max_words
        self.calls: list[tuple[list[str], int]] = []
        self.order: dict[str, int] = {}

    def _bound(self, query: str) -> float:
        return 6.0 + (zlib.crc32(query.encode()) % 5)

    def _found(self, query: str, k: int) -> list[Passage]:
        case = self.order.setdefault(query, len(self.order)) % 5
        rng = random.Random(zlib.crc32(query.encode()) ^ self.seed)
        top = self.TOP[case] * self._bound(query)
        scores = [top] + sorted((rng.uniform(0.01, top) for _ in range(k - 1)), reverse=True)
        return [Passage(f"{zlib.crc32(query.encode())}-{i}", rng.choice(["", "rome", "music"]),
                        " ".join(rng.choice(self.words) for _ in range(rng.randint(1, self.max_words))), score)
                for i, score in enumerate(scores[: self.COUNTS[case](k)])]

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]:
        """The passages found for each query, best first (recorded in ``calls``).

        Args:
            queries: the queries.
            k: the most passages per query.

        Returns:
            Per query, its passages (as many as its case gives).
        """
        self.calls.append((list(queries), k))
        return [self._found(query, k) for query in queries]

    def max_scores(self, queries: Sequence[str]) -> list[float]:
        """Each query's maximum attainable score (what the score gate divides by).

        Args:
            queries: the queries.

        Returns:
            One bound per query.
        """
        return [self._bound(query) for query in queries]
