#!/usr/bin/env bash
# The whole-test-set runs of docs/results.md ("Whole test sets"): SmolLM2-135M-Instruct (bf16), eval-lm --compare
# none,top1,lm-gate at L=512, s=4, l=32, BM25 over the whole Wikipedia sample, on
#   - the whole WikiText-103 test set (its 125 forbidden titles excluded from retrieval), and
#   - held-out Wikipedia: 100 articles of the sample (seed 0, each cut to its first paragraphs up to 1,200 words),
#     each excluded from retrieval (titles: results/scale/heldout-100-sample/titles.txt).
# Two workers (one core each) share each text's reader pass; each goes on to the held-out text when its WikiText-103
# chunks are done. Records: results/scale/{wikitext-103-test,heldout-100}/candidates-k1, committed as chunks
# complete (benchmarks/long_runs/long_run.sh). Run from the repository root after the README's set-up; run it again in every
# session (or fresh clone) until both compare.json files exist: it resumes after the committed chunks.
#
#   bash benchmarks/tables/scale_runs.sh [COMMIT]     # COMMIT: the code that runs (default: the one the records name)
#   python benchmarks/tables/scale_tables.py          # the tables with their intervals, once the records are complete
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
commit="${1:-${HF_RALM_SCALE_COMMIT:-$(cat results/scale/COMMIT)}}"
# shellcheck source=benchmarks/data/heldout_100.sh
source benchmarks/data/heldout_100.sh  # cache, wiki, heldout, model; the held-out text made and checked
index="$cache/index/wikipedia-2015-sample-bm25"
# the index once, before two workers would wait on its lock
hf-ralm index --corpus "$wiki" --index-dir "$index" >/dev/null

for shard in 0 1; do
  bash benchmarks/long_runs/long_run.sh "scale-$shard" "$commit" results/scale -- env OMP_NUM_THREADS=1 bash -c '
    shard=$0 root=$1 wiki=$2 heldout=$3 index=$4 model=$5
    compare() {
      hf-ralm eval-lm --model "$model" --dtype bfloat16 --compare none,top1,lm-gate --max-length 512 --stride 4 \
        --query-length 32 --retriever bm25 --corpus "$wiki" --index-dir "$index" --threads 1 --batch-size 8 \
        --chunk-size 256 --num-shards 2 --shard-id "$shard" --allow-long-run "$@"
    }
    compare --dataset-path "$root/../shared/data/wikitext-103/test.jsonl" --forbidden-titles wikitext-103 \
      --output-dir "$root/results/scale/wikitext-103-test" &&
    compare --dataset-path "$heldout/rows.jsonl" --forbidden-titles "$root/results/scale/heldout-100-sample/titles.txt" \
      --output-dir "$root/results/scale/heldout-100"' "$shard" "$root" "$wiki" "$heldout" "$index" "$model"
done
