"""Peak memory of the bm25 index build: the streamed build (``BM25Retriever.build``) against bm25s's own (every
passage's terms held as Python lists, then ``bm25s.BM25.index``: what ``BM25Retriever.build`` did before), on the
same corpus, each in a fresh process, side by side in one run; and a projection to the paper's 21M passages.

Each build runs in a child process and its peak resident memory (``ru_maxrss``) is read when it ends; another child
only imports what the build imports (torch, transformers and datasets come with ``hf_ralm``), to show the part the
build itself adds, and one more builds from the first quarter of the articles, for the projection. The two indexes
must retrieve the same passages for a set of queries (the exit status is 1 when they do not).

The projection is no measurement: it scales what was measured, and it models the build before issue 64, which held
every pair in memory; the build now spills its counts to disk and writes the matrix within a memory budget, and
``benchmarks/speed/bench_bm25_scale.py`` measures it at 2M to 21M passages instead. The build it models held,
besides the imports, 6 bytes per (passage, distinct term) pair while counting and 8 more while building the matrix
(its float32 scores and int32 passage ids), and the rest (per-term arrays, the vocabulary's Python strings,
buffers) is fitted as a fixed part plus a part per term from the two streamed builds. The pairs grow with the
passages (measured per passage here); the vocabulary grows more slowly, as Heaps' law ``V = K n^β`` fitted to the
vocabulary measured at several fractions of this corpus.

    python -m benchmarks.speed.bench_bm25_build --json-out ~/.cache/hf-ralm/bench/bm25_build.json

The whole Wikipedia sample (666k passages) takes about 15 minutes on 2 CPU cores for the three processes.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import math
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from benchmarks.bench_setup import SHARED

PAPER_PASSAGES = 21_015_324  # the DPR Wikipedia corpus (psgs_w100.tsv) the paper retrieves from
QUERIES = ["the emperor of rome", "the battle of hastings", "a comet seen through the telescope", "jazz musicians",
           "the river flows into the sea", "world war ii aircraft carrier", "the first president of the united states"]

CHILD = {
    "imports": "import hf_ralm.retrieval, datasets, bm25s",
    "streamed": """
import sys
from hf_ralm.retrieval import BM25Retriever
BM25Retriever.build(sys.argv[1], sys.argv[2], show_progress=False)
""",
    "bm25s": """
import os, sys
import bm25s
from datasets import Dataset
from hf_ralm import passage_text
from hf_ralm.retrieval import BM25_PARAMS, analyze_texts, passage_columns, read_corpus
passages = Dataset.from_dict(passage_columns(read_corpus(sys.argv[1])))
bm25 = bm25s.BM25(**BM25_PARAMS)
bm25.index(analyze_texts(passage_text(t, x) for t, x in zip(passages["title"], passages["text"])), show_progress=False)
bm25.save(os.path.join(sys.argv[2], "bm25s"))
""",
}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(SHARED / "wikipedia-2015-sample" / "articles.jsonl.gz"))
    parser.add_argument("--json-out", help="write every figure to this JSON file")
    return parser.parse_args(argv)


def run_child(name: str, *args: str) -> dict:
    """Run a child; its wall seconds and peak resident memory (MB)."""
    print(f"[bench] {name} ...", file=sys.stderr, flush=True)
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", CHILD[name], *args], check=True, env={**os.environ, "TQDM_DISABLE": "1"})
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak <= before:  # RUSAGE_CHILDREN keeps the largest child so far: a smaller one is not seen
        raise RuntimeError(f"{name}'s peak is hidden by an earlier, larger child: run the children smallest first")
    return {"seconds": seconds, "peak_mb": peak / 1024}


def first_articles(corpus: str, fraction: float, path: str) -> str:
    """The first ``fraction`` of the corpus's article lines, written to ``path``."""
    opener = gzip.open if corpus.endswith(".gz") else open
    with opener(corpus, "rt", encoding="utf-8") as f:
        total = sum(1 for _ in f)
    with opener(corpus, "rt", encoding="utf-8") as f, open(path, "w", encoding="utf-8") as out:
        out.writelines(itertools.islice(f, max(1, int(total * fraction))))
    return path


def vocabulary_growth(corpus: str, num_passages: int) -> dict:
    """Passages, (passage, term) pairs and vocabulary size at fractions of the corpus (one streaming pass)."""
    from hf_ralm import passage_text
    from hf_ralm.retrieval import iter_analyzed, passage_rows, read_corpus

    marks = {int(num_passages * f) for f in (0.05, 0.1, 0.25, 0.5, 1.0)}
    rows = passage_rows(read_corpus(corpus))
    vocab: set[str] = set()
    pairs, points = 0, []
    for n, terms in enumerate(iter_analyzed(passage_text(r["title"], r["text"]) for r in rows), 1):
        distinct = set(terms)
        vocab |= distinct
        pairs += len(distinct)
        if n in marks:
            points.append({"passages": n, "vocab": len(vocab), "pairs": pairs})
    return {"points": points}


