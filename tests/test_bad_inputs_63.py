"""Bad inputs of issue 63, each refused in one line naming the path or the flag (exit status 2 on the command line),
before any model loads where the input alone shows it: writes through symbolic links, devices and FIFOs as outputs,
a full disk during an index build, out-of-range sampling and ensemble values, a retrieval file or a plain folder as
the dataset, a folder as the corpus, a lone surrogate in a JSON row, a misspelt flag, a saved folder's broken
config.json or missing base model, and a missing corpus file behind lm-eval's ``--model_args``."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from conftest import ARTICLES, ON_TEST_DEVICE, TEST_DEVICE_ARGS, fail, write_jsonl
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.errors import OutputFolderError
from hf_ralm.cli import main


def generation(files, *extra: str) -> list[str]:
    return ["generate", "--model", files["model"], *TEST_DEVICE_ARGS, "--prompt", "the emperor", "--max-new-tokens",
            "2", *extra]


def evaluation(files, *extra: str) -> list[str]:
    return ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16",
            "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--output-dir",
            str(files["out"]), *extra]


@pytest.fixture()
def no_model_loads(monkeypatch):
    """A model loaded fails the test: the input alone shows what is wrong."""
    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded before the bad input was refused")

    monkeypatch.setattr("hf_ralm.core.engines.transformers._load_base_model", refuse)


# ----------------------------------------------------------------------------------------------------------------
# 6. Writes through links, outputs that never end, a full disk
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry", ["config.json", "README.md", "retriever_config.json"])
def test_save_pretrained_writes_no_file_through_a_link(tiny_model_dir, tmp_path, entry):
    """Before: config.json written through the link, over the user's file (no error)."""
    ralm = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), **ON_TEST_DEVICE)
    users = tmp_path / "users-notes.json"
    users.write_text("my notes")
    folder = tmp_path / "saved"
    folder.mkdir()
    os.symlink(users, folder / entry)
    with pytest.raises(OutputFolderError, match=rf"saved/{entry} is a symbolic link \(to .*users-notes.json\)"):
        ralm.save_pretrained(folder)
    assert users.read_text() == "my notes" and os.path.islink(folder / entry)
    assert not (folder / "config.json").exists() or entry == "config.json"  # nothing written


def test_save_pretrained_writes_no_index_through_a_linked_folder(tiny_model_dir, tiny_index, tmp_path):
    """``index`` a link to a folder elsewhere: the copy would land (or remove files) there."""
    ralm = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], **ON_TEST_DEVICE)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    folder = tmp_path / "saved"
    folder.mkdir()
    os.symlink(elsewhere, folder / "index")
    with pytest.raises(OutputFolderError, match="saved/index is a symbolic link"):
        ralm.save_pretrained(folder, save_index=True)
    assert os.listdir(elsewhere) == []


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_device_or_fifo_as_output_file_is_refused_before_loading(files, capsys, monkeypatch, no_model_loads,
                                                                   kind):
    """Before: /dev/full was read for ever to tell whether hf-ralm wrote it (23 GB, killed); here such a read fails
    the test at once instead."""
    read_text = Path.read_text

    def read_only_files(path, *args, **kwargs):
        assert path.is_file(), f"{path} was read"
        return read_text(path, *args, **kwargs)

    monkeypatch.setattr(Path, "read_text", read_only_files)
    target = "/dev/full"
    if kind == "fifo":
        target = str(files["tmp"] / "pipe")
        os.mkfifo(target)
    what = "a character device" if kind == "device" else "a named pipe (FIFO)"
    fail(capsys, files, generation(files, "--output-json", target), f"{target} is {what}, not a regular file",
         "give --output-json another path")


def test_a_link_as_output_file_is_refused(files, capsys, no_model_loads):
    """A link to a generation output hf-ralm wrote elsewhere: not replaced (the link dropped) without a word."""
    users = files["tmp"] / "theirs.json"
    users.write_text(json.dumps([], indent=2) + "\n")
    link = files["tmp"] / "out.json"
    os.symlink(users, link)
    fail(capsys, files, generation(files, "--output-json", str(link)), f"{link} is a symbolic link (to {users})")
    assert os.path.islink(link)


