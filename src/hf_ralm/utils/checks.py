"""The checks that settings, arguments and input files share, with messages that name the argument or the file: counts
and numbers; the Python API's arguments of the wrong type or empty ([`check_texts`][hf_ralm.utils.checks.check_texts],
[`token_id_list`][hf_ralm.utils.checks.token_id_list], [`check_vocabulary`][hf_ralm.utils.checks.check_vocabulary],
[`check_path`][hf_ralm.utils.checks.check_path]: each refusal names the argument, what was given and what it takes,
before any model runs); and the input files every reader opens through [`reading`][hf_ralm.utils.checks.reading] (a
regular file, refused before it is opened when it is a FIFO or a device:
[`is_input_file`][hf_ralm.utils.checks.is_input_file]).

Examples:
    >>> check_count("stride", 4)
    >>> check_texts("prompts", ("The Eiffel Tower is", "Rome was"))
    ['The Eiffel Tower is', 'Rome was']
    >>> check_texts("prompts", "The Eiffel Tower is")
    Traceback (most recent call last):
    ...
    hf_ralm.errors.InputTypeError: prompts takes a list of texts (str), got a str ('The Eiffel Tower is'): for one \
text, give a list of one, [text].
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
import operator
import os
import re
import stat
import zlib
from contextlib import contextmanager
from typing import Any, Iterable, Iterator, Mapping, NoReturn, Sequence, TextIO

from ..errors import InputError, InputTypeError, SettingError, setting, utf8_errors
from .atomic import naming_errors


def check_count(name: str, value: int, minimum: int = 1) -> None:
    """Check that a value is a count.

    Args:
        name: the argument, as the message names it.
        value: its value.
        minimum: the least it may be.

    Raises:
        SettingError: ``value`` is not an integer of at least ``minimum`` (the message names the argument).

    Examples:
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
    """A mapping of options with the options also given by name.

    Args:
        options: the mapping (e.g. ``retriever_options``).
        named: the options given by name (``None``: not given).
        what: the mapping's name, as the message names it.

    Returns:
        ``options`` with the named ones added.

    Raises:
        SettingError: an option is given both ways.

    Examples:
        >>> with_named_options({"k1": 0.9}, {"b": 0.4, "n_threads": None}, "retriever_options")
        {'k1': 0.9, 'b': 0.4}
    """
    named = {key: value for key, value in named.items() if value is not None}
    twice = sorted(set(named) & set(options))
    if twice:
        raise SettingError(f"{', '.join(twice)}: given both by name and in {setting(what)}; give each option once.")
    return {**options, **named}


def shown(value: Any, width: int = 60) -> str:
    """A value as a message shows it: its ``repr``, cut to ``width`` characters.

    Examples:
        >>> shown("x" * 100, width=12)
        "'xxxxxxxx..."
    """
    text = repr(value)
    return text if len(text) <= width else f"{text[:width - 3]}..."


def described(value: Any) -> str:
    """What a message says was given: ``None``, or the value's type and its shortened ``repr``
    ([`shown`][hf_ralm.utils.checks.shown]); a tensor or an array by its shape.

    Examples:
        >>> described(None), described(123), described([5, 6])
        ('None', 'an int (123)', 'a list ([5, 6])')
    """
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[0].lower() in "aeiou" else "a"
    shape = getattr(value, "shape", None)
    if shape is not None and not isinstance(value, type):
        return f"{article} {name} of shape {tuple(shape)}"
    return f"{article} {name} ({shown(value)})"


def refuse_type(name: str, value: Any, takes: str, fix: str = "", item: int | None = None) -> NoReturn:
    """Refuse an argument of the wrong type, in one line.

    Args:
        name: the argument.
        value: what was given ([`described`][hf_ralm.utils.checks.described]).
        takes: what it takes.
        fix: what to do instead, when there is something to say.
        item: the index of the item refused, when it is one of the argument's items.

    Raises:
        InputTypeError: always.
    """
    where = setting(name) + ("" if item is None else f"[{item}]")
    raise InputTypeError(f"{where} takes {takes}, got {described(value)}{': ' + fix if fix else ''}.")


def _is_collection(value: Any) -> bool:
    """A value that holds items to check one by one: an iterable that is no text, bytes or mapping."""
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes, Mapping))


