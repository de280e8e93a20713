"""The one record store (hf_ralm.records), as several workers of one run use it: chunks saved at any position and
read back in order with their gaps, each writer's temporary files its own, the settings file made once and always
compared, and no overwrite under a live writer."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import crashed_chunk
from hf_ralm.errors import OutputFolderError
from hf_ralm.records import RecordStore

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
    names = sorted(p.name for p in tmp_path.iterdir())
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
    with pytest.raises(OutputFolderError, match=r"being written by another worker .*delete the folder by hand"):
        RecordStore(tmp_path, SETTINGS, overwrite=True)
    live.unlink()
    os.utime(elsewhere, (0, 0))  # another machine's writer that stopped long ago
    fresh = RecordStore(tmp_path, {**SETTINGS, "stride": 8}, overwrite=True)
    assert fresh.settings["stride"] == 8 and not list(tmp_path.glob(".tmp-*"))


def test_two_processes_racing_to_create_a_folder_make_one_settings_file(tmp_path):
    script = ("import sys; from hf_ralm.records import RecordStore; "
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
