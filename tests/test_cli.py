"""The ``hf-ralm`` command line, run in-process on a tiny local model folder, dataset and corpus."""

from __future__ import annotations

import json
import math
import re

import pytest

from conftest import ARTICLES, EVAL_TEXT, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm.cli import FLAGS, build_parser, error_message, main
from hf_ralm.errors import SettingError
from hf_ralm.config.configuration_ralm import RalmConfig
from hf_ralm.config.settings import RALM_FIELDS
from hf_ralm.core.data import join_rows, load_dataset_text
from hf_ralm.core.perplexity import count_words

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
            "--query-length", "8", "--max-doc-tokens", "12", *TEST_DEVICE_ARGS, *extra]


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


def test_index_retrieve_eval(files, capsys, monkeypatch):
    out = run(capsys, ["index", "--corpus", files["corpus"], "--index-dir", files["index"]])
    assert json.loads(out) == {"index_dir": files["index"], "num_passages": len(ARTICLES)}
    info = json.loads((files["tmp"] / "index" / "hf_ralm_index.json").read_text())
    assert info["num_passages"] == len(ARTICLES)

    retrieval_file = files["tmp"] / "retrieval.json"

    def no_weights(*args):
        raise AssertionError("retrieve without a ranking reader must not load the model's weights")

    with monkeypatch.context() as patch:
        patch.setattr("hf_ralm.core.engines.transformers._load_base_model", no_weights)
        out = run(capsys, ["retrieve", *common(files, "--retriever", "bm25", "--index-dir", files["index"], "--corpus",
                                               files["corpus"], "--save-retrieval-file", str(retrieval_file))])
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
    with pytest.raises(FileNotFoundError, match="missing-dataset' does not exist: give a .jsonl/.jsonl.gz file"):
        load_dataset_text(str(tmp_path / "missing-dataset"))  # a local path: not looked up on the Hub


def test_error_missing_corpus(files, capsys):
    missing = str(files["tmp"] / "missing.jsonl")
    err = fail(capsys, ["eval-lm", *common(files, "--retriever", "bm25", "--index-dir", files["index"],
                                           "--corpus", missing)])
    assert "Corpus file not found" in err and missing in err
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
    assert f"The --model '{missing}' does not exist: give a model folder" in err


BAD_NUMBERS = [
    ("--stride", "0", "--stride must be at least 1, got 0"),
    ("--query-length", "0", "--query-length must be at least 1, got 0"),
    ("--stride", "-3", "--stride must be at least 1, got -3"),
    ("--max-doc-tokens", "0", "--max-doc-tokens must be at least 1"),
    ("--batch-size", "0", "argument --batch-size: must be a count (at least 1) or auto, got '0'"),
    ("--max-length", "4", "--max-length (4) must be larger than --stride (4)"),
    ("--max-eval-tokens", "1", "--max-eval-tokens must be at least 2, got 1"),
]


# retrieve puts no passage in context and runs no model batches: it has no --max-doc-tokens and no --batch-size
@pytest.mark.parametrize(
    "command,flag,value,message",
    [("eval-lm", *bad) for bad in BAD_NUMBERS]
    + [("retrieve", *bad) for bad in BAD_NUMBERS if bad[0] not in ("--max-doc-tokens", "--batch-size")],
)
def test_error_bad_numbers(files, capsys, command, flag, value, message):
    argv = common(files, "--save-retrieval-file", str(files["tmp"] / "r.json"))
    if flag in argv:
        argv[argv.index(flag) + 1] = value
    else:
        argv += [flag, value]
    err = fail(capsys, [command, *argv])
    assert message in err
    assert err.splitlines()[-1].startswith(f"hf-ralm: error: {message}")  # one last line, with the flag
    assert not (files["tmp"] / "r.json").exists()


