"""Which retrieved passages a window (evaluation) or a stride (generation) puts in context, computed with the
reader: the selection strategies, one file each with their registry
([`strategies`][hf_ralm.selection.strategies]), and the exact rules they share ([`rules`][hf_ralm.selection.rules]);
the one policy that applies them ([`policy`][hf_ralm.selection.policy]), computing what each needs; the retrieval
gates' scores
([`gates`][hf_ralm.selection.gates]); how the reader ranks a text's windows ([`rerank`][hf_ralm.selection.rerank]) and
what ranks when it does not ([`rankers`][hf_ralm.selection.rankers]: another LM;
[`predictive`][hf_ralm.selection.predictive]: a trained cross-encoder); and every window's candidates scored in one pass
([`candidates`][hf_ralm.selection.candidates]), from which any strategy's choices follow. The predictive reranker's
training lives apart, in [`hf_ralm.reranker_training`][hf_ralm.reranker_training].

The names below are this package's public face, imported from their module when first used (the scorer they need
imports torch).

Examples:
    ```python
    from hf_ralm.selection import rerank_windows

    outcome = rerank_windows(model, tokenizer, ids, windows, queries, candidates=candidates, config=config)
    outcome.chosen[5]   # the candidate window 5 puts in context (-1: none)
    ```
"""

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "candidates": ("CandidateRecordWriter", "CandidateScores", "choose_from_scores", "score_candidates"),
    "gates": ("lm_gate_config", "normalized_top_scores", "retrieved_fraction"),
    "predictive": ("NO_PASSAGE_TEXT", "PredictiveReranker", "argmax_first"),
    "rankers": ("LMReranker",),
    "rerank": ("rerank_windows",),
    "rules": ("rank_correlation",),
}
"""The public names, by the module that defines them."""

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)
__all__ = [name for names in LAZY_EXPORTS.values() for name in names]
