"""The loading of a [`RetrievalAugmentedModel`][hf_ralm.RetrievalAugmentedModel], what its
[`from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained] runs: a saved RALM folder read and checked before
anything loads, the reader loaded by its engine (the registry's [`Engine`][hf_ralm.Engine]), the retriever by its
backend.

A saved RALM's files are checked before they are used, each refusal one line naming the file and the key: its
settings ([`RalmConfig.validate`][hf_ralm.RalmConfig.validate]), its retriever's description
(``hf_ralm.retrieval.factory.check_retriever_config``), a base model that is the folder itself (or a chain of saved
RALMs that comes back to it), and every path it names (index folder, corpus, forbidden titles, encoder,
``reranker_model``), followed only inside the folder unless the caller gives that value
([`SavedFolderError`][hf_ralm.errors.SavedFolderError]); the one exception, read only, is an index that
``save_pretrained`` recorded outside a folder saved on this machine, opened there while it is still that index (never
from a Hub download, never built there: ``hf_ralm.retrieval.saved_paths.saved_index_dir``).

Examples:
    ```python
    parts = load_ralm("my-ralm", index_dir="wiki-bm25")   # a folder written by save_pretrained
    parts.config.retrieval_stride, type(parts.reader).__name__   # (4, 'LlamaForCausalLM')
    ```
"""

from __future__ import annotations

import json
import os
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Iterator, Mapping, Sequence

from transformers import AutoTokenizer, PreTrainedConfig, PreTrainedModel
from transformers.utils import CONFIG_NAME

from .config.configuration_ralm import RalmConfig
from .config.settings import RALM_FIELDS
from .core.engines.registry import DEFAULT_ENGINE, Loading, get_engine
from .errors import InputError, MissingFileError, SavedFolderError, SettingError, setting
from .retrieval.base import RETRIEVER_CONFIG_FILE, Retriever, read_forbidden_titles
from .retrieval.corpus import check_corpus_paths
from .retrieval.factory import (check_retriever_config, load_retriever, pretrained_folder, read_retriever_config,
                                retriever_from_folder)
from .retrieval.saved_paths import names_a_local_path, saved_path
from .utils.checks import refuse_type, with_named_options
from .utils.paths import missing_local_path