def test_error_missing_arguments(files, capsys):
    err = fail(capsys, ["eval-lm", "--dataset-path", files["dataset"]])
    assert "--model is required" in err
    err = fail(capsys, ["eval-lm", "--model", files["model"]])
    assert "--dataset-path is required" in err
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
    assert (args.stride, args.query_length, args.max_doc_tokens) == (4, 32, 256)
    assert (args.stride, args.max_doc_tokens) == (RalmConfig.retrieval_stride, RalmConfig.max_doc_tokens)
    assert "num_docs" not in vars(args)  # eval-lm retrieves the one passage per window it puts in context
    assert args.retriever == "none" and args.dtype == "auto" and args.max_length is None and args.batch_size == 8
    assert build_parser().parse_args(["eval-qa", "--batch-size", "auto"]).batch_size == "auto"
    with pytest.raises(SystemExit):
        build_parser().parse_args(["eval-lm", "--retriever", "dpr"])


def test_none_run_counts_no_retrievals(files, capsys):
    """Without a retriever no retrieval is made: nothing is counted as an empty retrieval."""
    plain_dir, live_dir = files["tmp"] / "plain", files["tmp"] / "live"
    run(capsys, ["eval-lm", *common(files, "--output-dir", str(plain_dir))])
    plain = json.loads((plain_dir / "eval.json").read_text())
    assert plain["num_windows"] > 1
    assert plain["num_retrievals"] == plain["num_empty_retrievals"] == plain["num_windows_with_passage"] == 0
    retrieval_file = files["tmp"] / "r.json"
    run(capsys, ["eval-lm", *common(files, "--retriever", "bm25", "--index-dir", files["index"], "--corpus",
                                    files["corpus"], "--output-dir", str(live_dir),
                                    "--save-retrieval-file", str(retrieval_file))])
    live = json.loads((live_dir / "eval.json").read_text())
    assert live["num_retrievals"] == live["num_windows"] - 1  # every window but window 0
    assert live["num_windows_with_passage"] + live["num_empty_retrievals"] == live["num_retrievals"]
    records = json.loads(retrieval_file.read_text())
    assert all(len(r["retrieved_docs"]) <= 1 for r in records)  # one passage per window: the one put in context
    from_file_dir = files["tmp"] / "from-file"
    run(capsys, ["eval-lm", *common(files, "--retrieval-file", str(retrieval_file), "--output-dir",
                                    str(from_file_dir))])
    from_file = json.loads((from_file_dir / "eval.json").read_text())
    for key in ("num_retrievals", "num_windows_with_passage", "num_empty_retrievals"):
        assert from_file[key] == live[key], key


RERANK_FLAGS = {"--rerank", "--rerank-candidates", "--rerank-tokens", "--reranker-model", "--rerank-allow-no-passage",
                "--rerank-no-passage-margin", "--rerank-seed"}
BEYOND_FLAGS = {"--retrieval-gate", "--gate-threshold", "--num-passages", "--max-context-doc-tokens", "--ensemble",
                "--ensemble-temperature"}  # issue 10: gates, several passages, ensembles
RESUME_FLAGS = ("--chunk-size", "--overwrite", "--repair", "--accept-unverified-chunks", "--num-shards", "--shard-id")
MODEL_FLAGS = ("--model", "--tokenizer", "--gguf-file", "--dtype", "--device", "--device-map", "--attn-implementation")
ENGINE_FLAGS = ("--engine", "--tensor-parallel-size", "--pipeline-parallel-size", "--gpu-memory-utilization",
                "--max-model-len", "--kv-cache-memory-bytes", "--enforce-eager",
                "--enable-prefix-caching")  # the commands that run a reader: the engines' options
