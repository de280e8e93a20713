"""An exclusive lock on a file, held by one process at a time: what makes concurrent builds of one index folder safe
(the first builds, the others wait and then use its index).

The lock is the operating system's (``flock``): it is released when its holder exits, crashed or not, so a killed
build never leaves a stale lock behind. The lock file itself stays (an empty file beside the folder it guards):
deleting it while another process waits on it would let a third take a second, unrelated lock. On a system without
``fcntl`` (Windows), or where the lock file cannot be made (a read-only folder), the lock is not taken.

Example:
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "index.lock")
    >>> with file_lock(path, "the index build"):
    ...     print("building")
    building
"""

from __future__ import annotations

import logging
import os
from contextlib import contextmanager
from typing import Iterator

logger = logging.getLogger(__name__)


@contextmanager
def file_lock(path: str | os.PathLike, what: str) -> Iterator[None]:
    """Hold the exclusive lock of ``path`` (created when missing, with its folder) for the ``with`` block; when
    another process holds it, wait, saying once that ``what`` is going on elsewhere."""
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
            logger.warning("Waiting for %s in another process to finish (it holds %s).", what, path)
            fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock
