"""The passage-selection strategies, one file each, and their registry
([`registry`][hf_ralm.selection.strategies.registry]). Registering one
([`register_strategy`][hf_ralm.selection.strategies.registry.register_strategy]) makes it a value of its stage's setting
everywhere: ``RalmConfig(rerank=...)`` / ``retrieval_gate=...``, evaluation, generation, ``--compare``, the run-cost
estimate and the command line's choices.

The built-in ones, in the order their names are listed (which is also ``--compare``'s):

* retrieval's order, ``rerank="none"`` ([`rerank_none`][hf_ralm.selection.strategies.rerank_none], ``--compare``'s
  ``top1``);
* the gates: ``"always"`` ([`gate_always`][hf_ralm.selection.strategies.gate_always]), ``"score"``
  ([`gate_score`][hf_ralm.selection.strategies.gate_score]), ``"lm"``
  ([`gate_lm`][hf_ralm.selection.strategies.gate_lm], ``lm-gate``);
* reranking: ``"lm"`` ([`rerank_lm`][hf_ralm.selection.strategies.rerank_lm], ``zero-shot`` and
  ``zero-shot-no-passage``), ``"predictive"``
  ([`rerank_predictive`][hf_ralm.selection.strategies.rerank_predictive]), ``"oracle"``
  ([`rerank_oracle`][hf_ralm.selection.strategies.rerank_oracle]), ``"random"``
  ([`rerank_random`][hf_ralm.selection.strategies.rerank_random]).

A new strategy is one file that subclasses [`RerankStrategy`][hf_ralm.selection.strategies.registry.RerankStrategy] or
[`GateStrategy`][hf_ralm.selection.strategies.registry.GateStrategy] and ends with its register line; nothing else
changes. From outside the package:

```python
from hf_ralm.core.passages import NO_PASSAGE
from hf_ralm.selection.strategies import RETRIEVAL_SCORES, RerankStrategy, register_strategy

class ScoreMargin(RerankStrategy):
    name = "bm25-margin"
    help = "the top passage when its score beats the second's by 1, else none"
    needs = frozenset({RETRIEVAL_SCORES})

    def choose(self, candidates, config):
        scores = [p.score for p in candidates.passages] + [float("-inf")]
        return 0 if scores[0] - scores[1] >= 1.0 else NO_PASSAGE

register_strategy(ScoreMargin())   # rerank="bm25-margin" in this process: eval-lm, --compare, generate, ...
```
"""

# the built-in strategies register as they are imported, in this order: their names' in the choices, --compare's rows'
from . import rerank_none, gate_always, gate_score, gate_lm, rerank_lm, rerank_predictive, rerank_oracle  # noqa: F401
from . import rerank_random  # noqa: F401
from .registry import (
    AFTER,
    BEFORE,
    CROSS_ENCODER,
    NORMALIZED_SCORES,
    RANKING_NLLS,
    RETRIEVAL_SCORES,
    TARGET_NLLS,
    Candidates,
    ComparisonRow,
    GateStrategy,
    RerankStrategy,
    Strategy,
    check_generation,
    comparison_rows,
    future_looking,
    get_strategy,
    ranks_target,
    reader_inputs_per_window,
    reader_ranks,
    register_strategy,
)

__all__ = [
    "AFTER", "BEFORE", "CROSS_ENCODER", "NORMALIZED_SCORES", "RANKING_NLLS", "RETRIEVAL_SCORES", "TARGET_NLLS",
    "Candidates", "ComparisonRow", "GateStrategy", "RerankStrategy", "Strategy", "check_generation", "comparison_rows",
    "future_looking", "get_strategy", "ranks_target", "reader_inputs_per_window", "reader_ranks", "register_strategy",
]
