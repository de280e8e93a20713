"""lm-evaluation-harness's ``ralm`` model: In-Context RALM inside lm-eval's likelihood and generation requests.

``import hf_ralm`` registers the name ``ralm`` with lm-eval when lm-eval is installed (``pip install
"hf-ralm[lm-eval]"``; lm-eval 0.4.13 discovers no plugins, so the import does it, lazily: this module is loaded only
when lm-eval asks for ``ralm``; the releases after lm-eval's pull request #4013 find it without the import, in the
``lm_eval.models`` entry point of hf-ralm's metadata). Then:

```python
import hf_ralm, lm_eval
lm_eval.simple_evaluate(model="ralm", tasks=["wikitext"], model_args="pretrained=HuggingFaceTB/SmolLM2-135M,"
                        "retriever=bm25,corpus=wiki.jsonl.gz,index_dir=wiki-bm25,max_length=256,"
                        "max_doc_tokens=200,retrieval_stride=4,query_length=32,dtype=float32,device=cpu")
lm_eval.simple_evaluate(model=RalmLM(ralm_model), tasks=[...])    # an already built RetrievalAugmentedModel
```

and on the command line ``hf-ralm lm-eval --model_args ... --tasks ...`` (lm-eval's own flags,
``hf_ralm.integrations.lm_eval_cli.cli_main``).

What each of lm-eval's requests is under In-Context RALM:

* ``loglikelihood_rolling`` (perplexity tasks such as ``wikitext``) is the paper's evaluation itself, computed by
  [`evaluate_perplexity`][hf_ralm.RetrievalAugmentedModel.evaluate_perplexity] on the document's tokens (no special
  tokens, as ``hf-ralm eval-lm`` tokenizes): windows every ``retrieval_stride`` tokens, each retrieving with its last
  ``query_length`` tokens, the passage written over the window's oldest tokens. lm-eval also asks for the document's
  first token, given its prefix token (BOS, else EOS), which eval-lm does not score: it is scored apart, given that
  token alone (window 0 retrieves nothing in the paper, and neither does it). So a document's log-likelihood is
  ``-(eval-lm's nll_sum on the document) + log p(first token | prefix token)``. With ``prefix_token_in_window=True`` the
  prefix token is instead token 0 of the windowed ids, so that the whole first window sees it, as lm-eval's ``hf`` model
  scores (the windows are then ``hf``'s with ``retrieval_stride`` = its ``max_length`` and ``max_length`` one more, for
  a document that fits in one window or fills its windows exactly, and a tokenizer that adds no BOS). With
  ``rolling_windows="lm-eval"`` and no retriever the document is scored on lm-eval's own windows, as its ``hf`` model
  scores it (with ``max_length`` one more than ``hf``'s).
* ``loglikelihood(context, continuation)`` (multiple choice, lambada): the context retrieves once (its decoded last
  ``query_length`` tokens; ``retrieval_query="context"``: the whole context; ``"doc:FIELD"``: a field of the task's
  document, e.g. ``doc:question``), its passages are chosen as generation chooses them at its first stride (gates,
  reranking, ``num_passages``: one policy, ``PassagePolicy``), and the continuation is
  scored on ``[passages; context]``, the oldest context tokens dropped so that the whole fits in ``max_length``
  ([`stride_start`][hf_ralm.core.strides.stride_start]). Every continuation of a context gets the same passages; a
  context's retrieval and choice run once however many continuations it has.
* ``generate_until`` (nq_open, triviaqa): [`generate_texts`][hf_ralm.RetrievalAugmentedModel.generate_texts], retrieving
  every ``retrieval_stride`` new tokens, stopped by lm-eval's own stop criteria (``until``, EOS) and ``max_gen_toks``.

Requests run batched (``batch_size`` per forward; ``auto`` halves on out-of-memory); the results' ``config`` block
carries the RALM's settings, the retriever, its index's fingerprint and how many windows, contexts and generations
had a passage ([`RalmLM.get_model_info`][hf_ralm.integrations.lm_eval.RalmLM.get_model_info]).

With ``engine=NAME`` in ``model_args`` (a registered reader engine, its options as keys) every request runs on its
[`Reader`][hf_ralm.Reader] as on transformers: a batch's inputs in one engine call, a batch's generations one call
per stride, each row stopped at its first ``until`` string (lm-eval cuts the text there all the same).
"""

