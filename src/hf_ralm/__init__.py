"""hf-ralm: In-Context Retrieval-Augmented Language Modeling (Ram et al., 2023) for any Hugging Face causal LM.

Besides the front ends ([`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel], [`evaluate`][hf_ralm.evaluate]
with its [`RunOptions`][hf_ralm.RunOptions], the retrievers), the steps they are built from are public too, for
scripts that time or check one step (the benchmarks): reading texts ([`load_dataset_text`][hf_ralm.load_dataset_text]),
the window plan ([`prepare`][hf_ralm.prepare], [`plan_windows`][hf_ralm.plan_windows]), the model inputs
([`window_prefixes`][hf_ralm.window_prefixes], [`passage_prefix`][hf_ralm.passage_prefix]), the scorer
([`score_windows`][hf_ralm.score_windows], [`PassageKVCache`][hf_ralm.PassageKVCache],
[`BatchSize`][hf_ralm.BatchSize]), ensembles, the figures ([`perplexity_figures`][hf_ralm.perplexity_figures]), the
record store ([`RecordStore`][hf_ralm.RecordStore]), the run harness ([`ChunkRun`][hf_ralm.ChunkRun]) and open-domain
QA ([`evaluate_qa`][hf_ralm.evaluate_qa]).

Examples:
    ```python
    from hf_ralm import (BM25Retriever, RalmConfig, load_dataset_text, perplexity_figures, prepare, score_windows,
                         window_prefixes)

    config = RalmConfig()
    plan = prepare(load_dataset_text("wikitext-103-test.jsonl"), tokenizer, config, BM25Retriever.load("wiki-bm25"),
                   max_length=1024)
    passages = plan.candidates(plan.windows, 1)   # each window's top passage
    nll = score_windows(model, plan.ids, plan.windows, window_prefixes(tokenizer, plan.windows, passages, config))
    scored = sum(w.num_scored for w in plan.windows)
    perplexity_figures(float(nll[1:].sum()), len(plan.ids), scored, plan.num_words)["token_ppl"]
    ```
"""

import importlib
import importlib.abc
import sys
import threading
from typing import TYPE_CHECKING, Any

from .utils.lazy import lazy_exports

LAZY_EXPORTS = {
    "core.batching": ("BatchSize",),
    "evaluation.compare": ("strategy_choices",),
    "evaluation.causal_lm": ("RalmCausalLMOutput",),
    "config.configuration_ralm": ("RalmConfig",),
    "config.query_lengths": ("default_query_length",),
    "core.data": ("join_rows", "load_dataset_text"),
    "core.engines.reader": ("Reader",),
    "core.engines.registry": ("Engine", "Loading", "engine_names", "register_engine"),
    "core.engines.vllm": ("VllmOptions", "VllmReader"),
    "core.ensemble": ("ensemble_member_nlls", "mix_window_nlls"),
    "errors": ("InputError",),
    "evaluation.pipeline": ("RalmEvalResult", "evaluate", "evaluate_perplexity", "evaluate_retrieval"),
    "generation": ("RalmGenerateOutput", "RalmLogitsProcessor"),
    "core.model_inputs": ("passage_prefix", "window_prefixes"),
    "modeling_ralm": ("RetrievalAugmentedModel",),
    "core.modeling_utils": ("model_device", "model_identity", "resolve_max_length"),
    "core.passage_cache": ("PassageKVCache",),
    "core.perplexity": ("count_words", "perplexity_figures", "perplexity_from_nll"),
    "core.plan": ("prepare", "tokenize_text"),
    "evaluation.qa": ("MAX_NEW_TOKENS", "evaluate_qa", "load_questions", "write_gold_corpus"),
    "runs.store": ("RecordStore",),
    "runs.fingerprints": ("digest",),
    "runs.harness": ("ChunkRun", "RunOptions"),
    "retrieval": ("RETRIEVER_NAMES", "BM25Retriever", "Retriever", "load_retriever", "load_retriever_from_pretrained",
                  "register_retriever", "retriever_class"),
    "core.passages": ("Passage",),
    "config.passage_template": ("passage_text",),
    "core.scoring": ("score_windows",),
    "core.windows": ("Window", "plan_windows"),
}
"""The package's public names, by the module that defines them: imported when first used (PEP 562), so that
``import hf_ralm`` (and ``hf-ralm --help``, whose package this is) loads neither torch nor transformers."""

