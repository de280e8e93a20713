"""``hf-ralm`` starts fast: ``--help``, ``--version``, every command's ``--help`` and usage errors are answered before
torch or transformers is imported (``import hf_ralm`` imports neither, while the Auto classes still load a saved RALM
after it); and a long pass shows its progress per batch of windows, not per chunk. The times are measured by
``benchmarks/speed/bench_cli_start.py``."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

import pytest

import hf_ralm
from conftest import EVAL_TEXT, ON_TEST_DEVICE
from hf_ralm.cli import COMMANDS, build_parser, main

PROBE = """
import json, sys
from hf_ralm.cli import main
try:
    main(sys.argv[1:])
    code = 0
except SystemExit as end:
    code = end.code
print(json.dumps({"code": code, "torch": "torch" in sys.modules, "transformers": "transformers" in sys.modules}),
      file=sys.stderr)
"""
"""Runs ``hf-ralm ARGS`` in a fresh interpreter and says, on the last line of stderr, how it ended and whether torch
and transformers were imported."""


def run_fresh(*argv: str) -> tuple[dict, str, str]:
    """``hf-ralm argv`` in a fresh interpreter (help 120 columns wide): how it ended (exit code, torch or
    transformers imported), its stdout and its stderr without that line."""
    env = {**os.environ, "COLUMNS": "120"}
    proc = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, timeout=300, env=env)
    *err, last = proc.stderr.rstrip("\n").splitlines()
    return json.loads(last), proc.stdout, "\n".join(err)


def test_help_is_the_full_parsers_and_imports_neither_torch_nor_transformers(monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    for argv in (["--help"], ["--debug", "--help"], ["-h", "eval-lm"]):
        ended, out, err = run_fresh(*argv)
        assert ended == {"code": 0, "torch": False, "transformers": False}, (argv, ended, err)
        assert out == build_parser().format_help() and not err


def test_version_names_the_installed_transformers_and_torch_without_importing_them():
    import torch
    import transformers

    ended, out, err = run_fresh("--version")
    assert ended == {"code": 0, "torch": False, "transformers": False}, (ended, err)
    versions = f"transformers {transformers.__version__}, torch {torch.__version__}"
    assert out == f"hf-ralm {hf_ralm.__version__} ({versions})\n"


@pytest.mark.parametrize("argv", [[], ["nope"], ["--strid", "4", "eval-lm"], ["--debug"]])
def test_top_level_usage_errors_are_one_line_without_torch_or_transformers(argv):
    ended, out, err = run_fresh(*argv)
    assert ended == {"code": 2, "torch": False, "transformers": False}, (argv, ended, err)
    assert not out and "Traceback" not in err
    assert err.splitlines()[-1].startswith("hf-ralm: error: ") and err.count("hf-ralm: error:") == 1


def command_help(name: str) -> str:
    """``hf-ralm NAME --help`` as the full parser (:func:`~hf_ralm.cli.build_parser`, torch loaded) formats it."""
    parser = build_parser()
    commands = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return commands.choices[name].format_help()


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_commands_help_is_the_full_parsers_and_imports_neither_torch_nor_transformers(command, monkeypatch):
    """Every flag's default and choices (the model's dtypes, the retrievers, the chunk sizes, the dense index's
    options, the reranker's training defaults) come from plain-Python modules of the library. (``lm-eval --help`` is
    lm-eval's own parser, which imports them.)"""
    monkeypatch.setenv("COLUMNS", "120")
    ended, out, err = run_fresh(command, "--help")
    assert ended == {"code": 0, "torch": False, "transformers": False}, (command, ended, err)
    assert out == command_help(command) and not err


def flag(name: str) -> str:
    """A command's argument name as its flag (``dataset_path``: ``--dataset-path``)."""
    return "--" + name.replace("_", "-")


MISSING_FLAGS = [([command, *[part for given in module.REQUIRED[:i] for part in (flag(given), "x")]],
                  f"{flag(name)} is required.")
                 for command, module in sorted(COMMANDS.items()) for i, name in enumerate(module.REQUIRED)]
"""Each command of the command line's table without each flag it cannot run without (``REQUIRED``), those before
it given: the line that refuses it."""


@pytest.mark.parametrize("argv, message", [
    (["eval-lm", "--stride", "x"], "argument --stride: invalid int value: 'x'"),  # argparse's
    (["eval-lm", "--model", "M", "--dataset-path", "D", "--stride", "0"], "--stride must be at least 1, got 0."),
    (["eval-lm", "--nope"], "unrecognized arguments: --nope"),
    *MISSING_FLAGS,
])
def test_a_commands_usage_errors_are_one_line_without_torch_or_transformers(argv, message, capsys):
    """The same line as when they are loaded (the command run in this process)."""
    ended, out, err = run_fresh(*argv)
    assert ended == {"code": 2, "torch": False, "transformers": False}, (argv, ended, err)
    assert not out and err.splitlines()[-1] == f"hf-ralm: error: {message}" and err.count("hf-ralm: error:") == 1
    with pytest.raises(SystemExit) as end:
        main(argv)
    assert end.value.code == 2 and capsys.readouterr().err.splitlines()[-1] == err.splitlines()[-1]


