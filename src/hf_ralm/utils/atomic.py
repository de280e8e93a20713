"""Writing files atomically, for every file hf-ralm writes (retrieval files, configs, reports, record chunks) and the
benchmarks' CSVs: a crash leaves the old file or the new one, never a part. An OS error while writing (a full disk,
a read-only folder) names the file being written, not only the temporary one (or nothing: ``fsync`` names no file).

Examples:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "eval.json")
    >>> write_json_atomic(path, {"token_ppl": 23.2})
    >>> open(path).read()
    '{\\n  "token_ppl": 23.2\\n}\\n'
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

TMP_PREFIX = ".tmp-"
"""How the temporary files of an atomic write begin, beside the file they become."""

_SHORT_WRITE = re.compile(r"^(\d+) requested and (\d+) written$")
"""numpy's error for a write that stopped short (``ndarray.tofile``, ``np.save``): on a regular file, a full disk
(or a used-up quota), which it does not say, naming neither the file nor the cause."""


def _read_umask() -> int:
    umask = os.umask(0o022)  # reading the umask means setting it: done once, at import, before any threads
    os.umask(umask)
    return umask


_UMASK = _read_umask()


def file_mode() -> int:
    """The permissions ``open()`` gives a new file under this process's umask (0o644 under the usual 022):
    ``tempfile.mkstemp`` makes its files private (0o600), which a results file shared with a team must not be."""
    return 0o666 & ~_UMASK


def write_text_atomic(path: str, text: str, suffix: str = ".tmp") -> None:
    """Write a text file atomically: to a temporary file beside ``path``, flushed to disk (fsync) and renamed over
    ``path``, so a crash leaves either the old file or the new one, never a truncated one.

    Args:
        path: the file (its folder is made if missing). It gets the permissions a plain ``open(path, "w")`` would
            ([`file_mode`][hf_ralm.utils.atomic.file_mode]).
        text: what it holds (UTF-8).
        suffix: the temporary file's suffix.

    Raises:
        OSError: the file cannot be written (the message names ``path``, not the temporary file).
    """
    directory = os.path.dirname(os.path.abspath(path))
    with naming_errors(path):
        os.makedirs(directory, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=TMP_PREFIX, suffix=suffix)
        try:
            os.fchmod(fd, file_mode())
            with os.fdopen(fd, "w", encoding="utf-8", newline="") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            os.unlink(tmp)
            raise


def json_text(data: Any) -> str:
    """What [`write_json_atomic`][hf_ralm.utils.atomic.write_json_atomic] writes of ``data``: strict JSON (a NaN or
    infinity is refused, a ``ValueError``, rather than written as the bare ``NaN`` that strict parsers reject),
    indented, UTF-8 as it is, a newline at the end. Its exact form also tells a file hf-ralm wrote
    ([`hf_ralm.utils.outputs`][hf_ralm.utils.outputs]).

    Examples:
        >>> json_text({"em": 0.5, "title": "Zürich"})
        '{\\n  "em": 0.5,\\n  "title": "Zürich"\\n}\\n'
    """
    return json.dumps(data, indent=2, ensure_ascii=False, allow_nan=False) + "\n"


def write_json_atomic(path: str, data) -> None:
    """Write a JSON file atomically ([`write_text_atomic`][hf_ralm.utils.atomic.write_text_atomic]).

    Args:
        path: the file.
        data: what it holds, as [`json_text`][hf_ralm.utils.atomic.json_text] writes it.

    Raises:
        ValueError: ``data`` holds a NaN or an infinity.
        OSError: the file cannot be written.
    """
    write_text_atomic(path, json_text(data), suffix=".json")


@contextmanager
def naming_errors(path: str | os.PathLike) -> Iterator[None]:
    """Re-raise an ``OSError`` raised while writing (or reading) ``path`` that names no file, or only a temporary one
    (a full disk's ``fsync``, a temporary file that cannot be made, a disk's I/O error), as one naming ``path``: the
    one-line error of the command line then says which file could not be written or read.

    A write that numpy stopped short (``"182749 requested and 130016 written"``, no error number) is reported as the
    full disk it is.

    Examples:
        >>> import errno
        >>> with naming_errors("out/eval.json"):
        ...     raise OSError(errno.ENOSPC, "No space left on device")
        Traceback (most recent call last):
        ...
        OSError: [Errno 28] No space left on device: 'out/eval.json'
        >>> with naming_errors("wiki-bm25"):
        ...     raise OSError("182749 requested and 130016 written")
        Traceback (most recent call last):
        ...
        OSError: [Errno 28] No space left on device (182749 bytes to write, 130016 written): 'wiki-bm25'
    """
    try:
        yield
    except OSError as error:
        named = error.filename is not None and not os.path.basename(os.fspath(error.filename)).startswith(TMP_PREFIX)
        if named:
            raise
        short = _SHORT_WRITE.match(str(error)) if error.errno is None else None
        if short:
            raise OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({short[1]} bytes to write, {short[2]} written)",
                          os.fspath(path)) from error
        if error.errno is None:  # pyarrow's errors carry only a message
            raise OSError(f"{os.fspath(path)}: {error}") from error
        raise OSError(error.errno, error.strerror, os.fspath(path)) from error


@contextmanager
def naming_full_disk(path: str | os.PathLike) -> Iterator[None]:
    """[`naming_errors`][hf_ralm.utils.atomic.naming_errors] for a full disk only (``ENOSPC``, or numpy's short write),
    for a block that reads files too, whose errors name them as they are (an index build reads its corpus).

    Examples:
        >>> with naming_full_disk("wiki-bm25"):
        ...     raise FileNotFoundError("Corpus file not found: 'wiki.jsonl'.")
        Traceback (most recent call last):
        ...
        FileNotFoundError: Corpus file not found: 'wiki.jsonl'.
    """
    try:
        yield
    except OSError as error:
        if error.errno != errno.ENOSPC and not (error.errno is None and _SHORT_WRITE.match(str(error))):
            raise
        with naming_errors(path):
            raise


def write_durably(final: Path, write: Callable[[Path], None], tmp: Path) -> None:
    """``write(tmp)`` (a file or a folder), then fsync what it wrote and rename it to ``final``: after a crash
    ``final`` is either missing or complete, never a part."""
    try:
        with naming_errors(final):
            write(tmp)
            for path in [tmp] if tmp.is_file() else [p for p in tmp.rglob("*") if p.is_file()]:
                with open(path, "rb+") as f:
                    os.fsync(f.fileno())
            os.replace(tmp, final)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp)
        elif tmp.exists():
            tmp.unlink()
        raise
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself
    finally:
        os.close(directory)
