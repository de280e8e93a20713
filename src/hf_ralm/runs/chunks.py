"""The chunk files of a record store's folder: their names (``chunk-<start>-<stop><suffix>``, a writer's temporary
``.tmp-chunk-...``), their contents and the checks every chunk passes when it is read (it decompresses and parses,
holds as many records as its name says, matches its checksum and counts, carries the digest of the folder's
settings, and holds rows of the store's schema), and a folder's records read without opening it for writing
(``ChunkFolder``, the base of [`RecordStore`][hf_ralm.RecordStore], whose hooks ``check_row`` and ``chunk_counts``
a store overrides).

Examples:
    >>> import tempfile
    >>> from hf_ralm.runs.store import RecordStore
    >>> folder = tempfile.mkdtemp()
    >>> with RecordStore(folder, {"k": 16}, chunk_size=2) as store:
    ...     store.add([{"window": 1}, {"window": 2}, {"window": 3}])
    >>> [path.name for path in ChunkFolder.complete_chunks(folder)]
    ['chunk-00000000-00000002.json.gz', 'chunk-00000002-00000003.json.gz']
    >>> ChunkFolder.num_saved(folder), ChunkFolder.read_rows(folder)[-1]
    (3, {'window': 3})
"""

from __future__ import annotations

import gzip
import json
import os
import re
import zlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar, Sequence

from ..errors import OutputFolderError
from ..utils.atomic import TMP_PREFIX as ATOMIC_TMP_PREFIX
from .fingerprints import digest
from .schema import fields_problem

CHUNK_PREFIX = "chunk-"
TMP_PREFIX = ATOMIC_TMP_PREFIX + CHUNK_PREFIX
CHUNK_SUFFIX = ".json.gz"
CHUNK_SUFFIXES = (CHUNK_SUFFIX, ".npy")
"""The chunk files' suffixes: the JSON records of the stores, and arrays (a store of embeddings)."""
REPRODUCE_KEY = "reproduce"
"""The settings file's key for how the run was started (never compared)."""
SUFFIX_PATTERN = "|".join(map(re.escape, CHUNK_SUFFIXES))
"""The chunk suffixes as a regular expression's alternatives (in the names of chunks and of temporary chunks)."""
_CHUNK_NAME = re.compile(rf"^{CHUNK_PREFIX}(\d{{8}})-(\d{{8}})({SUFFIX_PATTERN})$")
UNREADABLE = (EOFError, OSError, zlib.error, ValueError)
"""What reading a damaged chunk raises: a truncated gzip (``EOFError``), bad deflate data (``zlib.error``), bytes that
are no gzip (``OSError``), no JSON (``ValueError``), and the checks' own ``ValueError``."""
UNSTAMPED_REASON = "it carries no checksum and no settings digest (an older hf-ralm wrote it)"
"""What a repair says of a chunk of an older version it moves aside."""