def heaps_fit(points: list[dict]) -> tuple[float, float]:
    """``K, β`` of ``V = K n^β``, least squares in log space."""
    xs = [math.log(p["passages"]) for p in points]
    ys = [math.log(p["vocab"]) for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    beta = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    return math.exp(my - beta * mx), beta


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        quarter = first_articles(args.corpus, 0.25, os.path.join(tmp, "quarter.jsonl"))
        # smallest first: RUSAGE_CHILDREN reports the largest child so far
        imports = run_child("imports")
        small = run_child("streamed", quarter, os.path.join(tmp, "quarter"))
        from hf_ralm.retrieval import BM25Retriever

        small_index = BM25Retriever.load(os.path.join(tmp, "quarter"))
        small.update(pairs=int(small_index.bm25.scores["indptr"][-1]), vocab=len(small_index.bm25.vocab_dict))
        del small_index
        streamed = run_child("streamed", args.corpus, os.path.join(tmp, "streamed"))
        reference = run_child("bm25s", args.corpus, os.path.join(tmp, "bm25s"))
        import bm25s

        from hf_ralm.retrieval import analyze_texts

        ours = BM25Retriever.load(os.path.join(tmp, "streamed"))
        theirs = bm25s.BM25.load(os.path.join(tmp, "bm25s", "bm25s"), mmap=True)
        want, scores = theirs.retrieve(analyze_texts(QUERIES), k=10, show_progress=False)
        got = [[int(p.id) for p in row] for row in ours.retrieve(QUERIES, k=10)]
        same = got == [[int(i) for i, s in zip(r, c) if s > 0] for r, c in zip(want, scores)]
        num_passages, pairs, vocab = len(ours), int(ours.bm25.scores["indptr"][-1]), len(ours.bm25.vocab_dict)
    growth = vocabulary_growth(args.corpus, num_passages)
    k, beta = heaps_fit(growth["points"])
    vocab_21m = k * PAPER_PASSAGES ** beta
    pairs_per_passage = pairs / num_passages
    # beyond the imports and the pair arrays (counts 6 B, matrix 8 B a pair), the rest (per-term arrays, the
    # vocabulary's strings, buffers) fitted as fixed + per term from the two streamed builds
    rest = [(run["peak_mb"] - imports["peak_mb"]) * 2**20 - run_pairs * 14
            for run, run_pairs in ((small, small["pairs"]), (streamed, pairs))]
    per_term = (rest[1] - rest[0]) / (vocab - small["vocab"])
    fixed = rest[1] - per_term * vocab
    projected = imports["peak_mb"] + (PAPER_PASSAGES * pairs_per_passage * 14 + fixed + per_term * vocab_21m) / 2**20
    command = shlex.join(["python", "-m", "benchmarks.speed.bench_bm25_build",
                          *(sys.argv[1:] if argv is None else argv)])
    print(f"\n| build | peak memory (MB) | seconds |\n|---|---:|---:|\n"
          f"| imports only (torch, transformers, datasets, bm25s) | {imports['peak_mb']:.0f} | "
          f"{imports['seconds']:.1f} |\n"
          f"| streamed, first quarter of the articles | {small['peak_mb']:.0f} | {small['seconds']:.1f} |\n"
          f"| streamed (BM25Retriever.build) | {streamed['peak_mb']:.0f} | {streamed['seconds']:.1f} |\n"
          f"| bm25s.BM25.index over Python lists | {reference['peak_mb']:.0f} | {reference['seconds']:.1f} |")
    print(f"\n{num_passages:,} passages, {pairs:,} (passage, term) pairs ({pairs_per_passage:.1f} a passage), "
          f"{vocab:,} terms; the two indexes retrieve {'the same' if same else 'DIFFERENT'} passages for "
          f"{len(QUERIES)} queries.")
    steps = ", ".join(f"{p['passages']:,} → {p['vocab']:,}" for p in growth["points"])
    print(f"Vocabulary growth (passages → terms): {steps}; Heaps' law V = {k:.1f} n^{beta:.3f}.")
    print(f"Projection (not measured) for the paper's {PAPER_PASSAGES:,} passages: {vocab_21m / 1e6:.1f}M terms, "
          f"{PAPER_PASSAGES * pairs_per_passage / 1e9:.2f}G pairs, peak ≈ {projected / 1024:.1f} GB "
          f"(imports {imports['peak_mb']:.0f} MB + 14 B a pair + {fixed / 2**20:.0f} MB + {per_term:.0f} B a term, "
          f"the last two fitted to the two streamed builds). The score matrix alone, which search memory-maps, is "
          f"{PAPER_PASSAGES * pairs_per_passage * 8 / 2**30:.1f} GB there.")
    print(f"- `{command}`")
    if args.json_out:
        from hf_ralm.utils import write_json_atomic

        write_json_atomic(args.json_out, {
            "command": command, "imports": imports, "streamed": streamed, "bm25s": reference,
            "num_passages": num_passages, "pairs": pairs, "vocab": vocab, "same_retrievals": same,
            "quarter": small, "growth": growth, "heaps": {"k": k, "beta": beta},
            "fit": {"fixed_bytes": fixed, "bytes_per_term": per_term},
            "projection_21m": {"passages": PAPER_PASSAGES, "vocab": vocab_21m, "peak_mb": projected}})
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
