"""The predictive reranker's training defaults in plain Python (neither torch nor transformers is imported): the
defaults of [`collect_rerank_data`][hf_ralm.reranker_training.collect_rerank_data] and
[`train_reranker`][hf_ralm.reranker_training.train_reranker], which their signatures take from here and the command
line shows before it loads anything (``hf-ralm rerank-data --help``, ``hf-ralm train-reranker --help``).

Examples:
    >>> WINDOWS_PER_ARTICLE, TRAINING_DEFAULTS["learning_rate"]
    (8, 2e-05)
"""

from __future__ import annotations

CHUNK_SIZE = 64
"""Windows a chunk of rerank data when ``run.chunk_size`` is ``None`` (``rerank-data --chunk-size``'s default)."""

WINDOWS_PER_ARTICLE = 8
"""Windows collected per training article, spread evenly over it (``rerank-data --windows-per-article``)."""

TRAINING_DEFAULTS = {"eval_fraction": 0.1, "epochs": 1.0, "batch_size": 8, "learning_rate": 2e-5, "seed": 42,
                     "eval_points": 10}
"""The training's hyperparameters by default, by argument of ``train_reranker`` (``train-reranker``'s flags):
the share of the articles held out, epochs, windows per step, learning rate, seed, points of the learning curve."""
