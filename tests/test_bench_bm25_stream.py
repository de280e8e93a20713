"""The stream benchmark's --pin-cpu: every thread of the process on the one CPU asked, those already running and those
started after (as Lucene's JVM is), and a CPU the process may not use refused with what it may use."""

from __future__ import annotations

import os
import re
import threading

import pytest

from benchmarks.speed.bench_bm25_stream import on_each_thread, parse_args, pin_to_cpu, threads_off_cpu

linux_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="CPU affinity is Linux's")


@pytest.fixture
def restore_affinity():
    before = os.sched_getaffinity(0)
    yield
    on_each_thread(lambda thread: os.sched_setaffinity(thread, before))


@linux_affinity
def test_pinning_moves_running_threads_and_new_ones_inherit_it(restore_affinity):
    cpu = max(os.sched_getaffinity(0))
    stop = threading.Event()
    early = threading.Thread(target=stop.wait)
    early.start()
    try:
        pin_to_cpu(cpu)
        assert os.sched_getaffinity(early.native_id) == {cpu}
        seen = {}
        late = threading.Thread(target=lambda: seen.update(cpus=os.sched_getaffinity(0)))
        late.start()
        late.join()
        assert seen["cpus"] == {cpu}
        assert threads_off_cpu(cpu) == 0
    finally:
        stop.set()
        early.join()


@linux_affinity
def test_a_cpu_the_process_may_not_use_is_refused_with_the_allowed_ones(restore_affinity):
    allowed = sorted(os.sched_getaffinity(0))
    refusal = f"--pin-cpu {max(allowed) + 1}: this process may run on CPUs {allowed}"
    with pytest.raises(SystemExit, match=re.escape(refusal)):
        pin_to_cpu(max(allowed) + 1)
    assert sorted(os.sched_getaffinity(0)) == allowed


def test_a_platform_without_cpu_affinity_is_told_so(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(SystemExit, match=r"--pin-cpu needs CPU affinity \(os.sched_setaffinity\)"):
        pin_to_cpu(0)


def test_the_flag_is_parsed():
    assert parse_args(["--pin-cpu", "1"]).pin_cpu == 1
    assert parse_args([]).pin_cpu is None