SUBPACKAGES = ("cli", "config", "core", "evaluation", "generation", "integrations", "metrics", "reranker_training",
               "retrieval", "runs", "selection", "testing", "utils")
"""The subpackages reachable as attributes (``hf_ralm.retrieval.BM25Retriever``) without importing them first."""

if TYPE_CHECKING:  # what type checkers and the API reference read; at run time, LAZY_EXPORTS
    from .core.batching import BatchSize
    from .evaluation.compare import strategy_choices
    from .evaluation.causal_lm import RalmCausalLMOutput
    from .config.configuration_ralm import RalmConfig
    from .config.query_lengths import default_query_length
    from .core.data import join_rows, load_dataset_text
    from .core.engines.reader import Reader
    from .core.engines.registry import Engine, Loading, engine_names, register_engine
    from .core.engines.vllm import VllmOptions, VllmReader
    from .core.ensemble import ensemble_member_nlls, mix_window_nlls
    from .errors import InputError
    from .evaluation.pipeline import RalmEvalResult, evaluate, evaluate_perplexity, evaluate_retrieval
    from .generation import RalmGenerateOutput, RalmLogitsProcessor
    from .core.model_inputs import passage_prefix, window_prefixes
    from .modeling_ralm import RetrievalAugmentedModel
    from .core.modeling_utils import model_device, model_identity, resolve_max_length
    from .core.passage_cache import PassageKVCache
    from .core.perplexity import count_words, perplexity_figures, perplexity_from_nll
    from .core.plan import prepare, tokenize_text
    from .evaluation.qa import MAX_NEW_TOKENS, evaluate_qa, load_questions, write_gold_corpus
    from .runs.store import RecordStore
    from .runs.fingerprints import digest
    from .runs.harness import ChunkRun, RunOptions
    from .retrieval import (
        RETRIEVER_NAMES,
        BM25Retriever,
        Retriever,
        load_retriever,
        load_retriever_from_pretrained,
        register_retriever,
        retriever_class,
    )
    from .core.passages import Passage
    from .config.passage_template import passage_text
    from .core.scoring import score_windows
    from .core.windows import Window, plan_windows

_export, _exported = lazy_exports(__name__, LAZY_EXPORTS)


def __getattr__(name: str) -> Any:
    if name in SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    return _export(name)


def __dir__() -> list[str]:
    return sorted({*_exported(), *SUBPACKAGES})


__version__ = "0.1.0"


def _register_metrics() -> None:
    """Make ``evaluate.load("ralm_perplexity")`` resolve offline (see ``hf_ralm.metrics``); an unwritable cache
    folder must never make ``import hf_ralm`` fail."""
    from .metrics import register_metrics

    try:
        register_metrics()
    except OSError as error:
        from transformers.utils import logging  # only then: transformers is no part of ``import hf_ralm``

        logging.get_logger(__name__).debug("Could not register the metrics in evaluate's module cache: %s", error)


_register_metrics()

LM_EVAL_MODEL = "hf_ralm.integrations.lm_eval:RalmLM"
"""lm-evaluation-harness's ``ralm`` model, registered lazily: lm-eval imports it when asked for ``ralm``."""


def _register_lm_eval() -> None:
    """Register the ``ralm`` model with lm-evaluation-harness when it is installed: lm-eval 0.4.13 reads no entry
    points (the releases after its pull request #4013 find ``ralm`` in the ``lm_eval.models`` entry point that
    pyproject.toml declares, and a name already there is left as it is). Only lm-eval's registry is imported here (a
    few milliseconds), neither its evaluator nor ``hf_ralm.integrations.lm_eval``; without lm-eval nothing
    happens."""
    try:
        from lm_eval.api.registry import model_registry
    except ImportError:
        return
    if "ralm" not in model_registry:
        model_registry.register("ralm", target=LM_EVAL_MODEL)


