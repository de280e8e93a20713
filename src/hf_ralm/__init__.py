"""hf-ralm: In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023) for any Hugging Face causal LM.

Besides the front ends (:class:`RetrievalAugmentedModel`, :func:`evaluate` with its :class:`RunOptions`, the
retrievers), the steps they are built from are public too, for scripts that time or check one step (the benchmarks):
reading texts (:func:`load_dataset_text`), the window plan (:func:`prepare`, :func:`plan_windows`), the model inputs
(:func:`window_prefixes`, :func:`passage_prefix`), the scorer (:func:`score_windows`, :class:`PassageKVCache`,
:class:`BatchSize`), ensembles, the figures (:func:`perplexity_figures`), the record store (:class:`RecordStore`),
the run harness (:class:`ChunkRun`) and open-domain QA (:func:`evaluate_qa`).

Example::

    from hf_ralm import (BM25Retriever, RalmConfig, load_dataset_text, perplexity_figures, prepare, score_windows,
                         window_prefixes)

    config = RalmConfig()
    plan = prepare(load_dataset_text("wikitext-103-test.jsonl"), tokenizer, config, BM25Retriever.load("wiki-bm25"),
                   max_length=1024)
    passages = plan.candidates(plan.windows, 1)   # each window's top passage
    nll = score_windows(model, plan.ids, plan.windows, window_prefixes(tokenizer, plan.windows, passages, config))
    scored = sum(w.num_scored for w in plan.windows)
    perplexity_figures(float(nll[1:].sum()), len(plan.ids), scored, plan.num_words)["token_ppl"]
"""

from .batching import BatchSize
from .compare import strategy_choices
from .configuration_ralm import RalmConfig, default_query_length
from .data import join_rows, load_dataset_text
from .ensemble import ensemble_member_nlls, mix_window_nlls
from .errors import InputError
from .evaluation import RalmEvalResult, evaluate, evaluate_perplexity, evaluate_retrieval
from .generation import RalmGenerateOutput, RalmLogitsProcessor
from .model_inputs import passage_prefix, window_prefixes
from .modeling_ralm import RalmCausalLMOutput, RetrievalAugmentedModel
from .modeling_utils import model_device, model_identity, resolve_max_length
from .passage_cache import PassageKVCache
from .perplexity import count_words, perplexity_figures, perplexity_from_nll
from .plan import prepare, tokenize_text
from .qa import MAX_NEW_TOKENS, evaluate_qa, load_questions, write_gold_corpus
from .records import RecordStore, digest
from .runs import ChunkRun, RunOptions
from .retrieval import (
    RETRIEVER_NAMES,
    BM25Retriever,
    Retriever,
    load_retriever,
    load_retriever_from_pretrained,
    register_retriever,
    retriever_class,
)
from .passages import Passage, passage_text
from .scoring import score_windows
from .windows import Window, plan_windows

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
    "evaluate",
    "evaluate_perplexity",
    "evaluate_retrieval",
    "RunOptions",
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
    # the steps the front ends are built from
    "load_dataset_text",
    "join_rows",
    "default_query_length",
    "tokenize_text",
    "prepare",
    "plan_windows",
    "Window",
    "passage_text",
    "passage_prefix",
    "window_prefixes",
    "score_windows",
    "PassageKVCache",
    "BatchSize",
    "ensemble_member_nlls",
    "mix_window_nlls",
    "perplexity_figures",
    "perplexity_from_nll",
    "count_words",
    "model_device",
    "model_identity",
    "resolve_max_length",
    "RecordStore",
    "ChunkRun",
    "digest",
    "strategy_choices",
    "load_questions",
    "evaluate_qa",
    "MAX_NEW_TOKENS",
    "write_gold_corpus",
]
