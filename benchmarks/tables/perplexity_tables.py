"""Perplexity with and without BM25 retrieval, as the paper's tables: SmolLM2-135M and Gemma-3-270M,
max_length 512, s=4, ℓ=32, BM25 over the whole Wikipedia sample, first 2,048 tokens of
(a) WikiText-103 test (its forbidden titles excluded) and (b) held-out Wikipedia (benchmarks/data/make_heldout.py; the
sampled articles excluded). Gemma is also run with --bos-every-window (a BOS at the start of every window).
SmolLM2 runs in float32 and Gemma in bfloat16 (fp32 Gemma takes ~11 minutes per run on the 2-core CPU); --dtype
forces one dtype for both.

Each run is an `hf-ralm eval-lm` call writing OUT/<run>/eval.json; finished runs are skipped, so the script resumes.

    python benchmarks/data/make_heldout.py --corpus ../shared/data/wikipedia-2015-sample/articles.jsonl.gz \
        --out-dir ~/.cache/hf-ralm/heldout
    python benchmarks/tables/perplexity_tables.py --out ~/.cache/hf-ralm/tables
"""

import argparse
import json
import os
import subprocess
import sys

from benchmarks.bench_setup import BM25_INDEX, CACHE, HELDOUT_DIR, MODELS_DIR, READERS, WIKIPEDIA, eval_sets


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=str(CACHE / "tables"))
    parser.add_argument("--models-dir", default=str(MODELS_DIR))
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--corpus", default=str(WIKIPEDIA))
    parser.add_argument("--heldout-dir", default=str(HELDOUT_DIR))
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], help="one dtype for every model")
    parser.add_argument("--max-eval-tokens", type=int, default=2048)
    args = parser.parse_args()

    rows = []
    for data_name, (data_path, forbidden) in eval_sets(args.heldout_dir).items():
        for model_name, reader in READERS.items():
            folder, dtype = reader.folder, args.dtype or reader.dtype
            # a reader that needs a BOS in every window is also shown with the reference's BOS rule
            bos_options = [False, True] if reader.bos_every_window else [False]
            for bos in bos_options:
                figures = {}
                for retriever in ("none", "bm25"):
                    slug = data_name.lower().replace(" ", "-")
                    run = f"{slug}.{folder}.{dtype}.{retriever}{'.bos' if bos else ''}"
                    out_dir = os.path.join(args.out, run)
                    command = [
                        "hf-ralm", "eval-lm", "--model", os.path.join(args.models_dir, folder),
                        "--dataset-path", data_path, "--retriever", retriever, "--max-length", "512",
                        "--stride", "4", "--query-length", "32", "--max-eval-tokens", str(args.max_eval_tokens),
                        "--dtype", dtype, "--output-dir", out_dir,
                    ]
                    if retriever == "bm25":
                        command += ["--index-dir", args.index_dir, "--corpus", args.corpus,
                                    "--forbidden-titles", forbidden]
                    if bos:
                        command.append("--bos-every-window")
                    if not os.path.exists(os.path.join(out_dir, "eval.json")):
                        print("running:", " ".join(command), flush=True)
                        subprocess.run(command, check=True, stderr=subprocess.DEVNULL)
                    with open(os.path.join(out_dir, "eval.json")) as f:
                        figures[retriever] = json.load(f)
                label = f"{model_name}, {dtype}" + (
                    ", BOS every window" if bos else ", reference BOS" if bos_options != [False] else "")
                rows.append((data_name, label, figures))
    print("\n| data | model | token ppl, none | token ppl, BM25 | word ppl, none | word ppl, BM25 "
          "| windows with a passage |")
    print("|---|---|---|---|---|---|---|")
    for data_name, label, f in rows:
        print(f"| {data_name} | {label} | {f['none']['token_ppl']:.3f} | {f['bm25']['token_ppl']:.3f} | "
              f"{f['none']['word_ppl']:.3f} | {f['bm25']['word_ppl']:.3f} | "
              f"{f['bm25']['num_windows_with_passage']}/{f['bm25']['num_windows'] - 1} |")
    print(f"\n(max_length 512, s=4, ℓ=32, first {args.max_eval_tokens} tokens)", file=sys.stderr)


if __name__ == "__main__":
    main()
