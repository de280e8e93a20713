"""Shards against threads: one ``hf-ralm eval-lm`` process with T threads against T shard processes with one thread
each (``--num-shards T --shard-id I``, launched side by side on one folder), on the same windows, in one run.

Both are timed end to end as a user runs them (wall clock from launch until every process has exited: model and
index loading included, which each shard process pays once), and by their scoring alone (the seconds the run's
chunks record: one process's sum, the slowest shard's sum). What the two write must agree: ``eval.json``'s figures
within 1e-6 relative, every token's NLL within 1e-4 nats and every window's passages and choice exactly (float32:
one thread and two sum a matrix product in another order, which moves the last digits; sharding itself changes
nothing, which tests/test_shards.py checks with ``==`` at equal threads); the exit status is 1 when they do not.

Settings are bench_speed's: SmolLM2-135M (float32), WikiText-103 test, BM25 over the Wikipedia sample (WikiText's own
articles excluded), max_length 512, stride 4, query length 32, passages cut to 256 tokens::

    python -m benchmarks.speed.bench_shards --json-out ~/.cache/hf-ralm/bench/shards.json

The default (first 1,024 tokens: 129 windows, in chunks of 16) takes about ten minutes on 2 CPU cores. Run it on an
otherwise idle machine: other load falls on the two variants unequally.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from benchmarks.bench_common import available_cores, environment as run_environment
from benchmarks.bench_setup import DEFAULT_SETTINGS, SHARED

from hf_ralm import RecordStore
from hf_ralm.cli import add_ralm_arguments
from hf_ralm.utils import write_json_atomic

HOME = Path.home()
VOLATILE = {"num_resumed_windows", "scored_tokens_per_s", "timings", "args"}  # what differs between the runs
MAX_REL_DIFF = 1e-6  # one thread or two: float32 matrix products sum in another order; shards change nothing else
MAX_TOKEN_DIFF = 1e-4  # nats, per token: what bench_speed allows float32 paths that sum in another order


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=str(HOME / ".cache/hf-ralm/models/smollm2-135m-instruct"))
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"))
    parser.add_argument("--forbidden-titles", default=str(SHARED / "wikitext-103" / "forbidden_titles.txt"))
    parser.add_argument("--index-dir", default=str(HOME / ".cache/hf-ralm/index/wikipedia-2015-sample-bm25"))
    parser.add_argument("--max-eval-tokens", type=int, default=1024, help="score the first T tokens (default 1024)")
    add_ralm_arguments(parser, settings=("max_length", "max_doc_tokens"), defaults=DEFAULT_SETTINGS)
    parser.add_argument("--chunk-size", type=int, default=16, help="windows per chunk (default 16)")
    parser.add_argument("--workers", type=int, default=None,
                        help="T: threads of the one process, and shard processes (default: the cores available)")
    parser.add_argument("--json-out", help="write every figure to this JSON file (atomically)")
    args = parser.parse_args(argv)
    args.workers = args.workers or available_cores()
    if args.workers < 2:
        parser.error("--workers must be at least 2 (one process with one thread is both variants)")
    return args


def eval_lm(args, output_dir: Path) -> list[str]:
    return [sys.executable, "-m", "hf_ralm.cli", "eval-lm", "--model", args.model, "--dtype", "float32",
            "--device", "cpu", "--dataset-path", args.data, "--retriever", "bm25", "--index-dir", args.index_dir,
            "--forbidden-titles", args.forbidden_titles, "--max-eval-tokens", str(args.max_eval_tokens),
            "--max-length", str(args.max_length), "--max-doc-tokens", str(args.max_doc_tokens), "--chunk-size",
            str(args.chunk_size), "--output-dir", str(output_dir)]


def environment(threads: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    return {**env, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_VERBOSITY": "error", "TQDM_DISABLE": "1"}


def launch(commands: list[list[str]], threads: int) -> float:
    """Run ``commands`` side by side; the wall-clock seconds until all have exited."""
    t0 = time.perf_counter()
    processes = [subprocess.Popen(command, env=environment(threads), stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True) for command in commands]
    errors = [process.communicate()[1] for process in processes]
    seconds = time.perf_counter() - t0
    for process, error in zip(processes, errors):
        if process.returncode:
            sys.exit(f"[bench] {shlex.join(process.args)} failed:\n{error[-3000:]}")
    return seconds


def scoring_seconds(output_dir: Path, workers: int) -> float:
    """The slowest worker's summed chunk seconds (chunk c is worker c mod ``workers``'s)."""
    chunks = RecordStore.complete_chunks(output_dir / "windows")
    per_worker = [0.0] * workers
    for c, path in enumerate(chunks):
        per_worker[c % workers] += RecordStore.read_chunk_file(path)["seconds"]
    return max(per_worker)


def relative_difference(a, b) -> float:
    """The largest relative difference between the numbers of two equal-shaped JSON values (``inf`` when anything
    else differs)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return max([relative_difference(a[k], b[k]) for k in a], default=0.0) if a.keys() == b.keys() else float("inf")
    if isinstance(a, list) and isinstance(b, list):
        return max(map(relative_difference, a, b), default=0.0) if len(a) == len(b) else float("inf")
    if isinstance(a, float) and isinstance(b, (int, float)) and not isinstance(b, bool):
        return abs(a - b) / max(abs(a), abs(b)) if a != b else 0.0
    return 0.0 if a == b else float("inf")


