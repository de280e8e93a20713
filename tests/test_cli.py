"""The ``hf-ralm`` command line, run in-process on a tiny local model folder, dataset and corpus."""

from __future__ import annotations

import json
import math

import pytest

from conftest import ARTICLES, EVAL_TEXT, write_jsonl
from hf_ralm.cli import build_parser, load_dataset_text, main
from hf_ralm.windows import count_words, join_rows

FIGURE_KEYS = {"nll_sum", "num_tokens", "num_scored", "num_words", "token_ppl", "word_ppl"}


@pytest.fixture()
def files(tmp_path, tiny_model_dir):
    sentences = [s.strip() + " ." for s in EVAL_TEXT.split(" . ") if s.strip(" .")]
    rows = [{"text": " = Title = \n"}, {"text": ""}] + [{"text": " " + s + "\n"} for s in sentences]
    dataset = write_jsonl(tmp_path / "data.jsonl", rows)
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    return {
        "model": str(tiny_model_dir),
        "dataset": str(dataset),
        "text": join_rows(r["text"] for r in rows),
        "corpus": str(corpus),
        "index": str(tmp_path / "index"),
        "out": tmp_path / "out",
        "tmp": tmp_path,
    }


def common(files, *extra):
    return ["--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16", "--stride", "4",
            "--query-length", "8", "--device", "cpu", *extra]


def run(capsys, argv):
    main(argv)
    return capsys.readouterr().out


def fail(capsys, argv) -> str:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err.strip(), "a failing command must say why"
    return err


def test_index_retrieve_eval(files, capsys):
    out = run(capsys, ["index", "--corpus", files["corpus"], "--index-dir", files["index"]])
    assert json.loads(out) == {"index_dir": files["index"], "num_passages": len(ARTICLES)}
    info = json.loads((files["tmp"] / "index" / "hf_ralm_index.json").read_text())
    assert info["num_passages"] == len(ARTICLES)

    retrieval_file = files["tmp"] / "retrieval.json"
    out = run(capsys, ["retrieve", *common(files, "--retriever", "bm25", "--index-dir", files["index"],
                                           "--corpus", files["corpus"], "--save-retrieval-file", str(retrieval_file))])
    summary = json.loads(out)
    records = json.loads(retrieval_file.read_text())
    assert summary["num_windows"] == len(records)
    assert records[0]["query"] is None and records[0]["retrieved_docs"] == []
    assert records[0]["begin_location"] == 0 and records[0]["end_location"] == 16
    with_docs = [r for r in records[1:] if r["retrieved_docs"]]
    assert summary["num_windows_with_passage"] == len(with_docs) > 0
    assert {d["title"] for r in with_docs for d in r["retrieved_docs"]} <= {a["title"] for a in ARTICLES}
    assert not (files["out"] / "eval.json").exists()  # retrieve scores nothing

    live_dir, file_dir = files["tmp"] / "live", files["tmp"] / "from-file"
    out = run(capsys, ["eval-lm", *common(files, "--retriever", "bm25", "--index-dir", files["index"],
                                          "--corpus", files["corpus"], "--output-dir", str(live_dir))])
    printed = json.loads(out)
    live = json.loads((live_dir / "eval.json").read_text())
    assert FIGURE_KEYS <= set(live)
    assert {k: live[k] for k in printed} == printed
    assert live["num_scored"] == live["num_tokens"] - 1
    assert live["num_words"] == count_words(files["text"])
    assert live["token_ppl"] == pytest.approx(math.exp(live["nll_sum"] / live["num_tokens"]))
    assert live["word_ppl"] == pytest.approx(math.exp(live["nll_sum"] / live["num_words"]))
    assert live["num_windows"] == len(records)
    assert live["num_windows_with_passage"] == len(with_docs)
    assert live["args"]["stride"] == 4 and "timings" in live

    run(capsys, ["eval-lm", *common(files, "--retrieval-file", str(retrieval_file), "--output-dir", str(file_dir))])
    reused = json.loads((file_dir / "eval.json").read_text())
    for key in FIGURE_KEYS | {"num_windows", "num_windows_with_passage"}:
        assert reused[key] == pytest.approx(live[key], rel=1e-9), key

    # and retrieval really changes the figures (the file's passages were used)
    plain_dir = files["tmp"] / "plain"
    run(capsys, ["eval-lm", *common(files, "--output-dir", str(plain_dir))])
    plain = json.loads((plain_dir / "eval.json").read_text())
    assert plain["num_windows_with_passage"] == 0
    assert plain["nll_sum"] != pytest.approx(live["nll_sum"], rel=1e-6)
    assert plain["num_tokens"] == live["num_tokens"]


