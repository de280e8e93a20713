"""The lm gate's default margin, chosen on validation data and checked on test data.

The lm gate keeps a window's top passage only when it lowers the reader's NLL of the last s'=16 prefix tokens by at
least δ nats (``--retrieval-gate lm --gate-threshold δ``). δ is chosen here on WikiText-103 **valid** and on
held-out Wikipedia **validation** articles (a sample apart from the test articles), as the margin with the lowest
geometric mean of the two token perplexities, and then checked on WikiText-103 test and the held-out test articles
against no retrieval and BM25 in every window. SmolLM2-135M (float32, the README main job's reader), the first
``--max-eval-tokens`` tokens of each text, L=512, s=4, ℓ=32, BM25 over the Wikipedia sample with each text's own
articles excluded.

Every margin comes from one reader pass per text (``model.compare_strategies``: each window with its top passage
and without), whose records are kept under ``results/gate-margin/`` (committed: a rerun, here or in a fresh
clone, reads them back). Writes ``docs/figures/gate_margin.csv``::

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout
    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \\
        --out-dir ~/.cache/hf-ralm/heldout-valid --seed 1 --exclude-titles ~/.cache/hf-ralm/heldout/titles.txt
    python -m benchmarks.tables.gate_margin --max-eval-tokens 1024
"""

from __future__ import annotations

import argparse
import math
import os
import sys

from benchmarks.bench_setup import BM25_INDEX, CACHE, MODELS_DIR, READERS, REPO, RESULTS, SHARED
from hf_ralm.utils import write_text_atomic

MARGINS = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 8.0)
WIKITEXT_TITLES = SHARED / "wikitext-103" / "forbidden_titles.txt"
TEXTS = {  # name: (split, rows, the titles never retrieved for it)
    "WikiText-103 valid": ("validation", SHARED / "wikitext-103" / "valid.jsonl", WIKITEXT_TITLES),
    "held-out Wikipedia valid": ("validation", CACHE / "heldout-valid" / "rows.jsonl",
                                 CACHE / "heldout-valid" / "titles.txt"),
    "WikiText-103 test": ("test", SHARED / "wikitext-103" / "test.jsonl", WIKITEXT_TITLES),
    "held-out Wikipedia test": ("test", CACHE / "heldout" / "rows.jsonl", CACHE / "heldout" / "titles.txt"),
}


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--max-eval-tokens", type=int, default=1024)
    parser.add_argument("--models-dir", default=str(MODELS_DIR))
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--runs-dir", default=str(RESULTS / "gate-margin"))
    parser.add_argument("--csv", default=str(REPO / "docs" / "figures" / "gate_margin.csv"))
    parser.add_argument("--batch-size", type=int, default=8)
    return parser.parse_args(argv)


def rows_of_text(args, name: str) -> list[dict]:
    """none, top1 and the lm gate at every margin on one text, from one reader pass (records resumed)."""
    from hf_ralm import RetrievalAugmentedModel, load_dataset_text

    split, rows_path, titles = TEXTS[name]
    for path in (rows_path, titles):
        if not os.path.isfile(path):
            sys.exit(f"{path} is missing: make it with the commands in this script's docstring.")
    model = RetrievalAugmentedModel.from_pretrained(
        os.path.join(args.models_dir, READERS["SmolLM2-135M"].folder), retriever="bm25", index_dir=args.index_dir,
        forbidden_titles=str(titles), max_length=512, retrieval_stride=4, query_length=32, dtype="float32",
        device="cpu", retrieval_gate="lm", gate_threshold=0.0)
    text = load_dataset_text(str(rows_path))
    out = os.path.join(args.runs_dir, name.replace(" ", "_"))
    rows = []
    for margin in MARGINS:
        model.config.gate_threshold = margin
        comparison = model.compare_strategies(text, ["none", "top1", "lm-gate"], max_eval_tokens=args.max_eval_tokens,
                                              batch_size=args.batch_size, output_dir=out,
                                              show_progress=margin == MARGINS[0])
        for row in comparison.rows:
            if row.strategy != "lm-gate" and margin != MARGINS[0]:
                continue  # none and top1 do not depend on the margin
            rows.append({"split": split, "data": name, "strategy": row.strategy,
                         "margin": margin if row.strategy == "lm-gate" else "", "token_ppl": row.token_ppl,
                         "word_ppl": row.word_ppl, "retrieved_fraction": row.retrieved_fraction,
                         "windows": comparison.num_windows, "tokens": comparison.num_tokens})
        print(f"[gate-margin] {name}: δ={margin} done", file=sys.stderr)
    return rows


def choose_margin(rows: list[dict]) -> float:
    """The margin with the lowest geometric mean of the validation texts' token perplexities (the smaller on a
    tie)."""
    def score(margin: float) -> float:
        ppls = [r["token_ppl"] for r in rows if r["split"] == "validation" and r["margin"] == margin]
        return sum(math.log(p) for p in ppls) / len(ppls)

    return min(MARGINS, key=lambda m: (score(m), m))


def table(rows: list[dict], names: list[str], margins) -> str:
    def cell(name, strategy, margin=""):
        r = next(r for r in rows if r["data"] == name and r["strategy"] == strategy and r["margin"] == margin)
        return f"{r['token_ppl']:.3f} ({100 * r['retrieved_fraction']:.0f}%)"

    lines = ["| token ppl (windows with a passage) | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|",
             "| no retrieval | " + " | ".join(cell(n, "none") for n in names) + " |",
             "| BM25 top passage in every window | " + " | ".join(cell(n, "top1") for n in names) + " |"]
    lines += [f"| lm gate, δ={m:g} | " + " | ".join(cell(n, "lm-gate", m) for n in names) + " |" for m in margins]
    return "\n".join(lines)


def main(argv=None) -> int:
    import csv
    import io

    args = parse_args(argv)
    rows = [row for name in TEXTS for row in rows_of_text(args, name)]
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    write_text_atomic(args.csv, out.getvalue(), suffix=".csv")
    margin = choose_margin(rows)
    validation = [n for n in TEXTS if TEXTS[n][0] == "validation"]
    test = [n for n in TEXTS if TEXTS[n][0] == "test"]
    print(f"\nValidation (SmolLM2-135M, first {args.max_eval_tokens} tokens):\n")
    print(table(rows, validation, MARGINS))
    print(f"\nChosen on validation: δ={margin:g} nats (lowest geometric mean of the two token perplexities).\n")
    print("Test, at the chosen margin (and δ=0, the earlier default):\n")
    print(table(rows, test, sorted({0.0, margin})))
    print(f"\n- `python -m benchmarks.tables.gate_margin --max-eval-tokens {args.max_eval_tokens}`; rows in {args.csv}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
