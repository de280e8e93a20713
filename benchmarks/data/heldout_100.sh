# Sourced, from the repository root, by the long-run launchers whose held-out text is docs/results.md's 100 held-out
# articles (benchmarks/tables/scale_runs.sh, datastore_runs.sh): sets cache, wiki, heldout and model, and makes the
# held-out rows from the corpus (the same rows every time: the committed titles check it).
cache="${HF_RALM_CACHE:-$HOME/.cache/hf-ralm}"
wiki="$(cd ../shared/data && pwd)/wikipedia-2015-sample/articles.jsonl.gz"
heldout="$cache/heldout-100"
model="$cache/models/smollm2-135m-instruct"
python benchmarks/data/make_heldout.py --corpus "$wiki" --out-dir "$heldout" --num-articles 100 --max-words 1200 \
  --seed 0 >/dev/null
cmp -s "$heldout/titles.txt" results/scale/heldout-100-sample/titles.txt || {
  echo "the held-out sample differs from results/scale/heldout-100-sample/titles.txt" >&2; exit 1; }
