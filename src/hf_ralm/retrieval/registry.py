"""The one table of retriever backends: name → class, and what each declares before its class is imported.

hf-ralm's own backends are imported only when asked for (``lucene`` and ``dense`` need optional extras, ``hybrid`` the
dense one): their line here names their module and class and carries their declaration
([`RetrieverDeclaration`][hf_ralm.retrieval.RetrieverDeclaration]: the default query length and the build options
the class itself declares, from the backend's plain-Python module), so that the settings and ``hf-ralm --help`` know
them without importing the backend. A backend from outside hf-ralm is added with
[`register_retriever`][hf_ralm.retrieval.register_retriever], after which every ``retriever=`` that takes a name
([`load_retriever`][hf_ralm.retrieval.load_retriever],
[`RetrievalAugmentedModel.from_pretrained`][hf_ralm.RetrievalAugmentedModel.from_pretrained], a saved
``retriever_config.json``), ``--retriever`` and ``hf-ralm index`` find it. Importing this module declares each
backend's default query length to the settings, which sit below retrieval
(``hf_ralm.config.query_lengths.declare_query_length``): ``import hf_ralm`` does.

Examples:
    >>> RETRIEVER_NAMES
    ('none', 'bm25', 'lucene', 'dense', 'hybrid')
    >>> retriever_class("bm25").__name__
    'BM25Retriever'
    >>> retriever_declaration("hybrid").query_length
    64
"""

from __future__ import annotations

import dataclasses
from importlib import import_module
from typing import TYPE_CHECKING

from ..config.query_lengths import declare_query_length
from .declarations import RetrieverDeclaration, flag_name, index_flags, same_flag
from .dense_options import DENSE_QUERY_LENGTH, DenseBuildOptions

if TYPE_CHECKING:  # the contract imports transformers' logging: the names below are read without it (hf-ralm --help)
    from .base import Retriever

_BACKENDS: dict[str, tuple[str, str, RetrieverDeclaration] | type[Retriever]] = {
    # name -> (module of hf_ralm.retrieval, class, what the class declares), or the class registered from outside
    "bm25": ("bm25", "BM25Retriever", RetrieverDeclaration()),
    "lucene": ("lucene", "LuceneRetriever", RetrieverDeclaration()),
    "dense": ("dense", "DenseRetriever", RetrieverDeclaration(DENSE_QUERY_LENGTH, DenseBuildOptions)),
    "hybrid": ("hybrid", "HybridRetriever", RetrieverDeclaration(DENSE_QUERY_LENGTH, DenseBuildOptions)),
}
RETRIEVER_NAMES = ("none", *_BACKENDS)  # hf-ralm's own; "none": no retrieval
"""The retrievers hf-ralm ships; ``retriever_names`` adds the registered ones (the command line's choices)."""

for _name, (_, _, _declared) in _BACKENDS.items():
    declare_query_length(_name, _declared.query_length)


def retriever_names() -> tuple[str, ...]:
    """Every retriever name: ``"none"``, hf-ralm's backends, then those added with
    [`register_retriever`][hf_ralm.retrieval.register_retriever]."""
    return ("none", *_BACKENDS)


def retriever_declaration(name: str) -> RetrieverDeclaration:
    """What the backend registered as ``name`` declares (its default query length, its build options), read without
    importing it.

    Args:
        name: A registered retriever's name.

    Returns:
        Its [`RetrieverDeclaration`][hf_ralm.retrieval.RetrieverDeclaration].

    Raises:
        ValueError: no backend has that name.

    Examples:
        >>> retriever_declaration("dense").build_options.__name__
        'DenseBuildOptions'
    """
    backend = _backend(name)
    return backend[2] if isinstance(backend, tuple) else declaration_of(backend)


def declaration_of(cls: type[Retriever]) -> RetrieverDeclaration:
    """What the backend class ``cls`` declares with its class attributes ``default_query_length`` and
    ``BuildOptions``."""
    return RetrieverDeclaration(cls.default_query_length, getattr(cls, "BuildOptions", None))