class ChunkFolder:
    """The chunk files of a folder of records, read and checked without opening the folder for writing (no lock, no
    settings written): what [`RecordStore`][hf_ralm.RecordStore] builds on. A subclass sets ``record_type`` (a
    dataclass whose fields each row must hold, of their types), ``settings_file``, ``what`` (what the records are, in
    messages) and ``chunk_suffix``, and may check more of each row (``check_row``) and count more of a chunk
    (``chunk_counts``).

    Examples:
        >>> ChunkFolder.complete_chunks("no/such/folder"), ChunkFolder.chunk_counts([{"a": 1}])
        ([], {'num_records': 1})
    """

    settings_file: ClassVar[str] = "settings.json"
    what: ClassVar[str] = "records"
    record_type: ClassVar[type | None] = None
    chunk_suffix: ClassVar[str] = CHUNK_SUFFIX

    @classmethod
    def chunk_counts(cls, rows: Sequence[dict[str, Any]]) -> dict[str, int]:
        """What a chunk's header counts of its saved ``rows``, compared when it is read.

        Args:
            rows: the chunk's rows, as saved.

        Returns:
            The counts by name: the records (a subclass adds, e.g., the tokens they score).
        """
        return {"num_records": len(rows)}

    @classmethod
    def check_row(cls, row: Any, verified: bool) -> None:
        """Check a row read from a chunk.

        Args:
            row: the row, as saved.
            verified: whether the chunk is verified by its checksum (a number not finite was then saved so).

        Raises:
            ValueError: what is wrong with the row: by default, that it is not a saved ``record_type`` (a field
                missing or unknown, a value of another type, a number not finite unless ``verified``).
        """
        if cls.record_type is not None:
            problem = fields_problem(cls.record_type, row, "", finite=not verified)
            if problem:
                raise ValueError(problem)

    @classmethod
    def checked_rows(cls, content: Any, settings_digest: str | None) -> list[Any]:
        """The rows of a chunk file's content, checked: its checksum and settings digest (both, or neither: a chunk of
        an older version, which its reader refuses unless told to accept it), its counts and each row
        ([`check_row`][hf_ralm.RecordStore.check_row]).

        Args:
            content: the chunk file's content ([`read_chunk_file`][hf_ralm.RecordStore.read_chunk_file]).
            settings_digest: the digest of the settings it must have been computed under (``None``: not checked).

        Returns:
            The rows.

        Raises:
            ValueError: what is wrong.
        """
        if not isinstance(content, dict) or not isinstance(content.get("rows"), list):
            raise ValueError("it holds no list of rows")
        rows, verified = content["rows"], "checksum" in content
        if verified != ("settings_digest" in content):
            held, lacking = ("a checksum", "settings digest") if verified else ("a settings digest", "checksum")
            raise ValueError(f"it carries {held} but no {lacking}, as no hf-ralm writes them: it was altered after "
                             "it was written")
        if verified and content["checksum"] != digest(rows):
            raise ValueError("its rows do not match its checksum: they changed after it was written")
        made_under = content.get("settings_digest", settings_digest)
        if settings_digest is not None and made_under != settings_digest:
            raise ValueError(f"it was computed under other settings (digest {made_under}, the folder's "
                             f"{settings_digest}), and two configurations' records never mix")
        for number, row in enumerate(rows):
            try:
                cls.check_row(row, verified)
            except (TypeError, ValueError) as error:
                raise ValueError(f"its record {number}: {error}") from None
        for key, count in cls.chunk_counts(rows).items():
            if content.get(key, count) != count:
                raise ValueError(f"its header says {key} {content[key]}, its rows hold {count}")
        return rows

    @staticmethod
    def read_chunk_file(path: str | os.PathLike) -> dict[str, Any]:
        """A chunk file's contents, unchecked: ``rows``, ``seconds``, ``git_commit``, its counts, checksum and
        settings digest (the last three since this version) and what its writer added."""
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return json.load(f)

    @classmethod
    def _checked_file(cls, path: Path, settings_digest: str | None) -> dict[str, Any]:
        """A chunk file's contents, its rows checked (``checked_rows``); an ``OutputFolderError`` naming the file when
        it is damaged."""
        try:
            content = cls.read_chunk_file(path)
            check_chunk_length(range_of(path), cls.checked_rows(content, settings_digest))
        except UNREADABLE as error:
            raise OutputFolderError(f"{path} is a damaged chunk ({damage_reason(error)}): run the command that wrote "
                                    "it again with --repair (repair=True) to compute it again.") from None
        return content

    @classmethod
    def _checked_files(cls, folder: str | os.PathLike, accept_unverified: bool = False) -> list[dict[str, Any]]:
        """The contents of a folder's complete chunks, in order, each checked (``_checked_file``) against the
        folder's settings; those of an older version refused (``unverified_error``) unless ``accept_unverified``."""
        settings = Path(folder) / cls.settings_file
        settings_digest = digest(cls.read_settings(folder)[0]) if settings.is_file() else None
        paths = cls.complete_chunks(folder)
        contents = [cls._checked_file(path, settings_digest) for path in paths]
        unverified = [path for path, content in zip(paths, contents) if is_unstamped(content)]
        if unverified and not accept_unverified:
            raise unverified_error(Path(folder), unverified)
        return contents

    @classmethod
    def complete_chunks(cls, folder: str | os.PathLike) -> list[Path]:
        """The complete chunks of ``folder``, in order of position (temporary leftovers are not among them)."""
        folder = Path(folder)
        if not folder.is_dir():
            return []
        return sorted((path for path in folder.iterdir() if suffix_of(path) == cls.chunk_suffix),
                      key=range_of)

    @classmethod
    def prefix_length(cls, folder: str | os.PathLike) -> int:
        """How many records from position 0 on the folder's complete chunks hold without a gap: the records that stay
        the first ones whatever the workers of a sharded run, which save later chunks before earlier ones, add."""
        length = 0
        for start, stop in map(range_of, cls.complete_chunks(folder)):
            if start != length:
                break
            length = stop
        return length

    @classmethod
    def num_saved(cls, folder: str | os.PathLike) -> int:
        """How many records a folder's complete chunks hold (by their names: nothing is read)."""
        return sum(stop - start for start, stop in map(range_of, cls.complete_chunks(folder)))

    @classmethod
    def read_rows(cls, folder: str | os.PathLike, *, accept_unverified: bool = False) -> list[dict[str, Any]]:
        """The records of a folder's complete chunks, in order, as saved and checked (without opening the folder for
        writing).

        Args:
            folder: the records' folder.
            accept_unverified: take the chunks of an older version (without checksum and settings digest) as they are.

        Returns:
            The rows, as saved.

        Raises:
            OutputFolderError: a damaged chunk (named), or chunks of an older version (counted) unless
                ``accept_unverified``.
        """
        return [row for content in cls._checked_files(folder, accept_unverified) for row in content["rows"]]

    @classmethod
    def chunk_seconds(cls, folder: str | os.PathLike, *, accept_unverified: bool = False) -> float:
        """The summed ``seconds`` of a folder's complete chunks: what its records took to compute, across resumes
        (checked as [`read_rows`][hf_ralm.RecordStore.read_rows] checks them)."""
        return sum(content["seconds"] for content in cls._checked_files(folder, accept_unverified))

    @classmethod
    def read_settings(cls, folder: str | os.PathLike) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """The settings of a folder's records and how its run was started (``None`` when not recorded)."""
        stored = json.loads((Path(folder) / cls.settings_file).read_text(encoding="utf-8"))
        reproduce = stored.pop(REPRODUCE_KEY, None)
        return stored, reproduce


