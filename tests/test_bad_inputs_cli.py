"""Bad input that used to end in a traceback, a hang or a message that named neither the file nor the setting, through
the ``hf-ralm`` command line (in-process, tiny model and corpora): every case ends with one line
``hf-ralm: error: ...`` naming the file (and line) or the flag, exit status 2, and nothing written where the results
would go. The workers' start (``--num-shards``, ``--shard-id``) is inside the command line's handling too, QA rows are
checked field by field before use, a FIFO is refused before anything opens it, and a TSV corpus holds fields of any
length."""

from __future__ import annotations

import gzip
import json
import os
import signal
from contextlib import contextmanager

import pytest

from conftest import ARTICLES, TEST_DEVICE_ARGS, fail, write_jsonl
from hf_ralm.cli import main
from hf_ralm.runs.shards import Shard


@contextmanager
def within(seconds: int):
    """Fail, instead of hanging the test run, when the block takes longer than ``seconds`` (a FIFO read waits for a
    writer for ever)."""
    def expired(*_):
        raise AssertionError(f"still running after {seconds} s: something waits on the FIFO")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def eval_lm(files, *extra: str) -> list[str]:
    """A valid ``eval-lm`` of the tiny model, writing to ``out``."""
    return ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16",
            "--max-doc-tokens", "8", "--stride", "4", *TEST_DEVICE_ARGS, "--output-dir", str(files["out"]), *extra]


def eval_qa(files, questions, *extra: str) -> list[str]:
    return ["eval-qa", "--model", files["model"], "--questions", str(questions), *TEST_DEVICE_ARGS,
            "--output-dir", str(files["out"]), "--max-new-tokens", "2", *extra]


# ----------------------------------------------------------------------------------------------------------------
# The workers' start: its errors are the command line's too
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("flags,expected", [
    (["--num-shards", "0"], "--num-shards must be at least 1, got 0."),
    (["--num-shards", "-1"], "--num-shards must be at least 1, got -1."),
    (["--num-shards", "2", "--shard-id", "5"], "--shard-id must be from 0 to 1 (--num-shards=2), got 5."),
])
@pytest.mark.parametrize("command", ["index", "eval-lm"])
def test_shard_flags_out_of_range(files, capsys, command, flags, expected):
    argv = ["index", "--corpus", files["corpus"], "--index-dir", files["index"]] if command == "index" else \
        eval_lm(files)
    fail(capsys, files, [*argv, *flags], expected)
    assert not os.path.exists(files["index"])


@pytest.mark.parametrize("environ,expected", [
    ({"RANK": "one", "WORLD_SIZE": "2"}, "The environment variable RANK='one' is not an integer"),
    ({"RANK": "2", "WORLD_SIZE": "2"}, "torchrun's RANK and WORLD_SIZE make this process worker 2 of 2 workers"),
    ({"SLURM_ARRAY_TASK_ID": "3", "SLURM_ARRAY_TASK_COUNT": "0"}, "worker 3 of 0 workers"),
])
def test_launcher_variables_that_make_no_worker(environ, expected):
    with pytest.raises(ValueError, match="num_shards and shard_id") as info:
        Shard.resolve(environ=environ)
    assert expected in str(info.value)


# ----------------------------------------------------------------------------------------------------------------
# QA rows, checked field by field before use
# ----------------------------------------------------------------------------------------------------------------


QUESTION = {"question": "who was the first emperor of rome", "answers": ["augustus"],
            "ctxs": [{"title": "Rome", "text": ARTICLES[0]["text"]}]}


@pytest.mark.parametrize("change,expected", [
    ({"answers": 5}, ":2: question 2: 'answers' is 5, not a list of strings (the gold answers)"),
    ({"answers": ["rome", 5]}, ":2: question 2: 'answers' is ['rome', 5], not a list of strings"),
    ({"answers": None, "answer": {"text": "x"}}, ":2: question 2: 'answer' is {'text': 'x'}, not a list of strings"),
    ({"question": 7}, ":2: question 2: 'question' is 7, not the question's text"),
    ({"ctxs": ["Rome", "Sailing"]}, ":2: question 2: ctxs[0] is 'Rome', not a {title, text} passage"),
    ({"ctxs": {"title": "Rome"}}, ":2: question 2: 'ctxs' is {'title': 'Rome'}, not a list of {title, text}"),
    ({"ctxs": [{"title": ["Rome"], "text": "rome"}]}, ":2: question 2: ctxs[0] has 'title' ['Rome'], not a string"),
    ({"ctxs": [{"title": "Rome", "text": 5}]}, ":2: question 2: ctxs[0] has 'text' 5, not a string"),
])
@pytest.mark.parametrize("use", [["--use-ctxs"], ["--add-gold-to-corpus", "--retriever", "bm25"]])
def test_qa_rows_of_the_wrong_types(files, capsys, change, expected, use):
    row = {key: value for key, value in {**QUESTION, **change}.items() if value is not None}
    questions = write_jsonl(files["tmp"] / "q.jsonl", [QUESTION, row])
    argv = eval_qa(files, questions, *use, *(["--corpus", files["corpus"]] if "--retriever" in use else []))
    fail(capsys, files, argv, f"{questions}{expected}", "fix or remove that question")
    assert not (files["out"] / "gold-passages.jsonl").exists()


