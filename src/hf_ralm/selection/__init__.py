"""Which retrieved passages a window (evaluation) or a stride (generation) puts in context: retrieval gates
(:mod:`.gates`), reranking among ``k`` candidates (:mod:`.rerank`: zero-shot by the reader or another LM, the oracle,
random; :mod:`.predictive`: a trained cross-encoder), the exact rules they share (:mod:`.rules`), and every window's
candidates scored in one pass (:mod:`.candidates`). The predictive reranker's training lives apart, in
:mod:`hf_ralm.reranking`.

Example::

    from hf_ralm.selection.rerank import rerank_windows

    outcome = rerank_windows(model, tokenizer, ids, windows, queries, candidates, config)
    outcome.chosen[5]   # the candidate window 5 puts in context (-1: none)
"""
