"""The reader's inputs and scores: evaluation texts ([`data`][hf_ralm.core.data]), the window plan of a text
([`plan`][hf_ralm.core.plan]), where a model runs and in which precision ([`placement`][hf_ralm.core.placement],
[`modeling_utils`][hf_ralm.core.modeling_utils]), batch sizes ([`batching`][hf_ralm.core.batching]), the model inputs a
window's chosen passages make ([`model_inputs`][hf_ralm.core.model_inputs]), the exact fast scorer
([`scoring`][hf_ralm.core.scoring], with [`passage_cache`][hf_ralm.core.passage_cache]; on another engine,
[`engines`][hf_ralm.core.engines]), probability ensembles ([`ensemble`][hf_ralm.core.ensemble]) and the
perplexity figures ([`perplexity`][hf_ralm.core.perplexity]).

Nothing here retrieves or chooses: the window plan takes its candidates from a retriever given to it, and which of
them go in context is [`hf_ralm.selection`][hf_ralm.selection]'s.

Examples:
    ```python
    from hf_ralm.core.plan import prepare
    from hf_ralm.core.scoring import score_windows
    ```
"""
