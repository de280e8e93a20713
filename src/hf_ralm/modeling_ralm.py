"""``RetrievalAugmentedModel``: any frozen causal LM plus a retriever, PEFT-style.

It owns only a :class:`RalmConfig` and a retriever; everything else is forwarded to the wrapped model, and
``save_pretrained`` writes the config and the retriever's ``retriever_config.json`` (with ``save_index=True`` its
index too), never the base weights.

Example:
    >>> from hf_ralm import RetrievalAugmentedModel
    >>> model = RetrievalAugmentedModel.from_pretrained(
    ...     "HuggingFaceTB/SmolLM2-135M", retriever="bm25", index_dir="wiki-index", corpus="wiki.jsonl.gz",
    ...     retrieval_stride=4, query_length=32, max_length=512)                       # doctest: +SKIP
    >>> ids = model.tokenizer("Some text to score ...", return_tensors="pt").input_ids  # doctest: +SKIP
    >>> out = model(ids)                                                               # doctest: +SKIP
    >>> out.loss, out.token_nlls.shape, out.passages[0][out.token_windows[0, -1]]      # doctest: +SKIP
    >>> model.save_pretrained("my-ralm", save_index=True)   # config, retriever and index  # doctest: +SKIP
    >>> RetrievalAugmentedModel.from_pretrained("my-ralm")   # a folder or a Hub id          # doctest: +SKIP
"""

from __future__ import annotations

import copy
import json
import os
import tempfile
import warnings
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.utils import CONFIG_NAME, ModelOutput

from .config.configuration_ralm import RalmConfig
from .config.settings import RALM_FIELDS
from .evaluation.compare import DEFAULT_STRATEGIES, Comparison, compare_strategies
from .model_card import ralm_model_card
from .evaluation.pipeline import RalmEvalResult, evaluate
from .generation import ralm_generate
from .errors import InputError, MissingFileError, RalmWarning, SavedFolderError, SettingError, setting
from .config.passages import Passage
from .core.modeling_utils import is_engine_reader, vocabulary_size
from .core.dtypes import DEVICE_DEFAULT
from .core.placement import default_device, resolve_device, resolve_dtype
from .core.vllm_reader import ENGINE, VllmOptions, VllmReader, check_engine
from .retrieval.corpus import check_corpus_paths
from .retrieval.base import RETRIEVER_CONFIG_FILE, SAVED_INDEX_DIR, Retriever, read_forbidden_titles
from .retrieval.factory import (check_retriever_config, load_retriever, pretrained_folder, read_retriever_config,
                                retriever_from_folder)
from .retrieval.index_folder import names_a_local_path, saved_path
from .runs.harness import RunOptions
from .selection.rankers import load_reranker
from .utils.atomic import write_text_atomic
from .utils.checks import check_path, check_vocabulary, refuse_type, with_named_options
from .utils.outputs import check_no_links
from .utils.extras import require
from .utils.paths import OFFLINE_HINT, missing_local_path
from .runs.shards import Shard
from .utils.widened_linear import widen_where_bfloat16_is_slow

SAVED_ENTRIES = (CONFIG_NAME, RETRIEVER_CONFIG_FILE, "README.md", SAVED_INDEX_DIR, f"{SAVED_INDEX_DIR}.tmp")
"""What :meth:`RetrievalAugmentedModel.save_pretrained` writes in its folder (the index and its build folder with
``save_index``)."""


@dataclass
class RalmCausalLMOutput(ModelOutput):
    """Like ``CausalLMOutput``: ``loss`` is the mean NLL over the scored tokens of all rows.

    ``token_nlls[b, t]`` is the NLL of token ``t`` of row ``b`` (NaN where not scored: token 0, padding, ignored
    labels); ``token_windows[b, t]`` is the window that scored it and ``passages[b][window]`` the passages retrieved
    for that window (the first was in context; an empty list means none was).
    """

    loss: torch.FloatTensor | None = None
    token_nlls: torch.FloatTensor | None = None
    token_windows: torch.LongTensor | None = None
    passages: list[list[list[Passage]]] | None = None


def _saved_ralm_config(path: str, hub_kwargs: dict) -> tuple[RalmConfig, dict | None] | None:
    """The RalmConfig stored at ``path`` (folder or Hub id) and the retriever description that config.json held
    before retrievers were saved in their own ``retriever_config.json`` (``None`` in newer folders); ``None`` when
    ``path`` is a plain model. A saved setting that :meth:`RalmConfig.validate` refuses (a ``passage_template`` with
    an unknown field, ...) is refused here, naming the file, before anything loads; so is a local ``config.json``
    that is no JSON (not taken for a model to fetch from the Hub)."""
    _check_config_json(os.path.join(path, CONFIG_NAME))
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(path, **hub_kwargs)
    except (OSError, ValueError):
        return None
    if config_dict.get("model_type") != RalmConfig.model_type:
        return None
    old_retriever = config_dict.pop("retriever", None)
    try:
        return RalmConfig.from_dict(config_dict), old_retriever
    except (ValueError, TypeError) as error:
        raise SettingError(f"{os.path.join(path, CONFIG_NAME)}: {getattr(error, 'marked', error)} The saved "
                           "setting is refused: correct it in that file, or save the RALM again.") from None


def _check_config_json(file: str) -> None:
    """Refuse (an :class:`~hf_ralm.errors.InputError` naming ``file`` and where it goes wrong) a model folder's
    ``config.json`` that is there but no JSON object: transformers would report it as a model the Hub does not
    have."""
    if not os.path.isfile(file):
        return
    try:
        with open(file, encoding="utf-8") as f:
            value = json.load(f)
    except json.JSONDecodeError as error:
        problem = f"is not JSON ({error.msg} at line {error.lineno} column {error.colno})"
    except (UnicodeDecodeError, OSError) as error:
        problem = f"cannot be read as UTF-8 JSON ({error})"
    else:
        if isinstance(value, dict):
            return
        problem = f"holds a JSON {type(value).__name__}, not an object"
    raise InputError(f"{file} {problem}: a model folder's config.json is a JSON object (a saved RALM's settings, or "
                     "the causal LM's config); fix the file, or save the model again.")


