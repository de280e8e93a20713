"""The default query length ℓ of each retriever, as its backend declares it, in plain Python (nothing is imported):
what ``query_length=None`` means ([`default_query_length`][hf_ralm.default_query_length],
[`RalmConfig.query_length_for`][hf_ralm.RalmConfig.query_length_for]) and what ``--query-length``'s help states.
The settings sit below retrieval and import none of it, so the retriever registry writes each backend's default here
(``declare_query_length``): hf-ralm's own when ``hf_ralm`` is imported, one from outside when it is registered
([`register_retriever`][hf_ralm.retrieval.register_retriever]).

Examples:
    >>> default_query_length("dense"), default_query_length("bm25"), default_query_length("none")
    (64, 32, 32)
"""

from __future__ import annotations

SPARSE_QUERY_LENGTH = 32
"""The paper's best query length ℓ for sparse retrieval (BM25): the default of a retriever that declares no other,
and of none."""

_QUERY_LENGTHS: dict[str, int] = {}
"""Each registered retriever's default query length ℓ, by name, as its backend declares it
(``declare_query_length``)."""


def declare_query_length(retriever: str, length: int) -> None:
    """Record ``length`` as the default query length ℓ of the retriever named ``retriever``: what
    [`register_retriever`][hf_ralm.retrieval.register_retriever] (and the registry, for hf-ralm's own backends) calls
    with the backend's ``default_query_length``.

    Args:
        retriever: The retriever's registry name.
        length: Its default query length, in tokens.

    Raises:
        ValueError: ``length`` is no whole number of tokens of at least 1.
    """
    if not isinstance(length, int) or isinstance(length, bool) or length < 1:
        raise ValueError(f"The {retriever} retriever's default_query_length must be a whole number of tokens, at "
                         f"least 1, got {length!r}.")
    _QUERY_LENGTHS[retriever] = length


def default_query_length(retriever: str | None) -> int:
    """The query length ℓ a retriever kind gets when ``query_length`` is not set: its backend's declared default
    (``declare_query_length``; 64 tokens for ``"dense"`` and ``"hybrid"``, 32 for ``"bm25"`` and ``"lucene"``),
    and 32 for none (``None`` or ``"none"``).

    Args:
        retriever: A registered retriever's name, ``"none"`` or ``None``.

    Returns:
        The default query length, in tokens.

    Raises:
        ValueError: ``retriever`` names no registered retriever.

    Examples:
        >>> default_query_length("dense"), default_query_length("bm25"), default_query_length(None)
        (64, 32, 32)
    """
    if retriever is None or retriever == "none":
        return SPARSE_QUERY_LENGTH
    if retriever not in _QUERY_LENGTHS:
        raise ValueError(f"Unknown retriever {retriever!r}, so it has no default query length; the registered ones "
                         f"are {', '.join(_QUERY_LENGTHS)} (a backend from outside hf-ralm is registered first, with "
                         "register_retriever).")
    return _QUERY_LENGTHS[retriever]


def query_lengths_help() -> str:
    """The retrievers' default query lengths as ``--query-length``'s help states them, grouped by length in the order
    the retrievers were registered (read when a parser is built: a backend may be registered later).

    Examples:
        >>> query_lengths_help()
        '32 for bm25 and lucene, 64 for dense and hybrid'
    """
    by_length: dict[int, list[str]] = {}
    for name, length in _QUERY_LENGTHS.items():
        by_length.setdefault(length, []).append(name)
    return ", ".join(f"{length} for {_and(names)}" for length, names in by_length.items())


def _and(names: list[str]) -> str:
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} and {names[-1]}"
