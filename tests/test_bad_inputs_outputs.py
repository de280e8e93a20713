"""No input is an output, through the ``hf-ralm`` command line (in-process, tiny models and corpora): every path a
command writes is refused, in one line naming it and how to fix it, when it is one of the command's inputs or an
existing file hf-ralm did not write (the user's file is left byte for byte as it was), and an unwritable folder is
refused before any work; a file hf-ralm wrote is replaced on a rerun, saying so; an OS error while writing (a full
disk) names the file."""

from __future__ import annotations

import errno
import json
import os

import pytest

from conftest import TEST_DEVICE_ARGS, fail
from hf_ralm.cli import main


def evaluation(files, *extra: str) -> list[str]:
    """The flags of a valid evaluation of the tiny model (L=16, s=4, 8-token passages) with BM25."""
    return ["--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16", "--stride", "4",
            "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--retriever", "bm25", "--corpus",
            files["corpus"], "--index-dir", files["index"], *extra]


def generation(files, *extra: str) -> list[str]:
    return ["generate", "--model", files["model"], *TEST_DEVICE_ARGS, "--prompt", "the emperor", "--max-new-tokens",
            "3", *extra]


@pytest.mark.parametrize("through_link", [False, True])
def test_retrieve_refuses_its_dataset_as_the_retrieval_file(files, capsys, through_link):
    dataset = files["dataset"]
    before = open(dataset, "rb").read()
    target = dataset
    if through_link:
        target = str(files["tmp"] / "retrievals.json")
        os.symlink(dataset, target)
    fail(capsys, files, ["retrieve", *evaluation(files, "--save-retrieval-file", target)],
         f"--save-retrieval-file {target} is also the run's --dataset-path ({dataset})",
         "Give --save-retrieval-file another path")
    assert open(dataset, "rb").read() == before
    assert os.path.islink(target) == through_link


def test_generate_never_writes_over_a_file_it_did_not_write(files, capsys):
    notes = files["tmp"] / "notes.txt"
    notes.write_bytes(b"my notes\n")
    fail(capsys, files, generation(files, "--output-json", str(notes)),
         f"{notes} is no generation output hf-ralm wrote", "give --output-json another path, or move the file away")
    assert notes.read_bytes() == b"my notes\n"
    # a JSON list in another program's form is not hf-ralm's either
    notes.write_bytes(b'[{"prompt": "the emperor"}]')
    fail(capsys, files, generation(files, "--output-json", str(notes)), f"{notes} is no generation output")
    assert notes.read_bytes() == b'[{"prompt": "the emperor"}]'


@pytest.mark.parametrize("overwrite", [[], ["--overwrite"]])
def test_a_users_eval_json_in_the_output_dir_is_kept(files, capsys, overwrite):
    mine = files["tmp"] / "mine"
    mine.mkdir()
    (mine / "eval.json").write_bytes(b'{"token_ppl": 12.5}\n')
    fail(capsys, files, ["eval-lm", *evaluation(files, "--output-dir", str(mine), *overwrite)],
         f"{mine / 'eval.json'} is no evaluation report hf-ralm wrote", "give another --output-dir, or move the file")
    assert (mine / "eval.json").read_bytes() == b'{"token_ppl": 12.5}\n'
    assert sorted(p.name for p in mine.iterdir()) == ["eval.json"]


def test_overwrite_never_deletes_a_settings_file_hf_ralm_did_not_write(files, capsys):
    windows = files["out"] / "windows"
    windows.mkdir(parents=True)
    (windows / "settings.json").write_bytes(b'{"theme": "dark"}\n')
    fail(capsys, files, ["eval-lm", *evaluation(files, "--output-dir", str(files["out"]), "--overwrite")],
         f"{windows / 'settings.json'} is no settings file of window records hf-ralm wrote", "move it away")
    assert (windows / "settings.json").read_bytes() == b'{"theme": "dark"}\n'


@pytest.mark.parametrize("flag,path", [("--save-retrieval-file", "ro/retrievals.json"), ("--output-dir", "ro/out"),
                                       ("--save-retrieval-dataset", "ro/dataset")])
def test_retrieve_refuses_an_unwritable_folder_before_any_work(files, capsys, monkeypatch, flag, path):
    read_only = files["tmp"] / "ro"
    read_only.mkdir()
    read_only.chmod(0o555)
    if os.geteuid() == 0:  # root writes anywhere, and os.access tells it so: be a user who may not write there
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: os.path.abspath(p) != str(read_only) and access(
            p, mode, **kw))

    def loads(*args, **kwargs):
        raise AssertionError("the model and data were loaded before the output folder was checked")

    monkeypatch.setattr("hf_ralm.cli.retrieve.text_and_model", loads)
    try:
        retrievals = ["--save-retrieval-file", str(files["tmp"] / "r.json")] if flag == "--output-dir" else []
        fail(capsys, files, ["retrieve", *evaluation(files, flag, str(files["tmp"] / path), *retrievals)],
             f"{read_only} cannot be written to", f"give {flag} a path in a folder you can write to")
    finally:
        read_only.chmod(0o755)
    assert list(read_only.iterdir()) == []


def test_a_rerun_replaces_hf_ralms_own_outputs_and_says_so(files, capsys):
    retrievals, out = files["tmp"] / "r.json", files["out"]
    argv = ["retrieve", *evaluation(files, "--save-retrieval-file", str(retrievals), "--output-dir", str(out))]
    main(argv)
    first = retrievals.read_bytes()
    assert "replacing" not in capsys.readouterr().err
    main(argv)  # a rerun: the same files, written again
    err = capsys.readouterr().err
    assert f"hf-ralm: replacing {retrievals} (the retrieval file hf-ralm wrote there)" in err
    assert f"hf-ralm: replacing {out / 'eval.json'} (the evaluation report hf-ralm wrote there)" in err
    assert retrievals.read_bytes() == first
    main(generation(files, "--output-json", str(files["tmp"] / "g.json")))
    main(generation(files, "--output-json", str(files["tmp"] / "g.json")))
    assert f"hf-ralm: replacing {files['tmp'] / 'g.json'}" in capsys.readouterr().err
    assert json.loads((files["tmp"] / "g.json").read_text())[0]["prompt"] == "the emperor"


@pytest.mark.parametrize("command", ["generate", "eval-lm"])
def test_a_full_disk_names_the_file_being_written(files, capsys, monkeypatch, command):
    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")  # as fsync raises it: naming no file

    if command == "generate":
        argv, written = generation(files, "--output-json", str(files["tmp"] / "g.json")), files["tmp"] / "g.json"
    else:  # the records' folder (its settings file or first chunk), once the index is built
        argv, written = ["eval-lm", *evaluation(files, "--output-dir", str(files["out"]))], files["out"]
        main(["eval-lm", *evaluation(files)])
        capsys.readouterr()
    monkeypatch.setattr(os, "fsync", full)
    line = fail(capsys, files, argv, "[Errno 28] No space left on device: ")
    assert f"'{written}" in line, line
