"""Evaluating a RALM: language modeling over a text (:mod:`.pipeline`: :func:`~hf_ralm.evaluate`), its window
records (:mod:`.window_records`), several strategies from one reader pass (:mod:`.compare`), what a run will cost
before it starts (:mod:`.run_cost`) and open-domain QA (:mod:`.qa`).

Example::

    from hf_ralm.evaluation.pipeline import evaluate
"""