def check_texts(name: str, value: Any, allow_empty: bool = False) -> list[str]:
    """Texts given to the Python API, as a list.

    Args:
        name: the argument, as the message names it.
        value: a list, a tuple or another iterable of ``str``.
        allow_empty: take an empty one.

    Returns:
        The texts.

    Raises:
        InputTypeError: ``None``, a single text (iterating it would make one item per character), anything else that
            holds no items, or an item that is no ``str`` (named by its index).
        SettingError: an empty one, unless ``allow_empty``.

    Examples:
        >>> check_texts("queries", ["the emperor", None])
        Traceback (most recent call last):
        ...
        hf_ralm.errors.InputTypeError: queries[1] takes a text (str), got None.
    """
    takes = "a list of texts (str)"
    if isinstance(value, str):
        refuse_type(name, value, takes, "for one text, give a list of one, [text]")
    if not _is_collection(value):
        refuse_type(name, value, takes)
    texts = list(value)
    if not texts and not allow_empty:
        raise SettingError(f"{setting(name)} is empty: give at least one text.")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            refuse_type(name, text, "a text (str)", item=i)
    return texts


def token_id_list(name: str, value: Any, takes: str = "token ids (a list of int)") -> list[int]:
    """Token ids given to the Python API, as a list of ints.

    Args:
        name: the argument, as the message names it.
        value: a sequence of ints, or a 1-D tensor or array.
        takes: what the argument takes, as the message says.

    Returns:
        The ids.

    Raises:
        InputTypeError: no sequence, one of more than one dimension, or an item that is no integer (a bool is none
            either).

    Examples:
        >>> token_id_list("text_or_ids", (5, 6, 7))
        [5, 6, 7]
        >>> token_id_list("text_or_ids", [5, 6.5])
        Traceback (most recent call last):
        ...
        hf_ralm.errors.InputTypeError: text_or_ids[1] takes a token id (int), got a float (6.5).
    """
    if not _is_collection(value):
        refuse_type(name, value, takes)
    if getattr(value, "ndim", 1) != 1:
        refuse_type(name, value, takes, "one text's ids, a single row")
    ids = value.tolist() if hasattr(value, "tolist") else list(value)
    for i, token in enumerate(ids):
        if not isinstance(token, int) or isinstance(token, bool):
            if isinstance(token, bool) or not hasattr(token, "__index__"):
                refuse_type(name, token, "a token id (int)", item=i)
            ids[i] = operator.index(token)  # a numpy integer in a list
    return ids


def check_vocabulary(name: str, ids: Sequence[int] | Sequence[Sequence[int]], vocab_size: int | None) -> None:
    """Check token ids against a vocabulary, before an embedding lookup fails with an index error that names none of
    them.

    Args:
        name: the argument, as the message names it.
        ids: a row of ids, or rows.
        vocab_size: the vocabulary's size (``None``: not known, nothing checked).

    Raises:
        SettingError: an id is outside the vocabulary (the message names the first, where it is and the vocabulary's
            size).

    Examples:
        >>> check_vocabulary("input_ids", [[5, 6], [7, 900]], 128)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.SettingError: input_ids[1][1] is the token id 900, outside the model's vocabulary of 128 ids \
(0 to 127): give ids of the model's own tokenizer.
    """
    if vocab_size is None:
        return
    nested = bool(ids) and not isinstance(ids[0], int)
    for r, row in enumerate(ids if nested else [ids]):
        if row and (min(row) < 0 or max(row) >= vocab_size):
            column, bad = next((c, token) for c, token in enumerate(row) if not 0 <= token < vocab_size)
            where = f"{setting(name)}[{r}][{column}]" if nested else f"{setting(name)}[{column}]"
            raise SettingError(f"{where} is the token id {bad}, outside the model's vocabulary of {vocab_size} ids "
                               f"(0 to {vocab_size - 1}): give ids of the model's own tokenizer.")


def check_path(name: str, value: Any, what: str = "a folder's path") -> str:
    """A path given to the Python API, as a ``str``, before a ``None`` or a number becomes a file name.

    Args:
        name: the argument, as the message names it.
        value: a ``str`` or an ``os.PathLike``.
        what: what the path is of, as the message says.

    Returns:
        The path.

    Raises:
        InputTypeError: anything else.

    Examples:
        >>> check_path("save_directory", None)
        Traceback (most recent call last):
        ...
        hf_ralm.errors.InputTypeError: save_directory takes a folder's path (a str or an os.PathLike), got None.
    """
    if not isinstance(value, (str, os.PathLike)):
        refuse_type(name, value, f"{what} (a str or an os.PathLike)")
    return os.fspath(value)


