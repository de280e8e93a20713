"""The one table of retriever backends: name → class, imported only when asked for (``lucene`` and ``dense`` need
optional extras, ``hybrid`` the dense one).

Example:
    >>> RETRIEVER_NAMES
    ('none', 'bm25', 'lucene', 'dense', 'hybrid')
    >>> retriever_class("bm25").__name__
    'BM25Retriever'
"""

from __future__ import annotations

from importlib import import_module

from .base import Retriever

_BACKENDS = {  # name -> (module of hf_ralm.retrieval, class)
    "bm25": ("bm25", "BM25Retriever"),
    "lucene": ("lucene", "LuceneRetriever"),
    "dense": ("dense", "DenseRetriever"),
    "hybrid": ("hybrid", "HybridRetriever"),
}
RETRIEVER_NAMES = ("none", *_BACKENDS)  # "none": no retrieval


def retriever_class(name: str) -> type[Retriever]:
    """The :class:`Retriever` subclass registered as ``name`` (``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``)."""
    if name == "none":
        raise ValueError("'none' is no retriever, so it has no class (load_retriever('none') gives None); choose one "
                         f"of {', '.join(_BACKENDS)}.")
    if name not in _BACKENDS:
        raise ValueError(f"Unknown retriever {name!r}; choose one of {', '.join(RETRIEVER_NAMES)}.")
    module, class_name = _BACKENDS[name]
    return getattr(import_module(f"{__package__}.{module}"), class_name)
