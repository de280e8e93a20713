"""Two ``--compare`` runs of the same text side by side, one per engine: each strategy's token perplexity on both, the
relative difference of their NLL sums and the windows with a passage on each. The exit status is 1 when a row's NLL
sums differ beyond 1e-5 relative or its windows with a passage differ (issue 58's bar for the vLLM engine).

    python benchmarks/tables/compare_engines.py runs/compare-wikitext runs/compare-wikitext-vllm \\
        runs/compare-heldout runs/compare-heldout-vllm

Each pair is (the transformers engine's output folder, the other engine's), as ``hf-ralm eval-lm --compare`` wrote
them (``compare.json``). Seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TOLERANCE = 1e-5
"""The largest relative difference of a row's NLL sums that passes."""


def rows_of(folder: str) -> dict[str, dict]:
    """The rows of ``folder/compare.json``, by strategy."""
    path = Path(folder) / "compare.json"
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        sys.exit(f"compare_engines: cannot read {path}: {error}")
    return {row["strategy"]: row for row in report["rows"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", help="pairs of --compare output folders: transformers', then the other")
    args = parser.parse_args(argv)
    if len(args.folders) % 2:
        parser.error("give the folders in pairs: the transformers engine's run, then the other engine's")
    failed = []
    print("| run | strategy | token ppl (transformers) | token ppl (other engine) | NLL sums: relative difference "
          "| windows with a passage |")
    print("|---|---|---:|---:|---:|---|")
    for reference, other in zip(args.folders[::2], args.folders[1::2]):
        expected, got = rows_of(reference), rows_of(other)
        if set(expected) != set(got):
            sys.exit(f"compare_engines: {reference} and {other} compare other strategies: {sorted(expected)} against "
                     f"{sorted(got)}")
        for strategy, row in expected.items():
            difference = abs(got[strategy]["nll_sum"] - row["nll_sum"]) / abs(row["nll_sum"])
            windows = (row["num_windows_with_passage"], got[strategy]["num_windows_with_passage"])
            if difference > TOLERANCE or windows[0] != windows[1]:
                failed.append(f"{other}: {strategy}")
            print(f"| {Path(other).name} | {strategy} | {row['token_ppl']:.6f} | {got[strategy]['token_ppl']:.6f} | "
                  f"{difference:.1e} | {windows[0]} / {windows[1]} |")
    if failed:
        print(f"compare_engines: beyond {TOLERANCE} or other windows with a passage: {', '.join(failed)}",
              file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