def test_eval_lm_options(files, capsys):
    out_a, out_b = files["tmp"] / "a", files["tmp"] / "b"
    run(capsys, ["eval-lm", *common(files, "--max-eval-tokens", "40", "--batch-size", "3", "--output-dir",
                                    str(out_a))])
    run(capsys, ["eval-lm", *common(files, "--max-eval-tokens", "40", "--no-prefix-kv-reuse", "--bos-every-window",
                                    "--output-dir", str(out_b))])
    a = json.loads((out_a / "eval.json").read_text())
    b = json.loads((out_b / "eval.json").read_text())
    assert a["num_tokens"] == b["num_tokens"] == 40
    assert b["args"]["bos_every_window"] and b["args"]["no_prefix_kv_reuse"]
    assert a["nll_sum"] != pytest.approx(b["nll_sum"], rel=1e-6)  # the BOS changes the scores


def test_plain_text_dataset(files, tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("just some text\n")
    assert load_dataset_text(str(path)) == "just some text\n"
    assert load_dataset_text(files["dataset"]) == files["text"]
    with pytest.raises(FileNotFoundError, match="neither a file nor a loadable HF dataset"):
        load_dataset_text(str(tmp_path / "missing-dataset"))


def test_error_missing_corpus(files, capsys):
    missing = str(files["tmp"] / "missing.jsonl")
    err = fail(capsys, ["eval-lm", *common(files, "--retriever", "bm25", "--index-dir", files["index"],
                                           "--corpus", missing)])
    assert "corpus file not found" in err and missing in err
    err = fail(capsys, ["index", "--corpus", missing, "--index-dir", files["index"]])
    assert "Corpus file not found" in err and missing in err
    assert "Traceback" not in err


@pytest.mark.parametrize("rows", [[], [{"text": ""}, {"text": ""}]])
def test_error_empty_dataset(files, capsys, rows):
    empty = write_jsonl(files["tmp"] / "empty.jsonl", rows)
    argv = common(files)
    argv[argv.index("--dataset-path") + 1] = str(empty)
    err = fail(capsys, ["eval-lm", *argv])
    assert "empty" in err and str(empty) in err


def test_error_unknown_model_folder(files, capsys):
    missing = str(files["tmp"] / "no-such-model")
    argv = common(files)
    argv[argv.index("--model") + 1] = missing
    err = fail(capsys, ["eval-lm", *argv])
    assert "Could not load the causal LM" in err and missing in err


@pytest.mark.parametrize(
    "flag,value,message",
    [
        ("--stride", "0", "--stride must be at least 1, got 0"),
        ("--query-length", "0", "--query-length must be at least 1, got 0"),
        ("--stride", "-3", "--stride must be at least 1, got -3"),
        ("--max-doc-tokens", "0", "--max-doc-tokens must be at least 1"),
        ("--batch-size", "0", "--batch-size must be at least 1"),
        ("--max-length", "4", "--max-length (4) must be larger than --stride (4)"),
    ],
)
@pytest.mark.parametrize("command", ["eval-lm", "retrieve"])
def test_error_bad_numbers(files, capsys, flag, value, message, command):
    argv = common(files, "--save-retrieval-file", str(files["tmp"] / "r.json"))
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    err = fail(capsys, [command, *argv])
    assert message in err
    assert not (files["tmp"] / "r.json").exists()


def test_error_missing_arguments(files, capsys):
    err = fail(capsys, ["eval-lm", "--dataset-path", files["dataset"]])
    assert "--model is required" in err
    err = fail(capsys, ["eval-lm", "--model", files["model"]])
    assert "--dataset-path is required" in err
    err = fail(capsys, ["eval-lm", *common(files, "--retriever", "bm25")])
    assert "needs --index-dir" in err
    err = fail(capsys, ["retrieve", *common(files)])
    assert "needs --save-retrieval-file" in err
    err = fail(capsys, ["eval-lm", *common(files, "--retrieval-file", str(files["tmp"] / "nope.json"))])
    assert "Retrieval file not found" in err


def test_error_retrieval_file_of_other_settings(files, capsys):
    retrieval_file = files["tmp"] / "r.json"
    run(capsys, ["retrieve", *common(files, "--save-retrieval-file", str(retrieval_file))])
    argv = common(files, "--retrieval-file", str(retrieval_file))
    argv[argv.index("--stride") + 1] = "2"
    err = fail(capsys, ["eval-lm", *argv])
    assert "windows but this evaluation has" in err


def test_parser_defaults():
    args = build_parser().parse_args(["eval-lm", "--model", "m", "--dataset-path", "d"])
    assert (args.stride, args.query_length, args.max_doc_tokens, args.num_docs) == (4, 32, 256, 1)
    assert args.retriever == "none" and args.dtype == "float32" and args.max_length is None
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval-lm", "--retriever", "dpr"])
