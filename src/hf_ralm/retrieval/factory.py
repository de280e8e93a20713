"""Turning a retriever name or saved description into a :class:`Retriever`."""

from __future__ import annotations

from typing import Iterable

from .base import Retriever
from .bm25 import BM25Retriever

RETRIEVER_NAMES = ("none", "bm25", "lucene")


def load_retriever(
    spec: str | dict | Retriever | None,
    index_dir: str | None = None,
    corpus: str | list[str] | None = None,
    forbidden_titles: Iterable[str] = (),
) -> Retriever | None:
    """A retriever from a name (``"bm25"``, ``"none"``), a saved description (``{"type": "bm25", "index_dir": ...}``)
    or an instance (returned as is). ``"bm25"`` builds the index in ``index_dir`` from ``corpus`` when missing.

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
    raise ValueError(f"Unknown retriever {kind!r}; choose one of {', '.join(RETRIEVER_NAMES)}.")
