"""``rerank="predictive"``: a trained cross-encoder (the paper's §6.2, ``reranker_model``) scores the (query, passage)
pairs and the highest wins, ties to the better retrieval rank; with ``rerank_allow_no_passage`` the empty passage is one
more candidate. The policy asks the cross-encoder
([`choose_predictive`][hf_ralm.selection.predictive.choose_predictive]); training it is
[`hf_ralm.reranker_training`][hf_ralm.reranker_training]'s.

Examples:
    >>> from hf_ralm.core.passages import Passage
    >>> candidates = Candidates([Passage("1", "", "rome", 7.5)], "the emperor of", 0, predicted=-1)
    >>> PredictiveRerankStrategy().choose(candidates, config=None)
    -1
"""

from __future__ import annotations

from ...errors import SettingError, setting
from .registry import CROSS_ENCODER, Candidates, RerankStrategy, register_strategy


class PredictiveRerankStrategy(RerankStrategy):
    """The predictive reranker's choice."""

    name = "predictive"
    help = f"a trained reranker, {setting('reranker_model')}"
    fields = ("rerank_candidates", "reranker_model", "rerank_allow_no_passage")
    needs = frozenset({CROSS_ENCODER})

    def validate(self, config) -> None:
        if config.reranker_model is None:
            raise SettingError(f"{setting(self.stage)}={self.name!r} needs {setting('reranker_model')}: the folder or "
                               "Hub id of a trained reranker (hf-ralm train-reranker).")
        if config.rerank_no_passage_margin != 0:
            raise SettingError(f"{setting('rerank_no_passage_margin')} is in nats of the reader's NLL, which "
                               f"{setting(self.stage)}={self.name!r} does not compute (a trained reranker's scores "
                               "have no unit): drop the margin, or train the reranker with the no-passage candidate "
                               "and let it decide.")

    def choose(self, candidates: Candidates, config) -> int:
        return candidates.predicted


register_strategy(PredictiveRerankStrategy())
