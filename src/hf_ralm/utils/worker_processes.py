"""Worker processes that start from hf-ralm's own entry point, never from the caller's script: a work of hf-ralm's
spread over fresh interpreters from any Python context (a script without ``if __name__ == "__main__":``, a script on
stdin, ``python -c``, a notebook, a worker of torchrun).

Each worker is ``sys.executable -c <bootstrap>``: it puts the folder that holds this hf_ralm first on its path,
ignores SIGINT (Ctrl-C stops the main process, which ends the workers), imports the work's module and answers items
over its stdin and stdout, as length-prefixed pickled frames. multiprocessing's spawn would import the caller's
``__main__`` in every worker (and fails for a script on stdin); its fork would inherit the locks that other threads
hold (pyarrow's allocator, a JVM's, PyTorch's), on which a worker can wait forever. A fresh interpreter has neither.

Examples:
    >>> with WorkerPool("operator:itemgetter", (0,), processes=2) as pool:
    ...     list(pool.imap([[1, 2], [3, 4], [5, 6]], ahead=1))
    [1, 3, 5]
"""

from __future__ import annotations

import importlib
import os
import pickle
import queue
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from typing import IO, Any, Iterable, Iterator

START_SECONDS = 60.0
"""How long the workers may take to start (interpreter, imports) before the pool is given up as unavailable."""
STOP_SECONDS = 10.0
"""How long a worker may take to end once its input is closed before it is killed."""
_HEADER = struct.Struct("<Q")  # a frame's length in bytes, before its pickle
_READY = "hf-ralm worker ready"
_STOP = object()  # tells a worker's writer thread to close the worker's input
# the folder that holds this hf_ralm package (src/, site-packages): a worker imports the same hf_ralm as its parent
_PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_BOOTSTRAP = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); import sys; sys.path.insert(0, {root!r}); "
              "from hf_ralm.utils.worker_processes import serve; serve()")


class WorkersUnavailable(RuntimeError):
    """The worker processes could not start (the message says why): the caller does the work itself."""


class WorkerDied(RuntimeError):
    """A worker process ended before its work was done; the message gives its exit status and last line of stderr."""


def _write_frame(stream: IO[bytes], obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)))
    stream.write(data)
    stream.flush()


def _read_frame(stream: IO[bytes]) -> Any:
    header = stream.read(_HEADER.size)
    if len(header) < _HEADER.size:
        raise EOFError
    size = _HEADER.unpack(header)[0]
    data = stream.read(size)
    if len(data) < size:
        raise EOFError
    return pickle.loads(data)


def serve() -> None:
    """A worker's loop (what the bootstrap runs): the first frame names the work (``"module:factory"`` and the
    factory's arguments); ``factory(*args)`` is called once and the function it returns answers each later frame, in
    order, until the input ends (the main process is done, or gone)."""
    frames_in = sys.stdin.buffer
    frames_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # what the work prints goes to stderr, not into the frames
    target, args = _read_frame(frames_in)
    module, name = target.split(":")
    work = getattr(importlib.import_module(module), name)(*args)
    _write_frame(frames_out, _READY)
    while True:
        try:
            item = _read_frame(frames_in)
        except EOFError:
            return
        _write_frame(frames_out, work(item))