from __future__ import annotations

import inspect
import os
import re
import warnings
from collections import Counter
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from transformers import AutoTokenizer, PreTrainedModel

from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..utils.extras import require

try:
    from lm_eval.api.model import TemplateLM
    from lm_eval.api.registry import register_model
    from lm_eval.models.utils import (Collator, handle_stop_sequences, normalize_gen_kwargs,
                                      postprocess_generated_text)
    from lm_eval.models.utils_hf import stop_sequences_criteria
    from lm_eval.utils import get_rolling_token_windows, make_disjoint_window, simple_parse_args_string
except ImportError:
    require("lm_eval", "lm-eval", "The ralm model of lm-evaluation-harness")  # one line naming the extra
    raise

from ..core.batching import AUTO, BatchSize, parse_batch_size
from ..config.settings import RALM_FIELDS
from ..errors import RalmWarning, SettingError, setting
from ..core.strides import Strides, stride_start
from ..generation.contexts import Row
from ..generation.decoder import RalmDecoder
from ..modeling_ralm import RetrievalAugmentedModel
from ..core.plan import window_length
from ..core.engines.reader import engine_reader
from ..core.engines.registry import DEFAULT_ENGINE, get_engine, option_owners
from ..core.modeling_utils import left_pad, model_device, model_identity
from ..core.passage_cache import PassageKVCache
from ..retrieval.base import retriever_identity
from ..core.scoring import ScoredInput, score_continuations
from ..selection.strategies import future_looking
from ..utils.progress import tqdm

__all__ = ["RalmLM", "RalmRequestStats"]

MODEL_NAME = "ralm"
"""The name lm-eval knows the model by (``--model ralm``)."""

QUERY_SOURCES = ("tokens", "context", "doc:FIELD")
"""What a ``loglikelihood`` request retrieves with (``retrieval_query``): its context's decoded last ``query_length``
tokens (the paper's query), the whole context, or a field of the task's document."""

ROLLING_WINDOWS = ("ralm", "lm-eval")
"""How ``loglikelihood_rolling`` cuts a document (``rolling_windows``): In-Context RALM's sliding windows, retrieving
every ``retrieval_stride`` tokens, or lm-eval's own (its ``hf`` model's disjoint windows, without retrieval)."""

LOADING_ARGS = ("revision", "attn_implementation", "gguf_file", "device_map", "trust_remote_code")
"""Arguments of the base model's loading that ``model_args`` may give (passed to ``from_pretrained``)."""

CONTEXTS_PER_CHUNK = 256
"""Distinct contexts whose retrievals, choices and continuations run together (bounds the inputs held at once)."""


@dataclass
class RalmRequestStats:
    """What retrieval did over an evaluation's requests, in the results' ``config`` block: per request type, how many
    units and how many had a passage in context (rolling: windows after each document's first; loglikelihood:
    distinct contexts; generation: strides of the generated text)."""

    rolling_documents: int = 0
    rolling_windows: int = 0
    rolling_windows_with_passage: int = 0
    loglikelihood_requests: int = 0
    loglikelihood_contexts: int = 0
    loglikelihood_contexts_with_passage: int = 0
    generation_prompts: int = 0
    generation_strides: int = 0
    generation_strides_with_passage: int = 0


