"""The one record store (hf_ralm.runs.store), as several workers of one run use it: chunks saved at any position and
read back in order with their gaps, each writer's temporary files its own, the settings file made once and always
compared, and no overwrite under a live writer."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import crashed_chunk
from hf_ralm.errors import OutputFolderError, RalmWarning
from hf_ralm.runs.store import RecordStore
from hf_ralm.runs.fingerprints import digest

SETTINGS = {"k": 16, "stride": 4}


def test_workers_save_chunks_at_their_positions_and_a_reader_accepts_gaps(tmp_path):
    first = RecordStore(tmp_path, SETTINGS, chunk_size=2)
    second = RecordStore(tmp_path, SETTINGS, chunk_size=2)  # another worker of the same run
    first.save(0, [{"i": 0}, {"i": 1}])
    second.save(4, [{"i": 4}, {"i": 5}], batch_size=8)
    assert first.ranges() == [(0, 2)] and second.ranges() == [(4, 6)]
    first.refresh()
    assert first.ranges() == [(0, 2), (4, 6)] and [r["i"] for r in first.rows()] == [0, 1, 4, 5]
    assert first.num_done == 4 and first.num_chunks == 2
    reader = RecordStore(tmp_path, SETTINGS)
    assert reader.ranges() == [(0, 2), (4, 6)]  # the gap [2, 4) stays a gap
    assert RecordStore.prefix_length(tmp_path) == 2  # records 0 and 1 are the first two, whatever comes later
    names = sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("."))  # not the open stores' lock
    assert names == ["chunk-00000000-00000002.json.gz", "chunk-00000004-00000006.json.gz", "settings.json"]
    info = RecordStore.read_chunk_file(tmp_path / names[1])
    assert info["batch_size"] == 8 and info["rows"] == [{"i": 4}, {"i": 5}] and info["seconds"] >= 0
    second.save(2, [{"i": 2}, {"i": 3}])
    reader.refresh()
    assert [r["i"] for r in reader.rows()] == list(range(6)) and RecordStore.prefix_length(tmp_path) == 6
    assert RecordStore.prefix_length(tmp_path / "nothing-here") == 0


def test_the_settings_file_is_made_once_and_always_compared(tmp_path):
    RecordStore(tmp_path, SETTINGS, reproduce={"command": "first"})
    assert json.loads((tmp_path / "settings.json").read_text())["reproduce"] == {"command": "first"}
    again = RecordStore(tmp_path, SETTINGS, reproduce={"command": "second"})
    assert again.reproduce == {"command": "first"}  # the first worker's, never compared
    with pytest.raises(OutputFolderError, match="'stride': stored 4, given 8"):  # even without any record yet
        RecordStore(tmp_path, {**SETTINGS, "stride": 8})
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp-")]


def test_each_writer_cleans_only_the_leftovers_of_finished_writers(tmp_path):
    RecordStore(tmp_path, SETTINGS)
    dead = crashed_chunk(tmp_path, 0, 2)
    live = tmp_path / f".tmp-chunk-00000002-00000004.json.gz.{socket.gethostname()}-{os.getppid()}"
    live.write_bytes(b"being written")
    elsewhere = tmp_path / ".tmp-chunk-00000004-00000006.json.gz.another-host-1"
    elsewhere.write_bytes(b"being written")
    store = RecordStore(tmp_path, SETTINGS)
    assert not dead.exists() and live.exists() and elsewhere.exists()
    assert store.rows() == []  # temporary files are never read
    store.close()  # (an open store holds the folder's lock: the temporary files show the writers without it)
    with pytest.raises(OutputFolderError, match=r"being written by another worker .*delete the folder by hand"):
        RecordStore(tmp_path, SETTINGS, overwrite=True)
    live.unlink()
    os.utime(elsewhere, (0, 0))  # another machine's writer that stopped long ago
    fresh = RecordStore(tmp_path, {**SETTINGS, "stride": 8}, overwrite=True)
    assert fresh.settings["stride"] == 8 and not list(tmp_path.glob(".tmp-*"))


def test_two_processes_racing_to_create_a_folder_make_one_settings_file(tmp_path):
    script = ("import sys; from hf_ralm.runs.store import RecordStore; "
              "RecordStore(sys.argv[1], {'k': int(sys.argv[2])}).save(int(sys.argv[3]), [{'w': sys.argv[3]}])")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "run"), "16", str(start)],
                              stderr=subprocess.PIPE) for start in (0, 1)]
    assert [p.wait() for p in procs] == [0, 0]
    store = RecordStore(tmp_path / "run", {"k": 16})
    assert [r["w"] for r in store.rows()] == ["0", "1"]
    other = subprocess.run([sys.executable, "-c", script, str(tmp_path / "run"), "8", "2"], stderr=subprocess.PIPE,
                           text=True)
    assert other.returncode != 0 and "'k': stored 16, given 8" in other.stderr
    assert Path(tmp_path / "run" / "settings.json").is_file()


# ------------------------------------------------------------------------------------------------------------------
# Workers' lock, settings changed under a worker, checked chunks (issue 38)
# ------------------------------------------------------------------------------------------------------------------

WORKER = f"{socket.gethostname()}:{os.getpid()}"


def own_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_overwrite_is_refused_while_a_worker_computes_and_names_it(tmp_path):
    worker = RecordStore(tmp_path, SETTINGS, chunk_size=2)
    worker.save(0, [{"i": 0}, {"i": 1}])  # no chunk being written now: only the lock shows the worker
    with pytest.raises(OutputFolderError, match=rf"is being computed by {WORKER} \(since .*\): overwriting it now"):
        RecordStore(tmp_path, {**SETTINGS, "stride": 8}, overwrite=True)
    with pytest.raises(OutputFolderError, match=WORKER):
        RecordStore.remove(tmp_path)
    reader = RecordStore(tmp_path, SETTINGS)  # another worker of the same run shares the lock
    assert reader.ranges() == [(0, 2)]
    reader.close()
    worker.close()
    assert own_files(tmp_path) == ["chunk-00000000-00000002.json.gz", "settings.json"]  # no lock file left
    fresh = RecordStore(tmp_path, {**SETTINGS, "stride": 8}, overwrite=True)
    assert fresh.ranges() == [] and fresh.settings["stride"] == 8


def test_a_killed_worker_never_blocks_an_overwrite(tmp_path):
    script = ("import sys, time; from hf_ralm.runs.store import RecordStore; "
              "store = RecordStore(sys.argv[1], {'k': 16}); print('open', flush=True); time.sleep(60)")
    worker = subprocess.Popen([sys.executable, "-c", script, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert worker.stdout.readline() == "open\n"
        with pytest.raises(OutputFolderError, match=f"{socket.gethostname()}:{worker.pid}"):
            RecordStore(tmp_path, {"k": 8}, overwrite=True)
    finally:
        worker.kill()  # SIGKILL: the operating system releases its lock
        worker.wait()
    assert RecordStore(tmp_path, {"k": 8}, overwrite=True).settings == {"k": 8}


@pytest.mark.parametrize("replace", ["changed", "vanished"])
def test_a_worker_whose_settings_changed_saves_nothing_more(tmp_path, replace):
    worker = RecordStore(tmp_path / "run", SETTINGS, chunk_size=2)
    worker.save(0, [{"i": 0}, {"i": 1}])
    shutil.rmtree(tmp_path / "run")  # deleted by hand, or overwritten from where the lock does not reach
    if replace == "changed":
        RecordStore(tmp_path / "run", {**SETTINGS, "stride": 8}).close()
    with pytest.raises(OutputFolderError, match=rf"run/settings.json {replace} while this run computed .* saves "
                                                "nothing more"):
        worker.save(2, [{"i": 2}, {"i": 3}])
    with pytest.raises(RuntimeError, match="is closed"):  # it stopped: nothing more is added, or saved at its end
        worker.add([{"i": 4}, {"i": 5}])
    worker.close()
    assert not (tmp_path / "run").exists() or own_files(tmp_path / "run") == ["settings.json"]


def test_chunks_carry_their_checksum_counts_and_settings_digest(tmp_path):
    with RecordStore(tmp_path, SETTINGS, chunk_size=2) as store:
        store.add([{"i": 0}, {"i": 1}])
    content = RecordStore.read_chunk_file(tmp_path / "chunk-00000000-00000002.json.gz")
    assert content["num_records"] == 2 and content["checksum"] == digest([{"i": 0}, {"i": 1}])
    assert content["settings_digest"] == digest(SETTINGS) == store.settings_digest


def test_a_reader_refuses_chunks_of_two_settings_digests(tmp_path):
    with RecordStore(tmp_path / "a", SETTINGS, chunk_size=2) as store:
        store.add([{"i": 0}, {"i": 1}])
    with RecordStore(tmp_path / "b", {**SETTINGS, "stride": 8}, chunk_size=2) as other:
        other.save(2, [{"i": 2}, {"i": 3}])
    foreign = "chunk-00000002-00000004.json.gz"
    shutil.copy(tmp_path / "b" / foreign, tmp_path / "a")  # a chunk of other settings
    expected = rf"{foreign}: it was computed under other settings \(digest {digest({**SETTINGS, 'stride': 8})}"
    with pytest.raises(OutputFolderError, match=rf"holds 1 damaged chunk\(s\) \({expected}.*--repair"):
        RecordStore(tmp_path / "a", SETTINGS)
    with pytest.raises(OutputFolderError, match=rf"{foreign} is a damaged chunk \(it was computed under other"):
        RecordStore.read_rows(tmp_path / "a")
    with pytest.warns(RalmWarning, match=r"moved 1 damaged chunk\(s\) of .* are computed again"):
        repaired = RecordStore(tmp_path / "a", SETTINGS, repair=True)
    assert repaired.ranges() == [(0, 2)]
    assert [p.name.split("-", 2)[2] for p in (tmp_path / "a" / "damaged").iterdir()] == [foreign]


def test_chunks_of_older_versions_are_refused_unless_accepted(tmp_path):
    RecordStore(tmp_path, SETTINGS).close()
    with gzip.open(tmp_path / "chunk-00000000-00000002.json.gz", "wt") as f:  # as hf-ralm wrote them before
        json.dump({"rows": [{"i": 0}, {"i": 1}], "seconds": 1.5, "git_commit": None}, f)
    for read in (lambda: RecordStore(tmp_path, SETTINGS), lambda: RecordStore.read_rows(tmp_path)):
        with pytest.raises(OutputFolderError, match=r"holds 1 chunk\(s\) without checksum and settings digest"):
            read()
    accepted = RecordStore(tmp_path, SETTINGS, accept_unverified=True)
    assert [row["i"] for row in accepted.rows()] == [0, 1] and accepted.num_unverified == 1
    accepted.close()
    assert RecordStore.read_rows(tmp_path, accept_unverified=True) == [{"i": 0}, {"i": 1}]
    assert RecordStore.chunk_seconds(tmp_path, accept_unverified=True) == 1.5


def test_a_folder_with_files_of_others_is_refused_and_never_emptied(tmp_path):
    RecordStore(tmp_path, SETTINGS).save(0, [{"i": 0}])
    (tmp_path / "notes.txt").write_text("mine")
    for overwrite in (False, True):
        with pytest.raises(OutputFolderError, match=r"holds files hf-ralm did not write \(notes.txt\)"):
            RecordStore(tmp_path, SETTINGS, overwrite=overwrite)
    assert own_files(tmp_path) == ["chunk-00000000-00000001.json.gz", "notes.txt", "settings.json"]
