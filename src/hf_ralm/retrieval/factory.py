"""Turning a retriever name, a saved description or a saved folder (local or on the Hub) into a retriever.

Examples:
    >>> load_retriever("none") is None
    True
    >>> load_retriever("bm25", corpus="wiki.jsonl.gz")                     # index in the cache  # doctest: +SKIP
    >>> load_retriever({"type": "bm25", "index_dir": "wiki-bm25"})                               # doctest: +SKIP
    >>> load_retriever_from_pretrained("my-retriever")                                           # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Any, Iterable

from ..errors import SavedFolderError, setting
from ..utils.checks import refuse_type
from .base import PACKAGED_TITLES, RETRIEVER_CONFIG_FILE, Retriever
from .corpus import is_hub_corpus
from .saved_paths import saved_path
from .registry import retriever_class, retriever_names


def load_retriever(
    spec: str | dict | Retriever | None,
    index_dir: str | None = None,
    corpus: str | list[str] | None = None,
    forbidden_titles: Iterable[str] = (),
    **options,
) -> Retriever | None:
    """A retriever from a registry name, a description (a [`Retriever.config`][hf_ralm.retrieval.Retriever.config]),
    or an object with a ``retrieve`` method (returned as is); ``None`` for ``None`` or ``"none"``.

    A name is opened with the backend's [`from_options`][hf_ralm.retrieval.Retriever.from_options], which takes
    ``index_dir``, ``corpus``, ``forbidden_titles`` and ``options`` as one set of options, each backend the ones it
    declares (``None`` means the default; one it does not take is refused): a local index is built from ``corpus``
    when missing or stale, in hf-ralm's cache when ``index_dir`` is not given. A description is rebuilt with
    [`from_config`][hf_ralm.retrieval.Retriever.from_config]; arguments given here (an empty ``forbidden_titles``
    counts as not given) replace its values.

    Args:
        spec: A registered retriever's name, a description (a dict with a ``type``), a retriever, or ``None``.
        index_dir: The index folder.
        corpus: The corpus file(s) a local index is built from.
        forbidden_titles: The article titles whose passages are never retrieved (with a name, also a file of them
            or a shipped list's name, ``"wikitext-103"``).
        **options: The backend's other options (its ``Options``).

    Returns:
        The retriever, or ``None`` for no retrieval.

    Raises:
        ValueError: a description has no ``type``, or a name or ``type`` is no registered retriever's.
        InputTypeError: ``spec`` is neither a name, a description nor an object with a ``retrieve`` method.

    Examples:
        ```python
        load_retriever("dense", index_dir="wiki-dense", encoder="BAAI/bge-small-en-v1.5")
        ```
    """
    if spec is None or spec == "none":
        return None
    if isinstance(spec, str):
        return retriever_class(spec).from_options(index_dir=index_dir, corpus=corpus, forbidden_titles=forbidden_titles,
                                                  **options)
    if isinstance(spec, dict):
        if "type" not in spec:
            raise ValueError(f"A retriever description needs a 'type' ({', '.join(retriever_names()[1:])}), got "
                             f"{sorted(spec)}.")
        return retriever_class(spec["type"]).from_config(
            spec, index_dir=index_dir, corpus=corpus, forbidden_titles=sorted(forbidden_titles) or None, **options)
    if callable(getattr(spec, "retrieve", None)):
        return spec
    refuse_type("retriever", spec, f"a retriever's name ({', '.join(retriever_names())}), its description (a dict) "
                "or an object with a retrieve(queries, k) method")


def pretrained_folder(name_or_path: str | os.PathLike, **hub_kwargs) -> str:
    """A saved folder on this machine: ``name_or_path`` itself when it is a folder, else the Hub repository of that
    id, downloaded with ``huggingface_hub.snapshot_download`` into the Hugging Face cache.

    Args:
        name_or_path: A folder, or a Hub repository id.
        **hub_kwargs: ``snapshot_download``'s options: ``revision``, ``cache_dir``, ``token``, ``local_files_only``.

    Returns:
        The folder's path.
    """
    if os.path.isdir(name_or_path):
        return str(name_or_path)
    from huggingface_hub import snapshot_download

    return snapshot_download(repo_id=str(name_or_path), **hub_kwargs)


def load_retriever_from_pretrained(
    name_or_path: str | os.PathLike,
    forbidden_titles: Iterable[str] | None = None,
    corpus: str | list[str] | None = None,
    **overrides,
) -> Retriever:
    """The retriever saved by [`Retriever.save_pretrained`][hf_ralm.retrieval.Retriever.save_pretrained] in a folder
    (or a Hub repository, fetched with ``pretrained_folder``). The saved description is checked first
    (``read_retriever_config``), and the paths it records are followed only inside the folder
    (``retriever_from_folder``).

    Args:
        name_or_path: The saved folder, or a Hub repository id.
        forbidden_titles: The article titles never retrieved, replacing the saved ones when given.
        corpus: The corpus to rebuild a stale index from.
        **overrides: Replace saved values (``index_dir``, the backend's options).

    Returns:
        The retriever.

    Raises:
        FileNotFoundError: the folder holds no ``retriever_config.json``.
        SavedFolderError: the saved description is damaged, or a path it records leads outside the folder.
    """
    directory = pretrained_folder(name_or_path)
    path = os.path.join(directory, RETRIEVER_CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {RETRIEVER_CONFIG_FILE} in {directory!r}: save a retriever there with "
                                "retriever.save_pretrained(dir) (or RetrievalAugmentedModel.save_pretrained).")
    titles = None if forbidden_titles is None else sorted(forbidden_titles)
    return retriever_from_folder(directory, read_retriever_config(directory), forbidden_titles=titles, corpus=corpus,
                                 **overrides)


def read_retriever_config(folder: str) -> dict:
    """The retriever description a saved folder holds in its ``retriever_config.json``, checked
    (``check_retriever_config``); a file that is no JSON raises [`SavedFolderError`][hf_ralm.errors.SavedFolderError]
    naming it.

    Examples:
        ```python
        read_retriever_config("my-ralm")   # {'type': 'bm25', 'index_dir': 'index', 'forbidden_titles': []}
        ```
    """
    path = os.path.join(folder, RETRIEVER_CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            config = json.load(f)
    except ValueError as error:  # not JSON, or not UTF-8
        raise SavedFolderError(f"{path}: is not a JSON file ({error}): save the retriever again with "
                               "save_pretrained(dir).") from None
    return check_retriever_config(config, folder, RETRIEVER_CONFIG_FILE)


def check_retriever_config(config: Any, folder: str, file: str, key: str | None = None) -> dict:
    """``config``, a retriever description read from ``file`` in the saved ``folder`` (under ``key`` when the file
    holds more: an older RALM's ``config.json`` kept it under ``retriever``), once checked against what every
    description needs: a JSON object whose ``type`` names a registered retriever, whose paths are what the backend
    declares (its ``saved_path_options``: a string such as ``index_dir``, a string or a list of them such as
    ``corpus`` and ``forbidden_titles``), and whose parts that describe other retrievers (its ``saved_parts``: a
    hybrid one's ``sparse`` and ``dense`` sides) are descriptions too. Anything else raises
    [`SavedFolderError`][hf_ralm.errors.SavedFolderError] naming the file and the key, before any of it is used.

    Examples:
        ```python
        check_retriever_config(["bm25"], "my-ralm", "retriever_config.json")
        # SavedFolderError: my-ralm/retriever_config.json: it holds a list, not a JSON object describing the ...
        ```
    """
    where = os.path.join(folder, file)
    names = ", ".join(retriever_names()[1:])

    def refuse(problem: str) -> SavedFolderError:
        return SavedFolderError(f"{where}: {problem}; a retriever description is a JSON object such as "
                                f'{{"type": "bm25", "index_dir": "index"}} (type: one of {names}): save the retriever '
                                "again with save_pretrained(dir).")

    name = f"its {key}" if key else "it"
    if not isinstance(config, dict):
        raise refuse(f"{name} holds {_kind(config)}, not a JSON object describing the retriever")
    kind = config.get("type")
    if "type" not in config:
        raise refuse(f"{name} has no 'type' key (the retriever's kind)")
    if not isinstance(kind, str) or kind == "none" or kind not in retriever_names():
        raise refuse(f"its {key + '.' if key else ''}type {kind!r} is no retriever hf-ralm knows (a backend from "
                     "outside hf-ralm is registered first, with register_retriever)")
    backend = retriever_class(kind)
    for option, types in backend.saved_path_options.items():
        if option in config and config[option] is not None and not _has_types(config[option], types):
            raise refuse(f"its {key + '.' if key else ''}{option} is {_kind(config[option])}, not "
                         f"{' or '.join(_TYPE_NAMES[t] for t in types)}")
    for part in backend.saved_parts:
        if part in config:
            check_retriever_config(config[part], folder, file, f"{key}.{part}" if key else part)
    return config


_TYPE_NAMES = {"str": "a string", "list": "a list of strings"}
"""What a path option of a saved description may be (a backend's ``saved_path_options``), as an error names it."""


def _has_types(value: Any, types: tuple[str, ...]) -> bool:
    return (isinstance(value, str) and "str" in types) or (
        "list" in types and isinstance(value, list) and all(isinstance(item, str) for item in value))


def _kind(value: Any) -> str:
    """How an error names a JSON value's kind."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", int: "a number",
             float: "a number", type(None): "null"}
    return kinds.get(type(value), type(value).__name__)


def retriever_from_folder(folder: str, config: dict, config_file: str = RETRIEVER_CONFIG_FILE, **overrides
                          ) -> Retriever:
    """The retriever that ``config`` (checked by ``check_retriever_config``), read from ``config_file`` in the saved or
    downloaded ``folder``, describes; ``overrides`` (``None``: not given) replace its values. Every path it records is
    followed only inside ``folder``: its corpus files and forbidden-titles file here (``_saved_paths``), its index
    folder and encoder where the backend reads them (``Retriever._saved_settings``); one that leads outside is refused
    ([`SavedFolderError`][hf_ralm.errors.SavedFolderError], naming the file and the key) unless the caller gives that
    value, but for an index saved outside a folder on this machine, read there while it is still that index
    (``hf_ralm.retrieval.saved_paths.saved_index_dir``).

    Examples:
        ```python
        retriever_from_folder("my-ralm", {"type": "bm25", "index_dir": "index"}, forbidden_titles=["Nero"])
        ```
    """
    config = _saved_paths(config, folder, config_file, {k for k, v in overrides.items() if v is not None})
    return retriever_class(config["type"]).from_config(config, base_dir=folder, config_file=config_file, **overrides)


def _saved_paths(config: dict, folder: str, config_file: str, given: set[str]) -> dict:
    """``config`` with the corpus files and the forbidden-titles file it names (at any depth: a hybrid retriever's
    sides too) joined to ``folder`` (``hf_ralm.retrieval.saved_paths.saved_path``, which refuses one that leads
    outside it), but for those the caller gives (``given``: they replace the saved ones), a Hub corpus
    (``hf:DATASET``) and a list shipped with hf-ralm named by its name (``wikitext-103``): neither is a path."""
    def inside(path: str, key: str, fix: str) -> str:
        return saved_path(path, folder, config_file, key, fix)

    checked = {}
    for key, value in config.items():
        if key in given:
            checked[key] = value
        elif isinstance(value, dict):
            checked[key] = _saved_paths(value, folder, config_file, given)
        elif key == "corpus" and value is not None:
            fix = f"give the corpus yourself ({setting('corpus')}=...) to use it."
            paths = [value] if isinstance(value, str) else value
            paths = [path if is_hub_corpus(path) else inside(path, key, fix) for path in paths]
            checked[key] = paths[0] if isinstance(value, str) else paths
        elif key == "forbidden_titles" and isinstance(value, str):  # a file (a list holds the titles themselves)
            shipped = value in PACKAGED_TITLES and not os.path.exists(os.path.join(folder, value))
            checked[key] = value if shipped else inside(
                value, key, f"give the titles yourself ({setting('forbidden_titles')}=...) to use them.")
        else:
            checked[key] = value
    return checked