def test_qa_rows_of_a_json_list_name_the_question(files, capsys):
    questions = files["tmp"] / "dpr.json"
    questions.write_text(json.dumps([QUESTION, QUESTION, {**QUESTION, "answers": [["augustus"]]}]))
    fail(capsys, files, eval_qa(files, questions, "--use-ctxs"),
         f"{questions}: question 3: 'answers' is [['augustus']], not a list of strings")
    questions.write_text("[" + json.dumps(QUESTION))
    fail(capsys, files, eval_qa(files, questions, "--use-ctxs"), f"{questions} is not JSON (Expecting")


# ----------------------------------------------------------------------------------------------------------------
# Input files that are no regular files, and damaged gzip files
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("what", ["dataset", "questions", "corpus", "index corpus", "retrieval file"])
def test_a_fifo_is_refused_before_it_is_opened(files, capsys, what):
    fifo = files["tmp"] / "stream.jsonl"
    os.mkfifo(fifo)
    argv = {
        "dataset": eval_lm(files),
        "questions": eval_qa(files, fifo),
        "corpus": eval_lm(files, "--retriever", "bm25", "--corpus", str(fifo), "--index-dir", files["index"]),
        "index corpus": ["index", "--corpus", str(fifo), "--index-dir", files["index"]],
        "retrieval file": eval_lm(files, "--retrieval-file", str(fifo)),
    }[what]
    if what == "dataset":
        argv[argv.index("--dataset-path") + 1] = str(fifo)
    with within(60):
        fail(capsys, files, argv, f"'{fifo}' is a named pipe (FIFO), not a regular file", "save the data to a file")
    assert not os.path.exists(files["index"])


def test_a_device_is_refused_as_a_dataset(files, capsys):
    argv = eval_lm(files)
    argv[argv.index("--dataset-path") + 1] = os.devnull
    fail(capsys, files, argv, f"The dataset '{os.devnull}' is a character device, not a regular file")


@pytest.mark.parametrize("damage,expected", [
    (lambda data: b"not gzip at all", "Not a gzipped file"),
    (lambda data: data[: len(data) // 2], "Compressed file ended before the end-of-stream marker was reached"),
])
@pytest.mark.parametrize("what", ["dataset", "corpus", "questions"])
def test_a_damaged_gzip_file_is_named(files, capsys, damage, expected, what):
    rows = [{"text": f"the king {i} and the queen"} for i in range(2000)] if what == "dataset" else \
        ARTICLES * 400 if what == "corpus" else [QUESTION] * 400
    path = files["tmp"] / f"{what}.jsonl.gz"
    path.write_bytes(damage(gzip.compress("".join(json.dumps(row) + "\n" for row in rows).encode())))
    argv = {"dataset": eval_lm(files), "corpus": ["index", "--corpus", str(path), "--index-dir", files["index"]],
            "questions": eval_qa(files, path, "--use-ctxs")}[what]
    if what == "dataset":
        argv[argv.index("--dataset-path") + 1] = str(path)
    fail(capsys, files, argv, f"{path}: the", "is not a whole gzip file", expected, "fetch or write it again")
    assert not os.path.exists(files["index"])


# ----------------------------------------------------------------------------------------------------------------
# Corpora: long TSV fields, titles that are no strings, --words-per-passage
# ----------------------------------------------------------------------------------------------------------------


def test_tsv_corpus_with_a_field_longer_than_csvs_default_limit_is_indexed(files, capsys):
    corpus = files["tmp"] / "long.tsv"
    article = " ".join(["rome"] * 40_000)  # 199,999 characters in one field (csv's default limit: 131,072)
    corpus.write_text(f"id\ttext\ttitle\n1\t{article}\tRome\n2\tthe king sat on the throne\tKingdom\n")
    main(["index", "--corpus", str(corpus), "--index-dir", files["index"]])
    assert json.loads(capsys.readouterr().out)["num_passages"] == 400 + 1  # 100 words each


@pytest.mark.parametrize("title", [5, ["Rome", "Roma"], {"en": "Rome"}])
def test_corpus_title_that_is_no_string_names_the_line(files, capsys, title):
    corpus = write_jsonl(files["tmp"] / "titles.jsonl", [ARTICLES[0], {**ARTICLES[1], "title": title}])
    fail(capsys, files, ["index", "--corpus", str(corpus), "--index-dir", files["index"]],
         f"{corpus}:2: the row's 'title' is {title!r}, not a string")
    assert not os.path.exists(files["index"])


def test_words_per_passage_is_checked_as_a_setting(files, capsys):
    argv = ["index", "--corpus", files["corpus"], "--index-dir", files["index"], "--words-per-passage"]
    for value in ("-5", "-1"):
        line = fail(capsys, files, [*argv, value], f"--words-per-passage must be at least 0, got {value}.")
        assert "corpus" not in line  # refused before the build announces it or makes its folder:
        assert not os.path.exists(files["index"]) and not os.path.exists(f"{files['index']}.tmp")
    main([*argv, "0"])  # the rows are the passages
    assert json.loads(capsys.readouterr().out)["num_passages"] == len(ARTICLES)