def _saved_ralm_config(path: str, hub_kwargs: dict) -> tuple[RalmConfig, dict | None] | None:
    """The RalmConfig stored at ``path`` (folder or Hub id) and the retriever description that config.json held
    before retrievers were saved in their own ``retriever_config.json`` (``None`` in newer folders); ``None`` when
    ``path`` is a plain model. A saved setting that ``RalmConfig.validate`` refuses (a ``passage_template`` with
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
    """Refuse (an ``InputError`` naming ``file`` and where it goes wrong) a model folder's
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
    (``hf_ralm.retrieval.factory.check_retriever_config``)."""
    folder = pretrained_folder(path, **hub_kwargs)
    if old_retriever is not None:
        return folder, CONFIG_NAME, check_retriever_config(old_retriever, folder, CONFIG_NAME, "retriever")
    if not os.path.isfile(os.path.join(folder, RETRIEVER_CONFIG_FILE)):
        return None
    return folder, RETRIEVER_CONFIG_FILE, read_retriever_config(folder)


def _saved_retriever(path: str, old_retriever: dict | None, hub_kwargs: dict, **overrides) -> Retriever | None:
    """The retriever saved with the RALM folder ``path`` (``_saved_retriever_config``), if any: ``overrides``
    replace its saved values (see ``Retriever.from_config``). The paths the folder records are followed only
    inside it (``hf_ralm.retrieval.factory.retriever_from_folder``)."""
    saved = _saved_retriever_config(path, old_retriever, hub_kwargs)
    if saved is None:
        return None
    folder, file, config = saved
    return retriever_from_folder(folder, config, file, **overrides)


def saved_ralm_settings(name_or_path: str | os.PathLike, **hub_kwargs) -> tuple[RalmConfig, dict | None] | None:
    """The settings of a saved RALM and its retriever's description, both checked as
    [`from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained] checks them. What a front end reads before
    loading, to tell a saved value from a default (the command line: ``--model SAVED`` keeps the folder's retriever
    and settings unless a flag is given).

    Args:
        name_or_path: a folder written by
            [`save_pretrained`][hf_ralm.RetrievalAugmentedModel.save_pretrained], or a Hub id, then downloaded.
        **hub_kwargs: ``revision``, ``cache_dir``, ``token``, ``local_files_only``.

    Returns:
        The saved [`RalmConfig`][hf_ralm.RalmConfig] and its retriever's description (``None``: saved without one);
            ``None`` for a plain model.

    Examples:
        ```python
        config, retriever = saved_ralm_settings("my-ralm")
        config.retrieval_stride, retriever["type"]   # (4, 'bm25')
        ```
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
RALM, loaded through ``AutoModelForCausalLM``): what ``_loading_base_of`` checks a base model against."""


def _folder_key(name_or_path: str) -> str:
    """What tells two names of one model apart from two models: a local folder's real path, else the Hub id."""
    return os.path.realpath(name_or_path) if os.path.isdir(name_or_path) else name_or_path


@contextmanager
def _loading_base_of(path: str, base_name: str) -> Iterator[None]:
    """The block that loads the base model ``base_name`` of the saved RALM ``path``. A base model that is that folder
    itself, or a saved RALM whose base model is loading around it (a chain that comes back to a folder), is refused
    with one line naming the folder ([`SavedFolderError`][hf_ralm.errors.SavedFolderError]): it would load itself
    forever; so is a local base model that is not there."""
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
    inside the folder (joined to it: ``hf_ralm.retrieval.saved_paths.saved_path``), one that leads outside
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
    applied): ``None`` when no ``RalmConfig`` was given. ``trust_remote_code`` stays only when ``True`` (the
    user's, for the base model; the Auto class passes ``False`` for a folder of a registered class)."""
    config = kwargs.get("config")
    if not isinstance(config, RalmConfig):
        return kwargs, None
    added = ("config", "_from_auto", "adapter_kwargs")
    return {k: v for k, v in kwargs.items()
            if k not in added and not (k == "trust_remote_code" and v is not True)}, config


def check_model_path(name_or_path: str) -> None:
    """Refuse at once a model that looks like a local folder (``hf_ralm.utils.paths.looks_local``) and is not
    there, instead of asking the Hub for it.

    Args:
        name_or_path: the model's folder or Hub id.

    Raises:
        MissingFileError: it looks like a local folder and is not there.
    """
    if missing_local_path(name_or_path):
        raise MissingFileError(f"The {setting('model')} {name_or_path!r} does not exist: give a model folder (with "
                               "config.json), a GGUF file's folder, or a Hub id such as HuggingFaceTB/SmolLM2-135M.")


@dataclass
class LoadedRalm:
    """What ``load_ralm`` loads.

    Attributes:
        config: the RALM's settings.
        reader: a transformers model, or a [`Reader`][hf_ralm.Reader].
        retriever: its retriever (``None``: none).
        tokenizer: the reader's tokenizer.
    """

    config: RalmConfig
    reader: Any
    retriever: Retriever | None
    tokenizer: Any


def load_ralm(pretrained_model_name_or_path: str | os.PathLike | PreTrainedModel, model_args: Sequence = (),
              kwargs: Mapping[str, Any] | None = None, *, retriever: str | dict | Retriever | None = None,
              tokenizer=None, index_dir: str | None = None, corpus: str | list[str] | None = None,
              forbidden_titles: str | Sequence[str] | None = None, encoder: str | None = None, device=None,
              load_weights: bool = True, n_threads: int | None = None,
              retriever_options: Mapping[str, Any] | None = None, engine: str = DEFAULT_ENGINE,
              engine_options: Any = None) -> LoadedRalm:
    """The parts of a RALM, loaded as [`from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained] describes
    its arguments: the engine and its options checked first, then the saved folder, then the reader, the tokenizer and
    the retriever.

    Args:
        pretrained_model_name_or_path: as ``from_pretrained`` takes it; so are the keyword-only arguments.
        model_args: ``from_pretrained``'s positional arguments.
        kwargs: its other keyword arguments.

    Returns:
        The ``LoadedRalm``.

    Raises:
        SettingError: an unknown engine (the registered ones listed), an option or a loading argument the engine
            does not take, a saved setting refused.
        SavedFolderError: a saved folder whose base model or paths lead outside it, or back to itself.
    """
    kwargs, given_config = _from_auto_class(dict(kwargs or {}))
    reader_engine = get_engine(engine)
    engine_options = reader_engine.options(engine_options)
    overrides = {k: kwargs.pop(k) for k in list(kwargs) if k in RALM_FIELDS}
    reader_engine.check_loading(Loading(kwargs, device, load_weights))  # whatever is installed: before anything loads
    options = _retriever_options(retriever_options, index_dir=index_dir, corpus=corpus,
                                 forbidden_titles=forbidden_titles, encoder=encoder, n_threads=n_threads)
    hub_kwargs = {k: kwargs[k] for k in ("revision", "cache_dir", "token", "local_files_only") if k in kwargs}
    saved, old_retriever = None, None
    if not isinstance(pretrained_model_name_or_path, (str, os.PathLike, PreTrainedModel)):  # never asked of the Hub
        refuse_type("pretrained_model_name_or_path", pretrained_model_name_or_path, "a causal LM's Hub id or "
                    "folder, or a saved RALM's (a str or an os.PathLike), or a loaded transformers model")
    if isinstance(pretrained_model_name_or_path, PreTrainedModel):
        base = reader_engine.adopt(pretrained_model_name_or_path)
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
            base = reader_engine.load(base_name, engine_options,
                                      Loading(kwargs, device, load_weights, tuple(model_args)))
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
    return LoadedRalm(config, base, loaded, tokenizer)
