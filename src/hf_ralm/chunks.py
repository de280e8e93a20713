"""Chunked, resumable output folders: what a long run writes as it goes, so that a crash or Ctrl-C loses at most one
chunk and a rerun with the same settings goes on after the saved ones.

A folder::

    FOLDER/
      <metadata file>      the settings the rows were made with (JSON), and under "reproduce" how the run was started
      chunk-00000<suffix>  a complete chunk (a file or a folder: the subclass's format)
      chunk-00001<suffix>
      .tmp-chunk-00002...  a chunk being written, or left by a crash: never read, replaced by the next writer

Each chunk is written under its temporary name, flushed to disk (fsync) and renamed once complete, so only complete
chunks are ever visible. A subclass says how rows are saved (:meth:`ChunkWriter.save_chunk`) and read back
(:meth:`ChunkWriter.read_chunk`): the per-window records of an evaluation (:class:`~hf_ralm.resume.WindowRecordWriter`,
JSON chunks) and the compact records of long runs (:class:`RecordChunkWriter`: numbers and ids, gzip'd, small enough to
keep in a repository), among them the predictive reranker's training data
(:class:`~hf_ralm.reranking.data.RerankDataWriter`).

The settings are compared when a folder is opened again; the ``reproduce`` part of the metadata file (the command,
the code's git commit, the versions: :func:`~hf_ralm.provenance.provenance`) is written when the folder gets its first
rows and never compared, since a run may be resumed from another checkout, command line or machine.

Example::

    with WindowRecordWriter("out/windows", settings, chunk_size=256) as writer:
        done = writer.num_done                 # rows saved by an earlier run: skip them
        for rows in my_chunks(start=done):
            writer.add(rows)
"""

from __future__ import annotations

import functools
import gzip
import json
import os
import re
import shutil
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, ClassVar, Sequence

from .errors import OutputFolderError
from .retrieval.jsonfile import write_json_atomic
from .windows import check_count

CHUNK_PREFIX = "chunk-"
TMP_PREFIX = ".tmp-chunk-"
REPRODUCE_KEY = "reproduce"
"""The metadata file's key for how the run was started (never compared: see the module docstring)."""


