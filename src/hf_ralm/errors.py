"""The errors hf-ralm raises for bad input: a file or a setting that is wrong. Each message names the file (with its
line, or the item, when that helps) or the setting, says what is wrong and how to fix it. They are ``ValueError``
subclasses, so ``except ValueError`` catches them too; the command line prints the message as one line
(``hf-ralm: error: ...``) and exits with status 2 (``--debug`` also shows the traceback).

Example:
    >>> try:
    ...     raise CorpusError("wiki.jsonl:3: corpus rows need a 'text' field")
    ... except InputError as error:
    ...     print(error)
    wiki.jsonl:3: corpus rows need a 'text' field
"""

from __future__ import annotations

import gzip
from contextlib import contextmanager
from typing import Iterator


class InputError(ValueError):
    """A bad input file or setting; the message says which, what is wrong and how to fix it."""


class RetrievalFileError(InputError):
    """A retrieval file (``--retrieval-file``) that is no JSON list of windows, lacks fields, or whose windows are not
    those of the evaluation."""


class CorpusError(InputError):
    """A corpus file (``--corpus``) with bad rows, no passages, or bytes that are not UTF-8."""


class IndexFolderError(InputError):
    """An index folder (``--index-dir``) that is damaged (files missing or truncated), from an older hf-ralm, or another
    backend's."""


class OutputFolderError(InputError):
    """An output folder (``--output-dir``) that holds another run's saved progress (other settings, model or data),
    or files that are not a run's: going on there would mix results."""


def first_non_utf8_line(path: str) -> tuple[int, int]:
    """``(line, column)`` (from 1; the column counts bytes) of the first bytes of ``path`` (gzip-compressed when its
    name ends in ``.gz``) that are not UTF-8, or ``(0, 0)`` when there are none."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        for number, line in enumerate(f, 1):  # b"\n" never occurs inside a UTF-8 character
            try:
                line.decode("utf-8")
            except UnicodeDecodeError as error:
                return number, error.start + 1
    return 0, 0


@contextmanager
def utf8_errors(path: str, error: type[InputError] = InputError, what: str = "file") -> Iterator[None]:
    """Report a ``UnicodeDecodeError`` raised while reading ``path`` as ``error``, with the line and column of the
    first bytes that are not UTF-8 and how to fix the file."""
    try:
        yield
    except UnicodeDecodeError:
        line, column = first_non_utf8_line(path)
        raise error(f"{path}:{line}: the {what} is not UTF-8 (line {line}, byte {column}): fix that line or save the "
                    "file as UTF-8 (e.g. `iconv -f latin1 -t utf-8` for a Latin-1 file).") from None