class _Worker:
    """One worker process, with a thread that writes its items (the main thread never waits on a full pipe) and one
    that reads its results (the worker never waits on its output either)."""

    def __init__(self, command: list[str]):
        self.stderr = tempfile.TemporaryFile()  # a file, not a pipe: nothing has to drain it
        try:
            self.process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr)
        except BaseException:
            self.stderr.close()
            raise
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.results: queue.SimpleQueue = queue.SimpleQueue()  # (True, result), or (False, None) once it ended
        self.waiting = 0  # items sent whose result was not taken yet
        self.threads = [threading.Thread(target=self._write, daemon=True),
                        threading.Thread(target=self._read, daemon=True)]
        for thread in self.threads:
            thread.start()

    def _write(self) -> None:
        try:
            while (item := self.inbox.get()) is not _STOP:
                _write_frame(self.process.stdin, item)
            self.process.stdin.close()  # the worker reads the end of its input and exits
        except OSError:  # the worker is gone: its reader reports it
            pass

    def _read(self) -> None:
        try:
            while True:
                self.results.put((True, _read_frame(self.process.stdout)))
        except Exception:  # the end of its output (or a frame cut short): it ended
            self.results.put((False, None))

    def send(self, item: Any) -> None:
        self.waiting += 1
        self.inbox.put(item)

    def unfinished(self) -> int:
        """Items sent whose result has not come back yet."""
        return self.waiting - self.results.qsize()

    def take(self, timeout: float | None = None) -> Any:
        """The next result, in the order the items were sent; [`WorkerDied`][hf_ralm.utils.worker_processes.WorkerDied]
        if the worker ended first."""
        arrived, result = self.results.get(timeout=timeout)
        if not arrived:
            raise WorkerDied(self.describe_end())
        self.waiting -= 1
        return result

    def describe_end(self) -> str:
        try:
            status = self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            status = None
        self.stderr.seek(0)
        lines = [line.strip() for line in self.stderr.read().decode("utf-8", "replace").splitlines() if line.strip()]
        return (f"hf-ralm's worker process {self.process.pid} ended (exit status {status}) before its work was done"
                + (f": {lines[-1]}" if lines else ""))

    def stop(self, kill: bool) -> None:
        """End the worker: its input closed (it exits once it has answered what it was sent), or killed."""
        self.inbox.put(_STOP)
        if kill:
            self.process.kill()
        try:
            self.process.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for thread in self.threads:
            thread.join(STOP_SECONDS)
        for stream in (self.process.stdin, self.process.stdout, self.stderr):
            try:
                stream.close()
            except OSError:  # the input of a killed worker: what was left in its buffer cannot be written
                pass


class WorkerPool:
    """``processes`` worker processes, each running the function that ``factory(*args)`` returns (``target`` names the
    factory, ``"module:factory"``; it is called once per worker, so what the function keeps between items, a cache, is
    the worker's own), on the items of [`imap`][hf_ralm.utils.worker_processes.WorkerPool.imap].
    [`WorkersUnavailable`][hf_ralm.utils.worker_processes.WorkersUnavailable] when they cannot start (no
    ``sys.executable``, an embedded interpreter, a worker that ends before it is ready); used as a context manager, its
    workers always end: input closed on success, killed on an error, Ctrl-C or a generator closed early."""

    def __init__(self, target: str, args: tuple, processes: int):
        if not sys.executable:
            raise WorkersUnavailable("this Python has no interpreter to start workers with (sys.executable is empty)")
        if getattr(sys, "frozen", False):  # a bundled application: its executable would start the application again
            raise WorkersUnavailable(f"this Python is a frozen application ({sys.executable}), not an interpreter")
        command = [sys.executable, "-c", _BOOTSTRAP.format(root=_PACKAGE_ROOT)]
        self.workers: list[_Worker] = []
        try:
            for _ in range(processes):
                self.workers.append(_Worker(command))
            for worker in self.workers:
                worker.send((target, args))
            deadline = time.monotonic() + START_SECONDS
            for worker in self.workers:
                if worker.take(max(0.0, deadline - time.monotonic())) != _READY:
                    raise WorkerDied(f"{sys.executable} -c ... answered otherwise than an hf-ralm worker")
        except (OSError, WorkerDied, queue.Empty) as error:
            self.close(kill=True)
            reason = error if str(error) else f"a worker was not ready after {START_SECONDS:.0f} s"
            raise WorkersUnavailable(f"the worker processes could not start ({reason})") from None
        except BaseException:
            self.close(kill=True)
            raise

    def imap(self, items: Iterable, ahead: int) -> Iterator:
        """Each item's result, in the items' order; an item goes to the worker with the fewest unfinished, and at most
        ``ahead`` per worker wait beyond the one taken next, so memory stays bounded.
        [`WorkerDied`][hf_ralm.utils.worker_processes.WorkerDied] when a worker ends before its results are in."""
        pending: deque[_Worker] = deque()
        for item in items:
            worker = min(self.workers, key=_Worker.unfinished)
            worker.send(item)
            pending.append(worker)
            if len(pending) > ahead * len(self.workers):
                yield pending.popleft().take()
        while pending:
            yield pending.popleft().take()

    def close(self, kill: bool = False) -> None:
        """End every worker (see [`_Worker.stop`][hf_ralm.utils.worker_processes._Worker.stop])."""
        for worker in self.workers:
            worker.stop(kill)
        self.workers = []

    def __enter__(self) -> "WorkerPool":
        return self

    def __exit__(self, error_type, error, traceback) -> None:
        self.close(kill=error_type is not None)
