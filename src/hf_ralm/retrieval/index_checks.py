"""Content checksums of an index folder's files: recorded when an index is built, verified before it is used.

A build records the SHA-256 digest of every file it wrote in ``hf_ralm_index.json`` (under ``DIGEST_KEY``, beside their
sizes). Before an index is used, each file is checked against its digest, unless it is provably the file that was last
verified: its stamp (size, modification and change times in nanoseconds, inode and device, which any write to the file
changes) equals the stamp recorded when it was last verified. Stamps are kept in hf-ralm's cache, in one file per index
folder named by the caller (the index folder may be read-only: a Hub download, a saved RALM), written atomically; a
build stamps the files it has just hashed, so the first load after a build reads none of them again. A file whose stamp
did not change is trusted: damage that changes no stamp (a failing disk) is what a full check,
``hf-ralm index --verify DIR`` (``verify_files`` with ``trust_stamps=False``), finds.

SHA-256 because it is the fastest of the standard library's digests on CPUs with SHA instructions (1.1 GB/s against
BLAKE2b's 0.9 GB/s, measured on the 2-core machine of docs/files.md); files are hashed in ``CHUNK_BYTES`` reads, never
whole in memory.

Examples:
    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with open(os.path.join(folder, "a.bin"), "wb") as f:
    ...     _ = f.write(b"passages")
    >>> digests = {"a.bin": file_digest(os.path.join(folder, "a.bin"))}
    >>> stamps = os.path.join(tempfile.mkdtemp(), "stamps.json")
    >>> verify_files(folder, digests, stamps)           # hashed, then stamped
    []
    >>> with open(os.path.join(folder, "a.bin"), "r+b") as f:
    ...     _ = f.write(b"P")                            # same size, other content
    >>> [damage.name for damage in verify_files(folder, digests, stamps)]
    ['a.bin']
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
from typing import Mapping, NamedTuple, Sequence

from transformers.utils import logging

from ..utils.atomic import write_json_atomic

logger = logging.get_logger(__name__)

DIGEST_KEY = "sha256"
"""The key of ``hf_ralm_index.json`` that holds ``{file: SHA-256 hex digest}`` for the files it lists."""
CHUNK_BYTES = 8 << 20
"""How much of a file is read at a time while it is hashed."""


def file_digest(path: str) -> str:
    """The SHA-256 hex digest of the file ``path``, read ``CHUNK_BYTES`` at a time."""
    digest = hashlib.sha256()
    buffer = memoryview(bytearray(CHUNK_BYTES))
    with open(path, "rb", buffering=0) as f:
        while True:
            read = f.readinto(buffer)
            if not read:
                return digest.hexdigest()
            digest.update(buffer[:read])


def file_stamp(path: str) -> list[int]:
    """What any change to the file ``path`` changes: size, modification and change times (ns), inode, device."""
    info = os.stat(path)
    return [info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino, info.st_dev]


class Damage(NamedTuple):
    """A file whose content is not what its index recorded.

    Attributes:
        name: the file's name, relative to the index folder.
        path: its path.
        recorded: the digest its index recorded.
        actual: its digest now.
    """

    name: str
    path: str
    recorded: str
    actual: str


_UNWRITABLE_SAID: set[str] = set()
"""The stamps files that this process could not write and has said so: said once each."""


def _read_stamps(stamps_file: str) -> dict:
    """The stamps recorded in ``stamps_file``: ``{file name: [digest, *stamp]}``; none when it is missing or
    unreadable (then every file is hashed, which is only slower)."""
    try:
        with open(stamps_file, encoding="utf-8") as f:
            files = json.load(f).get("files")
    except (OSError, ValueError, AttributeError):
        return {}
    return files if isinstance(files, dict) else {}


def record_stamps(index_dir: str, stamps: Mapping[str, list], stamps_file: str) -> None:
    """Record ``stamps`` of the files of ``index_dir`` as verified, in ``stamps_file`` (atomically), and remove the
    stamp files beside it whose index folder no longer exists. A cache that cannot be written is said once per stamps
    file (logged: warning); the index is then hashed at every load.

    Args:
        index_dir: the index folder.
        stamps: ``{file name: [digest, *stamp]}``.
        stamps_file: the index folder's file of stamps, in hf-ralm's cache.
    """
    try:
        write_json_atomic(stamps_file, {"index_dir": os.path.realpath(index_dir), "files": dict(stamps)})
    except OSError as error:
        if stamps_file not in _UNWRITABLE_SAID:
            _UNWRITABLE_SAID.add(stamps_file)
            logger.warning("hf-ralm: could not record that the index in %s was verified (%s): its files are hashed "
                           "again at every load.", index_dir, error)
        return
    for other in glob.glob(os.path.join(os.path.dirname(stamps_file), "*.json")):
        try:
            with open(other, encoding="utf-8") as f:
                folder = json.load(f).get("index_dir")
            if isinstance(folder, str) and not os.path.isdir(folder):
                os.remove(other)
        except (OSError, ValueError, AttributeError):  # another process's, removed or being replaced meanwhile
            continue


def hash_files(folder: str, names: Sequence[str]) -> dict[str, list]:
    """``{name: [digest, *stamp]}`` of the files ``names`` of ``folder`` (a build's, before it is moved into place):
    what the build records (the digests) and stamps once moved (``stamp_moved``)."""
    return {name: [file_digest(os.path.join(folder, name)), *file_stamp(os.path.join(folder, name))]
            for name in names}


def stamp_moved(index_dir: str, hashed: Mapping[str, list], stamps_file: str) -> None:
    """Record the files a build has just hashed as verified in ``index_dir``, where they were moved: so the first load
    after a build hashes nothing. A move keeps a file's size, modification time, inode and device (it may change its
    change time); a file that differs in any of them is left to be hashed at its first use.

    Args:
        index_dir: the index folder.
        hashed: ``hash_files`` of its build folder.
        stamps_file: the index folder's file of stamps, in hf-ralm's cache.
    """
    stamps = {}
    for name, (digest, *then) in hashed.items():
        now = file_stamp(os.path.join(index_dir, name))
        if now[:2] == then[:2] and now[3:] == then[3:]:
            stamps[name] = [digest, *now]
    record_stamps(index_dir, stamps, stamps_file)


def verify_files(index_dir: str, digests: Mapping[str, str], stamps_file: str,
                 trust_stamps: bool = True) -> list[Damage]:
    """The files of ``index_dir`` whose content differs from their digest. A file whose stamp (``file_stamp``) equals
    the one recorded in ``stamps_file`` when it was last verified against the same digest is trusted when
    ``trust_stamps``; the others are hashed, and those that match are stamped.

    Args:
        index_dir: the index folder.
        digests: ``{name: SHA-256 hex digest}`` recorded at build (the names already checked to lie inside the folder).
        stamps_file: the index folder's file of stamps, in hf-ralm's cache.
        trust_stamps: trust a file whose stamp did not change.

    Returns:
        The damaged files, a ``Damage`` each.
    """
    stamps = _read_stamps(stamps_file)
    verified = {}
    damaged = []
    for name, recorded in digests.items():
        path = os.path.join(index_dir, name)
        before = file_stamp(path)
        if trust_stamps and stamps.get(name) == [recorded, *before]:
            verified[name] = stamps[name]
            continue
        actual = file_digest(path)
        if actual != recorded:
            damaged.append(Damage(name, path, recorded, actual))
        elif file_stamp(path) == before:  # not written to while it was read
            verified[name] = [recorded, *before]
    if verified != stamps:
        record_stamps(index_dir, verified, stamps_file)
    return damaged
