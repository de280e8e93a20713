"""hf-ralm: In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023) for any Hugging Face causal LM."""

from .configuration_ralm import RalmConfig
from .evaluation import RalmEvalResult, evaluate_perplexity
from .generation import RalmGenerateOutput, RalmLogitsProcessor
from .modeling_ralm import RalmCausalLMOutput, RetrievalAugmentedModel
from .retrieval import (
    RETRIEVER_NAMES,
    BM25Retriever,
    Passage,
    Retriever,
    load_retriever,
    load_retriever_from_pretrained,
    retriever_class,
)

__version__ = "0.1.0"

__all__ = [
    "RalmConfig",
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
