"""The rules docs/command-line.md and docs/conventions.md state about windows and passages, run as a user runs them:
with the defaults left implicit (``--max-doc-tokens`` at 256, ``--max-length`` at the model's maximum), through the
command line and in Python."""

from __future__ import annotations

import json
import warnings

import pytest

from conftest import EVAL_TEXT, ON_TEST_DEVICE, fail, write_jsonl
from hf_ralm.cli import main
from hf_ralm.errors import RalmWarning, SettingError


def retrieval_flags(files) -> list[str]:
    return ["--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", files["index"]]


def eval_lm(files, *extra: str) -> list[str]:
    """eval-lm with retrieval and nothing else set but the query length (the tiny texts are short)."""
    return ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--query-length", "8",
            *retrieval_flags(files), *extra]


# "The window length must hold a passage and a stride, --max-doc-tokens + --stride ≤ --max-length (or the model's
# maximum length): other settings are refused, not silently capped" (docs/command-line.md; docs/conventions.md)

@pytest.mark.parametrize("extra", [(), ("--compare", "none,top1,lm-gate")], ids=["eval-lm", "compare"])
def test_a_max_length_that_cannot_hold_the_default_passage_is_refused(files, capsys, extra):
    """The filer's run: --max-length 256 with passages at their default 256 ran with a passage in every window."""
    line = fail(capsys, files, eval_lm(files, "--max-length", "64", *extra, "--output-dir", str(files["out"])),
                "--max-length (64) cannot hold a passage", "--max-doc-tokens: 256", "--stride (4)",
                "lower --max-doc-tokens to at most 60 or raise --max-length to at least 260")
    assert line.count("--max-length") == 2


def test_the_models_maximum_that_cannot_hold_the_default_passage_is_refused(files, capsys):
    """No --max-length: the window is the model's maximum (128 positions for the tiny model), too short for 256."""
    fail(capsys, files, eval_lm(files, "--output-dir", str(files["out"])),
         "The model's maximum length (128) cannot hold a passage", "--max-doc-tokens: 256",
         "lower --max-doc-tokens to at most 124")


def test_generation_refuses_the_same_settings(files, capsys):
    fail(capsys, files, ["generate", "--model", files["model"], "--prompt", "the emperor of rome",
                         *retrieval_flags(files), "--max-length", "64", "--max-new-tokens", "2"],
         "--max-length (64) cannot hold a passage")


def test_several_passages_are_refused_by_their_cap(files, capsys):
    """"as for one passage L must hold the cap and a stride (max_context_doc_tokens + s <= L, else the settings are
    refused)" (docs/conventions.md)."""
    fail(capsys, files, eval_lm(files, "--max-length", "64", "--max-doc-tokens", "21", "--num-passages", "3",
                                "--output-dir", str(files["out"])),
         "--max-length (64) cannot hold the passages", "--max-context-doc-tokens: 63",
         "lower --max-context-doc-tokens to at most 60")


def test_without_retrieval_the_passage_length_is_not_in_the_way(files, capsys):
    main(["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "64"])
    assert json.loads(capsys.readouterr().out)["num_windows_with_passage"] == 0


def test_retrieve_puts_no_passage_in_context_so_it_is_not_refused(files, tmp_path, capsys):
    """``retrieve`` takes no --max-doc-tokens: it scores nothing, so its windows need not hold one."""
    out = tmp_path / "retrieval.json"
    main(["retrieve", "--model", files["model"], "--dataset-path", files["dataset"], "--query-length", "8",
          *retrieval_flags(files), "--max-length", "64", "--save-retrieval-file", str(out)])
    assert json.loads(out.read_text())


def test_python_refuses_before_any_window_runs(files):
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(files["model"], retriever="bm25", corpus=files["corpus"],
                                                    index_dir=files["index"], max_length=64, query_length=8,
                                                    **ON_TEST_DEVICE)
    with pytest.raises(SettingError, match=r"max_length \(64\) cannot hold a passage of 256 tokens"):
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    with pytest.raises(SettingError, match=r"max_length \(64\) cannot hold a passage of 256 tokens"):
        model.generate_texts(["the emperor of rome"], max_new_tokens=2)


def test_a_window_left_with_little_of_its_own_text_is_said(files):
    """A window that holds a passage and only a stride's worth of its own text is legal, and worth a word."""
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(files["model"], retriever="bm25", corpus=files["corpus"],
                                                    index_dir=files["index"], max_length=64, max_doc_tokens=60,
                                                    query_length=8, **ON_TEST_DEVICE)
    with pytest.warns(RalmWarning, match=r"keeps only 4 of its 64 tokens \(max_length\) for its own text"):
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    model.config.max_doc_tokens = 32
    with warnings.catch_warnings():
        warnings.simplefilter("error", RalmWarning)  # half the window its own: no word
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False)


# "A comparison or evaluation that can retrieve nothing says so in one line on stderr and in the table, with the flag
# that changes it" (issue 63): a text within one window retrieves nothing, since window 0 has no query

def test_a_comparison_that_retrieves_nothing_says_so(files, capsys, tmp_path):
    short = write_jsonl(tmp_path / "short.jsonl", [{"text": "the emperor of rome ruled the city"}])
    argv = eval_lm(files, "--max-length", "64", "--max-doc-tokens", "16", "--compare", "none,top1,lm-gate",
                   "--output-dir", str(tmp_path / "cmp"))
    argv[argv.index("--dataset-path") + 1] = str(short)
    main(argv)
    captured = capsys.readouterr()
    warning = [line for line in captured.err.splitlines() if line.startswith("hf-ralm: warning: no retrieval")]
    assert len(warning) == 1 and "--max-eval-tokens" in warning[0], captured.err
    assert "Warning: no retrieval happened" in captured.out  # the table says it too
    saved = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    assert saved["warnings"] and saved["warnings"][0].startswith("no retrieval happened")


def test_an_evaluation_that_retrieves_nothing_prints_why(files, capsys, tmp_path):
    short = write_jsonl(tmp_path / "short.jsonl", [{"text": "the emperor of rome ruled the city"}])
    argv = eval_lm(files, "--max-length", "64", "--max-doc-tokens", "16")
    argv[argv.index("--dataset-path") + 1] = str(short)
    main(argv)
    captured = capsys.readouterr()
    assert "hf-ralm: warning: no retrieval happened" in captured.err
    assert json.loads(captured.out)["warnings"][0].startswith("no retrieval happened")
