"""The checks that settings, arguments and input files share, with messages that name the argument or the file: counts
and numbers, and the input files every reader opens through :func:`reading` (a regular file, refused before it is
opened when it is a FIFO or a device: :func:`is_input_file`).

Example:
    >>> check_count("stride", 4)
    >>> is_finite_number(2.0), is_finite_number(float("nan")), is_finite_number(True)
    (True, False, False)
    >>> is_input_file("/dev/null")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_ralm.errors.InputError: The file '/dev/null' is a character device, not a regular file: ...
"""

from __future__ import annotations

import gzip
import math
import os
import stat
import zlib
from contextlib import contextmanager
from typing import Any, Iterator, Mapping, TextIO

from ..errors import InputError, SettingError, setting, utf8_errors
from .atomic import naming_errors


def check_count(name: str, value: int, minimum: int = 1) -> None:
    """Raise a :class:`~hf_ralm.errors.SettingError` that names the argument unless ``value`` is an integer of at
    least ``minimum``.

    Example:
        >>> check_count("stride", 0)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: stride must be at least 1, got 0.
    """
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(f"{setting(name)} must be an integer, got {value!r}.")
    if value < minimum:
        raise SettingError(f"{setting(name)} must be at least {minimum}, got {value}.")


def with_named_options(options: Mapping[str, Any], named: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``options`` (a mapping, e.g. ``retriever_options``) with the options also given by name added (``None``: not
    given); one given both ways is refused in one line naming ``what`` the mapping is.

    Example:
        >>> with_named_options({"k1": 0.9}, {"b": 0.4, "n_threads": None}, "retriever_options")
        {'k1': 0.9, 'b': 0.4}
    """
    named = {key: value for key, value in named.items() if value is not None}
    twice = sorted(set(named) & set(options))
    if twice:
        raise SettingError(f"{', '.join(twice)}: given both by name and in {setting(what)}; give each option once.")
    return {**options, **named}


def is_number(value) -> bool:
    """A real number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """A real number that is neither infinite nor NaN."""
    return is_number(value) and math.isfinite(value)


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def is_input_file(path: str | os.PathLike, what: str = "file", error: type[InputError] = InputError) -> bool:
    """Whether ``path`` is a regular file to read: ``False`` when nothing is there or a folder is (which a caller may
    take as a Hugging Face dataset folder, or report missing). A FIFO, a device or a socket is refused (``error``,
    naming ``what`` and the path) before anything opens it: reading one would wait for a writer or never end, and
    hf-ralm reads some inputs more than once (a corpus is hashed, then read).

    Example:
        >>> import tempfile
        >>> is_input_file(tempfile.mkdtemp()), is_input_file("missing.jsonl")
        (False, False)
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a parent that is a file, a name too long: no file to read
        return False
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return stat.S_ISREG(mode)
    kind = next((name for test, name in _NOT_REGULAR if test(mode)), "not a file or folder")
    raise error(f"The {what} {os.fspath(path)!r} is {kind}, not a regular file: hf-ralm reads its input files whole, "
                "some more than once, and would wait on it for ever; save the data to a file and give that.")


_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
"""What reading a damaged gzip file raises (a truncated one: ``EOFError``); none names the file."""


@contextmanager
def reading(path: str, error: type[InputError] = InputError, what: str = "file") -> Iterator[TextIO]:
    """``path`` open for reading as UTF-8 text (decompressed when its name ends in ``.gz``), once it is known to be no
    FIFO or device (:func:`is_input_file`); the errors of reading it name it: bytes that are not UTF-8 (``error``
    with the line: :func:`~hf_ralm.errors.utf8_errors`), a damaged or truncated gzip file (``error``), and an OS
    error that names no file (a disk's I/O error: :func:`~hf_ralm.utils.atomic.naming_errors`).

    Example::

        with reading("wiki.jsonl.gz", CorpusError, "corpus") as f:
            first = f.readline()
    """
    is_input_file(path, what, error)
    opener = gzip.open if path.endswith(".gz") else open
    with naming_errors(path):  # outside: a damaged gzip file (an OSError too) is told apart first
        try:
            with utf8_errors(path, error, what), opener(path, "rt", encoding="utf-8") as f:
                yield f
        except _GZIP_ERRORS as damaged:
            raise error(f"{path}: the {what} is not a whole gzip file ({damaged}): it was cut short or damaged, e.g. "
                        "by an interrupted download; fetch or write it again (or give it uncompressed, without .gz).") \
                from None