COMMAND_FLAGS = {
    "index": {"--corpus", "--index-dir", "--retriever", "--encoder", "--pooling", "--encoder-dtype", "--faiss-factory",
              "--words-per-passage", "--num-shards", "--shard-id", "--verify"},
    "retrieve": {*MODEL_FLAGS, "--retriever", "--encoder", "--threads",
                 "--corpus", "--index-dir", "--forbidden-titles", "--stride", "--query-length", "--max-length",
                 "--dataset-path", "--dataset-name", "--dataset-split", "--max-eval-tokens", "--output-dir",
                 "--save-retrieval-file", "--save-retrieval-dataset", "--no-passage-texts", "--push-to-hub",
                 "--max-doc-tokens", "--bos-every-window", "--batch-size", *RERANK_FLAGS, *BEYOND_FLAGS,
                 *RESUME_FLAGS},
    "eval-lm": {*MODEL_FLAGS, "--retriever", "--encoder", "--threads",
                "--corpus", "--index-dir", "--forbidden-titles", "--stride", "--query-length", "--max-length",
                "--max-doc-tokens", "--bos-every-window", "--dataset-path", "--dataset-name", "--dataset-split",
                "--max-eval-tokens", "--batch-size", "--output-dir", "--retrieval-file", "--save-retrieval-file",
                "--no-prefix-kv-reuse", "--compare", "--allow-long-run", *RERANK_FLAGS, *BEYOND_FLAGS, *RESUME_FLAGS,
                *ENGINE_FLAGS},
    "generate": {*MODEL_FLAGS, "--retriever", "--encoder", "--threads",
                 "--corpus", "--index-dir", "--forbidden-titles", "--stride", "--query-length", "--max-length",
                 "--max-doc-tokens", "--bos-every-window", "--batch-size", "--prompt", "--prompts-file",
                 "--max-new-tokens", "--show-sources", "--output-json", "--do-sample", "--temperature", "--top-k",
                 "--top-p", "--seed", *RERANK_FLAGS, *BEYOND_FLAGS, *ENGINE_FLAGS},
    "eval-qa": {*MODEL_FLAGS, "--retriever", "--encoder", "--threads",
                "--corpus", "--index-dir", "--forbidden-titles", "--batch-size", "--output-dir", "--questions",
                "--use-ctxs", "--add-gold-to-corpus", "--num-docs", "--max-questions", "--questions-name",
                "--questions-split",
                "--max-new-tokens", "--max-length", "--num-shards",
                "--shard-id", "--repair", "--accept-unverified-chunks", *ENGINE_FLAGS},
    "rerank-data": {*MODEL_FLAGS, "--retriever", "--encoder", "--threads",
                    "--corpus", "--index-dir", "--forbidden-titles", "--stride", "--query-length", "--max-length",
                    "--max-doc-tokens", "--bos-every-window", "--batch-size", "--rerank-candidates", "--rerank-tokens",
                    "--articles", "--exclude-titles", "--num-articles", "--windows-per-article", "--max-windows",
                    "--output-dir", "--chunk-size", "--overwrite", "--repair", "--accept-unverified-chunks",
                    "--num-shards", "--shard-id", *ENGINE_FLAGS},
    "train-reranker": {"--data", "--init", "--output-dir", "--push-to-hub", "--epochs", "--batch-size",
                       "--learning-rate", "--seed", "--eval-fraction", "--no-passage-candidate", "--max-train-windows",
                       "--eval-points", "--bf16", "--attention-dropout", "--articles", "--index-dir"},
}


@pytest.mark.parametrize("command", sorted(COMMAND_FLAGS))
def test_help_lists_only_the_commands_flags(capsys, command):
    with pytest.raises(SystemExit) as info:
        main([command, "--help"])
    assert info.value.code == 0
    listed = set(re.findall(r"^  (?:-h, )?(--[a-z0-9-]+)", capsys.readouterr().out, re.MULTILINE)) - {"--help"}
    assert listed == COMMAND_FLAGS[command] | {"--debug"}  # every command takes --debug


def test_generate_help_has_no_dataset_flags(capsys):
    with pytest.raises(SystemExit):
        main(["generate", "--help"])
    out = capsys.readouterr().out
    assert "--dataset-path" not in out and "--retrieval-file" not in out and "--num-docs" not in out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["generate", "--prompt", "p", "--dataset-path", "d"], "unrecognized arguments: --dataset-path d"),
        (["eval-lm", "--retriever", "dpr"], "argument --retriever: invalid choice: 'dpr'"),
        (["eval-lm", "--stride", "four"], "argument --stride: invalid int value: 'four'"),
        (["retrieve", "--retrieval-file", "r.json"], "unrecognized arguments: --retrieval-file"),
        (["eval-qa", "--stride", "2"], "unrecognized arguments: --stride"),
        ([], "the following arguments are required: command"),
    ],
)
def test_usage_errors_end_with_one_hf_ralm_line(capsys, argv, message):
    err = fail(capsys, argv)
    assert err.splitlines()[-1].startswith(f"hf-ralm: error: {message}")


