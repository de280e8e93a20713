#!/usr/bin/env bash
# The datastore-size runs of docs/results.md ("What a larger datastore buys", issue 64): SmolLM2-135M-Instruct (bf16),
# eval-lm --compare none,top1,lm-gate at L=512, s=4, l=32, BM25 over 1%, 3%, 10%, 30% and 100% of the Wikipedia
# sample's articles (nested seeded subsets: benchmarks/data/make_subsets.py), on the first 8,192 tokens of
#   - WikiText-103 test (its 125 forbidden titles excluded from retrieval at every size), and
#   - held-out Wikipedia (the 100 articles of results/scale/heldout-100-sample, each excluded from retrieval).
# Two workers (one core each) share each run's reader pass. Records: results/datastore/<p>pct/{wikitext-103,heldout},
# committed as chunks complete (benchmarks/long_runs/long_run.sh). Run from the repository root after the README's
# set-up, again in every session (or fresh clone) until every compare.json exists: it resumes after the committed
# chunks.
#
#   bash benchmarks/tables/datastore_runs.sh [COMMIT]   # COMMIT: the code that runs (default: results/datastore/COMMIT)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
commit="${1:-$(cat results/datastore/COMMIT)}"
# shellcheck source=benchmarks/data/heldout_100.sh
source benchmarks/data/heldout_100.sh  # cache, wiki, heldout, model; the held-out text made and checked
# the same bytes on every machine: the records name each corpus by a hash of its file
python benchmarks/data/make_subsets.py --corpus "$wiki" --out-dir "$cache/datastore" --percents 1,3,10,30 --seed 0 \
  --gzip-mtimes results/datastore/gzip-mtimes.json
# each index once, before two workers would wait on its lock, by the code that runs (the records hold the index's
# manifest, which a later version writes otherwise: it adds the files' checksums)
worktree="$(dirname "$root")/run-$(git rev-parse --short "$commit")"
[ -d "$worktree" ] || git worktree add --detach "$worktree" "$commit" >/dev/null
for percent in 1 3 10 30 100; do
  corpus="$cache/datastore/sample-${percent}pct.jsonl.gz"
  index="$cache/index/datastore-${percent}pct-bm25"
  if [ "$percent" = 100 ]; then corpus="$wiki" index="$cache/index/datastore-100pct-bm25"; fi
  PYTHONPATH="$worktree/src" python -m hf_ralm.cli index --corpus "$corpus" --index-dir "$index" >/dev/null
done

for shard in 0 1; do
  bash benchmarks/long_runs/long_run.sh "datastore-$shard" "$commit" results/datastore -- env OMP_NUM_THREADS=1 bash -c '
    shard=$0 root=$1 wiki=$2 heldout=$3 cache=$4 model=$5
    for percent in 1 3 10 30 100; do
      corpus="$cache/datastore/sample-${percent}pct.jsonl.gz" index="$cache/index/datastore-${percent}pct-bm25"
      if [ "$percent" = 100 ]; then corpus="$wiki" index="$cache/index/datastore-100pct-bm25"; fi
      compare() {
        hf-ralm eval-lm --model "$model" --dtype bfloat16 --compare none,top1,lm-gate --max-length 512 --stride 4 \
          --query-length 32 --retriever bm25 --corpus "$corpus" --index-dir "$index" --threads 1 --batch-size 8 \
          --chunk-size 256 --max-eval-tokens 8192 --num-shards 2 --shard-id "$shard" --allow-long-run "$@"
      }
      compare --dataset-path "$root/../shared/data/wikitext-103/test.jsonl" --forbidden-titles wikitext-103 \
        --output-dir "$root/results/datastore/${percent}pct/wikitext-103" &&
      compare --dataset-path "$heldout/rows.jsonl" \
        --forbidden-titles "$root/results/scale/heldout-100-sample/titles.txt" \
        --output-dir "$root/results/datastore/${percent}pct/heldout" || exit 1
    done' "$shard" "$root" "$wiki" "$heldout" "$cache" "$model"
done
