"""Saved chunks that do not show they were computed under their folder's settings (issue 56): a chunk is used only
with its checksum and its settings digest both present and matching. One that carries one without the other was
altered: it is damaged (one line, exit 2; ``--repair`` computes it again). One of an older version, without either,
is refused by default with one line naming the folder, how many and both ways out (``--repair``, or
``--accept-unverified-chunks``, which ``eval.json`` records); :meth:`RecordStore.stamp_older_chunks` verifies such
chunks once and stamps them."""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest

from conftest import TEST_DEVICE_ARGS, fail
from hf_ralm.cli import main
from hf_ralm.errors import OutputFolderError
from hf_ralm.runs.store import RecordStore
from hf_ralm.runs.fingerprints import digest
from hf_ralm.evaluation.window_records import WindowRecordWriter

FIRST_CHUNK = "chunk-00000000-00000004.json.gz"


def settings(files, out: Path, *extra: str) -> list[str]:
    """An evaluation of the tiny model without retrieval (L=16, s=4), in chunks of 4 windows, writing to ``out``."""
    return ["--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16", "--stride", "4",
            *TEST_DEVICE_ARGS, "--chunk-size", "4", "--output-dir", str(out), *extra]


def evaluated(capsys, files, out: Path, *extra: str) -> dict:
    """``eval-lm`` into ``out`` (exit 0): its ``eval.json``."""
    assert main(["eval-lm", *settings(files, out, *extra)]) in (0, None)
    capsys.readouterr()
    return json.loads((out / "eval.json").read_text())


def read_chunk(path: Path) -> dict:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def write_chunk(path: Path, content: dict) -> None:
    with gzip.open(path, "wt", encoding="utf-8") as f:
        json.dump(content, f)


def clean_and_other(capsys, files) -> tuple[dict, Path]:
    """A clean run's ``eval.json``, and the windows of a run with other settings (``--bos-every-window``); the
    clean run's windows copied to ``files["out"]`` (without its ``eval.json``: what the refused runs find)."""
    clean = evaluated(capsys, files, files["tmp"] / "clean")
    other = evaluated(capsys, files, files["tmp"] / "other", "--bos-every-window")
    assert other["nll_sum"] != clean["nll_sum"]
    shutil.copytree(files["tmp"] / "clean" / "windows", files["out"] / "windows")
    return clean, files["tmp"] / "other" / "windows"


def old_format(content: dict) -> dict:
    """A chunk's content as an older hf-ralm wrote it: its rows, seconds, commit and batch size, without the counts,
    checksum and settings digest that verify them."""
    return {key: value for key, value in content.items()
            if key not in ("num_records", "num_scored_tokens", "checksum", "settings_digest")}


def test_a_chunk_of_other_settings_is_damaged_whatever_it_carries(files, capsys):
    """Another run's chunk whose settings digest was removed (before: taken as computed under the folder's settings,
    its NLLs mixed into the figures, exit 0) is damaged, and so is one with its digest (the other settings'): one
    line, exit 2; ``--repair`` computes it again, to the clean run's figures."""
    clean, other = clean_and_other(capsys, files)
    foreign = read_chunk(other / FIRST_CHUNK)
    for content, expected in [({k: v for k, v in foreign.items() if k != "settings_digest"},
                               "it carries a checksum but no settings digest"),
                              ({k: v for k, v in foreign.items() if k != "checksum"},
                               "it carries a settings digest but no checksum"),
                              (foreign, f"it was computed under other settings (digest {foreign['settings_digest']}")]:
        write_chunk(files["out"] / "windows" / FIRST_CHUNK, content)
        fail(capsys, files, ["eval-lm", *settings(files, files["out"])], str(files["out"] / "windows"),
             "holds 1 damaged chunk(s)", f"{FIRST_CHUNK}: {expected}", "--repair")
    repaired = evaluated(capsys, files, files["out"], "--repair")
    assert repaired["nll_sum"] == clean["nll_sum"] and repaired["num_resumed_windows"] == clean["num_windows"] - 4
    assert [path.name.split("-", 2)[2] for path in (files["out"] / "windows" / "damaged").iterdir()] == [FIRST_CHUNK]
    assert "settings_digest" in read_chunk(files["out"] / "windows" / FIRST_CHUNK)


