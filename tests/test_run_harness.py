"""The run harness (:mod:`hf_ralm.runs.harness`): one chunk driver owns a run's shards, record store, barrier and final
file, whatever the step computes. A toy step (squares of positions) stands for a run's chunk; the long runs that use the
driver (eval-lm, retrieve, rerank-data, eval-qa, --compare, the dense encoding) have their own tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

import hf_ralm.runs.harness as runs
from hf_ralm.errors import OutputFolderError, SettingError
from hf_ralm.runs.store import RecordStore
from hf_ralm.runs.harness import ChunkRun, RunOptions

SETTINGS = {"task": "squares"}
TOTAL = 10


class Squares:
    """The toy step: the records of positions ``[start, stop)``, counting the positions it computed."""

    def __init__(self):
        self.calls: list[tuple[int, int]] = []

    def __call__(self, start: int, stop: int) -> list[dict]:
        self.calls.append((start, stop))
        return [{"n": n, "square": n * n} for n in range(start, stop)]


def squares_run(folder, chunk_size=3, **options) -> tuple[ChunkRun, Squares]:
    run = ChunkRun(RunOptions(output_dir=str(folder), chunk_size=chunk_size, show_progress=False, **options))
    run.open(RecordStore, folder, SETTINGS)
    step = Squares()
    run.run(TOTAL, step, desc="Squaring", unit="n")
    return run, step


def expected() -> list[dict]:
    return [{"n": n, "square": n * n} for n in range(TOTAL)]


def test_two_shards_compute_alternate_chunks_and_together_make_the_one_process_records(tmp_path):
    """Worker 0 of 2 computes chunks 0, 2, ...; worker 1 chunks 1, 3; each alone is incomplete, and once both are in,
    either reads every record (gather), the same as one process writes, in the same chunk files."""
    first, step0 = squares_run(tmp_path / "shared", num_shards=2, shard_id=0)
    assert step0.calls == [(0, 3), (6, 9)] and not first.complete(TOTAL)
    second, step1 = squares_run(tmp_path / "shared", num_shards=2, shard_id=1)
    assert step1.calls == [(3, 6), (9, 10)]
    second.gather()
    first.gather()
    assert first.complete(TOTAL) and first.rows() == second.rows() == expected()
    alone, _ = squares_run(tmp_path / "alone")
    assert alone.rows() == expected()
    assert sorted(os.listdir(tmp_path / "shared")) == sorted(os.listdir(tmp_path / "alone"))
    assert first.shard.description == "0 of 2 (arguments)"


def test_without_a_folder_the_records_stay_in_memory_and_shards_are_refused(tmp_path):
    run = ChunkRun(RunOptions(chunk_size=4, show_progress=False))
    step = Squares()
    run.run(TOTAL, step, desc="Squaring", unit="n")
    assert run.rows() == expected() and run.computed == [(0, 4), (4, 8), (8, 10)] and run.num_resumed == 0
    assert not os.listdir(tmp_path)
    with pytest.raises(SettingError, match=r"^2 workers \(arguments\) share a run through its output_dir: give one"):
        ChunkRun(RunOptions(num_shards=2, shard_id=0, chunk_size=4))


KILLED_WORKER = textwrap.dedent("""
    import os, signal, sys
    from hf_ralm.runs.store import RecordStore
    from hf_ralm.runs.harness import ChunkRun, RunOptions

    def step(start, stop):
        if start == 6:  # killed in the middle of its third chunk, as by the OOM killer or a preemption
            os.kill(os.getpid(), signal.SIGKILL)
        return [{"n": n, "square": n * n} for n in range(start, stop)]

    run = ChunkRun(RunOptions(output_dir=sys.argv[1], chunk_size=3, show_progress=False))
    run.open(RecordStore, sys.argv[1], {"task": "squares"})
    run.run(10, step, desc="Squaring", unit="n")
