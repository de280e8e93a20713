"""The one resumable record store: what every long run (``eval-lm``, ``retrieve``, ``rerank-data``, ``eval-qa``, the
benchmarks' passes) writes as it goes, so that a crash or Ctrl-C loses at most one chunk and a rerun with the same
settings goes on after the saved ones, here or from a copy of the folder elsewhere.

A folder::

    FOLDER/
      settings.json                      the settings the records depend on, and under "reproduce" how the run was
                                         started (command, git commit, versions, paths)
      chunk-00000000-00000064.json.gz    a complete chunk: records 0 to 63, {"rows": [...], "seconds": S,
                                         "git_commit": C} (S: what they took to compute)
      .tmp-chunk-00000064-...            a chunk being written, or left by a crash: never read, replaced

Each chunk is written under a temporary name of its own writer (``.tmp-chunk-<range>.json.gz.<host>-<pid>``), flushed
to disk (fsync) and renamed once complete, so only complete chunks are ever visible, and several workers can write
chunks of one run into one folder (:meth:`RecordStore.save` at any range; a reader accepts gaps). The settings file is
created exclusively (the first worker's) and always compared when a folder is opened: other settings are refused,
naming what differs (two configurations never mix). The ``reproduce`` part is written with it and never compared,
since a run may be resumed from another checkout, command line or machine. ``overwrite`` deletes a folder's records,
and is refused while another live worker is writing a chunk there. A record type (a dataclass) makes the rows typed:
they are saved as dicts and read back as instances; floats keep all their digits.

Example:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with RecordStore(folder, {"k": 16}, chunk_size=2) as store:
    ...     store.add([{"window": 1, "nll": 2.5}, {"window": 2, "nll": 1.25}, {"window": 3, "nll": 0.5}])
    >>> reopened = RecordStore(folder, {"k": 16})
    >>> reopened.num_done, reopened.rows()[-1]
    (3, {'window': 3, 'nll': 0.5})
    >>> RecordStore(folder, {"k": 8})   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_ralm.errors.OutputFolderError: ... holds records made with other settings ('k': stored 16, given 8). ...
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import os
import re
import shutil
import socket
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Sequence

from .errors import OutputFolderError, setting
from .utils.atomic import write_durably, write_json_atomic
from .utils.checks import check_count

CHUNK_PREFIX = "chunk-"
TMP_PREFIX = ".tmp-chunk-"
CHUNK_SUFFIX = ".json.gz"
CHUNK_SUFFIXES = (CHUNK_SUFFIX, ".npy")
"""The chunk files' suffixes: the JSON records of the stores, and arrays (a store of embeddings)."""
REPRODUCE_KEY = "reproduce"
"""The settings file's key for how the run was started (never compared)."""
_SUFFIX = "|".join(map(re.escape, CHUNK_SUFFIXES))
_CHUNK_NAME = re.compile(rf"^{CHUNK_PREFIX}(\d{{8}})-(\d{{8}})({_SUFFIX})$")
_TEMPORARY_NAME = re.compile(rf"^{re.escape(TMP_PREFIX)}\d{{8}}-\d{{8}}(?:{_SUFFIX})\.(.+)-(\d+)$")


def _check_can_be_folder(folder: Path) -> None:
    """Refuse (an :class:`~hf_ralm.errors.OutputFolderError`) a folder path that is a file, or lies under one: what
    ``mkdir`` would report as ``[Errno 20] Not a directory``."""
    for path in (folder, *folder.parents):
        if path.exists():
            if not path.is_dir():
                raise OutputFolderError(f"{path} is a file, where {setting('output_dir')} needs a folder: give the "
                                        "path of a new or empty folder, where the run keeps its records and results.")
            return


