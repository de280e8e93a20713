"""The one resumable record store: what every long run (``eval-lm``, ``retrieve``, ``rerank-data``, ``eval-qa``, the
benchmarks' passes) writes as it goes, so that a crash or Ctrl-C loses at most one chunk and a rerun with the same
settings goes on after the saved ones, here or from a copy of the folder elsewhere.

A folder:

```text
FOLDER/
  settings.json                      the settings the records depend on, and under "reproduce" how the run was
                                     started (command, git commit, versions, paths)
  chunk-00000000-00000064.json.gz    a complete chunk: records 0 to 63, {"rows": [...], "num_records": 64,
                                     "checksum": C, "settings_digest": D, "seconds": S, "git_commit": G}
                                     (C: a digest of the rows; D: of the settings they were computed under;
                                     S: what they took to compute; a store may add counts, e.g. scored tokens)
  .tmp-chunk-00000064-...            a chunk being written, or left by a crash: never read, replaced
  .workers.lock                      the lock the workers computing there hold (shared), and an overwrite takes
                                     (exclusive); gone once the last worker closes
  .worker-0.<host>-<pid>             one per worker holding the lock: who an overwrite names when refused
  damaged/                           chunks that failed their checks, moved aside (with a timestamp) by repair
```

Each chunk is written under a temporary name of its own writer (``.tmp-chunk-<range>.json.gz.<host>-<pid>``), flushed to
disk (fsync) and renamed once complete, so only complete chunks are ever visible, and several workers can write chunks
of one run into one folder ([`RecordStore.save`][hf_ralm.RecordStore.save] at any range; a reader accepts gaps). The
settings file is created exclusively (the first worker's) and always compared when a folder is opened: other settings
are refused, naming what differs (two configurations never mix). The ``reproduce`` part is written with it and never
compared, since a run may be resumed from another checkout, command line or machine. A record type (a dataclass) makes
the rows typed: they are saved as dicts and read back as instances; floats keep all their digits.

Every chunk is checked when it is read: it must decompress and parse, hold as many records as its name says, match its
checksum and counts, carry the digest of the folder's settings, and hold rows of the store's schema (every field of the
record type, of its type; numbers finite unless the checksum shows they were saved so; a store checks more, e.g. a
window record's NLLs against the window). A chunk that fails is named in one line (an
[`OutputFolderError`][hf_ralm.errors.OutputFolderError]), never used; ``repair`` moves it to ``damaged/`` and the run
computes its records again. A chunk with a checksum but no settings digest, or the other way round, was altered: it is
damaged. Chunks of older versions, without either, cannot be verified against the folder's settings: they are refused
too (one line, counting them), unless ``accept_unverified`` takes them as they are, after the other checks (a run
records how many it took: ``eval.json``'s ``accepted_unverified_chunks``), or
[`RecordStore.stamp_older_chunks`][hf_ralm.RecordStore.stamp_older_chunks] verifies them once and stamps them.

``overwrite`` deletes a folder's records (its chunks, temporary files and settings; nothing else, and never
``damaged/``). It is refused while a worker computes there: each store holds a shared ``flock`` on
``.workers.lock`` from its opening to its closing, and an overwrite must take it exclusively, without waiting. A lock
of the operating system rather than a lease with a heartbeat: it is released when its holder exits, killed or not, so
a crashed worker never blocks the folder, and no thread has to keep a lease alive. (Writers without the lock, such as
older versions, are still seen by their temporary chunk files.) And should the folder be replaced anyway (deleted by
hand, or overwritten from a machine the lock does not reach), a worker compares the settings file with its own before
each chunk it saves and stops, saving nothing more, once they differ.

Examples:
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with RecordStore(folder, {"k": 16}, chunk_size=2) as store:
    ...     store.add([{"window": 1, "nll": 2.5}, {"window": 2, "nll": 1.25}, {"window": 3, "nll": 0.5}])
    >>> reopened = RecordStore(folder, {"k": 16})
    >>> reopened.num_done, reopened.rows()[-1]
    (3, {'window': 3, 'nll': 0.5})
    >>> reopened.close()
    >>> RecordStore(folder, {"k": 8})   # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    hf_ralm.errors.OutputFolderError: ... holds records made with other settings ('k': stored 16, given 8). ...
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gzip
import json
import os
import shutil
import time
import warnings
import weakref
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Sequence

from ..errors import OutputFolderError, RalmWarning, setting
from ..utils.atomic import write_durably, write_json_atomic
from ..utils.checks import check_count
from ..utils.outputs import check_replaceable, json_object_with
from .chunks import (CHUNK_PREFIX, REPRODUCE_KEY, TMP_PREFIX, UNREADABLE, UNSTAMPED_REASON, ChunkFolder,
                     check_chunk_length, damage_reason, is_unstamped, range_of, unverified_error)
from .fingerprints import as_json, digest
from .output_folder import check_output_folder
from .workers import LOCK_FILE, WORKER, WORKER_PREFIX, WorkerLock, dead_leftovers, live_writers

DAMAGED_DIR = "damaged"
"""Where repair moves the chunks that failed their checks (never deleted)."""


class RecordStore(ChunkFolder):
    """Records in ``folder``, in complete chunks of ``chunk_size`` (see the module docstring).

    Opening a folder that holds the same ``settings`` resumes it (``num_done`` records in ``num_chunks`` chunks, read
    back with ``rows``, at ``ranges``); other settings are refused, naming the settings that differ, and so is a
    folder holding files that are not the store's, and a damaged chunk (naming it). The store holds the folder's
    shared lock from its opening to ``close`` (or its end), and saves nothing once the folder's settings are no
    longer its own. Records are added in order (``add``, buffered into chunks) or saved as a chunk at a given position
    (``save``: what the workers of a sharded run do). Reading a folder without opening it, and the checks every chunk
    passes, are its base's, ``ChunkFolder`` (``hf_ralm.runs.chunks``).

    A subclass sets ``record_type`` (a dataclass: records are saved as its fields, or its ``to_row()``, and read back
    as instances, or with its ``from_row(row)``), ``settings_file`` and ``what`` (what the records are, in messages),
    and may check records as they are saved (``prepare_row``) and read (``check_row``, ``check_chunk``), count what
    chunks hold (``chunk_counts``) and normalise settings (``normalise_settings``).

    Args:
        folder: The folder of the records, created if missing.
        settings: What the records depend on: compared with the folder's, never mixed.
        chunk_size: Records per chunk that ``add`` saves.
        overwrite: Delete the folder's chunks and settings first (and nothing else; refused while another worker
            computes there).
        repair: Move the damaged chunks to ``damaged/``, so that the run computes them again.
        accept_unverified: Take the chunks of an older version (without checksum and settings digest) as they are
            (``num_unverified`` counts them).
        reproduce: How the run was started (e.g. ``hf_ralm.utils.reproduction.provenance()``), stored beside the
            settings by the run that creates the folder.

    Raises:
        OutputFolderError: Other settings, files that are not the store's, a damaged chunk or chunks of an older
            version (unless ``repair`` or ``accept_unverified``), or an overwrite while a worker computes there.
        ValueError: ``settings`` holding the ``reproduce`` key.
    """

    def __init__(self, folder: str | os.PathLike, settings: Mapping[str, Any], *, chunk_size: int = 1000,
                 overwrite: bool = False, repair: bool = False, accept_unverified: bool = False,
                 reproduce: Mapping[str, Any] | None = None) -> None:
        check_count("chunk_size", chunk_size)
        self.folder = Path(folder)
        self.settings = self.normalise_settings(settings)
        if REPRODUCE_KEY in self.settings:
            raise ValueError(f"{REPRODUCE_KEY!r} is not a setting: pass how the run was started as reproduce=.")
        self.chunk_size = chunk_size
        self.repair = repair
        self.accept_unverified = accept_unverified
        self._unstamped: set[tuple[int, int]] = set()  # the ranges of chunks read without checksum and digest
        self._buffer: list[Any] = []
        self._closed = False

        check_output_folder(self.folder, self.own_entries(), self.what)
        if overwrite:
            self.remove(self.folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        lock = WorkerLock(self.folder).acquire(exclusive=False)
        self._release = weakref.finalize(self, lock.release)  # at close, or when the store is dropped unclosed
        try:
            self._open(reproduce)
        except BaseException:
            self._release()
            raise

    def _open(self, reproduce: Mapping[str, Any] | None) -> None:
        """Clean up after crashed writers, make or compare the settings file, and read the saved chunks."""
        for leftover in dead_leftovers(self.folder):  # what a crashed writer of this machine left
            _remove_path(leftover)
        stored = self.settings if reproduce is None else {**self.settings, REPRODUCE_KEY: as_json(reproduce,
                                                                                                  "reproduce")}
        if not _create_exclusively(self.folder / self.settings_file, stored):  # another run made it: same settings?
            self.reproduce = self._check_same_settings()
        else:
            self.reproduce = stored.get(REPRODUCE_KEY)
        self._last_save = time.perf_counter()
        self._saved = self._read_saved(self.complete_chunks(self.folder))

    @property
    def num_done(self) -> int:
        """How many records the folder holds (its gaps not counted)."""
        return sum(stop - start for start, stop in self._saved)

    @property
    def num_chunks(self) -> int:
        return len(self._saved)

    @property
    def num_unverified(self) -> int:
        """How many of the chunks held are of an older version (no checksum, no settings digest), taken as they are
        (``accept_unverified``)."""
        return len(self._unstamped & self._saved.keys())

    @functools.cached_property
    def settings_digest(self) -> str:
        """The digest of the settings ([`digest`][hf_ralm.digest]), which every chunk saved under them carries (and
        ``eval.json``)."""
        return digest(self.settings)

    @classmethod
    def own_entries(cls) -> tuple[str, ...]:
        """What the store puts in its folder (glob patterns): a folder holding anything else is refused."""
        return (cls.settings_file, CHUNK_PREFIX + "*", LOCK_FILE, WORKER_PREFIX + "*", DAMAGED_DIR)

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
        """``rows`` as [`write_chunk`][hf_ralm.RecordStore.write_chunk] saves them (by default each row's
        [`prepare_row`][hf_ralm.RecordStore.prepare_row])."""
        return [self.prepare_row(row) for row in rows]

    def write_chunk(self, path: Path, rows: Sequence[Any], info: Mapping[str, Any]) -> None:
        """Writes a chunk file: gzip'd JSON ``{"rows": rows, **counts, "checksum": ..., **info}`` (a subclass may
        store its rows another way, with its own ``chunk_suffix``).

        Args:
            path: the file to write.
            rows: the chunk's rows, as [`prepare_rows`][hf_ralm.RecordStore.prepare_rows] made them.
            info: what else the chunk file holds (``seconds``, ``git_commit``, ``settings_digest``, ...).
        """
        content = {"rows": rows, **self.chunk_counts(rows), "checksum": digest(rows), **info}
        data = json.dumps(content, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as f:
            f.write(data)

    def read_chunk(self, path: Path) -> Sequence[Any]:
        """The records of a chunk file, checked ([`checked_rows`][hf_ralm.RecordStore.checked_rows]; a ``ValueError``
        says what is wrong), as the store holds them (typed); a chunk of an older version
        (``hf_ralm.runs.chunks.is_unstamped``) is noted, for the store's opening to refuse or accept."""
        content = self.read_chunk_file(path)
        rows = self.checked_rows(content, self.settings_digest)
        if is_unstamped(content):
            self._unstamped.add(range_of(path))
        return [self._typed(row) for row in rows]

    def held_rows(self, rows: Sequence[Any], path: Path) -> Sequence[Any]:
        """What the store holds of rows it just saved to ``path`` (typed, without reading the file back)."""
        return [self._typed(row) for row in rows]

    def check_chunk(self, span: tuple[int, int], records: Sequence[Any]) -> None:
        """Raise a ``ValueError`` when a chunk's records (as the store holds them) are not those of its range
        ``span``: by default, when there are not as many (a subclass checks more)."""
        check_chunk_length(span, records)

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
        """Saves the buffered records as a last (possibly shorter) chunk and releases the folder's lock; closing
        twice is harmless."""
        if not self._closed:
            try:
                self._flush()
            finally:
                self._closed = True
                self._release()

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
        temporary name, fsynced, renamed).

        Args:
            start: the position of the chunk's first record.
            rows: its records (none: nothing is saved).
            prepared: the rows are already as they are saved
                ([`prepare_rows`][hf_ralm.RecordStore.prepare_rows]).
            **info: what goes into the chunk file beside ``rows``, ``seconds`` (the time since the store's previous
                save, or its opening), ``git_commit`` and ``settings_digest``.

        Raises:
            OutputFolderError: the folder's settings are no longer the store's
                ([`check_unchanged`][hf_ralm.RecordStore.check_unchanged]).

        Examples:
            ```python
            store.save(256, records_of_windows_256_to_511, batch_size=8)   # a worker's chunk of a sharded run
            ```
        """
        rows = rows if prepared else self.prepare_rows(rows)
        if not len(rows):
            return
        self.check_unchanged()
        span = (start, start + len(rows))
        now = time.perf_counter()
        info = {"seconds": now - self._last_save, "git_commit": self._git_commit,
                "settings_digest": self.settings_digest, **info}
        final = self._write_chunk_file(span, rows, info)
        self._last_save = now
        self._unstamped.discard(span)
        self._saved[span] = self.held_rows(rows, final)

    def _write_chunk_file(self, span: tuple[int, int], rows: Sequence[Any], info: Mapping[str, Any]) -> Path:
        """Writes the chunk of records ``span`` (``write_chunk``) under this writer's own temporary name, fsynced and
        renamed (replacing a chunk file there); its path."""
        final = self._chunk_path(span)
        write_durably(final, lambda path: self.write_chunk(path, rows, info),
                      self.folder / f"{TMP_PREFIX}{final.name[len(CHUNK_PREFIX):]}.{WORKER}")
        return final

    def _chunk_path(self, span: tuple[int, int]) -> Path:
        """The path of the complete chunk of records ``span``."""
        return self.folder / f"{CHUNK_PREFIX}{span[0]:08d}-{span[1]:08d}{self.chunk_suffix}"

    @classmethod
    def stamp_older_chunks(cls, folder: str | os.PathLike, **options: Any) -> list[Path]:
        """Verify the chunks of an older version in ``folder`` (without checksum and settings digest) against its
        settings, with every check a store of this class makes when it opens the folder (each row's schema, the
        counts, [`check_chunk`][hf_ralm.RecordStore.check_chunk]: the records of the chunk's range), then stamp them:
        each is written again (durably, as [`save`][hf_ralm.RecordStore.save] writes) with the same rows, ``seconds``
        and ``git_commit``, plus its counts, checksum and the folder's settings digest.

        Args:
            folder: the store's folder.
            **options: for the store, e.g. a window store's ``windows=``.

        Returns:
            The stamped chunks' paths.

        Raises:
            OutputFolderError: a chunk fails (it is named); nothing is stamped then.

        Examples:
            ```python
            CandidateRecordWriter.stamp_older_chunks("results/scale/wikitext-103-test/candidates-k1")
            ```
        """
        settings, _ = cls.read_settings(folder)
        with cls(folder, settings, accept_unverified=True, **options) as store:
            stamped = []
            for span in sorted(store._unstamped & store._saved.keys()):
                content = cls.read_chunk_file(store._chunk_path(span))
                rows = content.pop("rows")
                stamped.append(store._write_chunk_file(span, rows, {**content,
                                                                    "settings_digest": store.settings_digest}))
                store._unstamped.discard(span)
        return stamped

    def check_unchanged(self) -> None:
        """Check that the folder's settings file is still the store's. [`save`][hf_ralm.RecordStore.save] checks
        before every chunk; a caller checks before writing what it derives from the records (``eval.json``).

        Raises:
            OutputFolderError: another run replaced the folder, or it was deleted, while this one computed; the store
                then saves nothing more.
        """
        path = self.folder / self.settings_file
        try:
            stored = self.read_settings(self.folder)[0]
        except FileNotFoundError:
            stored = None
        if stored is not None and digest(stored) == self.settings_digest:
            return
        self._buffer, self._closed = [], True
        self._release()
        raise OutputFolderError(
            f"{path} {'vanished' if stored is None else 'changed'} while this run computed (another run replaced the "
            f"folder): it stops here and saves nothing more, so that its {self.what} never mix with the other run's. "
            "Rerun it in another folder.")

    @functools.cached_property
    def _git_commit(self) -> str | None:
        from ..utils.reproduction import provenance

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
        self._saved.update(self._read_saved([path for path in self.complete_chunks(self.folder)
                                             if range_of(path) not in self._saved]))

    def _read_saved(self, paths: Sequence[Path]) -> dict[tuple[int, int], Sequence[Any]]:
        """The records of the chunks ``paths``, checked; the damaged ones refused, naming them, or with ``repair``
        moved aside (``_set_aside``); so are those of an older version that pass the checks, unless
        ``accept_unverified`` (refused in a line of their own when there are no others: ``unverified_error``)."""
        saved, damaged, unverified = {}, {}, []
        for path in paths:
            span = range_of(path)
            try:
                records = self.read_chunk(path)
                self.check_chunk(span, records)
            except UNREADABLE as error:
                damaged[path] = damage_reason(error)
            else:
                if span in self._unstamped and not self.accept_unverified:
                    unverified.append(path)
                else:
                    saved[span] = records
        if unverified and not damaged and not self.repair:
            raise unverified_error(self.folder, unverified)
        damaged.update((path, UNSTAMPED_REASON) for path in unverified)
        if damaged:
            self._set_aside(damaged)
        return saved

    def _set_aside(self, damaged: Mapping[Path, str]) -> None:
        """Refuse the ``damaged`` chunks (their names and what is wrong with each), or with ``repair`` move them to
        ``damaged/`` (timestamped, never deleted), saying so: their records are then computed again."""
        listed = "; ".join(f"{path.name}: {reason}" for path, reason in list(damaged.items())[:3])
        listed += f"; and {len(damaged) - 3} more" if len(damaged) > 3 else ""
        aside = self.folder / DAMAGED_DIR
        if not self.repair:
            raise OutputFolderError(
                f"{self.folder} holds {len(damaged)} damaged chunk(s) ({listed}): rerun with --repair (repair=True) "
                f"to move them to {aside} and compute their {self.what} again.")
        aside.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S")
        for path in damaged:
            with contextlib.suppress(FileNotFoundError):  # another worker of the run moved it first
                os.rename(path, aside / f"{stamp}-{path.name}")
        warnings.warn(RalmWarning(f"moved {len(damaged)} damaged chunk(s) of {self.folder} to {aside} ({listed}): "
                                  f"their {self.what} are computed again."), stacklevel=4)

    def _typed(self, row: dict[str, Any]) -> Any:
        if self.record_type is None:
            return row
        from_row = getattr(self.record_type, "from_row", None)
        return from_row(row) if from_row is not None else self.record_type(**row)

    @classmethod
    def remove(cls, folder: str | os.PathLike) -> None:
        """Deletes what a store put in ``folder`` (its chunks, temporary files and settings; not ``damaged/``), under
        the folder's exclusive lock.

        Args:
            folder: the store's folder (nothing happens when it is not there).

        Raises:
            OutputFolderError: a worker computes there (it is named), or the folder holds files that are not the
                store's, its settings file included; nothing is deleted then.
        """
        folder = Path(folder)
        if not folder.is_dir():
            return
        check_output_folder(folder, cls.own_entries(), cls.what)
        check_replaceable(folder / cls.settings_file, json_object_with(), f"settings file of {cls.what}",
                          "move it away, or write to another folder")
        lock = WorkerLock(folder).acquire(exclusive=True)
        try:
            busy = live_writers(folder)  # writers without the lock: older versions
            if busy:
                raise OutputFolderError(
                    f"{folder} is being written by another worker ({', '.join(busy)} is writing a chunk there): "
                    "overwriting now would delete its work under it. Stop that worker first, or, to force it, delete "
                    f"the folder by hand (rm -r {folder}).")
            for path in cls.complete_chunks(folder) + list(folder.glob(TMP_PREFIX + "*")):
                _remove_path(path)
            (folder / cls.settings_file).unlink(missing_ok=True)
        finally:
            lock.release()

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


def _create_exclusively(path: Path, content: Mapping[str, Any]) -> bool:
    """Writes ``content`` as the JSON file ``path`` (durably) unless it exists; whether it did."""
    tmp = path.with_name(f".tmp-{path.name}.{WORKER}")
    write_json_atomic(str(tmp), content)
    try:
        os.link(tmp, path)  # atomic, and fails when another worker created it first
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)


def _remove_path(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink()
