"""hf-ralm: In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023) for any Hugging Face causal LM."""

from .configuration_ralm import RalmConfig
from .errors import InputError
from .evaluation import RalmEvalResult, evaluate_perplexity
from .generation import RalmGenerateOutput, RalmLogitsProcessor
from .modeling_ralm import RalmCausalLMOutput, RetrievalAugmentedModel
from .retrieval import (
    RETRIEVER_NAMES,
    BM25Retriever,
    Retriever,
    load_retriever,
    load_retriever_from_pretrained,
    retriever_class,
)
from .passages import Passage

__version__ = "0.1.0"


def _register_metrics() -> None:
    """Make ``evaluate.load("ralm_perplexity")`` resolve offline (see :mod:`hf_ralm.metrics`); an unwritable cache
    folder must never make ``import hf_ralm`` fail."""
    import logging

    from .metrics import register_metrics

    try:
        register_metrics()
    except OSError as error:
        logging.getLogger(__name__).debug("Could not register the metrics in evaluate's module cache: %s", error)


_register_metrics()

__all__ = [
    "RalmConfig",
    "InputError",
    "RetrievalAugmentedModel",
    "RalmCausalLMOutput",
    "RalmEvalResult",
    "evaluate_perplexity",
    "RalmGenerateOutput",
    "RalmLogitsProcessor",
    "BM25Retriever",
    "Passage",
    "Retriever",
    "load_retriever",
    "load_retriever_from_pretrained",
    "retriever_class",
    "RETRIEVER_NAMES",
]
