"""Evaluating a RALM: language modeling over a text (``pipeline``: [`evaluate`][hf_ralm.evaluate]), its window
records (``window_records``), several strategies from one reader pass (``compare``), what a run will cost before it
starts (``run_cost``), open-domain QA (``qa``) and the evaluation as a causal LM's ``forward`` (``causal_lm``).

Examples:
    >>> from hf_ralm.evaluation.pipeline import evaluate
"""
