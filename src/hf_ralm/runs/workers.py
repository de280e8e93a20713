"""The workers that compute one run in one folder: the folder's lock (shared by the workers, exclusive to an
overwrite, which is refused rather than kept waiting), the cards that name its holders, whether a process still
runs, and the files a worker's process names (its temporary chunks, its card): those a crashed one left
(``dead_leftovers``) and those being written now
(``live_writers``). The record store (``hf_ralm.runs.store``)
holds this lock from its opening to its closing.

Examples:
    >>> import tempfile
    >>> from pathlib import Path
    >>> folder = Path(tempfile.mkdtemp())
    >>> lock = WorkerLock(folder).acquire(exclusive=False)
    >>> [worker.split(" (since")[0] for worker in workers(folder)] == [f"{socket.gethostname()}:{os.getpid()}"]
    True
    >>> lock.release()
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import socket
import time
from pathlib import Path

from ..errors import OutputFolderError
from ..utils.atomic import file_mode
from .chunks import SUFFIX_PATTERN, TMP_PREFIX

try:
    import fcntl
except ImportError:  # Windows: no flock; an overwrite there sees only the workers writing a chunk
    fcntl = None

LOCK_FILE = ".workers.lock"
WORKER_PREFIX = ".worker-"
_OWNED_NAME = re.compile(
    rf"^(?:{re.escape(TMP_PREFIX)}\d{{8}}-\d{{8}}(?:{SUFFIX_PATTERN})|{WORKER_PREFIX}\d+)\.(.+)-(\d+)$")
"""A temporary chunk file or a worker's card: the name ends with its process's ``.<host>-<pid>``."""

WORKER = f"{socket.gethostname()}-{os.getpid()}"
"""This process, as its temporary chunk files and worker cards name it."""


class WorkerLock:
    """A folder's lock (``flock`` on its ``.workers.lock``): shared by the stores computing there, exclusive to an
    overwrite, which is refused rather than kept waiting. A shared holder leaves a card (``.worker-<n>.<host>-<pid>``,
    one per store: a process may open several) that names it to a refused overwrite. The last holder removes the
    lock file as it lets go; one who locked a file removed meanwhile locks the new one (the inode is compared), so
    two holders never lock two different files. Without ``fcntl`` (Windows) nothing is locked."""

    _numbers = itertools.count()

    def __init__(self, folder: Path):
        self.folder, self.path = folder, folder / LOCK_FILE
        self.card = folder / f"{WORKER_PREFIX}{next(self._numbers)}.{WORKER}"
        self.descriptor: int | None = None

    def acquire(self, exclusive: bool) -> WorkerLock:
        """Take the lock (shared: waiting for an overwrite in progress; exclusive: an
        [`OutputFolderError`][hf_ralm.errors.OutputFolderError] naming the workers when one holds it)."""
        if fcntl is None:
            return self
        while self.descriptor is None:
            descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB if exclusive else fcntl.LOCK_SH)
            except BlockingIOError:
                os.close(descriptor)
                raise OutputFolderError(
                    f"{self.folder} is being computed by {', '.join(workers(self.folder)) or 'another process'}: "
                    "overwriting it now would delete records under a live run. Stop that run (or let it finish) "
                    "first, then overwrite.") from None
            if same_file(descriptor, self.path):
                self.descriptor = descriptor
            else:  # the last holder removed the file as this process locked it: lock the one there now
                os.close(descriptor)
        if not exclusive:
            self.card.touch()
        return self

    def release(self) -> None:
        """Let go of the lock, removing the card, and the lock file when no one else holds it."""
        if self.descriptor is None:
            return
        self.card.unlink(missing_ok=True)
        try:
            fcntl.flock(self.descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.path.unlink(missing_ok=True)
        except BlockingIOError:  # other workers hold it still
            pass
        os.close(self.descriptor)
        self.descriptor = None


def same_file(descriptor: int, path: Path) -> bool:
    try:
        return os.path.samestat(os.fstat(descriptor), os.stat(path))
    except FileNotFoundError:
        return False


def workers(folder: Path) -> list[str]:
    """The workers holding a folder's lock, from their cards (``host:pid since ...``; those of this machine that no
    longer run left theirs when killed, and are not named)."""
    host, named = socket.gethostname(), []
    for path in sorted(folder.glob(WORKER_PREFIX + "*")):
        owner = owner_of(path)
        with contextlib.suppress(FileNotFoundError):  # it let go meanwhile
            since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))
            if owner is not None and (owner[0] != host or alive(owner[1])):
                named.append(f"{owner[0]}:{owner[1]} (since {since})")
    return list(dict.fromkeys(named))


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def owner_of(path: Path) -> tuple[str, int] | None:
    """``(host, pid)`` of the process a temporary chunk file or a worker card belongs to (``None`` for one without
    its writer's name)."""
    match = _OWNED_NAME.match(path.name)
    return (match.group(1), int(match.group(2))) if match else None


def dead_leftovers(folder: Path) -> list[Path]:
    """The temporary chunk files and worker cards of processes of this machine that are no longer running (a
    crash's leftovers)."""
    host = socket.gethostname()
    leftovers = []
    for path in [*folder.glob(TMP_PREFIX + "*"), *folder.glob(WORKER_PREFIX + "*")]:
        owner = owner_of(path)
        if owner is not None and owner[0] == host and not alive(owner[1]):
            leftovers.append(path)
    return leftovers


def live_writers(folder: Path) -> list[str]:
    """The workers other than this process writing a chunk in ``folder`` now: of this machine, running; of another,
    whose temporary file changed in the last ten minutes."""
    host, busy = socket.gethostname(), []
    for path in folder.glob(TMP_PREFIX + "*"):
        writer = owner_of(path)
        if writer is None or (writer[0] == host and writer[1] == os.getpid()):
            continue
        live = alive(writer[1]) if writer[0] == host else time.time() - path.stat().st_mtime < 600
        if live:
            busy.append(f"{writer[0]}:{writer[1]}")
    return busy
