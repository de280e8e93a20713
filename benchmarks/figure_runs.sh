#!/usr/bin/env bash
# The perplexity figures' intervals (docs/results.md, "Figures"): the points of stride, query_length, context_length
# and retrievers were measured before every point kept its token NLLs, so their CSVs have no interval. This measures
# every point again with the commands docs/results.md gives, `--fill-intervals`, in the background (one low-priority
# job, both threads as the first runs had), and commits the filled CSVs and the token records
# (benchmarks/runs/figures/<name>.{csv,tokens.jsonl}) as they grow. A row keeps what it measured first (its
# perplexity, its wall time); it only gains the interval, once its NLL sum is found again (perplexity.REFILL_RTOL).
# The first command copies docs/figures/<name>.csv there; run it again in every session (it resumes: each point is
# written as soon as it is measured) until `--status` says no row lacks an interval; then copy the four CSVs and
# token records into docs/figures and redraw (`--plot-only`).
#
#   bash benchmarks/figure_runs.sh [COMMIT]   # COMMIT: the code that runs (default: benchmarks/runs/figures/COMMIT)
#   bash benchmarks/figure_runs.sh --status   # rows without an interval, per figure
#
# The whole sample's dense index (query_length's dense points, retrievers' dense and hybrid) is built on first use:
# about 3 hours on a 2-core CPU, resumable; the Lucene index ~1.5 minutes (the `lucene` extra and Java 21).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
runs=benchmarks/runs/figures
names=(stride query_length context_length retrievers)

if [ "${1:-}" = "--status" ]; then
  for name in "${names[@]}"; do
    python - "$runs/$name.csv" <<'EOF'
import sys
from benchmarks.figures import intervals, perplexity
rows = perplexity.table(sys.argv[1]).read()
missing = sum(intervals.bounds(row) is None for row in rows)
print(f"{sys.argv[1]}: {len(rows)} rows, {missing} without an interval")
EOF
  done
  exit 0
fi

mkdir -p "$runs"
[ -e "$runs/COMMIT" ] || git rev-parse --short HEAD > "$runs/COMMIT"
commit="${1:-$(cat "$runs/COMMIT")}"
for name in "${names[@]}"; do
  [ -e "$runs/$name.csv" ] || cp "docs/figures/$name.csv" "$runs/$name.csv"
done
# the held-out text of the figures (the same 20 articles every time)
python benchmarks/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
  --out-dir "${HF_RALM_CACHE:-$HOME/.cache/hf-ralm}/heldout" >/dev/null

bash benchmarks/long_run.sh figures "$commit" "$runs" -- bash -c '
  out=$0
  fill() { python "benchmarks/figures/$1.py" "${@:2}" --dtype bfloat16 --fill-intervals --out-dir "$out"; }
  fill stride --max-eval-tokens 1024 &&
  fill query_length --max-eval-tokens 1024 --retrievers bm25 &&
  fill context_length --max-eval-tokens 256 &&
  fill retrievers --max-eval-tokens 1024 --corpora whole --retrievers none bm25 lucene &&
  fill retrievers --max-eval-tokens 1024 --corpora subset --retrievers bm25 lucene dense hybrid &&
  fill query_length --max-eval-tokens 1024 --retrievers dense &&
  fill retrievers --max-eval-tokens 1024' "$root/$runs"
