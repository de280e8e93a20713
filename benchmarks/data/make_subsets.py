"""Make the datastore-size corpora of docs/results.md ("What a larger datastore buys"): nested, seeded subsets of the
Wikipedia sample's articles, so that each size holds every article of the smaller ones.

    python benchmarks/data/make_subsets.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
        --out-dir ~/.cache/hf-ralm/datastore --percents 1,3,10,30 --seed 0

One seeded permutation of the articles; the subset of p percent is its first round(p/100 * N) articles, written in the
corpus's own order (so passage ids follow the corpus), as ``sample-<p>pct.jsonl.gz`` with ``subsets.json`` (the
settings and each subset's article count and titles' digest). 100 percent is the corpus itself. The evaluation keeps
its contamination rules at every size: the forbidden titles are passed to each run, not removed here. A subset file
already there with the same settings is kept.

The files are the same bytes on every machine (a run's records name the corpus by a hash of its bytes, so that a run
resumed on another machine must find the same file): gzip's header holds a time, which is 0 here, or the one
``--gzip-mtimes`` gives for a file (a JSON object ``{file name: seconds}``; the datastore runs' first subsets were
written with the time of day, recorded in results/datastore/gzip-mtimes.json).
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import random

from hf_ralm.retrieval import read_corpus
from hf_ralm.utils import write_json_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--percents", default="1,3,10,30", help="comma-separated sizes, in percent of the articles")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--gzip-mtimes", help="a JSON file of the gzip header time of some subsets (default 0)")
    args = parser.parse_args()
    mtimes = {}
    if args.gzip_mtimes:
        with open(args.gzip_mtimes, encoding="utf-8") as f:
            mtimes = json.load(f)
    percents = [float(p) for p in args.percents.split(",")]
    if any(not 0 < p < 100 for p in percents):
        parser.error(f"--percents takes sizes between 0 and 100 (100 is the corpus itself), got {args.percents}")
    manifest_path = os.path.join(args.out_dir, "subsets.json")
    settings = {"corpus": os.path.abspath(args.corpus), "seed": args.seed, "percents": percents,
                "gzip_mtimes": mtimes}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as f:
            if json.load(f)["settings"] == settings:
                print(f"{args.out_dir}: the subsets are there already")
                return
    articles = list(read_corpus(args.corpus))
    order = list(range(len(articles)))
    random.Random(args.seed).shuffle(order)
    os.makedirs(args.out_dir, exist_ok=True)
    made = {}
    for percent in percents:
        chosen = sorted(order[: round(percent / 100 * len(articles))])
        name = f"sample-{percent:g}pct.jsonl.gz"
        tmp = os.path.join(args.out_dir, f".{name}.tmp")
        # the header's file name is the temporary one's, as gzip.open writes it (the first subsets' bytes)
        with gzip.GzipFile(tmp, "wb", mtime=mtimes.get(name, 0)) as raw, io.TextIOWrapper(raw, encoding="utf-8") as f:
            f.writelines(json.dumps(articles[i], ensure_ascii=False) + "\n" for i in chosen)
        os.replace(tmp, os.path.join(args.out_dir, name))
        titles = "\n".join(articles[i]["title"] for i in chosen).encode("utf-8")
        made[name] = {"articles": len(chosen), "titles_sha256": hashlib.sha256(titles).hexdigest()}
        print(f"{name}: {len(chosen)} of {len(articles)} articles")
    write_json_atomic(manifest_path, {"settings": settings, "subsets": made})


if __name__ == "__main__":
    main()
