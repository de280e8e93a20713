"""The reader's inputs and scores: evaluation texts (:mod:`.data`), the window plan of a text (:mod:`.plan`), where
a model runs and in which precision (:mod:`.placement`, :mod:`.modeling_utils`), batch sizes (:mod:`.batching`), the
model inputs a window's chosen passages make (:mod:`.model_inputs`), the exact fast scorer (:mod:`.scoring`, with
:mod:`.passage_cache`; on another engine, :mod:`.engines`), probability ensembles (:mod:`.ensemble`) and the perplexity
figures (:mod:`.perplexity`).

Nothing here retrieves or chooses: the window plan takes its candidates from a retriever given to it, and which of
them go in context is :mod:`hf_ralm.selection`'s.

Example::

    from hf_ralm.core.plan import prepare
    from hf_ralm.core.scoring import score_windows
"""