def _saved_retriever_config(path: str, old_retriever: dict | None, hub_kwargs: dict) -> tuple[str, str, dict] | None:
    """The retriever saved with the RALM folder ``path`` (a folder or a Hub id, then downloaded), if any: the folder
    on this machine, the file that describes it (``retriever_config.json``; an older folder's ``config.json``, which
    held it under ``retriever``, recorded by absolute paths: those need ``index_dir=``) and its description, checked
    (:func:`~hf_ralm.retrieval.factory.check_retriever_config`)."""
    folder = pretrained_folder(path, **hub_kwargs)
    if old_retriever is not None:
        return folder, CONFIG_NAME, check_retriever_config(old_retriever, folder, CONFIG_NAME, "retriever")
    if not os.path.isfile(os.path.join(folder, RETRIEVER_CONFIG_FILE)):
        return None
    return folder, RETRIEVER_CONFIG_FILE, read_retriever_config(folder)


def _saved_retriever(path: str, old_retriever: dict | None, hub_kwargs: dict, **overrides) -> Retriever | None:
    """The retriever saved with the RALM folder ``path`` (:func:`_saved_retriever_config`), if any: ``overrides``
    replace its saved values (see :meth:`Retriever.from_config`). The paths the folder records are followed only
    inside it (:func:`~hf_ralm.retrieval.factory.retriever_from_folder`)."""
    saved = _saved_retriever_config(path, old_retriever, hub_kwargs)
    if saved is None:
        return None
    folder, file, config = saved
    return retriever_from_folder(folder, config, file, **overrides)


def saved_ralm_settings(name_or_path: str | os.PathLike, **hub_kwargs) -> tuple[RalmConfig, dict | None] | None:
    """The settings of the saved RALM ``name_or_path`` (a folder written by
    :meth:`RetrievalAugmentedModel.save_pretrained`, or a Hub id, then downloaded: ``hub_kwargs`` are ``revision``,
    ``cache_dir``, ``token``, ``local_files_only``) and its retriever's description (``None``: saved without one),
    both checked as :meth:`~RetrievalAugmentedModel.from_pretrained` checks them; ``None`` for a plain model. What a
    front end reads before loading, to tell a saved value from a default (the command line: ``--model SAVED`` keeps
    the folder's retriever and settings unless a flag is given).

    Example::

        config, retriever = saved_ralm_settings("my-ralm")
        config.retrieval_stride, retriever["type"]   # (4, 'bm25')
    """
    path = str(name_or_path)
    found = None if missing_local_path(path) else _saved_ralm_config(path, hub_kwargs)
    if found is None:
        return None
    config, old_retriever = found
    retriever = _saved_retriever_config(path, old_retriever, hub_kwargs)
    return config, None if retriever is None else retriever[2]


_LOADING: ContextVar[tuple[str, ...]] = ContextVar("hf_ralm_saved_ralms_loading", default=())
"""The saved RALMs whose base model is loading in this context, outermost first (a base model may itself be a saved
RALM, loaded through ``AutoModelForCausalLM``): what :func:`_loading_base_of` checks a base model against."""


def _folder_key(name_or_path: str) -> str:
    """What tells two names of one model apart from two models: a local folder's real path, else the Hub id."""
    return os.path.realpath(name_or_path) if os.path.isdir(name_or_path) else name_or_path


@contextmanager
def _loading_base_of(path: str, base_name: str) -> Iterator[None]:
    """The block that loads the base model ``base_name`` of the saved RALM ``path``. A base model that is that folder
    itself, or a saved RALM whose base model is loading around it (a chain that comes back to a folder), is refused
    with one line naming the folder (:class:`~hf_ralm.errors.SavedFolderError`): it would load itself forever; so is a
    local base model that is not there."""
    if missing_local_path(base_name):  # not asked of the Hub, which would only say it is no repository id
        raise SavedFolderError(f"{os.path.join(path, CONFIG_NAME)}: its base_model_name_or_path {base_name!r} does "
                               "not exist on this machine: set it to the causal LM's folder or Hub id, or load the "
                               "folder where that model is.")
    chain, key = _LOADING.get(), _folder_key(path)
    base = _folder_key(base_name)
    if base == key or base in chain:
        what = (f"is this folder itself ({path!r})" if base == key else
                f"is the saved RALM {base_name!r}, whose base model is {path!r} (a chain of saved RALMs that comes "
                "back to a folder)")
        raise SavedFolderError(f"{os.path.join(path, CONFIG_NAME)}: its base_model_name_or_path {base_name!r} "
                               f"{what}: loading it would never end. A RALM wraps a causal LM: set "
                               "base_model_name_or_path to the causal LM's Hub id or folder.")
    token = _LOADING.set((*chain, key))
    try:
        yield
    finally:
        _LOADING.reset(token)


def _saved_reranker_model(path: str, reranker_model: str, hub_kwargs: dict) -> str:
    """The ``reranker_model`` saved in the RALM ``path``'s ``config.json``: a Hub id as it is; a local path only
    inside the folder (joined to it: :func:`~hf_ralm.retrieval.index_folder.saved_path`), one that leads outside
    refused (the caller gives it instead)."""
    if not names_a_local_path(reranker_model):
        return reranker_model
    return saved_path(reranker_model, pretrained_folder(path, **hub_kwargs), CONFIG_NAME, "reranker_model",
                      f"give the reranker yourself ({setting('reranker_model')}={reranker_model!r}) to use it.")