@register_model(MODEL_NAME)
class RalmLM(TemplateLM):
    """lm-evaluation-harness's model for a [`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel] (see the module
    docstring for what each request computes).

    Args:
        pretrained: a causal LM (Hub id, local folder, or a loaded ``PreTrainedModel``), a saved RALM folder, or an
            already built [`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel] (then it comes with its own
            retriever and settings, and none of the loading arguments below may be given).
        retriever, corpus, index_dir, forbidden_titles, encoder, n_threads, tokenizer: as
            [`RetrievalAugmentedModel.from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained] takes them
            (``retriever``: ``bm25``, ``lucene``, ``dense``, ``hybrid`` or ``none``; not given: a saved RALM folder's
            own, else none).
        dtype, device: the model's precision and device, as
            [`RetrievalAugmentedModel.from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained] takes them (not
            given: hf-ralm's choice for the device, and the GPU when there is one, else the CPU).
        batch_size: windows (rolling), continuations (loglikelihood) or prompts (generation) per forward pass, or
            ``auto`` (lm-eval's ``auto:N`` too): from 64 on a GPU, halved on out-of-memory.
        retrieval_query: what a ``loglikelihood`` request retrieves with: ``"tokens"`` (the context's decoded last
            ``query_length`` tokens, the paper's query), ``"context"`` (the whole context: for QA-style prompts whose
            question is longer than ``query_length`` tokens) or ``"doc:FIELD"`` (the task document's ``FIELD``, e.g.
            ``doc:question``: the question alone, without a few-shot prompt's examples).
        prefix_token_in_window: ``loglikelihood_rolling`` puts lm-eval's prefix token at the start of the windowed
            ids (lm-eval's ``hf`` convention) instead of scoring the first token apart (eval-lm's windows).
        rolling_windows: ``"ralm"`` (In-Context RALM's sliding windows) or ``"lm-eval"``: ``loglikelihood_rolling``
            on lm-eval's own windows, as its ``hf`` model with ``max_length`` one less scores them (no retriever).
        prefix_token_id: the token lm-eval's requests are conditioned on when they have no context (default: BOS,
            else EOS, as lm-eval's ``hf`` model).
        max_gen_toks: new tokens of a generation whose task does not say (256, as lm-eval's ``hf`` model).
        engine: what runs the reader, a registered engine as ``from_pretrained`` takes it (default
            ``transformers``), its options given by name among ``settings``.
        settings: [`RalmConfig`][hf_ralm.RalmConfig] fields (``retrieval_stride``, ``query_length``, ``max_length``,
            ``max_doc_tokens``, ``num_passages``, ``rerank``, ``retrieval_gate``, ...) and the base model's
            loading arguments of ``LOADING_ARGS``.

    Examples:
        ```python
        lm = RalmLM("HuggingFaceTB/SmolLM2-135M", retriever="bm25", index_dir="wiki-bm25", max_length=256)
        lm_eval.simple_evaluate(model=lm, tasks=["wikitext"])["results"]["wikitext"]["word_perplexity,none"]
        ```
    """

    def __init__(self, pretrained: str | os.PathLike | PreTrainedModel | RetrievalAugmentedModel | None = None, *,
                 retriever: str | None = None, corpus: str | list[str] | None = None, index_dir: str | None = None,
                 forbidden_titles: str | Sequence[str] | None = None, encoder: str | None = None,
                 n_threads: int | None = None, tokenizer: str | None = None, dtype: str | None = None,
                 device: str | None = None, batch_size: int | str = DEFAULT_BATCH_SIZE,
                 max_batch_size: int | None = None, retrieval_query: str = "tokens",
                 prefix_token_in_window: bool = False, rolling_windows: str = "ralm",
                 prefix_token_id: int | None = None, max_gen_toks: int = 256, engine: str | None = None,
                 **settings: Any):
        super().__init__()
        owners = option_owners()  # every registered engine's options given by name
        engine_options = {name: settings.pop(name) for name in list(settings) if name in owners}
        unknown = sorted(set(settings) - (RALM_FIELDS - {"base_model_name_or_path"}) - set(LOADING_ARGS))
        if unknown:
            named = [name for name in inspect.signature(RalmLM).parameters if name != "settings"]
            raise SettingError(f"The {MODEL_NAME} model does not take {', '.join(map(repr, unknown))}: give "
                               f"{', '.join(named)}, RalmConfig fields (retrieval_stride, query_length, max_length, "
                               f"max_doc_tokens, ...), {', '.join(LOADING_ARGS)} or an engine's options "
                               f"({', '.join(owners)}).")
        if max_batch_size is not None:
            raise SettingError(f"The {MODEL_NAME} model has no max_batch_size: batch_size=auto starts at 64 on a GPU "
                               "and halves on out-of-memory.")
        if isinstance(pretrained, RetrievalAugmentedModel):
            given = {"retriever": retriever, "corpus": corpus, "index_dir": index_dir, "forbidden_titles":
                     forbidden_titles, "encoder": encoder, "tokenizer": tokenizer, "device": device,
                     "n_threads": n_threads, "dtype": dtype, "engine": engine, **engine_options, **settings}
            given = sorted(name for name, value in given.items() if value is not None)
            if given:
                raise SettingError(f"An already built RetrievalAugmentedModel comes with its retriever, settings, "
                                   f"precision and device: drop {', '.join(given)}, or build the model with them.")
            self.ralm = pretrained
        elif pretrained is None:
            raise SettingError(f"The {MODEL_NAME} model needs pretrained=: a causal LM (Hub id or folder), a saved "
                               "RALM folder, or a RetrievalAugmentedModel.")
        else:
            precision = {} if dtype is None else {"dtype": dtype}  # not given: from_pretrained's default
            self.ralm = RetrievalAugmentedModel.from_pretrained(
                pretrained, retriever=retriever, corpus=corpus, index_dir=index_dir,
                forbidden_titles=forbidden_titles, encoder=encoder, n_threads=n_threads, device=device,
                tokenizer=AutoTokenizer.from_pretrained(tokenizer) if tokenizer else None,
                engine=engine or DEFAULT_ENGINE, engine_options=engine_options or None, **precision, **settings)
        if self.ralm.tokenizer is None:
            raise SettingError("The RetrievalAugmentedModel has no tokenizer: build it with tokenizer=.")
        config = self.ralm.config
        for strategy in future_looking(config.rerank, config.retrieval_gate):
            raise SettingError(f"{setting(strategy.stage)}={strategy.name!r} chooses passages by the very tokens "
                               "being scored: an upper bound that looks at the future, not a result for lm-eval to "
                               f"report. Use hf-ralm eval-lm --{strategy.stage.replace('_', '-')} {strategy.name}, "
                               "which labels it so.")
        self.tokenizer = self.ralm.tokenizer
        self.retrieval_query = _check_query_source(retrieval_query)
        self.prefix_token_in_window = bool(prefix_token_in_window)
        self.rolling_windows = _check_rolling_windows(rolling_windows, self.ralm.retriever is not None)
        self._prefix_token_id = prefix_token_id
        self._max_gen_toks = int(max_gen_toks)
        self._device = model_device(self.ralm.language_model)
        self.batches = BatchSize(_batch_size(batch_size), self._device)
        self._passage_cache = PassageKVCache.for_model(self.ralm.language_model)
        self.stats = RalmRequestStats()

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None) -> "RalmLM":
        """``cls(**model_args)`` from lm-eval's ``"key=value,..."``; see
        [`create_from_arg_obj`][hf_ralm.integrations.lm_eval.RalmLM.create_from_arg_obj]."""
        return cls.create_from_arg_obj(simple_parse_args_string(arg_string), additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None) -> "RalmLM":
        """``cls(**arg_dict)`` with the evaluator's ``batch_size`` and ``device`` where ``model_args`` does not give
        them (and its ``device`` not to an engine that places the model itself): a ``device=`` in ``model_args``
        wins over the command line's default ``--device``, not the clash lm-eval's base class would raise."""
        places_model = not get_engine(arg_dict.get("engine") or DEFAULT_ENGINE).takes("device")
        extra = {key: value for key, value in (additional_config or {}).items()
                 if value is not None and key not in arg_dict and not (key == "device" and places_model)}
        return cls(**arg_dict, **extra)

    # --------------------------------------------------------------------------------------------------------------
    # What lm-eval reads of a model
    # --------------------------------------------------------------------------------------------------------------

    @property
    def eot_token_id(self) -> int:
        return self.tokenizer.eos_token_id

    @property
    def prefix_token_id(self) -> int:
        """What a request without context is conditioned on: ``prefix_token_id``, else BOS, else EOS."""
        if self._prefix_token_id is not None:
            return self._prefix_token_id
        bos = self.tokenizer.bos_token_id
        return bos if bos is not None else self.tokenizer.eos_token_id

    @property
    def max_length(self) -> int:
        """The window length ``L`` (``max_length``, or the model's maximum)."""
        return window_length(self.ralm.language_model, self.ralm.config, retrieving=self.ralm.retriever is not None)

    @property
    def max_gen_toks(self) -> int:
        return self._max_gen_toks

    @property
    def batch_size(self) -> int | str:
        return self.batches.setting

    @property
    def tokenizer_name(self) -> str:
        return self.tokenizer.name_or_path.replace("/", "__")

    def tok_encode(self, string: str, add_special_tokens: bool | None = None, **kwargs) -> list[int]:
        """The token ids of ``string``, with the tokenizer's default special tokens unless ``add_special_tokens``
        says (lm-eval's contexts are encoded as generation encodes its prompts)."""
        options = {} if add_special_tokens is None else {"add_special_tokens": add_special_tokens}
        return self.tokenizer.encode(string, **options)

    def get_model_info(self) -> dict:
        """What lm-eval writes into the results' ``config`` block: the reader (name, class, parameters, dtype), and
        under ``ralm`` the RALM settings, the window length, the retriever with its index's fingerprint
        (``retriever_identity``), how requests retrieve, and what retrieval did
        (``RalmRequestStats``).

        Examples:
            ```python
            results["config"]["ralm"]["retriever"]["corpus_fingerprint"]   # 'e0b8cc01f966ef0833ed9cfaab95c0...'
            ```
        """
        from .. import __version__

        model, config = self.ralm.language_model, self.ralm.config
        identity = model_identity(model)
        retriever = self.ralm.retriever
        return {
            "model_num_parameters": identity["reader_parameters"],
            "model_dtype": identity["dtype"],
            "ralm": {
                "hf_ralm_version": __version__,
                "base_model": config.base_model_name_or_path,
                "reader": identity,
                "settings": {key: value for key, value in config.to_dict().items()
                             if key in RALM_FIELDS and key != "base_model_name_or_path"},
                "window_length": self.max_length,
                "retriever": None if retriever is None else retriever_identity(retriever),
                "retrieval_query": self.retrieval_query,
                "prefix_token_in_window": self.prefix_token_in_window,
                "rolling_windows": self.rolling_windows,
                "prefix_token_id": self.prefix_token_id,
                "requests": asdict(self.stats),
            },
        }

    # --------------------------------------------------------------------------------------------------------------
    # loglikelihood_rolling: the paper's evaluation
    # --------------------------------------------------------------------------------------------------------------

    def loglikelihood_rolling(self, requests: list, disable_tqdm: bool = False) -> list[float]:
        """Each document's log-likelihood under In-Context RALM (see the module docstring): its tokens evaluated as
        ``hf-ralm eval-lm`` evaluates a text, plus its first token given the prefix token (or with
        ``prefix_token_in_window``, the prefix token put first in the windowed ids); with ``rolling_windows="lm-eval"``,
        lm-eval's own windows (``_lm_eval_rolling``).

        Args:
            requests: lm-eval's ``loglikelihood_rolling`` requests, a document each (``request.args[0]``).
            disable_tqdm: no progress bar.

        Returns:
            Each document's log-likelihood, in the order of ``requests``.
        """
        if self.rolling_windows == "lm-eval":
            return self._lm_eval_rolling(requests)
        texts = [request.args[0] for request in requests]
        documents = [self.tok_encode(text, add_special_tokens=False) for text in texts]
        firsts = [0.0] * len(documents) if self.prefix_token_in_window else self._first_token_logprobs(documents)
        results, found = [], []
        bar = tqdm(total=sum(len(ids) for ids in documents), unit="tok", desc="RALM perplexity",
                   disable=disable_tqdm or self.rank != 0)
        for text, ids, first in zip(texts, documents, firsts):
            windowed = [self.prefix_token_id, *ids] if self.prefix_token_in_window else ids
            nll_sum = 0.0
            if len(windowed) > 1:  # a lone token has nothing before it to be scored on
                with warnings.catch_warnings():  # each document's warnings are reported once for all, below
                    warnings.filterwarnings("ignore", category=RalmWarning)
                    figures = self.ralm.evaluate_perplexity(windowed, batch_size=self.batches.setting,
                                                            show_progress=False).figures
                found += figures.get("warnings", [])
                nll_sum = figures["nll_sum"]
                self.stats.rolling_windows += figures["num_windows"] - 1
                self.stats.rolling_windows_with_passage += figures["num_windows_with_passage"]
            self.stats.rolling_documents += 1
            results.append(first - nll_sum)
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), results[-1])
            bar.update(len(ids))
        bar.close()
        _warn_once(found, len(documents))
        return results

    def _lm_eval_rolling(self, requests: list) -> list[float]:
        """Each document's log-likelihood on lm-eval's own windows, as lm-eval's ``hf`` model computes it with a
        ``max_length`` one less (``hf``'s counts a window's input tokens, ours its tokens: one more, the last scored
        one): the document encoded as ``hf`` encodes it (the tokenizer's default special tokens: Gemma's BOS, after
        the prefix token too), cut by lm-eval's ``get_rolling_token_windows`` into disjoint spans of at most
        ``max_length - 1`` tokens, the first scored after the prefix token, each later one after the tokens before it
        that fill the window (one, but for the last span). No retrieval: the spans fill the windows."""
        texts = [request.args[0] for request in requests]
        inputs, owners = [], []
        for i, text in enumerate(texts):
            # lm-eval's hf model adds no special tokens to a text that already starts with the prefix token's text
            starts = text.startswith(self.tokenizer.decode([self.prefix_token_id]))
            ids = self.tok_encode(text, add_special_tokens=False if starts else None)
            spans = get_rolling_token_windows(ids, self.prefix_token_id, self.max_length - 1, context_len=1)
            pairs = [make_disjoint_window(span) for span in spans]
            for context, continuation in pairs:
                tokens = [*context, *continuation]
                inputs.append(ScoredInput(tokens, 0, len(tokens), (), len(context)))
            owners += [i] * len(pairs)
            self.stats.rolling_documents += 1
            self.stats.rolling_windows += max(0, len(pairs) - 1)
        scores = self.batches.run(lambda size: score_continuations(self.ralm.language_model, inputs, size))
        results = [0.0] * len(texts)
        for i, (logprob, _) in zip(owners, scores):
            results[i] += logprob
        for text, result in zip(texts, results):
            self.cache_hook.add_partial("loglikelihood_rolling", (text,), result)
        return results

    def _first_token_logprobs(self, documents: Sequence[list[int]]) -> list[float]:
        """``log p(first token | prefix token)`` of each document (0 for an empty one), in batched forwards."""
        inputs = [ScoredInput([self.prefix_token_id, ids[0]], 0, 2, (), 1) for ids in documents if ids]
        scores = iter(self.batches.run(lambda size: score_continuations(self.ralm.language_model, inputs, size)))
        return [next(scores)[0] if ids else 0.0 for ids in documents]

    # --------------------------------------------------------------------------------------------------------------
    # loglikelihood: a continuation with the context's passages in front
    # --------------------------------------------------------------------------------------------------------------

    def loglikelihood(self, requests: list, disable_tqdm: bool = False) -> list[tuple[float, bool]]:
        """Each continuation's log-probability after its context's passages and context (see the module docstring).

        Args:
            requests: lm-eval's ``loglikelihood`` requests, ``(context, continuation)`` each.
            disable_tqdm: no progress bar.

        Returns:
            ``(log p(continuation | passages; context), is_greedy)`` of each request, in the order of ``requests``.

        Raises:
            SettingError: an ensemble of passages (``ensemble_size`` above 1), a continuation that leaves its context
                no room in ``max_length``, or a ``retrieval_query="doc:FIELD"`` whose field the task's documents lack.
        """
        encoded = [(request.args, *self._encode_request(*request.args)) for request in requests]
        queries = None if self.retrieval_query == "tokens" else [self._query(request) for request in requests]
        return self._loglikelihood_tokens(encoded, disable_tqdm=disable_tqdm, queries=queries)

    def _encode_request(self, context: str, continuation: str) -> tuple[list[int], list[int]]:
        """lm-eval's encoding of a request: the context's and the continuation's ids, an empty context becoming the
        prefix token (as ``TemplateLM.loglikelihood`` encodes)."""
        if context:
            return self._encode_pair(context, continuation)
        continuation_ids = self.tok_encode(continuation, add_special_tokens=False)
        if continuation_ids[:1] == [self.prefix_token_id]:
            return continuation_ids[:1], continuation_ids[1:]
        return [self.prefix_token_id], continuation_ids

    def _query(self, request) -> str:
        """What ``request`` retrieves with under ``retrieval_query`` ``"context"`` or ``"doc:FIELD"``."""
        if self.retrieval_query == "context":
            return request.args[0]
        field = self.retrieval_query.removeprefix("doc:")
        if field not in (request.doc or {}):
            raise SettingError(f"retrieval_query={self.retrieval_query!r}: the documents of task "
                               f"{request.task_name!r} have no field {field!r} (they have "
                               f"{', '.join(sorted(request.doc or {}))}).")
        return str(request.doc[field])

    def _loglikelihood_tokens(self, requests: list, disable_tqdm: bool = False,
                              queries: Sequence[str] | None = None) -> list[tuple[float, bool]]:
        """``requests``: ``((context, continuation), context ids, continuation ids)`` as lm-eval encodes them;
        ``queries``: what each retrieves with (``None``: its context's last ``query_length`` tokens)."""
        if self.ralm.config.ensemble_size > 1:
            raise SettingError(f"{setting('ensemble_size')}={self.ralm.config.ensemble_size} mixes passages token by "
                               "token, and lm-eval's loglikelihood asks whether the continuation is the greedy one "
                               "under the mixture: loglikelihood requests take num_passages instead (rolling and "
                               "generation tasks take the ensemble).")
        keys = [(tuple(context_ids), None if queries is None else queries[i])
                for i, (_, context_ids, _) in enumerate(requests)]
        members: dict[tuple, list[int]] = {}
        for i, key in enumerate(keys):
            members.setdefault(key, []).append(i)
        contexts = list(members)
        self.stats.loglikelihood_requests += len(requests)
        results: list[tuple[float, bool] | None] = [None] * len(requests)
        with tqdm(total=len(requests), desc="RALM loglikelihood", disable=disable_tqdm or self.rank != 0) as bar:
            for start in range(0, len(contexts), CONTEXTS_PER_CHUNK):
                chunk = contexts[start : start + CONTEXTS_PER_CHUNK]
                scored = self.batches.run(lambda size: self._score_contexts(chunk, members, requests, queries, size))
                for i, answer in scored.items():
                    results[i] = answer
                    self.cache_hook.add_partial("loglikelihood", requests[i][0], answer)
                bar.update(len(scored))
        return results

    def _score_contexts(self, contexts: Sequence[tuple], members: dict, requests: list, queries, batch_size: int
                        ) -> dict[int, tuple[float, bool]]:
        """Retrieve and choose the passages of ``contexts`` (as generation's first stride does: one
        ``RalmDecoder`` call for them all), then score every continuation of each on
        ``[passages; context]`` (``score_continuations``, the passages' keys/values computed
        once); by request index."""
        model, config = self.ralm.language_model, self.ralm.config
        decoder = RalmDecoder(model, self.tokenizer, self.ralm.retriever, config, passage_cache=self._passage_cache,
                              reranker=self.ralm.reranker, rerank_batch_size=batch_size)
        rows = [Row(list(context_ids)) for context_ids, _ in contexts]
        decoder.start_stride(rows, Strides(config.retrieval_stride).length(0), generated=0,
                             queries=None if queries is None else [query for _, query in contexts])
        indices, inputs, max_length = [], [], self.max_length
        for row, key in zip(rows, contexts):
            prefix = row.mixture[0][1].prefix
            self.stats.loglikelihood_contexts += 1
            self.stats.loglikelihood_contexts_with_passage += bool(row.open_sources)
            for i in members[key]:
                continuation = list(requests[i][2])
                if len(prefix) + len(continuation) >= max_length:
                    raise SettingError(f"A continuation of {len(continuation)} tokens after passages of "
                                       f"{len(prefix)} tokens leaves no room for its context in "
                                       f"{setting('max_length')} {max_length}: raise {setting('max_length')} or "
                                       f"lower {setting('max_doc_tokens')}.")
                start = stride_start(len(row.ids), len(continuation), len(prefix), max_length)
                tokens = [*prefix, *row.ids[start:], *continuation]
                indices.append(i)
                inputs.append(ScoredInput(tokens, 0, len(tokens), prefix, len(tokens) - len(continuation)))
        scores = score_continuations(model, inputs, batch_size, passage_cache=self._passage_cache)
        return dict(zip(indices, scores))

    # --------------------------------------------------------------------------------------------------------------
    # generate_until: RALM generation
    # --------------------------------------------------------------------------------------------------------------

    def generate_until(self, requests: list, disable_tqdm: bool = False) -> list[str]:
        """Each request's generation
        ([`RetrievalAugmentedModel.generate_texts`][hf_ralm.RetrievalAugmentedModel.generate_texts], retrieving every
        ``retrieval_stride`` new tokens) up to its first ``until`` string or the end-of-sequence token, and at most
        ``max_gen_toks`` new tokens. Requests with the same generation settings run in batches, longest prompt first.

        Args:
            requests: lm-eval's ``generate_until`` requests, ``(context, generation settings)`` each.
            disable_tqdm: no progress bar.

        Returns:
            Each request's generated text, cut at its first ``until`` string, in the order of ``requests``.
        """
        collator = Collator([request.args for request in requests], group_by="gen_kwargs",
                            sort_fn=lambda args: (-len(self.tok_encode(args[0])), args[0]),
                            group_fn=lambda args: args[1])
        results: list[str] = []
        with tqdm(total=len(requests), desc="RALM generation", disable=disable_tqdm or self.rank != 0) as bar:
            for group in collator.get_batched(n=0):  # one group per generation settings
                contexts = [context for context, _ in group]
                texts = self.batches.map(contexts, lambda batch: self._generate(batch, group[0][1], bar))
                for (context, gen_kwargs), text in zip(group, texts):
                    self.cache_hook.add_partial("generate_until", (context, gen_kwargs), text)
                results += texts
        return collator.get_original(results)

    def _generate(self, prompts: Sequence[str], gen_kwargs: dict, bar: tqdm) -> list[str]:
        settings = dict(normalize_gen_kwargs(gen_kwargs, self.max_gen_toks))
        eos = self.tokenizer.decode([self.eot_token_id])
        until = [stop for stop in handle_stop_sequences(settings.pop("until"), eos=eos) if stop]
        settings["max_new_tokens"] = settings.pop("max_gen_toks")
        if not settings["do_sample"]:
            settings.pop("temperature", None)  # greedy: a temperature would only make transformers warn
        if engine_reader(self.ralm.language_model) is not None:
            # no stopping criteria run between the engine's tokens: each row stops at its first stop string, and
            # lm-eval keeps the text before it, as it keeps it from a batch stopped by its own criteria
            stop = {"stop_strings": until} if until else {}
        else:  # lm-eval's own stop criteria (the hf model's): the batch stops once every row holds a stop string
            width = left_pad(self.tokenizer, prompts).input_ids.shape[1]
            stop = {"stopping_criteria": stop_sequences_criteria(self.tokenizer, until, width, len(prompts))}
        generated = self.ralm.generate_texts(list(prompts), **stop, **settings)
        strides = Strides(self.ralm.config.retrieval_stride)
        for text in generated:
            self.stats.generation_prompts += 1
            self.stats.generation_strides += strides.count(len(text.output_ids))
            self.stats.generation_strides_with_passage += len({source["start"] for source in text.sources})
        bar.update(len(prompts))
        return [postprocess_generated_text(text.text, until, None) for text in generated]