_register_lm_eval()


def _declare_retrievers() -> None:
    """Declare hf-ralm's retriever backends to the settings, which sit below retrieval and import none of it: the
    registry's import does it (each backend's default query length, from its plain-Python declaration), so that every
    module of hf-ralm finds them declared, its package being imported first. No backend is imported."""
    from .retrieval import registry  # noqa: F401  (imported for what its import declares)


_declare_retrievers()


def _declare_strategies() -> None:
    """Declare hf-ralm's selection strategies to the settings, which sit below selection and import none of it: each
    strategy's module registers it as it is imported (``register_strategy``, which declares it to
    ``config.strategy_settings``), so that every module of hf-ralm finds them declared, its package being imported
    first. Neither torch nor transformers is imported."""
    from .selection import strategies  # noqa: F401  (imported for what its import declares)


_declare_strategies()

AUTO_CLASS_MODULES = {"transformers.models.auto.configuration_auto": "config.configuration_ralm",
                      "transformers.models.auto.modeling_auto": "modeling_ralm"}
"""transformers' Auto classes' modules, and the module of hf-ralm's that registers the RALM with them on import
(``AutoConfig``: ``RalmConfig``; ``AutoModelForCausalLM``: ``RetrievalAugmentedModel``)."""


class _AutoClassRegistration(importlib.abc.MetaPathFinder):
    """After ``import hf_ralm`` the Auto classes load a saved RALM, as when the import loaded everything, while
    ``import hf_ralm`` itself loads no transformers: once an Auto module of ``AUTO_CLASS_MODULES`` is loaded, the
    hf-ralm module that registers the RALM with it is imported, as soon as no module of transformers' or hf-ralm's is
    half-imported (it would import them: ``tokenization_auto`` loads ``modeling_auto`` halfway through)."""

    def __init__(self) -> None:
        self._depth = threading.local()  # this thread's transformers and hf-ralm modules being imported

    def find_spec(self, name: str, path=None, target=None):
        if name.partition(".")[0] not in ("transformers", __name__):
            return None
        later = sys.meta_path[sys.meta_path.index(self) + 1:] if self in sys.meta_path else ()
        spec = next((found for finder in later if hasattr(finder, "find_spec")
                     for found in [finder.find_spec(name, path, target)] if found is not None), None)
        if spec is not None and hasattr(spec.loader, "exec_module"):
            exec_module = spec.loader.exec_module

            def exec_then_register(module) -> None:
                self._depth.value = getattr(self._depth, "value", 0) + 1
                try:
                    exec_module(module)
                finally:
                    self._depth.value -= 1
                if not self._depth.value:
                    _register_with_auto_classes()

            spec.loader.exec_module = exec_then_register  # this spec's loader only
        return spec


def _register_with_auto_classes() -> None:
    """Import the hf-ralm modules that register the RALM with the Auto modules loaded so far (each once); when both
    are, the import hook is no longer needed."""
    for auto_module, module in AUTO_CLASS_MODULES.items():
        if auto_module in sys.modules and f"{__name__}.{module}" not in sys.modules:
            importlib.import_module(f"{__name__}.{module}")
    if all(f"{__name__}.{module}" in sys.modules for module in AUTO_CLASS_MODULES.values()):
        sys.meta_path[:] = [finder for finder in sys.meta_path if not isinstance(finder, _AutoClassRegistration)]


if not any(isinstance(finder, _AutoClassRegistration) for finder in sys.meta_path):
    sys.meta_path.insert(0, _AutoClassRegistration())
_register_with_auto_classes()

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
    "Engine",
    "Loading",
    "Reader",
    "register_engine",
    "engine_names",
    "VllmReader",
    "VllmOptions",
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