def _retriever_options(options: Mapping[str, Any] | None, **named) -> dict[str, Any]:
    """``from_pretrained``'s retriever options as one mapping: ``options`` (its ``retriever_options``) with the entries
    given by name (``index_dir=``, ``corpus=``, ...; ``None``: not given) added, one given both ways refused; forbidden
    titles given as a file are read at once, and corpus files checked to be there, so that a bad file fails before
    anything loads (not after the base model's weights)."""
    options = with_named_options(dict(options or {}), named, "retriever_options")
    if isinstance(options.get("forbidden_titles"), (str, os.PathLike)):
        options["forbidden_titles"] = read_forbidden_titles(str(options["forbidden_titles"]))
    check_corpus_paths(options.get("corpus"))
    return options


def _from_auto_class(kwargs: dict) -> tuple[dict, RalmConfig | None]:
    """The keyword arguments of a saved RALM's loading without what ``AutoModelForCausalLM.from_pretrained`` adds
    for the class it hands the folder to, and the config it read there (its RALM settings given to the Auto class
    applied): ``None`` when no :class:`RalmConfig` was given. ``trust_remote_code`` stays only when ``True`` (the
    user's, for the base model; the Auto class passes ``False`` for a folder of a registered class)."""
    config = kwargs.get("config")
    if not isinstance(config, RalmConfig):
        return kwargs, None
    added = ("config", "_from_auto", "adapter_kwargs")
    return {k: v for k, v in kwargs.items()
            if k not in added and not (k == "trust_remote_code" and v is not True)}, config


def _check_loading_extras(kwargs: dict) -> None:
    """Refuse at once, in one line naming the extra, a base model's loading that needs a package that is not
    installed (transformers would say so only after reading the model's files): accelerate for ``device_map``, gguf
    for ``gguf_file``."""
    if kwargs.get("device_map") is not None:
        require("accelerate", "accelerate", setting("device_map"))
    if kwargs.get("gguf_file"):
        require("gguf", "gguf", setting("gguf_file"))


def _model_type(name_or_path: str, kwargs: dict) -> str | None:
    """The ``model_type`` of the checkpoint's config (``None`` when it cannot be read without loading the model, e.g.
    a GGUF file): what ``dtype="device-default"`` needs to know of the model's family."""
    config_kwargs = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only") if k in kwargs}
    try:
        config_dict, _ = PreTrainedConfig.get_config_dict(name_or_path, **config_kwargs)
    except (OSError, ValueError):
        return None
    text_config = config_dict.get("text_config") or {}
    return text_config.get("model_type") or config_dict.get("model_type")


def _placement(kwargs: dict, device: str | torch.device | None, name_or_path: str) -> tuple[dict, torch.device | None]:
    """The base model's loading arguments with its precision resolved, and the device it goes to after loading
    (``None`` with ``device_map``: placed while loading)."""
    if "torch_dtype" in kwargs:  # transformers' older name
        if "dtype" in kwargs:
            raise SettingError("Give dtype or torch_dtype (its older name), not both.")
        kwargs = {**{k: v for k, v in kwargs.items() if k != "torch_dtype"}, "dtype": kwargs["torch_dtype"]}
    if kwargs.get("device_map") is not None:
        if device is not None:
            raise SettingError(f"Give {setting('device')} or {setting('device_map')}, not both: device_map places the "
                               "model's layers itself.")
        target = default_device(Shard.resolve().local_rank)
    else:
        target = resolve_device(device) if device is not None else default_device(Shard.resolve().local_rank)
    dtype = kwargs.get("dtype", DEVICE_DEFAULT)
    model_type = _model_type(name_or_path, kwargs) if dtype == DEVICE_DEFAULT and target.type == "cuda" else None
    kwargs = {**kwargs, "dtype": resolve_dtype(dtype, target, model_type)}
    return kwargs, None if kwargs.get("device_map") is not None else target


def _base_model_skeleton(name_or_path: str, model_kwargs: dict) -> PreTrainedModel:
    """The base model built from its config on the ``meta`` device: no weights read, no memory taken."""
    from transformers import AutoConfig

    config_kwargs = {k: model_kwargs[k] for k in ("gguf_file", "revision", "cache_dir", "token", "local_files_only")
                     if k in model_kwargs}
    try:
        config = AutoConfig.from_pretrained(name_or_path, **config_kwargs)
    except OSError as error:
        raise OSError(f"Could not read the config of the causal LM {name_or_path!r}: {error}") from error
    dtype = model_kwargs["dtype"]
    if dtype == "auto":  # the checkpoint's own, as from_pretrained reads it (float32 when its config names none)
        dtype = getattr(config.get_text_config(), "dtype", None) or torch.float32
        dtype = getattr(torch, dtype) if isinstance(dtype, str) else dtype  # a config read from JSON names it
    with torch.device("meta"):
        base = AutoModelForCausalLM.from_config(config, dtype=dtype)
    base.config.name_or_path = name_or_path  # what model_identity names it by, as for a loaded model
    return base


def check_model_path(name_or_path: str) -> None:
    """Refuse at once a model that looks like a local folder (:func:`~hf_ralm.utils.paths.looks_local`) and is not
    there, instead of asking the Hub for it."""
    if missing_local_path(name_or_path):
        raise MissingFileError(f"The {setting('model')} {name_or_path!r} does not exist: give a model folder (with "
                               "config.json), a GGUF file's folder, or a Hub id such as HuggingFaceTB/SmolLM2-135M.")


VLLM_LOADING_ARGS = ("dtype", "torch_dtype", "revision", "trust_remote_code")
"""The base model's loading arguments the vllm engine takes (the others place or build a transformers model)."""


