"""An exclusive lock on a file, held by one process at a time: what makes concurrent builds of one index folder safe
(the first builds, the others wait and then use its index).

The lock is the operating system's (``flock``): it is released when its holder exits, crashed or not, so a killed build
never leaves a stale lock behind. The holder writes who it is into the lock file (process id, host, since when) and
empties it when done; a waiter says every ``REPORT_SECONDS`` who holds the lock, and
gives up after ``LOCK_TIMEOUT_SECONDS`` (environment variable
``HF_RALM_LOCK_TIMEOUT``, in seconds) with one line that names the holder: a holder that was stopped (``kill -STOP``,
Ctrl-Z) or hangs blocks no one forever. The lock file itself stays: deleting it while another process waits on it would
let a third take a second, unrelated lock. On a system without ``fcntl`` (Windows), or where the lock file cannot be
made (a read-only folder), the lock is not taken.

Examples:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "index.lock")
    >>> with file_lock(path, "the index build"):
    ...     print("building")
    building
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from contextlib import contextmanager
from datetime import datetime
from typing import Iterator

# the logger transformers' logging.get_logger(__name__) gives, taken from the standard library: this module imports
# nothing else, so that a process holding a lock starts at once (tests/test_locks.py loads it from its file)
logger = logging.getLogger(__name__)

LOCK_TIMEOUT_SECONDS = 6 * 3600.0
"""How long a waiter waits for a lock before it gives up, unless ``HF_RALM_LOCK_TIMEOUT`` says otherwise: longer
than the index builds hf-ralm times (BM25 of the paper's 21M-passage corpus: under an hour on 2 CPU cores); a
longer build (a large dense index in one process) needs ``HF_RALM_LOCK_TIMEOUT`` raised for its waiters."""
TIMEOUT_VARIABLE = "HF_RALM_LOCK_TIMEOUT"
REPORT_SECONDS = 30.0  # how often a waiter says who holds the lock
POLL_SECONDS = 0.2  # how often a waiter tries to take the lock


class LockTimeoutError(TimeoutError):
    """A lock still held by another process after the waiter's timeout
    (``lock_timeout``); the message names the holder and how to go on."""


def lock_timeout() -> float:
    """The seconds a waiter waits for a lock: ``$HF_RALM_LOCK_TIMEOUT`` when set, else
    ``LOCK_TIMEOUT_SECONDS``.

    Examples:
        >>> lock_timeout() == float(os.environ.get("HF_RALM_LOCK_TIMEOUT", LOCK_TIMEOUT_SECONDS))
        True
    """
    value = os.environ.get(TIMEOUT_VARIABLE, "").strip()
    if not value:
        return LOCK_TIMEOUT_SECONDS
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also NaN
        raise ValueError(f"{TIMEOUT_VARIABLE} must be a number of seconds (how long to wait for a lock another "
                         f"process holds), got {value!r}.")
    return seconds


def _write_identity(descriptor: int) -> None:
    """Write who holds the lock (this process) into the lock file, for the waiters' messages."""
    identity = {"pid": os.getpid(), "host": socket.gethostname(), "since": datetime.now().astimezone().isoformat(
        timespec="seconds")}
    os.ftruncate(descriptor, 0)
    os.pwrite(descriptor, json.dumps(identity).encode(), 0)


def _is_stopped(pid: int) -> bool:
    """Whether process ``pid`` of this machine is stopped (``kill -STOP``, Ctrl-Z): the state in ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            return f.read().rpartition(")")[2].split()[0] in ("T", "t")
    except (OSError, IndexError):  # no /proc (macOS), or the process has just ended
        return False


def lock_holder(path: str | os.PathLike) -> tuple[str, int | None]:
    """Who holds a lock, as its lock file says.

    Args:
        path: the lock file.

    Returns:
        The holder in words (``"pid 123 on node7 since 2025-01-01T10:00:00 +01:00"``, with ``(stopped)`` for a stopped
            process of this machine; ``"another process"`` when the file does not say), and its process id when it runs
            here.
    """
    try:
        with open(path, encoding="utf-8") as f:
            identity = json.load(f)
        pid, host, since = int(identity["pid"]), str(identity["host"]), str(identity["since"])
    except (OSError, ValueError, KeyError, TypeError):  # being written, or an older hf-ralm's empty lock file
        return "another process", None
    here = host == socket.gethostname()
    stopped = " (stopped)" if here and _is_stopped(pid) else ""
    return f"pid {pid} on {host} since {since}{stopped}", pid if here else None


def _how_to_go_on(pid: int | None, words: str) -> str:
    """What the message of a waiter that gave up suggests: resume or end the holder, or wait longer."""
    if pid is None:
        ending = "End that process if it is stuck"
    elif words.endswith("(stopped)"):
        ending = f"Resume it (kill -CONT {pid}) or end it (kill {pid})"
    else:
        ending = f"End it if it is stuck (kill {pid})"
    return f"{ending} and run again, or set {TIMEOUT_VARIABLE}=SECONDS to wait longer"


def _wait(descriptor: int, path: str | os.PathLike, what: str, timeout: float) -> None:
    """Take the lock of ``descriptor`` once the other process lets go of it, saying every
    ``REPORT_SECONDS`` who holds it; raise
    ``LockTimeoutError`` after ``timeout`` seconds."""
    import fcntl

    start = time.monotonic()
    next_report = start
    while True:
        now = time.monotonic()
        if now >= next_report:
            logger.warning("Waiting for %s in another process to finish: %s holds %s (giving up after %g s; %s "
                           "changes that).", what, lock_holder(path)[0], path, timeout, TIMEOUT_VARIABLE)
            next_report = now + REPORT_SECONDS
        if now - start >= timeout:
            words, pid = lock_holder(path)
            raise LockTimeoutError(f"Gave up waiting for {what} after {timeout:g} s: {words} holds {path}. "
                                   f"{_how_to_go_on(pid, words)}.")
        time.sleep(min(POLL_SECONDS, max(0.0, start + timeout - now)))
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            continue


@contextmanager
def file_lock(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold the exclusive lock of a file for the ``with`` block, its holder's identity written in it.

    When another process holds it, wait for at most ``lock_timeout`` seconds,
    saying who holds it every ``REPORT_SECONDS``.

    Args:
        path: the lock file (created when missing, with its folder).
        what: what is going on under the lock, as the waiting message says.

    Yields:
        Nothing; the lock is held until the block ends.

    Raises:
        LockTimeoutError: the lock was not had in time (the message names its holder).
    """
    timeout = lock_timeout()
    try:
        import fcntl
    except ImportError:  # Windows: no flock; builds there are one process at a time
        yield
        return
    try:
        os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as error:  # e.g. a read-only folder of shared indexes: nothing can be built there anyway
        logger.warning("Not locking %s (%s): concurrent builds there are not kept apart.", path, error)
        yield
        return
    try:
        try:
            fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            _wait(descriptor, path, what, timeout)
        _write_identity(descriptor)
        try:
            yield
        finally:
            os.ftruncate(descriptor, 0)  # no holder any more: a later waiter reads none
    finally:
        os.close(descriptor)  # releases the lock
