"""Which retrieved passages a window (evaluation) or a stride (generation) puts in context: selection-time reranking
and retrieval gates, in one home. The strategies, one file each, and their registry (:mod:`.strategies`); the one
policy that applies them (:mod:`.policy`), computing what each needs; the retrieval gates' scores (:mod:`.gates`);
how the reader ranks a text's windows (:mod:`.rerank`) and what ranks when it does not (:mod:`.rankers`: another LM;
:mod:`.predictive`: a trained cross-encoder); the exact rules they share (:mod:`.rules`); and every window's
candidates scored in one pass (:mod:`.candidates`), from which any strategy's choices follow. The predictive
reranker's training lives apart, in :mod:`hf_ralm.reranker_training`.

Example::

    from hf_ralm.selection.rerank import rerank_windows

    outcome = rerank_windows(model, tokenizer, ids, windows, queries, candidates, config)
    outcome.chosen[5]   # the candidate window 5 puts in context (-1: none)
"""
