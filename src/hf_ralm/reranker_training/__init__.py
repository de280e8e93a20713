"""Training the predictive reranker of In-Context RALM (Ram et al. 2023, §6.2). Choosing passages at evaluation and
generation time, this reranker's use included, is ``hf_ralm.selection``'s (the ``"predictive"`` strategy).

[`collect_rerank_data`][hf_ralm.reranker_training.collect_rerank_data] collects its training data with the frozen
reader as compact records (``RerankDataWriter``; ``load_rerank_data`` gives back their texts, ``rerank_data_summary``
counts them), [`train_reranker`][hf_ralm.reranker_training.train_reranker] trains it with the loss of Eq. 9, and
[`PredictiveReranker`][hf_ralm.reranker_training.PredictiveReranker] uses it. Training and using it need the
``rerank`` extra (``pip install "hf-ralm[rerank]"``); sentence-transformers is imported only then.

Examples:
    ```python
    from hf_ralm.reranker_training import PredictiveReranker, train_reranker

    train_reranker("data/rerank", output_dir="models/reranker")
    PredictiveReranker("models/reranker").choose(["the emperor of"], [["Rome\\nrome was", "Music\\nthe band"]])
    ```
"""

from typing import TYPE_CHECKING

from ..utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "articles": ("TrainingTitles", "articles_source"),
    "collect": ("collect_rerank_data", "training_articles"),
    "data": ("RerankDataWriter", "file_fingerprint", "load_rerank_data", "rerank_data_summary"),
    "card": ("CURVE_FILE",),
    "held_out": ("rerank_metrics", "split_by_article"),
    "loss": ("PredictiveRerankLoss", "predictive_loss"),
    # PredictiveReranker is hf_ralm.selection's (the reranker in use), public here as the model the training makes
    "training": ("PredictiveReranker", "push_reranker", "train_reranker", "training_steps"),
}
"""The public names, by the module they are imported from when first used (torch, datasets): so that the command
line reads the training's defaults (``defaults``) without them."""

if TYPE_CHECKING:  # what type checkers and the API reference read; at run time, LAZY_EXPORTS
    from .articles import TrainingTitles, articles_source
    from .collect import collect_rerank_data, training_articles
    from .data import RerankDataWriter, file_fingerprint, load_rerank_data, rerank_data_summary
    from .card import CURVE_FILE
    from .held_out import rerank_metrics, split_by_article
    from .loss import PredictiveRerankLoss, predictive_loss
    from .training import PredictiveReranker, push_reranker, train_reranker, training_steps

__getattr__, __dir__ = lazy_exports(__name__, LAZY_EXPORTS)

__all__ = [
    "collect_rerank_data",
    "training_articles",
    "TrainingTitles",
    "articles_source",
    "RerankDataWriter",
    "load_rerank_data",
    "rerank_data_summary",
    "file_fingerprint",
    "PredictiveReranker",
    "PredictiveRerankLoss",
    "predictive_loss",
    "push_reranker",
    "rerank_metrics",
    "train_reranker",
    "training_steps",
    "split_by_article",
    "CURVE_FILE",
]