SETTINGS_PROBE = """
import json, sys
from hf_ralm.cli.common import Parser, error_message, use_saved_settings
from hf_ralm.cli.settings import add_ralm_arguments

parser = Parser(prog="hf-ralm eval-lm")
parser.add_argument("--model")
parser.add_argument("--retriever", default="none")
add_ralm_arguments(parser)
args = parser.parse_args(["--model", "no-such-model", "--stride", "0"])
try:
    use_saved_settings(args)
    refused = None
except ValueError as error:
    refused = error_message(error)
print(json.dumps({"help": parser.format_help(), "refused": refused, "torch": "torch" in sys.modules,
                  "transformers": "transformers" in sys.modules}))
"""
"""Makes every RALM setting's flag (:func:`~hf_ralm.cli.settings.add_ralm_arguments`, all groups), formats their
help, and refuses ``--stride 0`` as a command does before it looks up ``--model``; prints what it got and whether
torch and transformers were imported."""


def test_the_ralm_settings_flags_and_their_value_checks_import_neither_torch_nor_transformers(monkeypatch):
    """What every command's RALM flags and their usage errors need (defaults, types, help, the checks of one value)
    is plain Python: the same help and the same one-line error as with RalmConfig loaded."""
    monkeypatch.setenv("COLUMNS", "120")
    proc = subprocess.run([sys.executable, "-c", SETTINGS_PROBE], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "120"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout)
    assert (got["torch"], got["transformers"]) == (False, False)
    assert got["refused"] == "--stride must be at least 1, got 0."
    from hf_ralm.cli.common import Parser
    from hf_ralm.cli.settings import add_ralm_arguments

    parser = Parser(prog="hf-ralm eval-lm")
    parser.add_argument("--model")
    parser.add_argument("--retriever", default="none")
    add_ralm_arguments(parser)
    assert got["help"] == parser.format_help()
    assert "--stride STRIDE" in got["help"] and "(default 4)" in got["help"]


def test_import_hf_ralm_loads_no_torch_and_the_auto_classes_still_load_a_saved_ralm(tiny_model_dir, tmp_path):
    ralm = hf_ralm.RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), **ON_TEST_DEVICE)
    ralm.save_pretrained(tmp_path / "ralm")
    script = f"""
import sys
import hf_ralm
assert "torch" not in sys.modules and "transformers" not in sys.modules, "import hf_ralm loaded torch or transformers"
from transformers import AutoConfig, AutoModelForCausalLM
print(type(AutoConfig.from_pretrained({str(tmp_path / 'ralm')!r})).__name__)
print(type(AutoModelForCausalLM.from_pretrained({str(tmp_path / 'ralm')!r})).__name__)
print(hf_ralm.RalmConfig.__name__, hf_ralm.retrieval.BM25Retriever.__name__)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["RalmConfig", "RetrievalAugmentedModel", "RalmConfig", "BM25Retriever"]


def test_the_candidate_pass_shows_its_progress_per_batch_of_windows(tiny_model_dir, tiny_index, monkeypatch):
    """``--compare``'s pass: within one chunk, the run's bar advances batch by batch (it stood still for minutes,
    then jumped, on a large model), moved by the chunk's reranking, which shows no bar of its own."""
    import hf_ralm.runs.harness as harness

    bars = []

    class Recorded(harness.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **{**kwargs, "file": open("/dev/null", "w")})
            self.steps, self.shown = [], not self.disable  # (a closed bar is disabled)
            bars.append(self)

        def update(self, n=1):
            self.steps.append(n)
            return super().update(n)

    monkeypatch.setattr(harness, "tqdm", Recorded)
    model = hf_ralm.RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"], max_length=16, retrieval_stride=4,
        query_length=8, max_doc_tokens=8, rerank_candidates=3, rerank_tokens=4, **ON_TEST_DEVICE)
    model.compare_strategies(EVAL_TEXT, ["top1", "zero-shot"], run=hf_ralm.RunOptions(batch_size=1, chunk_size=1000))
    shown = [bar for bar in bars if bar.shown]
    assert shown, "the pass showed no bar of its windows"
    for bar in shown:  # every window counted once, in more steps than one per 64 windows
        assert sum(bar.steps) == bar.total and len(bar.steps) > 1, bar.steps