def suffix_of(path: Path) -> str | None:
    """The suffix of a complete chunk file's name (``None``: not a chunk)."""
    match = _CHUNK_NAME.match(path.name)
    return match.group(3) if match else None


def range_of(path: Path) -> tuple[int, int]:
    match = _CHUNK_NAME.match(path.name)
    return int(match.group(1)), int(match.group(2))


def check_chunk_length(span: tuple[int, int], records: Sequence[Any]) -> None:
    """Raise a ``ValueError`` unless a chunk holds as many records as its name (``span``) says."""
    if len(records) != span[1] - span[0]:
        raise ValueError(f"it holds {len(records)} records, where its name says {span[1] - span[0]}")


def damage_reason(error: BaseException) -> str:
    """What was wrong with a chunk, from the error reading it raised."""
    return str(error) or type(error).__name__


def is_unstamped(content: Mapping[str, Any]) -> bool:
    """Whether a chunk file's ``content`` (checked: ``RecordStore.checked_rows``) is of an older version,
    without checksum and settings digest: nothing shows it was computed under its folder's settings."""
    return "checksum" not in content and "settings_digest" not in content


def unverified_error(folder: Path, paths: Sequence[Path]) -> OutputFolderError:
    """The one line that refuses the chunks ``paths`` of an older version in ``folder``, and says both ways out."""
    shown = ", ".join(path.name for path in paths[:2]) + (f" and {len(paths) - 2} more" if len(paths) > 2 else "")
    return OutputFolderError(
        f"{folder} holds {len(paths)} chunk(s) without checksum and settings digest, written by an older hf-ralm "
        f"({shown}): nothing shows they were computed under its settings; rerun with --repair to compute them again, "
        "or with --accept-unverified-chunks to use them as they are (recorded in eval.json; in the library: "
        "repair=True, accept_unverified=True).")