def test_a_link_in_the_output_folder_is_refused(files, capsys, no_model_loads):
    elsewhere = files["tmp"] / "elsewhere"
    elsewhere.mkdir()
    files["out"].mkdir()
    os.symlink(elsewhere, files["out"] / "windows")
    fail(capsys, files, evaluation(files), "out/windows is a symbolic link", "or give another --output-dir")


@pytest.mark.parametrize("error", [OSError("210184 requested and 165856 written"),  # numpy's, on a full disk
                                   OSError(errno.ENOSPC, "No space left on device")])  # pyarrow's: no file named
def test_a_full_disk_during_an_index_build_names_the_index(files, capsys, monkeypatch, error):
    def full(*args, **kwargs):
        raise error

    monkeypatch.setattr("hf_ralm.retrieval.bm25.save_bm25s", full)
    line = fail(capsys, files, ["index", "--corpus", files["corpus"], "--index-dir", files["index"]],
                "No space left on device", files["index"])
    assert "requested" not in line
    assert not os.path.exists(files["index"]) and not os.path.exists(files["index"] + ".tmp")


# ----------------------------------------------------------------------------------------------------------------
# 7. Values and files of the command line
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags, expected", [
    (["--do-sample", "--top-p", "2"], "argument --top-p: must be above 0 and at most 1"),
    (["--do-sample", "--top-p", "0"], "argument --top-p: must be above 0 and at most 1"),
    (["--do-sample", "--temperature", "inf"], "argument --temperature: must be a finite number above 0"),
    (["--ensemble", "2", "--ensemble-temperature", "inf"], "--ensemble-temperature must be a positive number, and"),
])
def test_sampling_and_ensemble_values_out_of_range(files, capsys, no_model_loads, flags, expected):
    fail(capsys, files, generation(files, *flags), expected)


def test_a_retrieval_file_as_the_dataset_is_refused(files, capsys, no_model_loads):
    """Before: its JSON was evaluated as text (9 windows of it)."""
    path = files["tmp"] / "retrievals.json"
    path.write_text(json.dumps([{"begin_location": 0, "end_location": 4, "future": "the", "query": None,
                                 "retrieved_docs": []},
                                {"begin_location": 4, "end_location": 8, "future": "rome", "query": "the",
                                 "retrieved_docs": [{"id": "1", "title": "Rome", "text": "r", "score": 1.0}]}]))
    files["dataset"] = str(path)
    fail(capsys, files, evaluation(files), f"--dataset-path {str(path)!r} is a retrieval file",
         "give it as --retrieval-file")


def test_a_plain_folder_as_the_dataset_says_what_it_holds(files, capsys, no_model_loads):
    folder = files["tmp"] / "notes"
    folder.mkdir()
    (folder / "a.txt").write_text("some notes\n")
    files["dataset"] = str(folder)
    fail(capsys, files, evaluation(files), f"{str(folder)!r} is a folder (of a.txt)", "not 'test'",
         "a .jsonl file of rows with a 'text' field, a text file, or a Hugging Face dataset",
         "--dataset-name and --dataset-split")


@pytest.mark.parametrize("command", ["index", "eval-lm"])
def test_a_folder_as_the_corpus_is_named_a_folder(files, capsys, no_model_loads, command):
    folder = files["tmp"] / "wiki"
    folder.mkdir()
    flags = ["--corpus", str(folder), "--index-dir", files["index"]]
    argv = ["index", *flags] if command == "index" else evaluation(files, "--retriever", "bm25", *flags)
    fail(capsys, files, argv, f"The corpus {str(folder)!r} is a folder, not a corpus file", "JSONL")


