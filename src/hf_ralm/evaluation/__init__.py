"""Evaluating a RALM: language modeling over a text (``pipeline``: [`evaluate`][hf_ralm.evaluate]), its window
records (``window_records``), several strategies from one reader pass (``compare``), what a run will cost before it
starts (``run_cost``) and open-domain QA (``qa``).

Examples:
    >>> from hf_ralm.evaluation.pipeline import evaluate
"""