def is_number(value) -> bool:
    """A real number (an int or a float, not a bool)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value) -> bool:
    """A real number that is neither infinite nor NaN."""
    return is_number(value) and math.isfinite(value)


_NOT_REGULAR = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


def special_file_kind(mode: int) -> str | None:
    """What a file of ``mode`` (``os.stat``'s ``st_mode``) is when it is neither a regular file nor a folder (a FIFO,
    a device, a socket), as a message says it; ``None`` for a regular file or a folder.

    Examples:
        >>> special_file_kind(os.stat("/dev/null").st_mode), special_file_kind(os.stat(".").st_mode)
        ('a character device', None)
    """
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _NOT_REGULAR if test(mode)), "not a file or folder")


def is_input_file(path: str | os.PathLike, what: str = "file", error: type[InputError] = InputError) -> bool:
    """Whether ``path`` is a regular file to read: ``False`` when nothing is there or a folder is (which a caller may
    take as a Hugging Face dataset folder, or report missing). A FIFO, a device or a socket is refused (``error``,
    naming ``what`` and the path) before anything opens it: reading one would wait for a writer or never end, and
    hf-ralm reads some inputs more than once (a corpus is hashed, then read).

    Examples:
        >>> import tempfile
        >>> is_input_file(tempfile.mkdtemp()), is_input_file("missing.jsonl")
        (False, False)
    """
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):  # missing, a parent that is a file, a name too long: no file to read
        return False
    kind = special_file_kind(mode)
    if kind is None:
        return stat.S_ISREG(mode)
    raise error(f"The {what} {os.fspath(path)!r} is {kind}, not a regular file: hf-ralm reads its input files whole, "
                "some more than once, and would wait on it for ever; save the data to a file and give that.")


_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
"""A JSON escape of a UTF-16 surrogate: a pair of them is one character, one alone is none."""


def check_json_text(value: Any, line: str, where: str, error: type[InputError] = InputError) -> None:
    """Refuse (``error``, at ``where``: ``path:line``) a JSON value parsed from ``line`` that holds a string with a
    lone surrogate (``"\\ud800"`` without its pair): no character, it could not be tokenized nor written as UTF-8,
    and would fail far from the line that holds it.

    Examples:
        >>> import json
        >>> line = r'{"text": "bad \\ud800 row"}'
        >>> check_json_text(json.loads(line), line, "rows.jsonl:2")
        Traceback (most recent call last):
        ...
        hf_ralm.errors.InputError: rows.jsonl:2: a string of the row holds a lone surrogate (\\ud800), ...
    """
    if not _SURROGATE_ESCAPE.search(line):  # the only way a JSON line read as UTF-8 gets one
        return
    strings = [value]
    while strings:
        item = strings.pop()
        if isinstance(item, dict):
            strings.extend([*item.keys(), *item.values()])
        elif isinstance(item, list):
            strings.extend(item)
        elif isinstance(item, str):
            lone = next((c for c in item if "\ud800" <= c <= "\udfff"), None)
            if lone is not None:
                raise error(f"{where}: a string of the row holds a lone surrogate (\\u{ord(lone):04x}), the half of "
                            "a pair of UTF-16 escapes, which is no character: fix that line (the escapes' pair, or "
                            "the character itself), or remove it.")


_GZIP_ERRORS = (gzip.BadGzipFile, EOFError, zlib.error)
"""What reading a damaged gzip file raises (a truncated one: ``EOFError``); none names the file."""


@contextmanager
def reading(path: str, error: type[InputError] = InputError, what: str = "file") -> Iterator[TextIO]:
    """``path`` open for reading as UTF-8 text (decompressed when its name ends in ``.gz``), once it is known to be no
    FIFO or device ([`is_input_file`][hf_ralm.utils.checks.is_input_file]); the errors of reading it name it: bytes that
    are not UTF-8 (``error`` with the line: [`utf8_errors`][hf_ralm.errors.utf8_errors]), a damaged or truncated gzip
    file (``error``), and an OS error that names no file (a disk's I/O error:
    [`naming_errors`][hf_ralm.utils.atomic.naming_errors]).

    Examples:
        ```python
        with reading("wiki.jsonl.gz", CorpusError, "corpus") as f:
            first = f.readline()
        ```
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