class ChunkWriter:
    """Appends rows to ``folder`` in complete chunks of ``chunk_size`` rows (see the module docstring).

    Opening a folder that holds rows of the same ``metadata`` resumes it (``num_done`` rows in ``num_chunks``
    chunks, read back as ``saved_chunks``); other metadata is refused with an
    :class:`~hf_ralm.errors.OutputFolderError` naming the settings that differ, and a folder holding other files
    with a ``FileExistsError``, unless ``overwrite=True``, which deletes the folder's chunks and metadata first (and
    nothing else). ``reproduce`` (how the run was started, e.g. :func:`~hf_ralm.provenance.provenance`) is stored
    beside the metadata when the folder has no rows yet and kept as it is when it has.
    """

    metadata_file: ClassVar[str]
    suffix: ClassVar[str] = ""  # of a chunk's name: "" for a folder, ".json" for a file
    what: ClassVar[str] = "data"  # what the rows are, in messages

    def __init__(self, folder: str | os.PathLike, metadata: Mapping[str, Any], *, chunk_size: int = 1000,
                 overwrite: bool = False, reproduce: Mapping[str, Any] | None = None) -> None:
        check_count("chunk_size", chunk_size)
        self.folder = Path(folder)
        self.metadata = self.normalise_metadata(metadata)
        if REPRODUCE_KEY in self.metadata:
            raise ValueError(f"{REPRODUCE_KEY!r} is not a setting: pass how the run was started as reproduce=.")
        self.chunk_size = chunk_size
        self._buffer: list[Any] = []
        self._closed = False

        metadata_path = self.folder / self.metadata_file
        stored_reproduce = None
        if overwrite:
            self.remove(self.folder)
        elif metadata_path.is_file():
            if self.complete_chunks(self.folder):  # no rows yet: nothing to mix, the new metadata replaces it
                stored_reproduce = self._check_same_metadata(metadata_path)
        elif self.folder.is_dir() and any(self.folder.iterdir()):
            raise FileExistsError(
                f"{self.folder} is not empty and has no {self.metadata_file}, so it is not a {self.what} folder: "
                "write to a new or empty folder, or overwrite (--overwrite, overwrite=True) to write there anyway.")
        self.folder.mkdir(parents=True, exist_ok=True)
        for leftover in self.folder.glob(TMP_PREFIX + "*"):  # chunks a crash left half written
            _remove_path(leftover)
        self.reproduce = stored_reproduce if stored_reproduce is not None else \
            (None if reproduce is None else as_json(reproduce, "reproduce"))
        stored = self.metadata if self.reproduce is None else {**self.metadata, REPRODUCE_KEY: self.reproduce}
        write_json_atomic(str(metadata_path), stored)
        self._last_save = time.perf_counter()

        chunks = self.complete_chunks(self.folder)
        self.saved_chunks = [self.read_chunk(chunk) for chunk in chunks]  # what an earlier run saved, in order
        self.num_chunks = len(chunks)
        self.num_done = sum(len(rows) for rows in self.saved_chunks)
        self._next_index = _chunk_index(chunks[-1]) + 1 if chunks else 0

    # what a subclass defines -------------------------------------------------------------------------------------

    def save_chunk(self, rows: list[Any], path: Path) -> None:
        """Write ``rows`` to ``path`` (a temporary name, renamed by the caller)."""
        raise NotImplementedError

    def read_chunk(self, path: Path) -> Sequence[Any]:
        """The rows of a complete chunk."""
        raise NotImplementedError

    def normalise_metadata(self, metadata: Mapping[str, Any]) -> dict[str, Any]:
        """``metadata`` as it reads back from JSON (tuples become lists), so a stored copy compares equal to it."""
        return as_json(metadata, "metadata")

    def prepare_row(self, row: Any) -> Any:
        """``row`` as it is saved (a subclass checks it here)."""
        return row

    # the writing -------------------------------------------------------------------------------------------------

    def add(self, rows: Any | Iterable[Any]) -> None:
        """Buffers ``rows`` (one row, a mapping, or several), saving a chunk whenever ``chunk_size`` are buffered."""
        if self._closed:
            raise RuntimeError(f"This writer of {self.folder} is closed: open a new {type(self).__name__} to add rows.")
        for row in [rows] if isinstance(rows, Mapping) else rows:
            self._buffer.append(self.prepare_row(row))
            if len(self._buffer) >= self.chunk_size:
                self._flush()

    def close(self) -> None:
        """Saves the buffered rows as a last (possibly shorter) chunk; closing twice is harmless."""
        if not self._closed:
            self._flush()
            self._closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc_info: object) -> None:
        # Buffered rows are complete and valid even when the caller failed, so they are saved all the same.
        self.close()

    def _flush(self) -> None:
        if not self._buffer:
            return
        name = self.chunk_name(self._next_index, self.num_done, self.num_done + len(self._buffer)) + self.suffix
        tmp = self.folder / (TMP_PREFIX + name)
        _write_durably(self.folder / (CHUNK_PREFIX + name), lambda path: self.save_chunk(self._buffer, path), tmp)
        self.num_done += len(self._buffer)
        self.num_chunks += 1
        self._next_index += 1
        self._buffer = []

    def chunk_name(self, index: int, start: int, stop: int) -> str:
        """The name of chunk number ``index`` (from 0), which holds the rows ``[start, stop)``, before the suffix."""
        return f"{index:05d}"

    # the folder --------------------------------------------------------------------------------------------------

    @classmethod
    def complete_chunks(cls, folder: Path) -> list[Path]:
        """The complete chunks of ``folder``, in writing order (temporary leftovers are not among them)."""
        pattern = re.compile(rf"^{CHUNK_PREFIX}\d{{5,}}(-\d{{5,}})?{re.escape(cls.suffix)}$")
        return sorted((path for path in folder.iterdir() if pattern.match(path.name)), key=_chunk_index)

    @classmethod
    def read_metadata(cls, folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The settings of a folder's rows and how its run was started (``None`` when not recorded)."""
        stored = json.loads((Path(folder) / cls.metadata_file).read_text(encoding="utf-8"))
        reproduce = stored.pop(REPRODUCE_KEY, None)
        return stored, reproduce

    @classmethod
    def remove(cls, folder: Path) -> None:
        """Deletes what a writer put in ``folder`` (and nothing else the user may keep there)."""
        if not folder.is_dir():
            return
        for path in cls.complete_chunks(folder) + list(folder.glob(TMP_PREFIX + "*")):
            _remove_path(path)
        (folder / cls.metadata_file).unlink(missing_ok=True)

    def _check_same_metadata(self, path: Path) -> dict[str, Any] | None:
        """Raise when the stored settings differ from the given ones; the stored ``reproduce``."""
        stored, reproduce = self.read_metadata(path.parent)
        given = self.metadata
        differing = sorted(key for key in stored.keys() | given.keys() if stored.get(key) != given.get(key))
        if differing:
            details = "; ".join(f"{key!r}: stored {stored.get(key)!r}, given {given.get(key)!r}" for key in differing)
            raise OutputFolderError(
                f"{path.parent} holds {self.what} made with other settings ({details}). Going on would mix them: "
                "write to another folder, or overwrite (--overwrite, overwrite=True) to delete its "
                f"{self.what} and start afresh.")
        return reproduce


class RecordChunkWriter(ChunkWriter):
    """Rows of plain numbers, ids and short strings (JSON-serializable dicts) in gzip'd JSON chunks: the compact
    records of a long run, small enough to commit to a repository as each chunk completes. A chunk file holds
    ``{"rows": [...], "seconds": S, "git_commit": C}``: the wall time from the previous chunk's save (or from opening
    the writer) to its own, and the commit of the code that computed it (:func:`~hf_ralm.provenance.provenance`).
    A chunk is named by the rows it holds: ``chunk-00000000-00000064.json.gz``.
    Floats are written with all their digits, so they read back equal.

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> with RecordChunkWriter(folder, {"k": 16}, chunk_size=2) as writer:
        ...     writer.add([{"window": 1, "nll": 2.5}, {"window": 2, "nll": 1.25}, {"window": 3, "nll": 0.5}])
        >>> reopened = RecordChunkWriter(folder, {"k": 16})
        >>> reopened.num_done, reopened.rows()[-1]
        (3, {'window': 3, 'nll': 0.5})
    """

    metadata_file = "settings.json"
    suffix = ".json.gz"
    what = "records"

    def save_chunk(self, rows: list[Any], path: Path) -> None:
        now = time.perf_counter()
        chunk = {"rows": rows, "seconds": now - self._last_save, "git_commit": self._git_commit}
        self._last_save = now
        data = json.dumps(chunk, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)

    def read_chunk(self, path: Path) -> list[Any]:
        return self.read_chunk_file(path)["rows"]

    def chunk_name(self, index: int, start: int, stop: int) -> str:
        """Named by the rows it holds (``chunk-00000064-00000128``), so a name says what is done."""
        return f"{start:08d}-{stop:08d}"

    @functools.cached_property
    def _git_commit(self) -> str | None:
        from .provenance import provenance

        return provenance()["git_commit"]

    @staticmethod
    def read_chunk_file(path: str | os.PathLike) -> dict[str, Any]:
        """A chunk file's contents: ``rows``, ``seconds`` and ``git_commit``."""
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)

    def rows(self) -> list[Any]:
        """Every saved row, in writing order."""
        return [row for rows in self.saved_chunks for row in rows]

    @classmethod
    def chunk_seconds(cls, folder: str | os.PathLike) -> float:
        """The summed ``seconds`` of a folder's complete chunks: what its rows took to compute, across resumes."""
        return sum(cls.read_chunk_file(path)["seconds"] for path in cls.complete_chunks(Path(folder)))


def as_json(mapping: Mapping[str, Any], what: str) -> dict[str, Any]:
    """``mapping`` as it reads back from JSON (tuples become lists), so a stored copy compares equal to it."""
    try:
        return json.loads(json.dumps(dict(mapping)))
    except TypeError as error:
        raise TypeError(f"The {what} must be JSON-serializable (strings, numbers, lists, dicts): {error}") from None


def _write_durably(final: Path, write, tmp: Path) -> None:
    """``write(tmp)`` (a file or a folder), then fsync what it wrote and rename it to ``final``: after a crash
    ``final`` is either missing or complete, never a part."""
    try:
        write(tmp)
        for path in [tmp] if tmp.is_file() else [p for p in tmp.rglob("*") if p.is_file()]:
            with open(path, "rb+") as f:
                os.fsync(f.fileno())
        os.replace(tmp, final)
    except BaseException:
        if tmp.exists():
            _remove_path(tmp)
        raise
    directory = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the rename itself
    finally:
        os.close(directory)


def _remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()


def _chunk_index(path: Path) -> int:
    return int(re.match(rf"{CHUNK_PREFIX}(\d+)", path.name).group(1))
