"""What checking an index's files against their build-time checksums costs a load (issue 63): a bm25 index of the
first ``--articles`` articles of the Wikipedia sample (0: all of them) is built into a temporary folder, with
hf-ralm's cache (where the stamps of verified files go) in a temporary folder too, then loaded ``--rounds`` times
each way, in one process, its imports done first:

* stamps valid (every file unchanged since it was last verified: the usual load, and the first one after a build);
* stamps gone (every file must be hashed: the first load of a copied or downloaded index, or after a file was
  touched), the stamps removed before each such load.

Per way, the median of the load (``BM25Retriever.load``) and of the check alone (``verify_index`` with
``trust_stamps=True``, and without: what ``hf-ralm index --verify DIR`` does); the index's files are in the page
cache (just written or read), so hashing is timed at the CPU's speed, not the disk's.

    python -m benchmarks.speed.bench_index_checks --articles 2000 --json-out ~/.cache/hf-ralm/bench/index_checks.json

About 1 minute with 2,000 articles (the build 38 s of it), 7 minutes with the whole sample (the build 5 minutes),
on this project's 2 CPU cores while other jobs shared them (load average 7 to 12).
"""

from __future__ import annotations

import argparse
import gzip
import os
import shlex
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_common import available_cores
from benchmarks.bench_setup import WIKIPEDIA


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(WIKIPEDIA))
    parser.add_argument("--articles", type=int, default=2000, help="the first N articles are indexed (0: all)")
    parser.add_argument("--rounds", type=int, default=5, help="loads timed each way (default %(default)s)")
    parser.add_argument("--json-out", help="write every figure to this JSON file")
    return parser.parse_args(argv)


def first_articles(corpus: str, count: int, path: Path) -> str:
    """The first ``count`` rows of ``corpus`` written to ``path`` (``corpus`` itself for 0)."""
    if count == 0:
        return corpus
    with gzip.open(corpus, "rt", encoding="utf-8") as source, gzip.open(path, "wt", encoding="utf-8") as target:
        for number, line in enumerate(source):
            if number == count:
                break
            target.write(line)
    return str(path)


def seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "benchmarks.speed.bench_index_checks",
                          *(sys.argv[1:] if argv is None else argv)])
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["HF_HOME"] = os.path.join(tmp, "hf")  # hf-ralm's cache, and the stamps in it, of this run only
        from hf_ralm.retrieval import BM25Retriever, hf_ralm_cache_dir, verify_index

        index_dir = os.path.join(tmp, "index")
        corpus = first_articles(args.corpus, args.articles, Path(tmp, "corpus.jsonl.gz"))
        print("[bench] building the index ...", file=sys.stderr, flush=True)
        build_s = seconds(lambda: BM25Retriever.build(corpus, index_dir, show_progress=False))
        stamps = os.path.join(hf_ralm_cache_dir(), "index-checks")
        BM25Retriever.load(index_dir)  # the imports (bm25s, datasets) and the page cache, before anything is timed
        times: dict[str, list[float]] = {"load, stamps valid": [], "check, stamps valid": [],
                                         "load, every file hashed": [], "check, every file hashed": []}
        for _ in range(args.rounds):
            times["check, stamps valid"].append(seconds(lambda: verify_index(index_dir, trust_stamps=True)))
            times["load, stamps valid"].append(seconds(lambda: BM25Retriever.load(index_dir)))
            shutil.rmtree(stamps)
            times["load, every file hashed"].append(seconds(lambda: BM25Retriever.load(index_dir)))
            times["check, every file hashed"].append(seconds(lambda: verify_index(index_dir)))
        summary = verify_index(index_dir)
        num_passages = len(BM25Retriever.load(index_dir))
    median = {name: statistics.median(values) for name, values in times.items()}
    valid_share = median["check, stamps valid"] / median["load, stamps valid"]
    hashed_share = median["check, every file hashed"] / median["load, every file hashed"]
    print(f"\n{num_passages:,} passages, {summary['files']} files, {summary['bytes'] / 1e6:,.1f} MB; built in "
          f"{build_s:.1f} s; {available_cores()} CPU cores; medians of {args.rounds} rounds\n\n"
          "| load | load, ms | of which the check, ms | the check's share |\n|---|---:|---:|---:|\n"
          f"| stamps valid | {median['load, stamps valid'] * 1e3:.1f} | {median['check, stamps valid'] * 1e3:.2f} | "
          f"{valid_share:.2%} |\n"
          f"| every file hashed | {median['load, every file hashed'] * 1e3:.1f} | "
          f"{median['check, every file hashed'] * 1e3:.1f} | {hashed_share:.0%} |")
    print(f"- `{command}`")
    if args.json_out:
        from hf_ralm.utils import write_json_atomic

        write_json_atomic(args.json_out, {
            "command": command, "cores": available_cores(), "num_passages": num_passages, "files": summary["files"],
            "bytes": summary["bytes"], "build_seconds": build_s, "seconds": times, "median_seconds": median})
    return 0


if __name__ == "__main__":
    sys.exit(main())