def max_token_difference(a: list[dict], b: list[dict]) -> float:
    """The largest difference between two runs' NLL of one token (``inf`` when their windows differ otherwise)."""
    if [{k: v for k, v in row.items() if k != "nlls"} for row in a] != \
            [{k: v for k, v in row.items() if k != "nlls"} for row in b]:
        return float("inf")
    return max((abs(x - y) for ra, rb in zip(a, b) for x, y in zip(ra["nlls"] or [], rb["nlls"] or [])), default=0.0)


def figures(output_dir: Path) -> dict:
    report = json.loads((output_dir / "eval.json").read_text())
    return {k: v for k, v in report.items() if k not in VOLATILE}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    t = args.workers
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        print("[bench] warm-up (file caches): 1 process, 64 tokens ...", file=sys.stderr, flush=True)
        launch([eval_lm(args, root / "warm-up") + ["--max-eval-tokens", "64"]], t)
        print(f"[bench] 1 process x {t} threads ...", file=sys.stderr, flush=True)
        one_wall = launch([eval_lm(args, root / "one")], t)
        print(f"[bench] {t} processes x 1 thread ...", file=sys.stderr, flush=True)
        shards_wall = launch([eval_lm(args, root / "shards") + ["--num-shards", str(t), "--shard-id", str(i)]
                              for i in range(t)], 1)
        one, shards = figures(root / "one"), figures(root / "shards")
        difference = relative_difference(one, shards)
        token_difference = max_token_difference(RecordStore.read_rows(root / "one" / "windows"),
                                                RecordStore.read_rows(root / "shards" / "windows"))
        same = difference <= MAX_REL_DIFF and token_difference <= MAX_TOKEN_DIFF
        windows = one["num_windows"]
        rows = {
            f"1 process x {t} threads": {"wall_s": one_wall, "scoring_s": scoring_seconds(root / "one", 1)},
            f"{t} processes x 1 thread": {"wall_s": shards_wall, "scoring_s": scoring_seconds(root / "shards", t)},
        }
    command = shlex.join(["python", "-m", "benchmarks.speed.bench_shards", *(sys.argv[1:] if argv is None else argv)])
    env = {**run_environment(command, torch.device("cpu")), "threads": t}
    print("\n| variant | wall s | windows/s (wall) | scoring s | windows/s (scoring) |\n|---|---:|---:|---:|---:|")
    for name, row in rows.items():
        row.update(windows_per_s_wall=windows / row["wall_s"], windows_per_s_scoring=windows / row["scoring_s"])
        print(f"| {name} | {row['wall_s']:.1f} | {row['windows_per_s_wall']:.3f} | {row['scoring_s']:.1f} | "
              f"{row['windows_per_s_scoring']:.3f} |")
    (base, base_row), (_, shard_row) = rows.items()
    print(f"\nshards / one process: {base_row['wall_s'] / shard_row['wall_s']:.2f}x wall, "
          f"{base_row['scoring_s'] / shard_row['scoring_s']:.2f}x scoring; {windows} windows, token ppl "
          f"{one['token_ppl']!r} (one process) and {shards['token_ppl']!r} (shards): "
          f"largest relative difference of eval.json's figures {difference:.1e} (at most {MAX_REL_DIFF:.0e}), of a "
          f"token's NLL {token_difference:.1e} nats (at most {MAX_TOKEN_DIFF:.0e}), the passages and choices the "
          f"same: {'ok' if same else 'FAILED'}")
    print(f"- `{command}`\n- torch {env['torch']}, transformers {env['transformers']}, Python {env['python']}; "
          f"{env['device']}, {t} cores")
    if args.json_out:
        write_json_atomic(args.json_out, {"environment": env, "num_windows": windows, "variants": rows,
                                          "token_ppl": {"one": one["token_ppl"], "shards": shards["token_ppl"]},
                                          "figures_relative_difference": difference,
                                          "max_token_nll_difference": token_difference, "within_tolerance": same})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
