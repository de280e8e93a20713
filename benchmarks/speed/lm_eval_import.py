"""What registering the ralm model with lm-evaluation-harness costs ``import hf_ralm``: the import time of lm-eval's
registry inside it (python -X importtime, cumulative), and ``import hf_ralm`` with lm-eval installed and hidden (as
if not installed), each the median of --runs fresh interpreters, run alternately.

    python benchmarks/speed/lm_eval_import.py --runs 7
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

HIDE = "import sys; sys.modules['lm_eval'] = None; "


def import_seconds(prelude: str) -> float:
    """Seconds a fresh interpreter takes for ``import hf_ralm`` after ``prelude`` (the interpreter's own start-up
    not counted)."""
    code = f"{prelude}import time; t = time.perf_counter(); import hf_ralm; print(time.perf_counter() - t)"
    return float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def registry_seconds() -> float:
    """The cumulative import time of ``lm_eval.api.registry`` (with ``lm_eval``'s package) inside ``import
    hf_ralm``, from ``python -X importtime``."""
    stderr = subprocess.run([sys.executable, "-X", "importtime", "-c", "import hf_ralm"], capture_output=True,
                            text=True, check=True).stderr
    total = 0
    for line in stderr.splitlines():
        parts = [part.strip() for part in line.removeprefix("import time:").split("|")]
        if len(parts) == 3 and parts[2] in ("lm_eval", "lm_eval.api", "lm_eval.api.registry"):
            total = max(total, int(parts[1]))  # cumulative microseconds: the outermost one holds the others
    return total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    with_lm_eval, without, registry = [], [], []
    start = time.perf_counter()
    for _ in range(args.runs):
        with_lm_eval.append(import_seconds(""))
        without.append(import_seconds(HIDE))
        registry.append(registry_seconds())
    print(f"import hf_ralm, median of {args.runs} ({time.perf_counter() - start:.0f} s in all):")
    print(f"  with lm-eval installed:      {statistics.median(with_lm_eval):.3f} s")
    print(f"  with lm-eval hidden:         {statistics.median(without):.3f} s")
    print(f"  lm-eval's registry within:   {statistics.median(registry) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
