"""Data preparation: the held-out Wikipedia evaluation set (``python benchmarks/data/make_heldout.py``) and the local
lm-eval tasks over the shared data (``--include_path benchmarks/data/lm_eval_tasks``)."""