def _vllm_reader(name_or_path: str, engine_options: Mapping[str, Any] | None, kwargs: dict,
                 device: str | torch.device | None, load_weights: bool) -> VllmReader:
    """The reader on the vllm engine: ``engine_options`` (:class:`~hf_ralm.core.vllm_reader.VllmOptions`) with the
    precision :func:`_placement` would give a transformers model on this machine's default device (``"auto"``: the
    checkpoint's own), unless the options name one. What places or builds a transformers model (``device``,
    ``device_map``, ``load_weights=False``, ``attn_implementation``, ...) is refused in one line."""
    refused = sorted(k for k, v in kwargs.items() if k not in VLLM_LOADING_ARGS and v is not None)
    refused += [name for name, given in (("device", device is not None), ("load_weights", not load_weights)) if given]
    if refused:
        raise SettingError(f"{', '.join(setting(name) for name in refused)}: not taken by {setting('engine')} vllm, "
                           f"which places and loads the model itself; drop {'it' if len(refused) == 1 else 'them'}, "
                           f"or use {setting('engine')} transformers.")
    options = VllmOptions.entries(engine_options)
    if "dtype" in kwargs or "torch_dtype" in kwargs or "dtype" not in options:
        placed, _ = _placement({k: v for k, v in kwargs.items() if k in ("dtype", "torch_dtype")}, None, name_or_path)
        dtype = placed["dtype"]
        named = {"dtype": dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")}
    else:
        named = {}
    return VllmReader(name_or_path, VllmOptions.of(options, **named), revision=kwargs.get("revision"),
                      trust_remote_code=bool(kwargs.get("trust_remote_code", False)))


def _load_base_model(name_or_path: str, model_args: Sequence, model_kwargs: dict):
    try:
        return AutoModelForCausalLM.from_pretrained(name_or_path, *model_args, **model_kwargs)
    except OSError as error:
        raise OSError(
            f"Could not load the causal LM {name_or_path!r}: it is neither a local model folder nor a model that "
            f"could be fetched from the Hub (a typo, or {OFFLINE_HINT}). Original error: {error}"
        ) from error


class RetrievalAugmentedModel(PreTrainedModel, GenerationMixin):
    """A frozen causal LM evaluated with In-Context RALM: every ``retrieval_stride`` tokens a passage retrieved for
    the last ``query_length`` tokens is put in front of the context. No weights change.

    A ``transformers`` causal LM where one is expected: ``generate`` decodes with retrieval every
    ``retrieval_stride`` tokens, so ``pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)`` works
    (:meth:`collect_sources` gives the passages behind its text), and after ``import hf_ralm``
    ``AutoModelForCausalLM.from_pretrained(folder_or_hub_id)`` loads a saved RALM as this class. Its reader
    (``language_model``) is a transformers model, or with ``from_pretrained(..., engine="vllm")`` a
    :class:`~hf_ralm.core.vllm_reader.VllmReader` (no torch module: its weights live in the engine's processes), on
    which evaluation, :meth:`compare_strategies`, :meth:`forward` and :meth:`generate` run as on transformers.

    Example::

        from transformers import pipeline

        generator = pipeline("text-generation", model=ralm, tokenizer=ralm.tokenizer)
        with ralm.collect_sources() as sources:
            text = generator("The Eiffel tower is", max_new_tokens=16, do_sample=False)[0]["generated_text"]
        sources[0][0]["title"]   # the passage in context for the first stride
    """

    config_class = RalmConfig
    base_model_prefix = "language_model"
    _no_split_modules: list[str] = []

    def __init__(self, config: RalmConfig, language_model: PreTrainedModel | VllmReader,
                 retriever: Retriever | None = None, tokenizer=None, reranker=None):
        super().__init__(config)
        self.language_model = language_model
        self.retriever = retriever
        self.tokenizer = tokenizer
        self._reranker = reranker
        self._source_sinks: list[list[list[dict]]] = []  # the lists of the open collect_sources() blocks
        # the reader's own generation config (its special tokens, its defaults): what generate() runs with, and what
        # pipeline() reads, rather than the empty one PreTrainedModel makes from the RALM config
        self.generation_config = getattr(language_model, "generation_config", None) or self.generation_config
        # no post_init(): it would re-initialise the wrapped model's weights

    @property
    def device(self) -> torch.device:
        """Where the RALM's inputs go: the reader's device, or on an engine reader this process's memory (the engine
        takes token ids from here; its GPUs are its own processes'), so that a ``pipeline`` keeps its inputs there."""
        if is_engine_reader(self.language_model):
            return torch.device("cpu")
        return super().device

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "language_model":
                raise
            return getattr(self.language_model, name)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path: str | os.PathLike | PreTrainedModel,
        *model_args,
        retriever: str | dict | Retriever | None = None,
        tokenizer=None,
        index_dir: str | None = None,
        corpus: str | list[str] | None = None,
        forbidden_titles: str | Sequence[str] | None = None,
        encoder: str | None = None,
        device: str | torch.device | None = None,
        load_weights: bool = True,
        n_threads: int | None = None,
        retriever_options: Mapping[str, Any] | None = None,
        engine: str = "transformers",
        engine_options: Mapping[str, Any] | None = None,
        **kwargs,
    ) -> "RetrievalAugmentedModel":
        """Wrap a causal LM given as a Hub id, a local folder or a loaded model, or rebuild a saved RALM folder.

        Args:
            pretrained_model_name_or_path: model id/folder (loaded with ``AutoModelForCausalLM``), a loaded model,
                or a folder written by :meth:`save_pretrained`.
            retriever: a retriever name (``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``, ``"none"``), a
                description (``Retriever.config()``), or any object with ``retrieve(queries, k)``. Not given, a
                saved RALM folder's own retriever (its ``retriever_config.json``); others get none.
            index_dir, corpus: where the index is (built there from ``corpus`` when missing or stale; without
                ``index_dir``, in hf-ralm's cache). For a saved retriever, they replace its index folder / rebuild
                its index from ``corpus`` when stale.
            forbidden_titles: a file with one title per line, or titles, never to retrieve (contamination).
            encoder: the dense retriever's encoder (``"dense"``, ``"hybrid"``); ``query_length`` then defaults to
                64 (the paper's best for dense retrieval) instead of 32 unless given.
            device: where a model loaded here goes (default: the GPU when there is one, this rank's under torchrun,
                else the CPU: :func:`~hf_ralm.core.placement.default_device`); not with ``device_map``, which places it
                itself (accelerate's big-model placement, for a model larger than one GPU). A loaded model given
                here stays where it is. A model loaded here in bfloat16 on a CPU without bfloat16 instructions gets
                its linear layers computed in float32 and rounded back to bfloat16, several times faster there
                (:func:`~hf_ralm.utils.widened_linear.widen_bfloat16_matmuls`); a model given here is left as it
                is.
            n_threads: the threads of a BM25 or Lucene search (``"bm25"``, ``"lucene"``, ``"hybrid"``'s sparse side;
                default: the CPUs this process may use, :func:`~hf_ralm.utils.cpus.available_cpus`).
            retriever_options: the retriever backend's options as one mapping, those its ``Options`` declare (a
                remote backend's address, the dense backend's ``pooling``, ...; one it does not take is refused):
                ``index_dir``, ``corpus``, ``forbidden_titles``, ``encoder`` and ``n_threads`` above are entries of it
                given by name (one given both ways is refused). A saved retriever takes them as replacements of its
                saved values, but for ``n_threads`` (it keeps its default).
            load_weights: ``False`` builds the base model from its config on PyTorch's ``meta`` device, without
                weights: its class, size, dtype and maximum length are there, and nothing can run through it. Enough
                to retrieve (``hf-ralm retrieve`` without a reader that ranks), in seconds and no memory.
            engine: what runs the reader: ``"transformers"`` (a model in this process, the default) or ``"vllm"``
                (a :class:`~hf_ralm.core.vllm_reader.VllmReader`, the engine's own processes, tensor or pipeline
                parallel across GPUs: evaluation, ``compare_strategies``, reranking and ``forward`` run on it,
                exactly as on transformers, and generation one engine call per stride; docs/vllm.md). vLLM
                places the model itself (no ``device``/``device_map``); ``dtype`` is resolved as for transformers.
            engine_options: the vllm engine's options (:class:`~hf_ralm.core.vllm_reader.VllmOptions`:
                ``tensor_parallel_size``, ``pipeline_parallel_size``, ``gpu_memory_utilization``,
                ``max_model_len``, ``enforce_eager``, ``kv_cache_memory_bytes``, ... and any other ``vllm.LLM``
                argument); only with ``engine="vllm"``.
            kwargs: :class:`RalmConfig` fields (``retrieval_stride``, ``query_length``, ``max_length``, ...); the
                rest (``dtype``, ``device_map``, ``attn_implementation``, ``gguf_file``, ``revision``, ...) go to the
                base model's loading. ``dtype`` (or ``torch_dtype``): ``"auto"`` is transformers' (the checkpoint's
                own precision); not given, ``"device-default"``, hf-ralm's choice for the device: bfloat16 on a GPU
                that has it, float16 on another GPU (float32 for the families that overflow in float16: Gemma, T5)
                and float32 elsewhere (:func:`~hf_ralm.core.placement.resolve_dtype`; the command line's
                ``--dtype auto``); a name or a ``torch.dtype`` is used as it is. For a saved RALM, ``revision``
                names one of its repository, and the base model loads at its own default.

        ``AutoModelForCausalLM.from_pretrained(saved_ralm)`` lands here (after ``import hf_ralm``), with the same
        keyword arguments.

        A saved RALM's files are checked before they are used, each refusal one line naming the file and the key:
        its settings (:meth:`RalmConfig.validate`), its retriever's description
        (:func:`~hf_ralm.retrieval.factory.check_retriever_config`), a base model that is the folder itself (or a
        chain of saved RALMs that comes back to it), and every path it names (index folder, corpus, forbidden
        titles, encoder, ``reranker_model``), followed only inside the folder unless the caller gives that value
        (:class:`~hf_ralm.errors.SavedFolderError`); the one exception, read only, is an index that
        :meth:`save_pretrained` recorded outside a folder saved on this machine, opened there while it is still that
        index (never from a Hub download, never built there:
        :func:`~hf_ralm.retrieval.index_folder.saved_index_dir`).
        """
        kwargs, given_config = _from_auto_class(kwargs)
        engine = check_engine(engine, engine_options)
        if engine != ENGINE:  # the vllm engine refuses these loading arguments whatever is installed
            _check_loading_extras(kwargs)
        overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in RALM_FIELDS}
        options = _retriever_options(retriever_options, index_dir=index_dir, corpus=corpus,
                                     forbidden_titles=forbidden_titles, encoder=encoder, n_threads=n_threads)
        hub_kwargs = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only") if k in kwargs}
        saved, old_retriever = None, None
        if not isinstance(pretrained_model_name_or_path, (str, os.PathLike, PreTrainedModel)):  # never asked of the Hub
            refuse_type("pretrained_model_name_or_path", pretrained_model_name_or_path, "a causal LM's Hub id or "
                        "folder, or a saved RALM's (a str or an os.PathLike), or a loaded transformers model")
        if isinstance(pretrained_model_name_or_path, PreTrainedModel):
            if engine == ENGINE:
                raise SettingError(f"{setting('engine')} vllm loads the reader in its own processes: give the model's "
                                   "Hub id or folder, not a loaded model.")
            base = pretrained_model_name_or_path
            base_name = base.config.name_or_path or None
        else:
            path = str(pretrained_model_name_or_path)
            check_model_path(path)
            saved, old_retriever = _saved_ralm_config(path, hub_kwargs) or (None, None)
            base_name = saved.base_model_name_or_path if saved else path
            if saved and not base_name:
                raise ValueError(f"{path} holds a RALM config without base_model_name_or_path.")
            if saved:  # a revision names one of the RALM's repository, not of its base model's
                kwargs = {k: v for k, v in kwargs.items() if k != "revision"}
            with _loading_base_of(path, base_name) if saved else nullcontext():
                if engine == ENGINE:
                    base = _vllm_reader(base_name, engine_options, kwargs, device, load_weights)
                else:
                    kwargs, device = _placement(kwargs, device, base_name)
                    if load_weights:
                        base = _load_base_model(base_name, model_args, kwargs)
                        if device is not None:
                            base.to(device)
                        widen_where_bfloat16_is_slow(base)
                    else:
                        base = _base_model_skeleton(base_name, kwargs)
        if not is_engine_reader(base):
            base.eval()
        if tokenizer is None:
            tokenizer_kwargs = {k: kwargs[k] for k in ("gguf_file", "revision", "cache_dir", "token") if k in kwargs}
            tokenizer = AutoTokenizer.from_pretrained(base_name, **tokenizer_kwargs)

        fields = (given_config or saved).to_dict() if (given_config or saved) else {}
        fields = {k: v for k, v in fields.items() if k in RALM_FIELDS}
        fields.update(overrides, base_model_name_or_path=base_name)
        if saved is not None and saved.reranker_model and "reranker_model" not in overrides \
                and fields.get("reranker_model") == saved.reranker_model:  # the folder's, not the caller's
            fields["reranker_model"] = _saved_reranker_model(path, saved.reranker_model, hub_kwargs)
        config = RalmConfig(**fields)
        if retriever is None and saved is not None:  # its saved values, replaced by the options given
            options.pop("n_threads", None)  # never given to a saved retriever (a saved dense or hybrid one refuses it)
            loaded = _saved_retriever(path, old_retriever, hub_kwargs, **options)
        else:
            loaded = load_retriever(retriever, **options)
        config.query_length = config.query_length_for(loaded)  # None: the retriever's default
        return cls(config, base, loaded, tokenizer)

    def save_pretrained(self, save_directory: str | os.PathLike, save_index: bool = False,
                        comparison: Comparison | None = None, repo_id: str | None = None, *,
                        dataset: str | None = None, tags: Sequence[str] = (), base_model: str | None = None,
                        **kwargs) -> None:
        """Write the RALM config (``config.json``), the retriever's ``retriever_config.json`` (see
        :meth:`Retriever.save_pretrained`) and a model card (``README.md``, :func:`~hf_ralm.model_card.ralm_model_card`:
        base model, retriever and corpus, settings, and ``comparison``'s figures when given, also as the card's
        ``model-index`` results on ``dataset``; ``tags`` join the card's own); the base model stays where it is. With
        ``save_index`` the retriever's index is copied into ``save_directory/index``, so the folder works on its own
        once moved or uploaded to the Hub (:meth:`push_to_hub`); without it, an index outside the folder is recorded
        by its path and identity, and the folder loads on this machine while that index is unchanged. A retriever that
        is no :class:`Retriever` is not saved.

        The config names the base model by ``base_model``, its Hub id, when given (as :meth:`push_to_hub` does),
        else as this RALM names it; a base model that is a folder on this machine is said in a warning, since the
        saved folder then loads only where that folder is."""
        save_directory = check_path("save_directory", save_directory)
        config = self.config if base_model is None else self._hub_config(base_model)
        base = config.base_model_name_or_path
        if base and names_a_local_path(base):
            warnings.warn(RalmWarning(
                f"{save_directory} names its base model by the local folder {base!r}, so it loads only where that "
                "folder is: give save_pretrained(..., base_model='OWNER/NAME'), the base model's Hub id, for a "
                "folder that loads anywhere."), stacklevel=2)
        self._write_folder(save_directory, config, save_index=save_index, comparison=comparison,
                           repo_id=repo_id, dataset=dataset, tags=tags, **kwargs)

    def _write_folder(self, save_directory: str | os.PathLike, config: RalmConfig, *, save_index: bool,
                      comparison: Comparison | None, repo_id: str | None, dataset: str | None, tags: Sequence[str],
                      **kwargs) -> None:
        """:meth:`save_pretrained` with ``config`` as the folder's RALM config (:meth:`push_to_hub`'s names its base
        model by its Hub id). A link where it writes is refused first: a user's file is never written through one."""
        check_no_links(save_directory, SAVED_ENTRIES,
                       f"remove the link, or save to another folder than {save_directory}")
        os.makedirs(save_directory, exist_ok=True)
        config.save_pretrained(save_directory, **kwargs)
        retriever_file = os.path.join(save_directory, RETRIEVER_CONFIG_FILE)
        if isinstance(self.retriever, Retriever):
            self.retriever.save_pretrained(save_directory, save_index=save_index)
        elif os.path.exists(retriever_file):  # left by an earlier save here: it does not describe this model
            os.remove(retriever_file)
        card = ralm_model_card(config, self.retriever, repo_id=repo_id, index_included=save_index,
                               comparison=comparison, dataset=dataset, tags=tags)
        write_text_atomic(os.path.join(save_directory, "README.md"), str(card), suffix=".md")

    def _hub_config(self, base_model: str | None) -> RalmConfig:
        """The RALM config :meth:`push_to_hub` uploads: its base model named by ``base_model`` (a Hub id) when given;
        a base model that is a folder on this machine (or none) without it is refused in one line
        (:class:`~hf_ralm.errors.SavedFolderError`): the repository would load nowhere else."""
        base = base_model or self.config.base_model_name_or_path
        if base_model is not None and names_a_local_path(base_model):
            raise SavedFolderError(f"base_model={base_model!r} is a local path: give the base model's Hub id (such as "
                                   "HuggingFaceTB/SmolLM2-135M), which the pushed repository names.")
        if not base or names_a_local_path(base):
            what = f"is the local folder {base!r}" if base else "is not known"
            raise SavedFolderError(f"This RALM's base model {what}, which a Hub repository cannot load elsewhere: "
                                   "give its Hub id, push_to_hub(..., base_model='OWNER/NAME').")
        config = copy.deepcopy(self.config)
        config.base_model_name_or_path = base
        return config

    def push_to_hub(self, repo_id: str, *, push_index: bool = False, comparison: Comparison | None = None,
                    dataset: str | None = None, commit_message: str | None = None,
                    commit_description: str | None = None, private: bool | None = None,
                    token: str | bool | None = None, revision: str | None = None, create_pr: bool = False,
                    tags: Sequence[str] | None = None, base_model: str | None = None) -> str:
        """Upload what :meth:`save_pretrained` writes (config, retriever config, model card; with ``push_index`` the
        index under ``index/``) to the Hub repository ``repo_id`` (created when missing), so that
        ``RetrievalAugmentedModel.from_pretrained(repo_id)`` downloads and rebuilds the RALM. The base model is
        referred to, not uploaded: by ``base_model``, its Hub id, when given (needed when this RALM's base model is a
        local folder, which is refused in one line otherwise; the RALM itself keeps its own), else by this RALM's
        ``base_model_name_or_path``. Keyword arguments after ``repo_id``, as transformers' ``push_to_hub``:
        ``private`` for a new repository, ``token``, ``revision`` (the branch), ``create_pr`` (a pull request instead
        of a commit), ``commit_message``/``commit_description``, ``tags`` (added to the card's); ``comparison`` and
        ``dataset`` put measured figures on the card (its ``model-index``). Returns the commit's URL (the pull
        request's with ``create_pr``).

        Example::

            model.push_to_hub("me/smollm2-ralm-wiki", push_index=True, comparison=comparison, dataset="wikitext",
                              base_model="HuggingFaceTB/SmolLM2-135M")   # the base model was loaded from a folder
        """
        from huggingface_hub import HfApi

        if not isinstance(repo_id, str):
            refuse_type("repo_id", repo_id, "a Hub repository id (a str, OWNER/NAME)")
        config = self._hub_config(base_model)  # refused before the repository is created
        api = HfApi(token=token)
        api.create_repo(repo_id, private=private, exist_ok=True)
        with tempfile.TemporaryDirectory() as folder:
            self._write_folder(folder, config, save_index=push_index, comparison=comparison, repo_id=repo_id,
                               dataset=dataset, tags=tags or ())
            info = api.upload_folder(repo_id=repo_id, folder_path=folder, revision=revision, create_pr=create_pr,
                                     commit_message=commit_message or f"Upload In-Context RALM over "
                                                                      f"{config.base_model_name_or_path}",
                                     commit_description=commit_description)
        url = getattr(info, "pr_url", None) if create_pr else None
        return str(url or getattr(info, "commit_url", info))

    @property
    def reranker(self):
        """What ranks the candidates for ``config.rerank`` when the reader does not (``"lm"`` with a
        ``reranker_model``, or ``"predictive"``): loaded on first use, on the reader's device then."""
        if self._reranker is None:
            self._reranker = load_reranker(self.config, self.language_model)
        return self._reranker

    def evaluate_perplexity(self, text_or_ids: str | Sequence[int], **kwargs) -> RalmEvalResult:
        """In-Context RALM perplexity of a text under the paper's conventions:
        :func:`hf_ralm.evaluation.pipeline.evaluate` with this model's retriever, config and reranker; the keyword
        arguments are its own and the run options
        (``run=``, a :class:`~hf_ralm.runs.harness.RunOptions`, or its fields as keywords: ``output_dir=`` saves the
        progress chunk by chunk, and a rerun resumes it).

        Example::

            model.evaluate_perplexity(text, output_dir="runs/bm25").figures["num_resumed_windows"]   # 0
        """
        if self.tokenizer is None:
            raise ValueError("This model has no tokenizer: pass tokenizer= to from_pretrained.")
        run, options = RunOptions.split(kwargs)
        return evaluate(self.language_model, self.tokenizer, text_or_ids, self.retriever, self.config, run=run,
                        reranker=self.reranker, **options)

    def compare_strategies(self, text_or_ids: str | Sequence[int], strategies: Sequence[str] = DEFAULT_STRATEGIES,
                           **kwargs) -> Comparison:
        """Several passage-selection strategies (``"none"``, ``"top1"``, ``"lm-gate"``, ``"zero-shot"``,
        ``"oracle"``, ...) on the same windows of a text, from one reader pass; see
        :func:`hf_ralm.evaluation.compare.compare_strategies` for the keyword arguments (``run=``, a
        :class:`~hf_ralm.runs.harness.RunOptions`, or its fields as keywords, as :meth:`evaluate_perplexity` takes
        them).
        Example::

            comparison = model.compare_strategies(text, ["none", "top1", "lm-gate"], max_eval_tokens=1024)
            print(comparison.to_markdown())
            model.compare_strategies(text, ["top1", "oracle"], run=RunOptions(output_dir="runs/compare"))
        """
        if self.tokenizer is None:
            raise ValueError("This model has no tokenizer: pass tokenizer= to from_pretrained.")
        run, options = RunOptions.split(kwargs)
        return compare_strategies(self.language_model, self.tokenizer, text_or_ids, self.retriever, self.config,
                                  strategies, run=run, **options)

    def generate(self, inputs=None, **kwargs):
        """Generate with In-Context RALM, re-retrieving every ``retrieval_stride`` new tokens (and reranking the
        candidates as ``config.rerank`` says, with :attr:`reranker` when the reader does not rank); takes what
        ``transformers``' ``generate`` takes (and text prompts). See :func:`hf_ralm.generation.ralm_generate`.
        Inside :meth:`collect_sources`, every generated row's sources are recorded there too."""
        # transformers' generate spells stop strings with tokenizer= (a pipeline passes its own): here the RALM's,
        # which is the reader's, spells them, as it decodes the queries
        kwargs.pop("tokenizer", None)
        rows: list[list[dict]] | None = [] if self._source_sinks else None
        output = ralm_generate(self.language_model, self.tokenizer, self.retriever, self.config, inputs,
                               reranker=self.reranker, sources_out=rows, **kwargs)
        for sink in self._source_sinks:
            sink.extend(rows)
        return output

    @contextmanager
    def collect_sources(self) -> Iterator[list[list[dict]]]:
        """Record the sources of every generation run inside the block (by :meth:`generate`, a ``pipeline``, ...):
        the yielded list gets one entry per generated row, in the order they were generated, each the row's list of
        passages in context (:attr:`~hf_ralm.generation.RalmGenerateOutput.sources`: ``start``/``end`` generated
        tokens, ``id``, ``title``, ``text``, ``score``). A ``pipeline`` keeps only the tensors of ``generate``'s
        output, so this is how its text's passages come out: one entry per prompt (``num_return_sequences`` entries
        per prompt when sampling several).

        Example::

            with ralm.collect_sources() as sources:
                outputs = generator(["The Eiffel tower is", "Rome was"], max_new_tokens=16)
            [[source["title"] for source in row] for row in sources]   # per prompt, the passage of each stride
        """
        sink: list[list[dict]] = []
        self._source_sinks.append(sink)
        try:
            yield sink
        finally:
            self._source_sinks.pop()  # blocks nest, so the last one opened closes first

    def generate_texts(self, prompts: Sequence[str], **kwargs) -> list:
        """Generate from text prompts (one batch) and get, per prompt, the generated text and the passages that
        grounded it (:class:`~hf_ralm.generation.texts.GeneratedText`, printable with its sources); ``kwargs`` as
        :meth:`generate` takes them. What ``hf-ralm generate`` runs.

        Example::

            text = model.generate_texts(["The Eiffel tower is"], max_new_tokens=16)[0]
            print(text.format(model.tokenizer, show_sources=True))
        """
        from .generation.texts import generate_texts

        return generate_texts(self.language_model, self.tokenizer, self.retriever, self.config, prompts,
                              reranker=self.reranker, **kwargs)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,
        retrieval_file: str | None = None,
        batch_size: int = 8,
        show_progress: bool = False,
        **unused,
    ) -> RalmCausalLMOutput:
        """Evaluate every row of ``input_ids`` with In-Context RALM (retrieving as it goes).

        ``labels`` follows the transformers convention for causal LMs: equal to ``input_ids``, with ``-100`` where a
        token must not count in the loss. Rows may be right-padded (``attention_mask``). ``input_ids`` that are no
        tensor, or that hold an id outside the reader's vocabulary, are refused in one line before anything runs.
        """
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() not in (1, 2):
            refuse_type("input_ids", input_ids, "a tensor of token ids (1-D, or 2-D with a row per text)")
        check_vocabulary("input_ids", input_ids.tolist(), vocabulary_size(self.language_model))
        if input_ids.dim() == 1:
            input_ids = input_ids[None]
        # a 1-D mask or labels go with a 1-D row (indexing them per row as 2-D would read single elements)
        if attention_mask is not None and attention_mask.dim() == 1:
            attention_mask = attention_mask[None]
        if labels is not None and labels.dim() == 1:
            labels = labels[None]
        if labels is not None and bool(((labels != -100) & (labels != input_ids)).any()):
            raise ValueError("labels must equal input_ids (with -100 where a token is ignored): RALM scores the text.")
        rows, nlls, windows_of = [], [], []
        for b in range(input_ids.shape[0]):
            length = int(attention_mask[b].sum()) if attention_mask is not None else input_ids.shape[1]
            result = self.evaluate_perplexity(input_ids[b, :length].tolist(), retrieval_file=retrieval_file,
                                              batch_size=batch_size, show_progress=show_progress)
            row_nll = torch.full(input_ids.shape[1:], float("nan"), dtype=torch.float64)
            row_nll[:length] = result.token_nlls
            row_windows = torch.full(input_ids.shape[1:], -1, dtype=torch.long)
            row_windows[:length] = result.token_windows
            rows.append(result.in_context())
            nlls.append(row_nll)
            windows_of.append(row_windows)
        token_nlls = torch.stack(nlls)
        if labels is not None:
            token_nlls[labels.cpu() == -100] = float("nan")
        scored = ~torch.isnan(token_nlls)
        loss = token_nlls[scored].mean().float() if scored.any() else torch.tensor(float("nan"))
        return RalmCausalLMOutput(loss=loss, token_nlls=token_nlls.float(), token_windows=torch.stack(windows_of),
                                  passages=rows)


# After ``import hf_ralm``, ``AutoModelForCausalLM.from_pretrained(saved_ralm)`` returns this class (AutoConfig reads
# the config: configuration_ralm.py), and ``pipeline`` counts it among the causal LMs. Registered here rather than
# through an ``auto_map`` in the saved config.json: an auto_map names code inside the repository, which transformers
# runs only with ``trust_remote_code=True`` (a prompt, or a refusal), and every saved folder would carry a copy of it;
# the registration needs only the installed package, which a RALM needs anyway (its retrieval and decoding live there).
AutoModelForCausalLM.register(RalmConfig, RetrievalAugmentedModel)