""")


def test_a_run_killed_in_a_chunk_resumes_after_its_saved_chunks(tmp_path):
    """A worker killed (SIGKILL) while computing its third chunk leaves the first two; a rerun computes only the
    rest, reads the saved ones back and ends with the records of an uninterrupted run."""
    folder = tmp_path / "run"
    killed = subprocess.run([sys.executable, "-c", KILLED_WORKER, str(folder)], capture_output=True, text=True)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert RecordStore.num_saved(folder) == 6
    run, step = squares_run(folder)
    assert step.calls == [(6, 9), (9, 10)] and run.num_resumed == 6 and run.num_computed == 4
    assert run.rows() == expected() and run.complete(TOTAL)
    assert not [name for name in os.listdir(folder) if name.startswith(".")]  # the killed worker's leftovers


def test_a_resume_with_another_chunk_size_computes_only_what_no_chunk_holds(tmp_path):
    folder = tmp_path / "run"
    first = ChunkRun(RunOptions(output_dir=str(folder), chunk_size=4, show_progress=False))
    first.open(RecordStore, folder, SETTINGS)
    with first.progress(TOTAL, desc="Squaring", unit="n"):
        first.compute(0, 4, Squares())
    run, step = squares_run(folder, chunk_size=3)
    assert step.calls == [(4, 6), (6, 9), (9, 10)] and run.rows() == expected()


def test_overwrite_is_refused_under_a_live_worker_and_deletes_nothing(tmp_path):
    """A worker computing in the folder holds its lock: an overwrite there is refused, naming it, and its records
    stay; once it is done, the overwrite deletes the records and the final file, and the run starts afresh."""
    folder = tmp_path / "run"
    live = ChunkRun(RunOptions(output_dir=str(folder), chunk_size=3, show_progress=False))
    live.open(RecordStore, folder, SETTINGS)
    live.compute(0, 3, Squares())  # computing: its store is open
    final = tmp_path / "eval.json"
    final.write_text("{}")
    again = ChunkRun(RunOptions(output_dir=str(folder), chunk_size=3, overwrite=True, show_progress=False))
    with pytest.raises(OutputFolderError, match=f"{folder} is being computed by .*:{os.getpid()}"):
        again.open(RecordStore, folder, SETTINGS, final=[final])
    assert RecordStore.num_saved(folder) == 3 and final.exists()
    live.store.close()
    store = again.open(RecordStore, folder, {"task": "cubes"}, final=[final])
    assert again.num_resumed == 0 and store.num_done == 0 and not final.exists()


def test_the_final_file_is_written_once_by_the_writer_and_never_over_a_replaced_folder(tmp_path, monkeypatch):
    """Under torch.distributed only rank 0 writes the final file, and every rank waits for it (the barrier); a
    folder another run replaced meanwhile gets no final file from this one."""
    barriers = []
    monkeypatch.setattr(runs, "distributed_barrier", lambda: barriers.append(1))
    run, _ = squares_run(tmp_path / "run")
    written = []
    for rank in (1, 0):  # two ranks of one run
        monkeypatch.setattr(runs, "is_writer", lambda rank=rank: rank == 0)
        run.finish(lambda: written.append(json.dumps(run.rows())))
    assert written == [json.dumps(expected())] and len(barriers) == 3  # opening, and each rank's finish
    replaced = ChunkRun(RunOptions(output_dir=str(tmp_path / "run"), chunk_size=3, overwrite=True,
                                   show_progress=False))
    replaced.open(RecordStore, tmp_path / "run", {"task": "cubes"})
    with pytest.raises(OutputFolderError, match="changed while this run computed"):
        run.finish(lambda: written.append("stale"))
    assert written == [json.dumps(expected())]


def test_run_options_split_the_flat_keywords_and_check_the_chunk_size():
    options, rest = RunOptions.split({"output_dir": "out", "batch_size": 2, "max_eval_tokens": 64,
                                      "run": RunOptions(repair=True)})
    assert options == RunOptions(output_dir="out", batch_size=2, repair=True) and rest == {"max_eval_tokens": 64}
    with pytest.raises(SettingError, match="chunk_size must be at least 1, got 0"):
        RunOptions(chunk_size=0)
    with pytest.raises(SettingError, match="shard_id must be from 0 to 1"):
        RunOptions(num_shards=2, shard_id=2).shard
