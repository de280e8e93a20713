"""The one table of retriever backends: name → class. hf-ralm's own are imported only when asked for (``lucene`` and
``dense`` need optional extras, ``hybrid`` the dense one); a backend from outside hf-ralm is added with
:func:`register_retriever`, after which every ``retriever=`` that takes a name (``load_retriever``,
``RetrievalAugmentedModel.from_pretrained``, a saved ``retriever_config.json``) finds it.

Example:
    >>> RETRIEVER_NAMES
    ('none', 'bm25', 'lucene', 'dense', 'hybrid')
    >>> retriever_class("bm25").__name__
    'BM25Retriever'
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the contract imports transformers' logging: the names below are read without it (hf-ralm --help)
    from .base import Retriever

_BACKENDS: dict[str, tuple[str, str] | type[Retriever]] = {  # name -> (module of hf_ralm.retrieval, class) or class
    "bm25": ("bm25", "BM25Retriever"),
    "lucene": ("lucene", "LuceneRetriever"),
    "dense": ("dense", "DenseRetriever"),
    "hybrid": ("hybrid", "HybridRetriever"),
}
RETRIEVER_NAMES = ("none", *_BACKENDS)  # hf-ralm's own; "none": no retrieval
"""The retrievers hf-ralm ships (the command line's choices); :func:`retriever_names` adds the registered ones."""


def retriever_names() -> tuple[str, ...]:
    """Every retriever name: ``"none"``, hf-ralm's backends, then those added with :func:`register_retriever`."""
    return ("none", *_BACKENDS)


def register_retriever(cls: type[Retriever]) -> type[Retriever]:
    """Add the backend ``cls`` (a :class:`~hf_ralm.retrieval.base.Retriever` subclass) under its ``name``, so that
    ``retriever_class(cls.name)`` gives it; returns ``cls`` (a class decorator). Registering the same class again
    does nothing; a name that another backend has is refused.

    Example::

        @register_retriever
        class SearchServiceRetriever(Retriever):
            name = "search-service"
            ...

        RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="search-service",
                                                retriever_options={"url": "http://localhost:9200"})
    """
    from .base import Retriever

    if not (isinstance(cls, type) and issubclass(cls, Retriever)):
        raise TypeError(f"register_retriever takes a Retriever subclass, got {cls!r}.")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} has no name: set the class attribute name = '...' (its registry name).")
    taken = _BACKENDS.get(name)
    if name == "none" or (taken is not None and taken is not cls):
        owner = ("no retrieval" if name == "none" else f"{__package__}.{'.'.join(taken)}" if isinstance(taken, tuple)
                 else f"{taken.__module__}.{taken.__qualname__}")
        raise ValueError(f"The retriever name {name!r} is taken ({owner}): give {cls.__name__} another name.")
    _BACKENDS[name] = cls
    return cls


def retriever_class(name: str) -> type[Retriever]:
    """The :class:`Retriever` subclass registered as ``name`` (``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``, or
    one added with :func:`register_retriever`)."""
    if name == "none":
        raise ValueError("'none' is no retriever, so it has no class (load_retriever('none') gives None); choose one "
                         f"of {', '.join(retriever_names()[1:])}.")
    if name not in _BACKENDS:
        raise ValueError(f"Unknown retriever {name!r}; choose one of {', '.join(retriever_names())}.")
    backend = _BACKENDS[name]
    if isinstance(backend, type):
        return backend
    module, class_name = backend
    return getattr(import_module(f"{__package__}.{module}"), class_name)
