"""Turning a retriever name, a saved description or a saved folder (local or on the Hub) into a retriever.

Example:
    >>> load_retriever("none") is None
    True
    >>> load_retriever("bm25", corpus="wiki.jsonl.gz")                     # index in the cache  # doctest: +SKIP
    >>> load_retriever({"type": "bm25", "index_dir": "wiki-bm25"})                               # doctest: +SKIP
    >>> load_retriever_from_pretrained("my-retriever")                                           # doctest: +SKIP
"""

from __future__ import annotations

import json
import os
from typing import Iterable

from .base import RETRIEVER_CONFIG_FILE, Retriever
from .registry import retriever_class, retriever_names


def load_retriever(
    spec: str | dict | Retriever | None,
    index_dir: str | None = None,
    corpus: str | list[str] | None = None,
    forbidden_titles: Iterable[str] = (),
    **options,
) -> Retriever | None:
    """A retriever from a registry name, a description (a :meth:`Retriever.config`), or an object with a
    ``retrieve`` method (returned as is); ``None`` for ``None`` or ``"none"``.

    A name is opened with the backend's ``from_options``, which takes ``index_dir``, ``corpus``, ``forbidden_titles``
    and ``options`` as one set of options, each backend the ones it declares (``None`` means the default; one it does
    not take is refused): a local index is built from ``corpus`` when missing or stale, in hf-ralm's cache when
    ``index_dir`` is not given. A description is rebuilt with ``from_config``; arguments given here (an empty
    ``forbidden_titles`` counts as not given) replace its values.

    Example::

        load_retriever("dense", index_dir="wiki-dense", encoder="BAAI/bge-small-en-v1.5")
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
    raise TypeError(f"retriever must be a name {retriever_names()}, a dict or a Retriever, got "
                    f"{type(spec).__name__}.")


def pretrained_folder(name_or_path: str | os.PathLike, **hub_kwargs) -> str:
    """A saved folder on this machine: ``name_or_path`` itself when it is a folder, else the Hub repository of that
    id, downloaded with ``huggingface_hub.snapshot_download`` (``hub_kwargs``: ``revision``, ``cache_dir``,
    ``token``, ``local_files_only``) into the Hugging Face cache."""
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
    """The retriever saved by :meth:`Retriever.save_pretrained` in a folder (or a Hub repository, fetched with
    :func:`pretrained_folder`). ``forbidden_titles`` replaces the saved ones when given; ``corpus`` rebuilds a stale
    index; ``overrides`` (``index_dir``, the backend's options) replace saved values."""
    directory = pretrained_folder(name_or_path)
    path = os.path.join(directory, RETRIEVER_CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {RETRIEVER_CONFIG_FILE} in {directory!r}: save a retriever there with "
                                "retriever.save_pretrained(dir) (or RetrievalAugmentedModel.save_pretrained).")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)
    titles = None if forbidden_titles is None else sorted(forbidden_titles)
    return retriever_class(config["type"]).from_config(config, base_dir=directory, forbidden_titles=titles,
                                                       corpus=corpus, **overrides)