def test_a_chunk_of_an_older_version_is_refused_unless_accepted_knowingly(files, capsys):
    """A chunk without checksum and settings digest (before: read as the folder's) is refused by default with one line
    that names the folder, how many and both ways out; ``--accept-unverified-chunks`` uses it, and ``eval.json``
    records it; ``--repair`` computes it again."""
    clean, _ = clean_and_other(capsys, files)
    folder = files["out"] / "windows"
    for name in (FIRST_CHUNK, "chunk-00000004-00000008.json.gz"):
        write_chunk(folder / name, old_format(read_chunk(folder / name)))
    fail(capsys, files, ["eval-lm", *settings(files, files["out"])],
         f"{folder} holds 2 chunk(s) without checksum and settings digest", FIRST_CHUNK,
         "rerun with --repair to compute them again, or with --accept-unverified-chunks to use them as they are "
         "(recorded in eval.json")
    with pytest.raises(OutputFolderError, match=r"holds 2 chunk\(s\) without checksum"):  # so do the library's readers
        WindowRecordWriter.read_rows(folder)

    accepted = evaluated(capsys, files, files["out"], "--accept-unverified-chunks")
    assert accepted["nll_sum"] == clean["nll_sum"] and accepted["accepted_unverified_chunks"] == 2
    assert accepted["args"]["accept_unverified"] is True
    assert "accepted_unverified_chunks" not in clean  # recorded only where they were accepted
    (files["out"] / "eval.json").unlink()

    repaired = evaluated(capsys, files, files["out"], "--repair")
    assert repaired["nll_sum"] == clean["nll_sum"] and repaired["num_resumed_windows"] == clean["num_windows"] - 8
    assert len(list((folder / "damaged").iterdir())) == 2
    assert all("checksum" in read_chunk(path) for path in RecordStore.complete_chunks(folder))


def test_the_stamp_tool_stamps_verified_older_chunks_and_refuses_others(files, capsys):
    """:meth:`RecordStore.stamp_older_chunks` stamps a folder's chunks of an older version once they pass every check
    of the store (rows unchanged, now with their checksum and the folder's settings digest), and stamps nothing when
    one fails (named)."""
    clean, _ = clean_and_other(capsys, files)
    folder = files["out"] / "windows"
    stamped = read_chunk(folder / FIRST_CHUNK)
    write_chunk(folder / FIRST_CHUNK, old_format(stamped))
    wrong = old_format(read_chunk(folder / "chunk-00000004-00000008.json.gz"))
    wrong["rows"][0]["window"] = 5  # the record of another window than its position
    write_chunk(folder / "chunk-00000004-00000008.json.gz", wrong)

    with pytest.raises(OutputFolderError, match=r"chunk-00000004-00000008.json.gz: it holds the records of windows "
                                                r"\[5, 5, 6\]"):
        WindowRecordWriter.stamp_older_chunks(folder)
    assert "checksum" not in read_chunk(folder / FIRST_CHUNK)  # nothing stamped

    write_chunk(folder / "chunk-00000004-00000008.json.gz", old_format(read_chunk(
        files["tmp"] / "clean" / "windows" / "chunk-00000004-00000008.json.gz")))
    assert [path.name for path in WindowRecordWriter.stamp_older_chunks(folder)] == [
        FIRST_CHUNK, "chunk-00000004-00000008.json.gz"]
    settings_digest = digest(WindowRecordWriter.read_settings(folder)[0])
    again = read_chunk(folder / FIRST_CHUNK)
    assert again == stamped and again["settings_digest"] == settings_digest  # its rows, seconds and commit kept
    assert WindowRecordWriter.stamp_older_chunks(folder) == []  # nothing left to stamp
    assert evaluated(capsys, files, files["out"])["nll_sum"] == clean["nll_sum"]  # used without any flag


def test_stamp_runs_stamps_the_committed_folders_by_their_stores(tmp_path, capsys):
    """``python -m benchmarks.long_runs.stamp_runs`` stamps each runs folder's older chunks with the store that wrote
    it, and names a folder no store is known for (exit 1)."""
    from benchmarks.long_runs import stamp_runs

    folder = tmp_path / "rerank-tables" / "SmolLM2-135M.WikiText-103_test.1024" / "predictive"
    RecordStore(folder, {"ranker": "sha"}).close()
    write_chunk(folder / "chunk-00000000-00000002.json.gz",
                {"rows": [{"window": 0, "chosen": 1}, {"window": 1, "chosen": 0}], "seconds": 1.5, "git_commit": None})
    assert stamp_runs.main(["--runs-dir", str(tmp_path)]) == 0
    assert "predictive: 1 chunk(s) verified by RecordStore and stamped" in capsys.readouterr().out
    assert RecordStore.read_rows(folder) == [{"window": 0, "chosen": 1}, {"window": 1, "chosen": 0}]

    RecordStore(tmp_path / "elsewhere", {}).save(0, [{"i": 0}])
    assert stamp_runs.main(["--runs-dir", str(tmp_path)]) == 1
    assert "elsewhere: no store is known for it" in capsys.readouterr().err