def register_retriever(cls: type[Retriever]) -> type[Retriever]:
    """Add the backend ``cls`` (a [`Retriever`][hf_ralm.retrieval.Retriever] subclass) under its ``name``, so that
    ``retriever_class(cls.name)`` gives it, with what it declares: its ``default_query_length`` (what
    ``query_length=None`` means with it, [`default_query_length`][hf_ralm.config.query_lengths.default_query_length])
    and, for a backend with a local index, its ``BuildOptions`` ([`index_flag`][hf_ralm.retrieval.index_flag] fields:
    flags of ``hf-ralm index``, each an option of its ``Options``). Registering the same class again does nothing.

    Args:
        cls: The backend class.

    Returns:
        ``cls``, so that this works as a class decorator.

    Raises:
        TypeError: ``cls`` is no ``Retriever`` subclass.
        ValueError: its name is missing or taken by another backend, its default query length is no count, or a
            build option is no option of its ``Options`` or is another backend's flag declared otherwise.

    Examples:
        ```python
        @register_retriever
        class SearchServiceRetriever(Retriever):
            name = "search-service"
            default_query_length = 64
            ...

        RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="search-service",
                                                retriever_options={"url": "http://localhost:9200"})
        ```
    """
    from .base import Retriever, option_names

    if not (isinstance(cls, type) and issubclass(cls, Retriever)):
        raise TypeError(f"register_retriever takes a Retriever subclass, got {cls!r}.")
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        raise ValueError(f"{cls.__name__} has no name: set the class attribute name = '...' (its registry name).")
    taken = _BACKENDS.get(name)
    if name == "none" or (taken is not None and taken is not cls):
        owner = ("no retrieval" if name == "none" else f"{__package__}.{taken[0]}.{taken[1]}"
                 if isinstance(taken, tuple) else f"{taken.__module__}.{taken.__qualname__}")
        raise ValueError(f"The retriever name {name!r} is taken ({owner}): give {cls.__name__} another name.")
    declared = declaration_of(cls)
    takes = option_names(cls.Options)
    for field in index_flags(declared.build_options):
        if field.name not in takes:
            raise ValueError(f"{cls.__name__}'s build option {field.name!r} is no option of its Options "
                             f"({', '.join(takes)}): hf-ralm index passes it to the build by that name.")
        clash = next((other for other in _flag_fields(exclude=name) if other.name == field.name), None)
        if clash is not None and not same_flag(clash, field):
            raise ValueError(f"{cls.__name__}'s build option {field.name!r} would be hf-ralm index's "
                             f"{flag_name(field)}, which another retriever declares otherwise: name it otherwise, or "
                             "declare it as that retriever does (the same default, help and choices).")
    declare_query_length(name, declared.query_length)  # checked there: refused, nothing is registered
    _BACKENDS[name] = cls
    return cls


def retriever_class(name: str) -> type[Retriever]:
    """The [`Retriever`][hf_ralm.retrieval.Retriever] subclass registered as ``name``, imported now for hf-ralm's own.

    Args:
        name: A registered retriever's name: ``"bm25"``, ``"lucene"``, ``"dense"``, ``"hybrid"``, or one added with
            [`register_retriever`][hf_ralm.retrieval.register_retriever].

    Returns:
        The backend class.

    Raises:
        ValueError: ``name`` is ``"none"`` or no registered backend's.
    """
    backend = _backend(name)
    if isinstance(backend, type):
        return backend
    module, class_name, _ = backend
    return getattr(import_module(f"{__package__}.{module}"), class_name)


def _backend(name: str) -> tuple[str, str, RetrieverDeclaration] | type[Retriever]:
    if name == "none":
        raise ValueError("'none' is no retriever, so it has no class (load_retriever('none') gives None); choose one "
                         f"of {', '.join(retriever_names()[1:])}.")
    if name not in _BACKENDS:
        raise ValueError(f"Unknown retriever {name!r}; choose one of {', '.join(retriever_names())}.")
    return _BACKENDS[name]


def _flag_fields(exclude: str | None = None) -> list[dataclasses.Field]:
    """The ``hf-ralm index`` flag fields every registered backend (but ``exclude``) declares."""
    return [field for name in _BACKENDS if name != exclude
            for field in index_flags(retriever_declaration(name).build_options)]
