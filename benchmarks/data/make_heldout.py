"""Make the "held-out Wikipedia" evaluation set: a seeded sample of articles from the retrieval corpus, written as
WikiText-like rows (`{"text": ...}` per line), plus the list of their titles to pass as --forbidden-titles so that
retrieval can never return the evaluated articles themselves (only related ones).

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
        --out-dir ~/.cache/hf-ralm/heldout --num-articles 20 --seed 0

The whole-set held-out text of docs/results.md (100 articles, each cut to its first paragraphs up to 1,200 words)::

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
        --out-dir ~/.cache/hf-ralm/heldout-100 --num-articles 100 --max-words 1200 --seed 0

A validation set apart from it (what benchmarks/tables/gate_margin.py tunes on)::

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
        --out-dir ~/.cache/hf-ralm/heldout-valid --seed 1 --exclude-titles ~/.cache/hf-ralm/heldout/titles.txt
"""

import argparse
import json
import os
import random

from hf_ralm.retrieval import read_corpus
from hf_ralm.utils import write_json_atomic


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--num-articles", type=int, default=20)
    parser.add_argument("--min-words", type=int, default=1000, help="only sample articles at least this long")
    parser.add_argument("--max-words", type=int,
                        help="keep each article's first paragraphs up to this many words (at least its first "
                             "paragraph): more articles for the same evaluation cost")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--exclude-titles", help="never sample these articles (a titles.txt of another sample: a "
                                                 "validation set apart from the test set)")
    args = parser.parse_args()

    excluded = set()
    if args.exclude_titles:
        with open(args.exclude_titles, encoding="utf-8") as f:
            excluded = {line.strip() for line in f if line.strip()}
    candidates = [a for a in read_corpus(args.corpus)
                  if len(a["text"].split()) >= args.min_words and a["title"] not in excluded]
    sample = random.Random(args.seed).sample(candidates, args.num_articles)
    os.makedirs(args.out_dir, exist_ok=True)
    rows = []
    for article in sample:
        rows.append(f" = {article['title']} = \n")
        words = kept = 0
        for paragraph in (p.strip() for p in article["text"].split("\n") if p.strip()):
            words += len(paragraph.split())
            if args.max_words is not None and kept and words > args.max_words:
                break
            rows.append(paragraph + " \n")
            kept += 1
    tmp = os.path.join(args.out_dir, "rows.jsonl.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": row}) + "\n" for row in rows)
    os.replace(tmp, os.path.join(args.out_dir, "rows.jsonl"))
    with open(os.path.join(args.out_dir, "titles.txt"), "w", encoding="utf-8") as f:
        f.writelines(a["title"] + "\n" for a in sample)
    write_json_atomic(os.path.join(args.out_dir, "sample.json"), {**vars(args), "titles": [a["title"] for a in sample]})
    print(f"{len(sample)} articles ({len(rows)} rows) from {len(candidates)} candidates -> {args.out_dir}")
    print("first titles:", [a["title"] for a in sample[:5]])


if __name__ == "__main__":
    main()