@pytest.mark.parametrize("what", ["dataset", "corpus"])
def test_a_lone_surrogate_in_a_json_row_names_the_file_and_line(files, capsys, what):
    path = files["tmp"] / f"{what}-bad.jsonl"
    good = ARTICLES[0] if what == "corpus" else {"text": "the emperor"}
    path.write_text(json.dumps(good) + "\n" + json.dumps({**good, "text": "bad \ud800 row"}) + "\n")
    if what == "dataset":
        files["dataset"] = str(path)
        argv = evaluation(files)
    else:
        argv = ["index", "--corpus", str(path), "--index-dir", files["index"]]
    fail(capsys, files, argv, f"{path}:2: a string of the row holds a lone surrogate (\\ud800)")


def test_a_surrogate_pair_is_one_character(files):
    from hf_ralm.core.data import load_dataset_text

    path = write_jsonl(files["tmp"] / "pair.jsonl", [{"text": "smile \U0001F600"}])  # json.dumps escapes the pair
    assert "\\ud83d\\ude00" in path.read_text()
    assert load_dataset_text(str(path)) == "smile \U0001F600"


def test_a_misspelt_flag_shows_the_commands_usage_and_the_nearest_flag(files, capsys):
    with pytest.raises(SystemExit) as info:
        main(["eval-lm", "--model", files["model"], "--strid", "4"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: hf-ralm eval-lm ")
    assert err.rstrip().splitlines()[-1] == \
        "hf-ralm: error: unrecognized arguments: --strid 4 (did you mean --stride?)"


@pytest.fixture()
def saved_folder(tiny_model_dir, tmp_path) -> Path:
    ralm = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), max_length=16, **ON_TEST_DEVICE)
    ralm.save_pretrained(tmp_path / "my-ralm")
    return tmp_path / "my-ralm"


def test_a_saved_config_that_is_no_json_is_named(files, capsys, saved_folder):
    """Before: 'Could not load the causal LM ... from the Hub'."""
    (saved_folder / "config.json").write_text("{not json")
    files["model"] = str(saved_folder)
    line = fail(capsys, files, evaluation(files), f"{saved_folder}/config.json is not JSON",
                "line 1 column 2")
    assert "Could not load" not in line


def test_a_saved_base_model_that_is_not_there_is_named(files, capsys, saved_folder, no_model_loads):
    config = json.loads((saved_folder / "config.json").read_text())
    config["base_model_name_or_path"] = str(files["tmp"] / "gone-model")
    (saved_folder / "config.json").write_text(json.dumps(config))
    files["model"] = str(saved_folder)
    line = fail(capsys, files, evaluation(files), f"{saved_folder}/config.json: its base_model_name_or_path",
                "gone-model", "does not exist on this machine")
    assert "Could not load" not in line


def test_a_missing_corpus_fails_before_the_base_model_loads(tiny_model_dir, tmp_path, no_model_loads):
    with pytest.raises(FileNotFoundError, match="Corpus file not found"):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                corpus=str(tmp_path / "missing.jsonl"), **ON_TEST_DEVICE)


def test_lm_eval_checks_the_corpus_before_its_tasks_and_model_load(files, capsys, monkeypatch):
    """Before: lm-eval indexed its tasks and loaded the model first (13 s), then the corpus was found missing."""
    from test_lm_eval import require

    require("lm_eval")
    # lm-eval binds its log handler, once per process, to the stderr of its first run: here capsys's, closed after
    # this test, so the later lm-eval tests would log into a closed stream
    monkeypatch.setattr("lm_eval.utils._LOGGING_CONFIGURED", True)

    def refuse(*args, **kwargs):
        raise AssertionError("lm-eval went on before the corpus was checked")

    monkeypatch.setattr("lm_eval._cli.harness.HarnessCLI.execute", refuse)
    missing = files["tmp"] / "missing.jsonl"
    with pytest.raises(SystemExit) as info:
        main(["lm-eval", "--model_args", f"pretrained={files['model']},retriever=bm25,corpus={missing}",
              "--tasks", "wikitext"])
    assert info.value.code == 2
    assert f"Corpus file not found: '{missing}'" in capsys.readouterr().err
