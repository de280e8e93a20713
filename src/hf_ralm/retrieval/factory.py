"""Turning a retriever name or saved description into a :class:`Retriever`."""

from __future__ import annotations

import json
import os
from typing import Iterable

from .base import Retriever
from .bm25 import BM25Retriever

RETRIEVER_NAMES = ("none", "bm25", "lucene", "dense", "hybrid")
RETRIEVER_CONFIG_FILE = "retriever_config.json"


def load_retriever(
    spec: str | dict | Retriever | None,
    index_dir: str | None = None,
    corpus: str | list[str] | None = None,
    forbidden_titles: Iterable[str] = (),
    encoder: str | None = None,
) -> Retriever | None:
    """A retriever from a name (``"bm25"``, ``"none"``), a saved description (``{"type": "bm25", "index_dir": ...}``)
    or an instance (returned as is). ``"bm25"`` builds the index in ``index_dir`` from ``corpus`` when missing.
    ``"dense"`` does the same with ``encoder`` (default: the one the index records, else all-MiniLM-L6-v2);
    ``"hybrid"`` keeps a BM25 index in ``index_dir/bm25`` and a dense one in ``index_dir/dense``.

    Example:
        >>> load_retriever("none") is None
        True
    """
    if spec is None or spec == "none":
        return None
    if isinstance(spec, dict):
        kind = spec.get("type")
        index_dir = spec.get("index_dir", index_dir)
        forbidden_titles = spec.get("forbidden_titles", forbidden_titles)
        encoder = spec.get("encoder", encoder)
    else:
        kind = spec
    if not isinstance(kind, str):
        if isinstance(spec, Retriever):
            return spec
        raise TypeError(f"retriever must be a name {RETRIEVER_NAMES}, a dict or a Retriever, got {type(spec).__name__}.")
    if kind == "bm25":
        if index_dir is None:
            raise ValueError("The bm25 retriever needs an index folder: pass index_dir= (--index-dir) and a corpus.")
        return BM25Retriever.build_or_load(corpus, index_dir, forbidden_titles=forbidden_titles)
    if kind == "lucene":  # pyserini is an optional extra: imported only when asked for
        from .lucene import LuceneRetriever

        if index_dir is None:
            raise ValueError("The lucene retriever needs an index folder (--index-dir) and a corpus, or the name of a "
                             "pyserini prebuilt index such as 'wikipedia-dpr'.")
        bm25_params = {key: spec[key] for key in ("k1", "b") if isinstance(spec, dict) and key in spec}
        return LuceneRetriever.build_or_load(corpus, index_dir, forbidden_titles=forbidden_titles, **bm25_params)
    if kind == "dense":  # faiss and sentence-transformers are an optional extra: imported only when asked for
        from .dense import DenseRetriever

        if index_dir is None:
            raise ValueError("The dense retriever needs an index folder: pass index_dir= (--index-dir) and a corpus.")
        return DenseRetriever.build_or_load(corpus, index_dir, forbidden_titles=forbidden_titles, encoder=encoder)
    if kind == "hybrid":
        from .hybrid import K_RRF, MIN_DEPTH, HybridRetriever

        if isinstance(spec, dict) and "sparse" in spec and "dense" in spec:  # a saved config(): both sub-configs
            sides = [load_retriever({**spec[side], "forbidden_titles": sorted(forbidden_titles)}, corpus=corpus)
                     for side in ("sparse", "dense")]
            return HybridRetriever(*sides, k_rrf=spec.get("k_rrf", K_RRF), depth=spec.get("depth", MIN_DEPTH))
        if index_dir is None:
            raise ValueError("The hybrid retriever needs an index folder (--index-dir, holding bm25/ and dense/) and "
                             "a corpus.")
        return HybridRetriever.build_or_load(corpus, index_dir, forbidden_titles=forbidden_titles, encoder=encoder)
    raise ValueError(f"Unknown retriever {kind!r}; choose one of {', '.join(RETRIEVER_NAMES)}.")


def save_retriever_config(retriever: Retriever, save_directory: str) -> str:
    """Write ``retriever.config()`` to ``save_directory/retriever_config.json`` (any backend with ``config()``);
    :func:`load_retriever_from_pretrained` reads it back. Returns the file's path."""
    from .files import write_json_atomic

    if not callable(getattr(retriever, "config", None)):
        raise TypeError(f"{type(retriever).__name__} has no config(): it cannot be saved.")
    path = os.path.join(save_directory, RETRIEVER_CONFIG_FILE)
    write_json_atomic(path, retriever.config())
    return path


def load_retriever_from_pretrained(
    directory: str, forbidden_titles: Iterable[str] | None = None, corpus: str | list[str] | None = None
) -> Retriever | None:
    """The retriever saved by :func:`save_retriever_config` (or a backend's ``save_pretrained``) in ``directory``;
    ``forbidden_titles`` replaces the saved ones when given."""
    path = os.path.join(directory, RETRIEVER_CONFIG_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No {RETRIEVER_CONFIG_FILE} in {directory!r}: save one with save_pretrained(dir).")
    with open(path, encoding="utf-8") as f:
        spec = json.load(f)
    if forbidden_titles is not None:
        spec["forbidden_titles"] = sorted(forbidden_titles)
    return load_retriever(spec, corpus=corpus)