def test_config_errors_are_reported_with_flags():
    """Every RALM setting the command line passes on has its flag, and the config's errors read as flags."""
    assert {name for name in FLAGS if name in RALM_FIELDS} == {
        "retrieval_stride", "query_length", "max_length", "max_doc_tokens", "bos_every_window", "rerank",
        "rerank_candidates", "rerank_tokens", "reranker_model", "rerank_allow_no_passage", "rerank_no_passage_margin",
        "rerank_seed", "retrieval_gate", "gate_threshold", "num_passages", "max_context_doc_tokens", "ensemble_size",
        "ensemble_temperature"}
    with pytest.raises(SettingError) as info:
        RalmConfig(max_length=2, retrieval_stride=3)
    assert str(info.value) == ("max_length (2) must be larger than retrieval_stride (3), or windows would skip "
                               "tokens: lower retrieval_stride or raise max_length.")  # Python's names in Python
    assert error_message(info.value) == ("--max-length (2) must be larger than --stride (3), or windows would skip "
                                         "tokens: lower --stride or raise --max-length.")
    # only what the library marked as a setting becomes a flag: names in paths or other words stay
    plain = ValueError("max_lengths and my_max_length stay, as does data/max_length.txt")
    assert error_message(plain) == str(plain)


def test_retrieve_reranks_once_and_eval_lm_reuses_it(tmp_path, tiny_model_dir, tiny_index, capsys):
    """``retrieve --rerank lm`` writes the k candidates, their ranking NLLs and the choice; ``eval-lm`` on that file
    gives the perplexity of reranking in eval-lm itself; an oracle run says it looks at the future."""
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    common = ["--model", str(tiny_model_dir), "--dataset-path", str(data), "--stride", "4", "--query-length", "8",
              "--max-length", "32", "--max-doc-tokens", "12"]
    bm25 = ["--retriever", "bm25", "--index-dir", tiny_index["index_dir"]]
    rerank = ["--rerank", "lm", "--rerank-candidates", "3", "--rerank-tokens", "6"]
    main(["retrieve", *common, *bm25, *rerank, "--save-retrieval-file", str(tmp_path / "r.json")])
    items = json.loads((tmp_path / "r.json").read_text())
    assert all(item["rerank"] == "lm" and -1 <= item["chosen"] < max(1, len(item["retrieved_docs"])) for item in items)
    assert 2 <= max(len(item["retrieved_docs"]) for item in items) <= 3  # the tiny index matches few
    assert all("ranking_nll" in doc for item in items for doc in item["retrieved_docs"])
    main(["eval-lm", *common, "--retrieval-file", str(tmp_path / "r.json"), "--output-dir", str(tmp_path / "a")])
    main(["eval-lm", *common, *bm25, *rerank, "--output-dir", str(tmp_path / "b")])
    a, b = (json.loads((tmp_path / d / "eval.json").read_text()) for d in ("a", "b"))
    assert a["rerank"] == b["rerank"] == "lm"
    assert a["token_ppl"] == pytest.approx(b["token_ppl"], rel=1e-9)
    main(["eval-lm", *common, *bm25, "--rerank", "oracle", "--output-dir", str(tmp_path / "c")])
    c = json.loads((tmp_path / "c" / "eval.json").read_text())
    assert c["oracle_looks_at_future"] is True and c["token_ppl"] <= b["token_ppl"]
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        main(["eval-lm", *common, *bm25, "--rerank", "predictive"])
    assert info.value.code == 2
    assert "--rerank='predictive' needs --reranker-model" in capsys.readouterr().err
