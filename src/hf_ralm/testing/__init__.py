"""hf-ralm's reference implementations, for tests and benchmarks (as ``transformers.testing_utils`` is for
transformers): plain loops that evaluate one window, one candidate and one passage at a time with full forwards,
written from the paper and docs/conventions.md, which every fast path of hf-ralm is held to (fp32, 1e-4) and timed
against.

They are independent of the code they check: the passage encoding, the passages' context, the ranking tokens, the ties,
the no-passage margin, the random choice and the lm gate's default are written here from the documented rules
([`hf_ralm.testing.spec`][hf_ralm.testing.spec]), never imported from
[`hf_ralm.core.model_inputs`][hf_ralm.core.model_inputs], [`hf_ralm.core.scoring`][hf_ralm.core.scoring],
[`hf_ralm.selection`][hf_ralm.selection] or [`hf_ralm.generation`][hf_ralm.generation] (tests/test_testing.py checks the
imports). They put their inputs on the model's device, so the same exactness tests run on a GPU
(``HF_RALM_TEST_DEVICE=cuda``), and return float64 CPU NLLs.

Examples:
    ```python
    from hf_ralm.testing import reference_window_nlls
    from hf_ralm.core.scoring import score_windows

    windows = plan_windows(len(ids), 1024, 4)
    fast = score_windows(model, ids, windows, prefixes)
    assert torch.allclose(fast[1:], reference_window_nlls(model, ids, windows, prefixes)[1:], atol=1e-4)
    ```
"""

from .bm25 import reference_bm25_scores, reference_bm25_top_k
from .loops import (
    full_nlls,
    next_token_logits,
    other_lm_ranking_nll,
    plain_ensemble_nlls,
    plain_rerank,
    plain_window_nlls,
    ranking_nll,
    reference_rerank_nlls,
    reference_window_nlls,
)
from .retrievers import ScoredRetriever
from .spec import (
    LM_GATE_MARGIN,
    PASSAGE_SEPARATOR,
    lm_gate_margin,
    ranking_positions,
    spec_choice,
    spec_passage_ids,
    spec_prefix,
    spec_random_choice,
    target_positions,
    write_over,
)

__all__ = [
    "LM_GATE_MARGIN",
    "PASSAGE_SEPARATOR",
    "ScoredRetriever",
    "full_nlls",
    "lm_gate_margin",
    "next_token_logits",
    "other_lm_ranking_nll",
    "plain_ensemble_nlls",
    "plain_rerank",
    "plain_window_nlls",
    "ranking_nll",
    "ranking_positions",
    "reference_bm25_scores",
    "reference_bm25_top_k",
    "reference_rerank_nlls",
    "reference_window_nlls",
    "spec_choice",
    "spec_passage_ids",
    "spec_prefix",
    "spec_random_choice",
    "target_positions",
    "write_over",
]
