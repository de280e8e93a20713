"""``rerank="lm"``: zero-shot LM reranking (the paper's §6.1). Each candidate is ranked by an LM's summed NLL of the
ranking tokens (the last ``rerank_tokens`` tokens of the prefix, [`hf_ralm.selection.rules`][hf_ralm.selection.rules])
with the candidate in context: the reader's own, or another LM's (``reranker_model``, in text). The lowest wins, ties to
the better retrieval rank; with ``rerank_allow_no_passage`` no passage is one more candidate, which a passage must beat
by ``rerank_no_passage_margin`` nats ([`choose_ranked`][hf_ralm.selection.rules.choose_ranked]).

Examples:
    >>> from hf_ralm.config.configuration_ralm import RalmConfig
    >>> from hf_ralm.core.passages import Passage
    >>> rome, music = Passage("1", "", "rome", 7.5), Passage("2", "", "music", 6.0)
    >>> ranked = Candidates([rome, music], "the emperor of", 0, options=[rome, music], ranking_nlls=[12.0, 11.0])
    >>> LMRerankStrategy().choose(ranked, RalmConfig(rerank="lm"))
    1
"""

from __future__ import annotations

from ...errors import setting
from ...core.passages import NO_PASSAGE
from ..rules import choose_ranked
from .registry import RANKING_NLLS, Candidates, ComparisonRow, RerankStrategy, register_strategy


class LMRerankStrategy(RerankStrategy):
    """Zero-shot reranking by an LM's ranking NLLs."""

    name = "lm"
    help = f"zero-shot, an LM's NLL of the last {setting('rerank_tokens')} tokens"
    fields = ("rerank_candidates", "rerank_tokens", "reranker_model", "rerank_allow_no_passage",
              "rerank_no_passage_margin")
    needs = frozenset({RANKING_NLLS})

    def ranked(self, candidates: Candidates) -> list[float] | None:
        """The NLLs it ranks on.

        Args:
            candidates: the window's candidates.

        Returns:
            One NLL per option (``None`` when nothing was ranked).
        """
        return candidates.ranking_nlls

    def choose(self, candidates: Candidates, config) -> int:
        nlls = self.ranked(candidates)
        best = choose_ranked(nlls, candidates.options, config) if nlls is not None else 0  # no token: the top one
        return best if best < len(candidates.passages) else NO_PASSAGE

    def reader_inputs(self, config) -> int:
        if config.reranker_model is not None:  # another LM ranks
            return 0
        return config.rerank_candidates + int(config.rerank_allow_no_passage)

    def comparisons(self) -> list[ComparisonRow]:
        return [ComparisonRow("zero-shot", "the passage with the lowest ranking NLL among k (the reader reranks)",
                              lambda config: {self.stage: self.name}),
                ComparisonRow("zero-shot-no-passage",
                              "zero-shot, or no passage unless one saves rerank_no_passage_margin nats",
                              lambda config: {self.stage: self.name, "rerank_allow_no_passage": True,
                                              "rerank_no_passage_margin": config.rerank_no_passage_margin})]


register_strategy(LMRerankStrategy())
