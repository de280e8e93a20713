"""How fast ``hf-ralm`` answers before any work: ``--help``, ``--version``, every command's ``--help`` (but
``lm-eval``'s, which is lm-eval's own parser) and usage errors of each kind (argparse's ``--stride x``, an unknown flag,
a value check's ``--stride 0``), each the wall time of a fresh process (the interpreter's start-up included, as a user
waits for it), the median of --runs, the commands run in turn so that a busy machine slows them alike; with, for scale,
a fresh interpreter that imports torch and transformers and one that does nothing. Prints the machine (CPUs, load).

    python benchmarks/speed/bench_cli_start.py --runs 7
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time

HELPED = ("index", "retrieve", "eval-lm", "generate", "eval-qa", "rerank-data", "train-reranker")
"""The commands whose ``--help`` is timed: all of hf-ralm's own."""

USAGE_ERRORS = (["eval-lm", "--stride", "x"], ["eval-lm", "--nope"],
                ["eval-lm", "--model", "M", "--dataset-path", "D", "--stride", "0"])
"""The usage errors timed (exit status 2): argparse's, an unknown flag, a value check."""

COMMANDS = {
    "hf-ralm --help": ["--help"],
    "hf-ralm --version": ["--version"],
    **{f"hf-ralm {name} --help": [name, "--help"] for name in HELPED},
    **{f"hf-ralm {' '.join(argv)}": argv for argv in USAGE_ERRORS},
}
"""What is timed: each line's ``hf-ralm`` arguments."""

REFERENCES = {
    "python -c 'import torch, transformers'": [sys.executable, "-c", "import torch, transformers"],
    "python -c pass": [sys.executable, "-c", "pass"],
}


def hf_ralm() -> list[str]:
    """The ``hf-ralm`` command: the installed script next to this interpreter, else ``python -m hf_ralm.cli``."""
    script = shutil.which("hf-ralm", path=os.path.dirname(sys.executable)) or shutil.which("hf-ralm")
    return [script] if script else [sys.executable, "-m", "hf_ralm.cli"]


def seconds(argv: list[str]) -> tuple[float, int]:
    """The wall time of ``argv`` in a fresh process, and its exit status."""
    start = time.perf_counter()
    status = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode
    return time.perf_counter() - start, status


def machine() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (f"{platform.processor() or platform.machine()}, {usable} usable CPUs of {os.cpu_count()}, load average "
            f"{load}; Python {platform.python_version()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7, help="fresh processes per command (default %(default)s)")
    args = parser.parse_args()
    command = hf_ralm()
    timed = {**{name: command + argv for name, argv in COMMANDS.items()}, **REFERENCES}
    times: dict[str, list[float]] = {name: [] for name in timed}
    statuses: dict[str, set[int]] = {name: set() for name in timed}
    print(f"machine: {machine()}")
    print(f"hf-ralm: {' '.join(command)}")
    start = time.perf_counter()
    for _ in range(args.runs):
        for name, argv in timed.items():
            took, status = seconds(argv)
            times[name].append(took)
            statuses[name].add(status)
    print(f"wall time of a fresh process, median of {args.runs} (min-max), {time.perf_counter() - start:.0f} s "
          "in all:")
    for name, values in times.items():
        print(f"  {name:<58} {statistics.median(values):6.2f} s  ({min(values):.2f}-{max(values):.2f})  "
              f"exit {'/'.join(map(str, sorted(statuses[name])))}")
    print(f"machine after: {machine()}")


if __name__ == "__main__":
    main()
