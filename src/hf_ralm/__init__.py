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
    register_retriever,
    retriever_class,
)
from .passages import Passage

__version__ = "0.1.0"


def _register_metrics() -> None:
    """Make ``evaluate.load("ralm_perplexity")`` resolve offline (see :mod:`hf_ralm.metrics`); an unwritable cache
    folder must never make ``import hf_ralm`` fail."""
    from transformers.utils import logging

    from .metrics import register_metrics

    try:
        register_metrics()
    except OSError as error:
        logging.get_logger(__name__).debug("Could not register the metrics in evaluate's module cache: %s", error)


_register_metrics()

LM_EVAL_MODEL = "hf_ralm.integrations.lm_eval:RalmLM"
"""lm-evaluation-harness's ``ralm`` model, registered lazily: lm-eval imports it when asked for ``ralm``."""


def _register_lm_eval() -> None:
    """Register the ``ralm`` model with lm-evaluation-harness when it is installed (lm-eval 0.4.13 discovers no
    plugins). Only lm-eval's registry is imported here (a few milliseconds), neither its evaluator nor
    :mod:`hf_ralm.integrations.lm_eval`; without lm-eval nothing happens."""
    try:
        from lm_eval.api.registry import model_registry
    except ImportError:
        return
    if "ralm" not in model_registry:
        model_registry.register("ralm", target=LM_EVAL_MODEL)


_register_lm_eval()

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
    "register_retriever",
    "RETRIEVER_NAMES",
]
