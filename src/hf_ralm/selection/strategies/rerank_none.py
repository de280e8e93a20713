"""``rerank="none"``: retrieval's own order, the paper's: a window puts its top passage(s) in context.

Examples:
    >>> from hf_ralm.core.passages import Passage
    >>> RetrievalOrderStrategy().choose(Candidates([Passage("1", "", "rome", 7.5)], "the emperor of", 0), config=None)
    0
"""

from __future__ import annotations

from .registry import Candidates, ComparisonRow, RerankStrategy, register_strategy


class RetrievalOrderStrategy(RerankStrategy):
    """No reranking: the retriever's first passage (with several passages or an ensemble, its top ones)."""

    name = "none"
    help = "the top one"
    chooses = False

    def choose(self, candidates: Candidates, config) -> int:
        return 0

    def comparisons(self) -> list[ComparisonRow]:
        return [ComparisonRow("top1", "the retriever's first passage", lambda config: {self.stage: self.name})]


register_strategy(RetrievalOrderStrategy())
