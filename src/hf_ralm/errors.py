"""The errors hf-ralm raises for bad input: a file or a setting that is wrong. Each message names the file (with its
line, or the item, when that helps) or the setting, says what is wrong and how to fix it. They are ``ValueError``
subclasses, so ``except ValueError`` catches them too (an argument of the wrong type,
[`InputTypeError`][hf_ralm.errors.InputTypeError], is a ``TypeError`` as well); the command line prints the message as
one line (``hf-ralm: error: ...``) and exits with status 2 (``--debug`` also shows the traceback).

Examples:
    >>> try:
    ...     raise CorpusError("wiki.jsonl:3: corpus rows need a 'text' field")
    ... except InputError as error:
    ...     print(error)
    wiki.jsonl:3: corpus rows need a 'text' field
"""

from __future__ import annotations

import gzip
import re
from contextlib import contextmanager
from typing import Iterator, Mapping

_SETTING = re.compile(r"⟦([A-Za-z_]\w*)⟧")


def setting(name: str) -> str:
    """How a message names a setting (an argument of the library: ``retrieval_stride``, ``max_eval_tokens``, ...),
    so that a front end can name it its own way: a [`SettingError`][hf_ralm.errors.SettingError] prints it as it is,
    the command line as its flag (``--stride``).

    Args:
        name: the setting's Python name.

    Returns:
        The setting's name, marked for [`name_settings`][hf_ralm.errors.name_settings].

    Examples:
        >>> str(SettingError(f"{setting('retrieval_stride')} must be at least 1, got 0."))
        'retrieval_stride must be at least 1, got 0.'
        >>> SettingError(f"{setting('retrieval_stride')} must be at least 1").render({"retrieval_stride": "--stride"})
        '--stride must be at least 1'
    """
    return f"⟦{name}⟧"


class NamesSettings:
    """An error whose message names settings with [`setting`][hf_ralm.errors.setting]: printed with their Python
    names, and [`render`][hf_ralm.errors.NamesSettings.render] names them otherwise (the command line: with its flags).

    Args:
        message: the message, its settings marked with [`setting`][hf_ralm.errors.setting].
    """

    def __init__(self, message: str):
        self.marked = message
        super().__init__(self.render())

    def render(self, names: Mapping[str, str] | None = None) -> str:
        """The message with each setting named by ``names`` (its own name when ``names`` has none for it).

        Args:
            names: a setting's name for each Python name (``None``: every setting by its own name).

        Returns:
            The message.
        """
        return name_settings(self.marked, names)


def name_settings(text: str, names: Mapping[str, str] | None = None) -> str:
    """``text`` (a message, a help line) with each setting marked by [`setting`][hf_ralm.errors.setting] named by
    ``names``, its own name when ``names`` has none for it.

    Args:
        text: the text, its settings marked.
        names: a setting's name for each Python name (``None``: every setting by its own name).

    Returns:
        The text with its settings named.

    Examples:
        >>> name_settings(f"the last {setting('rerank_tokens')} tokens", {"rerank_tokens": "--rerank-tokens"})
        'the last --rerank-tokens tokens'
    """
    names = names or {}
    return _SETTING.sub(lambda match: names.get(match.group(1), match.group(1)), text)


class RalmWarning(NamesSettings, UserWarning):
    """A run that went through, but not as its settings suggest (e.g. retrieval that never ran because the text fits
    in one window): the message says why and how to change it, naming settings with
    [`setting`][hf_ralm.errors.setting]. The command line prints it as one line ``hf-ralm: warning: ...`` with its
    flags; the result records it too."""


class InputError(NamesSettings, ValueError):
    """A bad input file or setting; the message says which, what is wrong and how to fix it (naming settings with
    [`setting`][hf_ralm.errors.setting])."""


class SettingError(InputError):
    """A bad setting or argument value; its message names the settings ([`setting`][hf_ralm.errors.setting])."""


class InputTypeError(SettingError, TypeError):
    """An argument of the wrong type (``None``, a text where a list of texts goes, a number where a path goes): a
    ``TypeError``, as Python's own would be, and a [`SettingError`][hf_ralm.errors.SettingError], so ``except
    InputError`` (and the command line) takes it as any other bad input. Its message names the argument, what was
    given and what it takes (``hf_ralm.utils.checks.refuse_type``)."""


class MissingFileError(NamesSettings, FileNotFoundError):
    """A file a setting names does not exist (a ``FileNotFoundError``); its message names the setting."""


class RetrievalFileError(InputError):
    """A retrieval file (``--retrieval-file``) that is no JSON list of windows, lacks fields, or whose windows are not
    those of the evaluation."""


class CorpusError(InputError):
    """A corpus file (``--corpus``) with bad rows, no passages, or bytes that are not UTF-8."""


class IndexFolderError(InputError):
    """An index folder (``--index-dir``) that is damaged (files missing or truncated), from an older hf-ralm, or another
    backend's."""


class SavedFolderError(InputError):
    """A saved or downloaded folder (``save_pretrained``, a Hub repository) whose files name a path outside it: such a
    path is followed only when the caller gives it (``index_dir=``, ``encoder=``)."""


class OutputFolderError(InputError):
    """An output folder (``--output-dir``) that holds another run's saved progress (other settings, model or data),
    or files that are not a run's: going on there would mix results."""


class NonFiniteError(NamesSettings, ValueError):
    """A model output that is not a number (NaN or infinite): no figure is reported from it. Its message names the
    tokens, the precision, and the fix (half precision overflowing: bfloat16 or float32)."""


def first_non_utf8_line(path: str) -> tuple[int, int]:
    """Where a file's first bytes that are not UTF-8 are.

    Args:
        path: the file (gzip-compressed when its name ends in ``.gz``).

    Returns:
        ``(line, column)`` (from 1; the column counts bytes) of the first bytes that are not UTF-8, or ``(0, 0)`` when
            there are none.
    """
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
    first bytes that are not UTF-8 and how to fix the file.

    Args:
        path: the file the block reads.
        error: the class of the error raised.
        what: what the message calls the file.

    Raises:
        InputError: (``error``) the block raised a ``UnicodeDecodeError``.
    """
    try:
        yield
    except UnicodeDecodeError:
        line, column = first_non_utf8_line(path)
        raise error(f"{path}:{line}: the {what} is not UTF-8 (line {line}, byte {column}): fix that line or save the "
                    "file as UTF-8 (e.g. `iconv -f latin1 -t utf-8` for a Latin-1 file).") from None