class RecordStore:
    """Records in ``folder``, in complete chunks of ``chunk_size`` (see the module docstring).

    Opening a folder that holds the same ``settings`` resumes it (``num_done`` records in ``num_chunks`` chunks, read
    back with :meth:`rows`, at :meth:`ranges`); other settings are refused with an
    :class:`~hf_ralm.errors.OutputFolderError` naming the settings that differ, and a folder holding other files
    with a ``FileExistsError``, unless ``overwrite=True``, which deletes the folder's chunks and settings first (and
    nothing else; refused while another worker writes there). ``reproduce`` (how the run was started, e.g.
    :func:`~hf_ralm.utils.provenance.provenance`) is stored beside the settings by the run that creates the folder.
    Records are added in order (:meth:`add`, buffered into chunks) or saved as a chunk at a given position
    (:meth:`save`: what the workers of a sharded run do). A subclass sets ``record_type`` (a dataclass: records are
    saved as its fields, or its ``to_row()``, and read back as instances, or with its ``from_row(row)``),
    ``settings_file`` and ``what`` (what the records are, in messages), and may check records (:meth:`prepare_row`)
    and settings (:meth:`normalise_settings`).
    """

    settings_file: ClassVar[str] = "settings.json"
    what: ClassVar[str] = "records"
    record_type: ClassVar[type | None] = None
    chunk_suffix: ClassVar[str] = CHUNK_SUFFIX

    def __init__(self, folder: str | os.PathLike, settings: Mapping[str, Any], *, chunk_size: int = 1000,
                 overwrite: bool = False, reproduce: Mapping[str, Any] | None = None) -> None:
        check_count("chunk_size", chunk_size)
        self.folder = Path(folder)
        self.settings = self.normalise_settings(settings)
        if REPRODUCE_KEY in self.settings:
            raise ValueError(f"{REPRODUCE_KEY!r} is not a setting: pass how the run was started as reproduce=.")
        self.chunk_size = chunk_size
        self._buffer: list[Any] = []
        self._closed = False

        settings_path = self.folder / self.settings_file
        _check_can_be_folder(self.folder)
        if overwrite:
            self.remove(self.folder)
        elif not settings_path.is_file() and self.folder.is_dir() and any(
                not path.name.startswith(".tmp-") for path in self.folder.iterdir()):  # another worker's are in-flight
            raise FileExistsError(
                f"{self.folder} is not empty and has no {self.settings_file}, so it is not a {self.what} folder: "
                "write to a new or empty folder, or overwrite (--overwrite, overwrite=True) to write there anyway.")
        self.folder.mkdir(parents=True, exist_ok=True)
        for leftover in _dead_leftovers(self.folder):  # chunks a crashed writer of this machine left half written
            _remove_path(leftover)
        stored = self.settings if reproduce is None else {**self.settings, REPRODUCE_KEY: as_json(reproduce,
                                                                                                  "reproduce")}
        if not _create_exclusively(settings_path, stored):  # another run (or worker) made the folder: same settings?
            self.reproduce = self._check_same_settings()
        else:
            self.reproduce = stored.get(REPRODUCE_KEY)
        self._last_save = time.perf_counter()
        self._saved = {_range_of(path): self.read_chunk(path) for path in self.complete_chunks(self.folder)}

    @property
    def num_done(self) -> int:
        """How many records the folder holds (its gaps not counted)."""
        return sum(stop - start for start, stop in self._saved)

    @property
    def num_chunks(self) -> int:
        return len(self._saved)

    # what a subclass may change ----------------------------------------------------------------------------------

    def normalise_settings(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        """``settings`` as they read back from JSON (tuples become lists), so a stored copy compares equal."""
        return as_json(settings, "settings")

    def prepare_row(self, row: Any) -> dict[str, Any]:
        """``row`` as it is saved: a record's ``to_row()`` or its fields, or a JSON-serializable dict (a subclass
        checks it here)."""
        if hasattr(row, "to_row"):
            return row.to_row()
        return dataclasses.asdict(row) if dataclasses.is_dataclass(row) else dict(row)

    def prepare_rows(self, rows: Sequence[Any]) -> Sequence[Any]:
        """``rows`` as :meth:`write_chunk` saves them (by default each row's :meth:`prepare_row`)."""
        return [self.prepare_row(row) for row in rows]

    def write_chunk(self, path: Path, rows: Sequence[Any], info: Mapping[str, Any]) -> None:
        """Writes a chunk file: gzip'd JSON ``{"rows": rows, **info}`` (a subclass may store its rows another way,
        with its own ``chunk_suffix``)."""
        data = json.dumps({"rows": rows, **info}, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)

    def read_chunk(self, path: Path) -> Sequence[Any]:
        """The records of a chunk file, as the store holds them (typed)."""
        return [self._typed(row) for row in self.read_chunk_file(path)["rows"]]

    def held_rows(self, rows: Sequence[Any], path: Path) -> Sequence[Any]:
        """What the store holds of rows it just saved to ``path`` (typed, without reading the file back)."""
        return [self._typed(row) for row in rows]

    # writing -----------------------------------------------------------------------------------------------------

    def add(self, rows: Any | Iterable[Any]) -> None:
        """Buffers ``rows`` (one record, or several) after the last saved ones, saving a chunk whenever
        ``chunk_size`` are buffered."""
        if self._closed:
            raise RuntimeError(f"This store of {self.folder} is closed: open a new {type(self).__name__} to add rows.")
        one = isinstance(rows, Mapping) or dataclasses.is_dataclass(rows)
        for row in [rows] if one else rows:
            self._buffer.append(self.prepare_row(row))
            if len(self._buffer) >= self.chunk_size:
                self._flush()

    def flush(self) -> None:
        """Saves the buffered records now, as a chunk of their own (e.g. at the end of a batch that must not be lost
        while the next one runs)."""
        self._flush()

    def close(self) -> None:
        """Saves the buffered records as a last (possibly shorter) chunk; closing twice is harmless."""
        if not self._closed:
            self._flush()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Buffered records are complete and valid even when the caller failed, so they are saved all the same.
        self.close()

    def _flush(self) -> None:
        if self._buffer:
            start = max((stop for _, stop in self._saved), default=0)
            self.save(start, self._buffer, prepared=True)
            self._buffer = []

    def save(self, start: int, rows: Sequence[Any], *, prepared: bool = False, **info: Any) -> None:
        """Saves ``rows`` as the chunk of records ``[start, start + len(rows))`` (written under this writer's own
        temporary name, fsynced, renamed); ``info`` goes into the chunk file beside ``rows``, ``seconds`` (the time
        since the store's previous save, or its opening) and ``git_commit``.

        Example::

            store.save(256, records_of_windows_256_to_511, batch_size=8)   # a worker's chunk of a sharded run
        """
        rows = rows if prepared else self.prepare_rows(rows)
        if not len(rows):
            return
        span = (start, start + len(rows))
        name = f"{span[0]:08d}-{span[1]:08d}{self.chunk_suffix}"
        now = time.perf_counter()
        info = {"seconds": now - self._last_save, "git_commit": self._git_commit, **info}
        final = self.folder / (CHUNK_PREFIX + name)
        write_durably(final, lambda path: self.write_chunk(path, rows, info),
                      self.folder / f"{TMP_PREFIX}{name}.{_WORKER}")
        self._last_save = now
        self._saved[span] = self.held_rows(rows, final)

    @functools.cached_property
    def _git_commit(self) -> str | None:
        from .utils.provenance import provenance

        return provenance()["git_commit"]

    # reading -----------------------------------------------------------------------------------------------------

    def rows(self) -> list[Any]:
        """Every saved record, in order of position (``record_type`` instances when the store has one)."""
        return [row for span in sorted(self._saved) for row in self._saved[span]]

    def items(self) -> list[tuple[tuple[int, int], list[Any]]]:
        """Every saved chunk's ``[start, stop)`` and records, in order."""
        return [(span, list(self._saved[span])) for span in sorted(self._saved)]

    def ranges(self) -> list[tuple[int, int]]:
        """The ``[start, stop)`` of every saved chunk, in order (a sharded run's may have gaps)."""
        return sorted(self._saved)

    def refresh(self) -> None:
        """Reads the chunks other workers saved since this store was opened (or last refreshed)."""
        for path in self.complete_chunks(self.folder):
            span = _range_of(path)
            if span not in self._saved:
                self._saved[span] = self.read_chunk(path)

    def _typed(self, row: dict[str, Any]) -> Any:
        if self.record_type is None:
            return row
        from_row = getattr(self.record_type, "from_row", None)
        return from_row(row) if from_row is not None else self.record_type(**row)

    @staticmethod
    def read_chunk_file(path: str | os.PathLike) -> dict[str, Any]:
        """A chunk file's contents: ``rows``, ``seconds``, ``git_commit`` and what its writer added."""
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)

    @classmethod
    def complete_chunks(cls, folder: str | os.PathLike) -> list[Path]:
        """The complete chunks of ``folder``, in order of position (temporary leftovers are not among them)."""
        folder = Path(folder)
        if not folder.is_dir():
            return []
        return sorted((path for path in folder.iterdir() if _chunk_suffix(path) == cls.chunk_suffix),
                      key=_range_of)

    @classmethod
    def prefix_length(cls, folder: str | os.PathLike) -> int:
        """How many records from position 0 on the folder's complete chunks hold without a gap: the records that stay
        the first ones whatever the workers of a sharded run, which save later chunks before earlier ones, add."""
        length = 0
        for start, stop in map(_range_of, cls.complete_chunks(folder)):
            if start != length:
                break
            length = stop
        return length

    @classmethod
    def num_saved(cls, folder: str | os.PathLike) -> int:
        """How many records a folder's complete chunks hold (by their names: nothing is read)."""
        return sum(stop - start for start, stop in map(_range_of, cls.complete_chunks(folder)))

    @classmethod
    def read_rows(cls, folder: str | os.PathLike) -> list[dict[str, Any]]:
        """The records of a folder's complete chunks, in order, as saved (without opening the folder for writing)."""
        return [row for chunk in cls.complete_chunks(folder) for row in cls.read_chunk_file(chunk)["rows"]]

    @classmethod
    def chunk_seconds(cls, folder: str | os.PathLike) -> float:
        """The summed ``seconds`` of a folder's complete chunks: what its records took to compute, across resumes."""
        return sum(cls.read_chunk_file(path)["seconds"] for path in cls.complete_chunks(folder))

    @classmethod
    def read_settings(cls, folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The settings of a folder's records and how its run was started (``None`` when not recorded)."""
        stored = json.loads((Path(folder) / cls.settings_file).read_text(encoding="utf-8"))
        reproduce = stored.pop(REPRODUCE_KEY, None)
        return stored, reproduce

    @classmethod
    def remove(cls, folder: str | os.PathLike) -> None:
        """Deletes what a store put in ``folder`` (and nothing else the user may keep there); an
        :class:`~hf_ralm.errors.OutputFolderError` while another live worker is writing a chunk there."""
        folder = Path(folder)
        if not folder.is_dir():
            return
        busy = _live_writers(folder)
        if busy:
            raise OutputFolderError(
                f"{folder} is being written by another worker ({', '.join(busy)} is writing a chunk there): "
                "overwriting now would delete its work under it. Stop that worker first, or, to force it, delete "
                f"the folder by hand (rm -r {folder}).")
        for path in cls.complete_chunks(folder) + list(folder.glob(TMP_PREFIX + "*")):
            _remove_path(path)
        (folder / cls.settings_file).unlink(missing_ok=True)

    def _check_same_settings(self) -> dict[str, Any] | None:
        """Raise when the stored settings differ from the given ones; the stored ``reproduce``."""
        stored, reproduce = self.read_settings(self.folder)
        given = self.settings
        differing = sorted(key for key in stored.keys() | given.keys() if stored.get(key) != given.get(key))
        if differing:
            details = "; ".join(f"'{setting(key)}': stored {stored.get(key)!r}, given {given.get(key)!r}"
                                for key in differing)
            raise OutputFolderError(
                f"{self.folder} holds {self.what} made with other settings ({details}). Going on would mix them: "
                "write to another folder, or overwrite (--overwrite, overwrite=True) to delete its "
                f"{self.what} and start afresh.")
        return reproduce


_WORKER = f"{socket.gethostname()}-{os.getpid()}"
"""This process, as its temporary chunk files name it."""


def _chunk_suffix(path: Path) -> str | None:
    """The suffix of a complete chunk file's name (``None``: not a chunk)."""
    match = _CHUNK_NAME.match(path.name)
    return match.group(3) if match else None


def _range_of(path: Path) -> tuple[int, int]:
    match = _CHUNK_NAME.match(path.name)
    return int(match.group(1)), int(match.group(2))


def _temporary_writer(path: Path) -> tuple[str, int] | None:
    """``(host, pid)`` of the worker a temporary chunk file belongs to (``None`` for one without its writer's
    name)."""
    match = _TEMPORARY_NAME.match(path.name)
    return (match.group(1), int(match.group(2))) if match else None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _dead_leftovers(folder: Path) -> list[Path]:
    """The temporary chunk files of writers of this machine that are no longer running (a crash's leftovers)."""
    host = socket.gethostname()
    leftovers = []
    for path in folder.glob(TMP_PREFIX + "*"):
        writer = _temporary_writer(path)
        if writer is not None and writer[0] == host and not _alive(writer[1]):
            leftovers.append(path)
    return leftovers


def _live_writers(folder: Path) -> list[str]:
    """The workers other than this process writing a chunk in ``folder`` now: of this machine, running; of another,
    whose temporary file changed in the last ten minutes."""
    host, busy = socket.gethostname(), []
    for path in folder.glob(TMP_PREFIX + "*"):
        writer = _temporary_writer(path)
        if writer is None or (writer[0] == host and writer[1] == os.getpid()):
            continue
        live = _alive(writer[1]) if writer[0] == host else time.time() - path.stat().st_mtime < 600
        if live:
            busy.append(f"{writer[0]}:{writer[1]}")
    return busy


def _create_exclusively(path: Path, content: Mapping[str, Any]) -> bool:
    """Writes ``content`` as the JSON file ``path`` (durably) unless it exists; whether it did."""
    tmp = path.with_name(f".tmp-{path.name}.{_WORKER}")
    write_json_atomic(str(tmp), content)
    try:
        os.link(tmp, path)  # atomic, and fails when another worker created it first
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def as_json(mapping: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``mapping`` as it reads back from JSON (tuples become lists), so a stored copy compares equal to it."""
    try:
        return json.loads(json.dumps(dict(mapping)))
    except TypeError as error:
        raise TypeError(f"The {what} must be JSON-serializable (strings, numbers, lists, dicts): {error}") from None


def digest(value: Any) -> str:
    """A short SHA-256 of a JSON-serializable value (or of bytes): what settings record of large inputs.

    Example:
        >>> digest([1, 2, 3])
        'a36b1f2c3f84522d'
    """
    data = value if isinstance(value, bytes) else json.dumps(value, sort_keys=True).encode("utf-8")
    return hashlib.sha256(data).hexdigest()[:16]


def titles_fingerprint(titles: Iterable[str]) -> str:
    """A short, order-free identity of a set of titles (forbidden or excluded ones), to record in settings instead of
    the titles themselves.

    Example:
        >>> titles_fingerprint(["Nero", "Rome"]) == titles_fingerprint(["Rome", "Nero", "Rome"])
        True
    """
    unique = sorted(set(titles))
    return f"{len(unique)} titles, sha256 {digest(chr(10).join(unique).encode('utf-8'))}"


def _remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