def _check_query_source(value: str) -> str:
    if value in ("tokens", "context") or (isinstance(value, str) and value.startswith("doc:") and value[4:]):
        return value
    raise SettingError(f"retrieval_query must be one of {', '.join(QUERY_SOURCES)} (e.g. doc:question), got "
                       f"{value!r}.")


def _check_rolling_windows(value: str, retrieves: bool) -> str:
    if value not in ROLLING_WINDOWS:
        raise SettingError(f"rolling_windows must be one of {', '.join(ROLLING_WINDOWS)}, got {value!r}.")
    if value == "lm-eval" and retrieves:
        raise SettingError("rolling_windows=lm-eval scores lm-eval's own windows, which fill max_length with the "
                           "tokens they score and leave no room for a passage: give retriever=none, or "
                           "rolling_windows=ralm (In-Context RALM's windows, retrieving every retrieval_stride "
                           "tokens).")
    return value


def _batch_size(value: int | str) -> int | str:
    """lm-eval's batch size as hf-ralm's: a count, or ``auto`` (lm-eval's ``auto:N`` too: hf-ralm halves on
    out-of-memory instead of searching N times)."""
    return AUTO if isinstance(value, str) and value.startswith(AUTO) else parse_batch_size(value)


def _warn_once(messages: Sequence[str], num_documents: int) -> None:
    """The evaluations' warnings over the documents, each kind (its text without numbers and quoted names) once,
    with how many documents it concerned and its first document's message."""
    kind = [re.sub(r"\d+|'[^']*'", "#", message) for message in messages]
    kinds = Counter(kind)
    first: dict[str, str] = {}
    for key, message in zip(kind, messages):
        first.setdefault(key, message)
    for kind, count in kinds.items():
        warnings.warn(RalmWarning(f"in {count} of {num_documents} documents, {first[kind]}"), stacklevel=3)
