"""The build lock (``hf_ralm.runs.locks.file_lock``, taken by ``index_folder.building``): a waiter says who holds it
and gives up after a timeout (a stopped holder blocks no one forever), and no lock file is left in the user's
folders."""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ARTICLES, write_jsonl
from hf_ralm.cli import main
from hf_ralm.runs import locks

# The holder: a process that takes the lock and says so. locks.py is loaded from its file (it imports only the
# standard library), so the process starts in a fraction of a second.
HOLDER = """import importlib.util, sys
spec = importlib.util.spec_from_file_location("locks", sys.argv[1])
locks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(locks)
with locks.file_lock(sys.argv[2], "the build of index"):
    print("locked", flush=True)
    sys.stdin.read()  # held until the test ends it
"""


@pytest.fixture()
def holder(tmp_path):
    """A process of this machine that holds the lock ``tmp_path/index.lock``, stopped (SIGSTOP) as a suspended job
    is; killed at the end of the test."""
    path = tmp_path / "index.lock"
    process = subprocess.Popen([sys.executable, "-c", HOLDER, locks.__file__, str(path)], stdin=subprocess.PIPE,
                               stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "locked\n"
        os.kill(process.pid, signal.SIGSTOP)
        # the signal is delivered when the kernel next schedules the holder: on a busy machine the first report could
        # come before it is stopped, so the test starts waiting once /proc says it is
        deadline = time.monotonic() + 30
        while not locks._is_stopped(process.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield {"path": path, "pid": process.pid}
    finally:
        process.kill()
        process.wait()


def test_a_waiter_says_who_holds_the_lock_and_gives_up_on_a_stopped_holder(holder, monkeypatch, caplog):
    """The holder's identity is in the lock file; a waiter reports it every REPORT_SECONDS and gives up after
    HF_RALM_LOCK_TIMEOUT seconds with one line that names it and says how to go on (before: it waited forever)."""
    identity = json.loads(holder["path"].read_text())
    assert (identity["pid"], identity["host"]) == (holder["pid"], socket.gethostname()) and identity["since"]
    monkeypatch.setenv("HF_RALM_LOCK_TIMEOUT", "1.5")
    monkeypatch.setattr(locks, "REPORT_SECONDS", 0.5)
    outcome: dict = {}

    def wait() -> None:
        try:
            with locks.file_lock(holder["path"], "the build of index"):
                outcome["locked"] = True
        except Exception as error:  # what the test checks
            outcome["error"] = error

    with caplog.at_level(logging.WARNING, logger=locks.__name__):
        waiter = threading.Thread(target=wait, daemon=True)  # daemon: a waiter that never returns fails, not hangs
        waiter.start()
        waiter.join(timeout=30)
    assert not waiter.is_alive(), "the waiter is still waiting for a stopped holder"
    error = outcome.get("error")
    assert isinstance(error, locks.LockTimeoutError) and isinstance(error, TimeoutError), outcome
    held_by = f"pid {holder['pid']} on {socket.gethostname()} since {identity['since']} (stopped)"
    assert "\n" not in str(error)
    assert str(error).startswith(f"Gave up waiting for the build of index after 1.5 s: {held_by} holds "
                                 f"{holder['path']}."), str(error)
    assert f"kill -CONT {holder['pid']}" in str(error) and "HF_RALM_LOCK_TIMEOUT" in str(error)
    reports = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Waiting for the build of index")]
    assert len(reports) >= 2 and all(held_by in report for report in reports), reports  # again, every interval


@pytest.mark.parametrize("value", ["soon", "-1"])
def test_a_lock_timeout_that_is_no_number_of_seconds_is_refused(tmp_path, monkeypatch, value):
    monkeypatch.setenv("HF_RALM_LOCK_TIMEOUT", value)
    with pytest.raises(ValueError, match=f"HF_RALM_LOCK_TIMEOUT must be a number of seconds .*, got '{value}'"):
        with locks.file_lock(tmp_path / "index.lock", "the build of index"):
            pass


def test_the_lock_file_is_free_of_its_holder_once_released(tmp_path):
    path = tmp_path / "index.lock"
    with locks.file_lock(path, "the build of index"):
        assert json.loads(path.read_text())["pid"] == os.getpid()
    assert path.read_text() == ""  # a later reader finds no holder that has gone


@pytest.mark.parametrize("corpus_rows", [ARTICLES, [{"id": "1", "body": "no text"}]], ids=["built", "failed"])
def test_a_build_leaves_no_lock_file_in_the_users_folder(tmp_path, monkeypatch, capsys, corpus_rows):
    """The build lock lives in hf-ralm's cache, keyed by the folder's real path: the user's folder holds the corpus
    and the index, and nothing else, after a build or a failed one (before: an empty ``.index.lock`` beside it)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    work = tmp_path / "work"
    work.mkdir()
    corpus = write_jsonl(work / "corpus.jsonl", corpus_rows)
    try:
        main(["index", "--corpus", str(corpus), "--index-dir", str(work / "index")])
    except SystemExit as error:  # the failed build: one line, exit status 2
        assert error.code == 2 and "corpus rows need a 'text' field" in capsys.readouterr().err
    built = ["index"] if corpus_rows is ARTICLES else []
    assert sorted(p.name for p in work.iterdir()) == ["corpus.jsonl", *built]
    assert [p.suffix for p in Path(tmp_path / "hf" / "hf-ralm" / "locks").iterdir()] == [".lock"]
