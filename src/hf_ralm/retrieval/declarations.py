"""What a retriever backend declares in plain Python, for what must know it before the backend's class is imported
(``hf-ralm --help``, the settings' default query length): the options of its index build that ``hf-ralm index``
offers as flags ([`index_flag`][hf_ralm.retrieval.index_flag], the fields of its ``BuildOptions`` dataclass) and what
the registry keeps of it ([`RetrieverDeclaration`][hf_ralm.retrieval.RetrieverDeclaration]). Neither torch,
transformers nor a backend is imported here.

Examples:
    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True)
    ... class WordOverlapBuildOptions:
    ...     min_overlap: int = index_flag(1, help="words a passage shares with a query to be retrieved (default 1)")
    >>> [(field.name, flag_name(field)) for field in index_flags(WordOverlapBuildOptions)]
    [('min_overlap', '--min-overlap')]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Sequence

from ..config.query_lengths import SPARSE_QUERY_LENGTH

INDEX_FLAG = "hf_ralm_index_flag"
"""The key of a dataclass field's metadata that makes it a flag of ``hf-ralm index``
([`index_flag`][hf_ralm.retrieval.index_flag])."""


def index_flag(default: Any = None, *, help: str, choices: Sequence[str] | None = None) -> Any:
    """A field of a backend's ``BuildOptions`` dataclass: an option of its index build that ``hf-ralm index`` offers
    as the flag ``--<field name>`` (underscores as dashes), and passes to the build under the field's name when given.

    Args:
        default: The field's default. The command line passes only the flags given, so the backend's own default
            applies otherwise; say it in ``help``.
        help: The flag's ``--help`` text.
        choices: The values the flag takes, if they are few.

    Returns:
        A ``dataclasses.field`` carrying the flag's help and choices.

    Examples:
        >>> declared = index_flag(help="dense pooling", choices=("mean", "cls")).metadata
        >>> declared.get(INDEX_FLAG)
        {'help': 'dense pooling', 'choices': ('mean', 'cls')}
    """
    return dataclasses.field(default=default, metadata={INDEX_FLAG: {"help": help, "choices": choices}})


def index_flags(options: type | None) -> list[dataclasses.Field]:
    """The fields of the dataclass ``options`` declared with [`index_flag`][hf_ralm.retrieval.index_flag], in their
    order.

    Args:
        options: A backend's ``BuildOptions`` dataclass, or ``None``.

    Returns:
        Its flag fields (none for ``None``).

    Raises:
        TypeError: ``options`` is neither a dataclass nor ``None``.
    """
    if options is None:
        return []
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise TypeError(f"A backend's BuildOptions is a dataclass (or None), got {options!r}.")
    return [field for field in dataclasses.fields(options) if INDEX_FLAG in field.metadata]


def flag_name(field: dataclasses.Field) -> str:
    """The command-line flag of an [`index_flag`][hf_ralm.retrieval.index_flag] field: ``encoder_dtype`` →
    ``--encoder-dtype``."""
    return "--" + field.name.replace("_", "-")


def same_flag(one: dataclasses.Field, other: dataclasses.Field) -> bool:
    """Whether two [`index_flag`][hf_ralm.retrieval.index_flag] fields of the same name declare the same flag
    (default, help and choices), so that two backends may share it (``dense`` and ``hybrid`` share the encoder's)."""
    return (one.name, one.default, one.metadata[INDEX_FLAG]) == (other.name, other.default, other.metadata[INDEX_FLAG])


@dataclass(frozen=True)
class RetrieverDeclaration:
    """What the registry knows of a backend without importing its class: what the settings and the command line
    need before any backend is loaded. A backend class declares it with its class attributes
    ``default_query_length`` and ``BuildOptions``; hf-ralm's own, imported only when used, in their registry line
    too (``hf_ralm.retrieval.registry``).

    Attributes:
        query_length: The query length ℓ its queries get when ``query_length`` is not set (the paper's 32 for sparse
            retrieval, 64 for dense).
        build_options: The dataclass whose [`index_flag`][hf_ralm.retrieval.index_flag] fields are its
            ``hf-ralm index`` flags, or ``None``.

    Examples:
        >>> RetrieverDeclaration().query_length
        32
    """

    query_length: int = SPARSE_QUERY_LENGTH
    build_options: type | None = None
