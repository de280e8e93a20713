"""``retrieval_gate="score"``: a window keeps its passages only when its top passage's retrieval score, over its
query's maximum attainable score, reaches ``gate_threshold``; it decides before reranking (a closed window has
nothing to rank). The score is [`normalized_top_scores`][hf_ralm.selection.gates.normalized_top_scores].

Examples:
    >>> from hf_ralm.config.configuration_ralm import RalmConfig
    >>> from hf_ralm.core.passages import Passage
    >>> config = RalmConfig(retrieval_gate="score", gate_threshold=0.3)
    >>> [ScoreGateStrategy().opens(Candidates([Passage("1", "", "rome", 6.1)], None, 0, normalized_score=score), config)
    ...  for score in (0.43, 0.12)]
    [True, False]
"""

from __future__ import annotations

from ...errors import SettingError, setting
from ...utils.checks import is_number
from .registry import BEFORE, NORMALIZED_SCORES, Candidates, ComparisonRow, GateStrategy, register_strategy


class ScoreGateStrategy(GateStrategy):
    """The score gate: retrieval's own confidence, compared across queries."""

    name = "score"
    help = (f"when the top passage's score over its query's maximum attainable score reaches "
            f"{setting('gate_threshold')}; bm25")
    fields = ("gate_threshold",)
    needs = frozenset({NORMALIZED_SCORES})
    position = BEFORE

    def validate(self, config) -> None:
        if config.gate_threshold is None:
            raise SettingError(f"{setting(self.stage)}={self.name!r} needs {setting('gate_threshold')}: the fraction "
                               "of the query's maximum attainable retrieval score (0 to 1) the top passage must "
                               "reach.")
        if not is_number(config.gate_threshold) or not 0 <= config.gate_threshold <= 1:
            raise SettingError(f"{setting('gate_threshold')} must be a number from 0 to 1 (a fraction of the query's "
                               f"maximum attainable score), got {config.gate_threshold!r}.")

    def opens(self, candidates: Candidates, config) -> bool:
        return candidates.normalized_score is not None and candidates.normalized_score >= config.gate_threshold

    def score(self, candidates: Candidates) -> float | None:
        return candidates.normalized_score

    def comparisons(self) -> list[ComparisonRow]:
        return []  # its threshold is a fraction of a score, no default: benchmarks/tables/gate_tables.py sweeps it


register_strategy(ScoreGateStrategy())
