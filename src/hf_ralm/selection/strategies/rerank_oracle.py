"""``rerank="oracle"``: the candidate under which the reader's NLL of the window's *own target tokens* is lowest,
chosen as ``"lm"`` chooses (ties, the no-passage candidate and its margin alike). It looks at the future: an upper
bound, not a method; generation and lm-eval refuse it, and an evaluation under it says so.

Examples:
    >>> from hf_ralm.config.configuration_ralm import RalmConfig
    >>> from hf_ralm.core.passages import Passage
    >>> rome, music = Passage("1", "", "rome", 7.5), Passage("2", "", "music", 6.0)
    >>> ranked = Candidates([rome, music], None, 0, options=[rome, music], target_nlls=[9.0, 9.5])
    >>> OracleRerankStrategy().choose(ranked, RalmConfig(rerank="oracle")), OracleRerankStrategy().looks_at_future
    (0, True)
"""

from __future__ import annotations

from .registry import TARGET_NLLS, Candidates, ComparisonRow, register_strategy
from .rerank_lm import LMRerankStrategy


class OracleRerankStrategy(LMRerankStrategy):
    """The best candidate for the window's target: zero-shot reranking's rule on the target's NLLs."""

    name = "oracle"
    help = "the reader's NLL of the window's own target: an upper bound that looks at the future"
    fields = ("rerank_candidates", "rerank_allow_no_passage", "rerank_no_passage_margin")
    needs = frozenset({TARGET_NLLS})

    def ranked(self, candidates: Candidates) -> list[float] | None:
        return candidates.target_nlls

    def reader_inputs(self, config) -> int:
        return config.rerank_candidates + int(config.rerank_allow_no_passage)

    def comparisons(self) -> list[ComparisonRow]:
        return [ComparisonRow(self.name, "the passage that lowers the window's own NLL most (looks at the future: a "
                              "bound)", lambda config: {self.stage: self.name})]


register_strategy(OracleRerankStrategy())
