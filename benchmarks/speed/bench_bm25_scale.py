"""The bm25 index at the paper's scale on one machine (issue 64): build time, build peak memory, index size on disk
and the memory a load adds, for corpora of 666k (the Wikipedia sample), 2M, 5M and 21M passages (the sample plus
generated passages: benchmarks/data/make_synthetic_corpus.py).

    python -m benchmarks.speed.bench_bm25_scale --sizes 666157,2000000
    python -m benchmarks.speed.bench_bm25_scale --table    # the table and docs/figures/bm25_scale.png, from records

Each size is one compact record, ``results/bm25-scale/bm25-<N>.json`` (committed); a size whose record is there is
skipped, so the driver resumes across sessions as a long run (``benchmarks/long_runs/long_run.sh``). For a size, its
corpus is made when missing (the sample's own passages: the sample itself), then the build runs in a child process
(``BM25Retriever.build``, what ``hf-ralm index`` runs) while this process samples the resident memory of the child and
of its analysis workers every half second from ``/proc`` (anonymous and file-backed pages apart, so that a memory map
read through shows as such); the child's own ``ru_maxrss`` is its exact peak. The build's phases are timed in the
child: reading, analysing and counting the passages (the term counts spilled to disk), writing the score matrix
(passes over the spilled counts), and copying the passages' table into the index. Then a fresh child imports what a
load imports, reads its resident memory, opens the index (``BM25Retriever.load``: the bm25s arrays and the passages'
table memory-mapped) and reads it again: the difference is what the load adds. Queries per second and the lucene
backend's columns are left empty (``null``) for the retrieval benchmarks of issue 64 to fill; the table says so.

The machine is shared: each record keeps the load average over the build, which the times depend on (peak memory does
not). ``--src DIR`` runs the children on another checkout's ``src`` (the build before, to set beside this one), its
record named by ``--label``. Disk: a size needs its corpus (about 350 MB per million generated passages, gzip'd),
its index (about 1.2 GB per million passages) and, while it builds, the spilled counts (about 0.4 GB per million
passages) and a second copy of the passages' table (about 0.6 GB per million); ``--remove-index`` deletes each index
once measured.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from benchmarks.bench_setup import CACHE, REPO, RESULTS, WIKIPEDIA

SAMPLE_PASSAGES = 666_157  # the Wikipedia sample's passages: its size is the sample itself
RECORDS = RESULTS / "bm25-scale"
INDEXES = CACHE / "bm25-scale"
FIGURE = REPO / "docs" / "figures" / "bm25_scale.png"
NOT_MEASURED = {"queries_per_s": None, "lucene": {"build_s": None, "build_peak_mb": None, "index_bytes": None,
                                                  "load_added_mb": None, "queries_per_s": None}}

BUILD = """
import json, os, resource, sys, time
from datasets import Dataset
from hf_ralm.retrieval import BM25Retriever

bm25 = sys.modules[BM25Retriever.__module__]  # its build's steps, timed

marks = {}
def timed(name, function):
    def run(*args, **kwargs):
        marks[name + "_start"] = time.perf_counter()
        try:
            return function(*args, **kwargs)
        finally:
            marks[name + "_end"] = time.perf_counter()
    return run
bm25.save_bm25s = timed("matrix", bm25.save_bm25s)
if hasattr(bm25, "finish_saved_dataset"):  # the passages' table written in place
    bm25.finish_saved_dataset = timed("table", bm25.finish_saved_dataset)
else:  # before: copied by save_to_disk
    Dataset.save_to_disk = timed("table", Dataset.save_to_disk)
start = time.perf_counter()
BM25Retriever.build(sys.argv[1], sys.argv[2], show_progress=False, **json.loads(sys.argv[3]))
end = time.perf_counter()
print(json.dumps({"seconds": end - start, "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "workers_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
                  "phases_s": {"count": marks["matrix_start"] - start,
                               "matrix": marks["matrix_end"] - marks["matrix_start"],
                               "table": marks["table_end"] - marks["table_start"],
                               "finish": end - marks["table_end"]}}))
"""
LUCENE_BUILD = """
import json, resource, sys, time
from hf_ralm.retrieval import LuceneRetriever

start = time.perf_counter()
LuceneRetriever.build(sys.argv[1], sys.argv[2], show_progress=False, n_threads=1)
print(json.dumps({"seconds": time.perf_counter() - start,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "java_peak_mb": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024}))
"""
LUCENE_LOAD = """
import json, sys, time
import hf_ralm.retrieval
from hf_ralm.retrieval import LuceneRetriever, start_jvm

def memory():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return int(fields["VmRSS"].split()[0]) / 1024

start_jvm()  # the JVM's own memory is not the index's
before = memory()
start = time.perf_counter()
retriever = LuceneRetriever.load(sys.argv[1], n_threads=1)
seconds = time.perf_counter() - start
print(json.dumps({"seconds": seconds, "passages": len(retriever), "added_mb": memory() - before}))
"""
LOAD = """
import json, sys, time
import bm25s, datasets
import hf_ralm.retrieval
from hf_ralm.retrieval import BM25Retriever

def memory():
    with open("/proc/self/status") as f:
        fields = dict(line.split(":", 1) for line in f)
    return {key: int(fields[key].split()[0]) / 1024 for key in ("VmRSS", "RssAnon", "RssFile")}

before = memory()
start = time.perf_counter()
retriever = BM25Retriever.load(sys.argv[1])
seconds = time.perf_counter() - start
after = memory()
print(json.dumps({"seconds": seconds, "passages": len(retriever), "terms": len(retriever.bm25.vocab_dict),
                  "postings": int(retriever.bm25.scores["indptr"][-1]), "before_mb": before["VmRSS"],
                  "added_mb": after["VmRSS"] - before["VmRSS"], "added_anon_mb": after["RssAnon"] - before["RssAnon"],
                  "added_file_mb": after["RssFile"] - before["RssFile"]}))
"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", default=f"{SAMPLE_PASSAGES},2000000,5000000,21000000",
                        help="comma-separated corpus sizes in passages, built in turn (those with a record skipped)")
    parser.add_argument("--sample", type=Path, default=WIKIPEDIA, help="the Wikipedia sample's articles")
    parser.add_argument("--records", type=Path, default=RECORDS, help="where each size's record is written")
    parser.add_argument("--index-root", type=Path, default=INDEXES, help="where the indexes are built")
    parser.add_argument("--src", type=Path, help="the hf_ralm source tree the children import (default: this one)")
    parser.add_argument("--label", default="bm25", help="the records' name: <label>-<N>.json")
    parser.add_argument("--memory-budget", type=int, help="the build's memory_budget in bytes (default: its own)")
    parser.add_argument("--remove-index", action="store_true", help="delete each index once it is measured")
    parser.add_argument("--backend", choices=("bm25", "lucene"), default="bm25",
                        help="lucene: fill the lucene columns of the sizes whose bm25 record is there (build one "
                             "thread, peak RSS with the JVM's, index size, what a load adds)")
    parser.add_argument("--table", action="store_true", help="print the table and draw the figure from the records")
    return parser.parse_args(argv)


def tree_memory(pid: int) -> dict[str, float] | None:
    """The resident memory (MB) of a process and its descendants: their sum, and the process's own anonymous and
    file-backed pages; ``None`` once it is gone."""
    import psutil

    try:
        root = psutil.Process(pid)
        with open(f"/proc/{pid}/status") as f:
            fields = dict(line.split(":", 1) for line in f if ":" in line)
        total = root.memory_info().rss + sum(child.memory_info().rss for child in root.children(recursive=True))
    except (psutil.NoSuchProcess, FileNotFoundError, KeyError):
        return None
    own = {key: int(fields[key].split()[0]) / 1024 for key in ("RssAnon", "RssFile") if key in fields}
    return {"tree": total / 2**20, **own}


def run_child(code: str, args: list[str], src: Path | None) -> tuple[dict, dict, list[float]]:
    """Run a child script; its JSON line, the peaks sampled from /proc (MB) and the load averages seen."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    if src is not None:
        env["PYTHONPATH"] = f"{src}{os.pathsep}{env.get('PYTHONPATH', '')}"
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE, env=env, text=True)
    peaks: dict[str, float] = {}
    loads = []
    while child.poll() is None:
        sample = tree_memory(child.pid)
        for key, value in (sample or {}).items():
            peaks[key] = max(peaks.get(key, 0.0), value)
        loads.append(os.getloadavg()[0])
        time.sleep(0.5)
    out = child.stdout.read()
    if child.returncode:
        raise RuntimeError(f"the child failed (exit status {child.returncode})")
    return json.loads(out.strip().splitlines()[-1]), peaks, loads


def corpus_for(size: int, sample: Path) -> Path:
    """The corpus of ``size`` passages, made from the ``sample`` when missing."""
    if size == SAMPLE_PASSAGES:
        return sample
    from benchmarks.data import make_synthetic_corpus

    make_synthetic_corpus.main(["--size", str(size), "--sample", str(sample)])
    return make_synthetic_corpus.corpus_path(make_synthetic_corpus.OUT_DIR, size)


def folder_bytes(folder: Path) -> dict[str, int]:
    sizes = {part: sum(f.stat().st_size for f in (folder / part).rglob("*") if f.is_file())
             for part in ("bm25s", "passages")}
    return {**sizes, "all": sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())}


def measure(size: int, args: argparse.Namespace) -> dict:
    corpus = corpus_for(size, args.sample)
    index = args.index_root / f"{args.label}-{size}"
    shutil.rmtree(index, ignore_errors=True)
    index.parent.mkdir(parents=True, exist_ok=True)
    print(f"[bench] {size:,} passages: building {index} from {corpus}", file=sys.stderr, flush=True)
    options = {} if args.memory_budget is None else {"memory_budget": args.memory_budget}
    build, peaks, loads = run_child(BUILD, [str(corpus), str(index), json.dumps(options)], args.src)
    build["options"] = options
    build.update(sampled_peak_mb=peaks, load_average=sum(loads) / len(loads) if loads else None)
    load, _, _ = run_child(LOAD, [str(index)], args.src)
    record = {"passages": load["passages"], "corpus": str(corpus), "corpus_bytes": corpus.stat().st_size,
              "terms": load["terms"], "postings": load["postings"], "build": build, "index_bytes": folder_bytes(index),
              "load": load, **NOT_MEASURED, "cpus": os.cpu_count(), "src": str(args.src or REPO / "src"),
              "git_commit": source_commit(args.src or REPO / "src")}
    if args.remove_index:
        shutil.rmtree(index)
    return record


def measure_lucene(record: dict, args: argparse.Namespace) -> dict:
    """The lucene columns of a size's record: the Lucene backend's index of the same corpus built in a child (one
    indexing thread; the JVM is a child of it, its memory sampled with it), its size on disk, and what loading it
    adds to a process whose JVM has started. The index stays for the query benchmark (bench_bm25_stream)."""
    corpus = corpus_for(record["passages"], args.sample)
    index = args.index_root / f"lucene-{record['passages']}"
    shutil.rmtree(index, ignore_errors=True)
    index.parent.mkdir(parents=True, exist_ok=True)
    print(f"[bench] {record['passages']:,} passages: building {index} (lucene) from {corpus}", file=sys.stderr,
          flush=True)
    build, peaks, loads = run_child(LUCENE_BUILD, [str(corpus), str(index)], args.src)
    load, _, _ = run_child(LUCENE_LOAD, [str(index)], args.src)
    if load["passages"] != record["passages"]:
        raise RuntimeError(f"the lucene index holds {load['passages']:,} passages, the bm25 one "
                           f"{record['passages']:,}: not the same corpus")
    return {**record, "lucene": {
        "build_s": build["seconds"], "build_peak_mb": peaks.get("tree", build["peak_mb"]),
        "index_bytes": sum(f.stat().st_size for f in index.rglob("*") if f.is_file()),
        "load_added_mb": load["added_mb"], "queries_per_s": record["lucene"]["queries_per_s"],
        "build": {**build, "sampled_peak_mb": peaks, "load_average": sum(loads) / len(loads) if loads else None},
        "load": load, "git_commit": source_commit(args.src or REPO / "src")}}


def source_commit(src: Path) -> str | None:
    """The commit of the source tree the children ran, ``+changes`` when it differs from it; ``None`` outside git."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(src), *args], capture_output=True, text=True).stdout.strip()

    commit = git("rev-parse", "HEAD")
    return (commit + ("+changes" if git("status", "--porcelain", "--", ".") else "")) if commit else None


def records(folder: Path, label: str) -> list[dict]:
    found = [json.loads(p.read_text()) for p in folder.glob(f"{label}-*.json")
             if p.stem[len(label) + 1:].isdigit()]  # bm25-2000000, not bm25-before-666157
    return sorted(found, key=lambda r: r["passages"])


def table(rows: list[dict]) -> str:
    """The markdown table of the records, bm25's measured columns and the columns other benchmarks fill."""
    def cell(value, scale=1.0, digits=0):
        return "not measured" if value is None else f"{value / scale:,.{digits}f}"

    lines = ["| passages | terms | build (min) | build peak RSS (GB) | index on disk (GB) | load adds RSS (GB) | "
             "queries/s | per query one at a time p50 / p99 (ms) | lucene: build (min), peak (GB), index (GB), load "
             "(GB), queries/s | bm25 against Lucene |",
             "|---:|---:|---:|---:|---:|---:|---:|---|---|---:|"]
    for r in rows:
        lucene, stream = r["lucene"], r.get("stream") or {}
        lucene_cells = ", ".join([cell(lucene["build_s"], 60, 1), cell(lucene["build_peak_mb"], 1024, 2),
                                  cell(lucene["index_bytes"], 2**30, 2), cell(lucene["load_added_mb"], 1024, 2),
                                  cell(lucene["queries_per_s"], digits=1)])
        latency = (f"{stream['one_at_a_time_p50_ms']:.2f} / {stream['one_at_a_time_p99_ms']:.2f}" if stream
                   else cell(None))
        times = (f"{stream['times_lucene']:.1f}x" if stream.get("times_lucene") else cell(None))
        lines.append(f"| {r['passages']:,} | {r['terms']:,} | {cell(r['build']['seconds'], 60, 1)} | "
                     f"{cell(r['build']['peak_mb'], 1024, 2)} | {cell(r['index_bytes']['all'], 2**30, 2)} | "
                     f"{cell(r['load']['added_mb'], 1024, 2)} | {cell(r['queries_per_s'])} | {latency} | "
                     f"{lucene_cells} | {times} |")
    return "\n".join(lines)


def times_lucene_cpu(record: dict) -> float | None:
    """bm25's retrieve against Lucene's batch_search in queries per second of CPU time (the JVM also works on other
    cores, which its wall rate counts); ``None`` where either was not timed."""
    cpu = (record.get("stream") or {}).get("cpu_qps") or {}
    if "retrieve" not in cpu or "lucene batch_search" not in cpu:
        return None
    return cpu["retrieve"] / cpu["lucene batch_search"]


# issue 64's targets: (what, the size it is measured at, the figure from a record, the wanted value, at most?)
TARGETS = [
    ("bm25 queries/s, the 666k sample", SAMPLE_PASSAGES, lambda r: r["queries_per_s"], 2000, False),
    ("bm25 queries/s, 21M passages", 21_000_000, lambda r: r["queries_per_s"], 100, False),
    ("bm25 against Lucene's batch_search, the 666k sample", SAMPLE_PASSAGES,
     lambda r: (r.get("stream") or {}).get("times_lucene"), 20, False),
    ("bm25 against Lucene's batch_search, CPU time, the 666k sample", SAMPLE_PASSAGES, times_lucene_cpu, 20, False),
    ("bm25 against Lucene's batch_search, 21M passages", 21_000_000,
     lambda r: (r.get("stream") or {}).get("times_lucene"), 20, False),
    ("bm25 against Lucene's batch_search, CPU time, 21M passages", 21_000_000, times_lucene_cpu, 20, False),
    ("21M build peak RSS (GiB)", 21_000_000, lambda r: r["build"]["peak_mb"] / 1024, 8, True),
    ("21M load adds RSS (GiB)", 21_000_000, lambda r: r["load"]["added_mb"] / 1024, 2, True),
]


def targets_table(rows: list[dict]) -> str:
    """Each target of issue 64 beside the measured figure: met, or by how much it is missed (a share of the target);
    a size or figure without a record says "not measured"."""
    by_size = {r["passages"]: r for r in rows}
    lines = ["| target | wanted | measured | |", "|---|---:|---:|---|"]
    for what, size, read, wanted, at_most in TARGETS:
        value = read(by_size[size]) if size in by_size else None
        if value is None:
            measured, verdict = "not measured", "not measured"
        else:
            met = value <= wanted if at_most else value >= wanted
            measured = f"{value:,.2f}" if value < 100 else f"{value:,.0f}"
            verdict = "met" if met else f"missed by {abs(value - wanted) / wanted:.0%}"
        lines.append(f"| {what} | {'at most' if at_most else 'at least'} {wanted:,} | {measured} | {verdict} |")
    pinned = [f"{r['passages']:,}" for r in rows if (r.get("stream") or {}).get("pinned_cpu") is not None]
    if pinned:  # the wall rates of such a run are one core's in the strict sense: say which sizes they are
        lines += ["", "The stream benchmark ran on one CPU, Lucene's JVM with it (`--pin-cpu`), at "
                  f"{', '.join(pinned)} passages."]
    return "\n".join(lines)


def figure(rows: list[dict], path: Path) -> None:
    """Build time, build peak, index size, what a load adds and queries/s against the passages, bm25 and lucene
    (a lucene point only where it is measured)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # per panel: how to read bm25's and lucene's raw figure from a record (None where not measured), and its unit
    panels = [("build time (min)", lambda r: r["build"]["seconds"], lambda lu: lu["build_s"], 60),
              ("build peak RSS (GB)", lambda r: r["build"]["peak_mb"], lambda lu: lu["build_peak_mb"], 1024),
              ("index on disk (GB)", lambda r: r["index_bytes"]["all"], lambda lu: lu["index_bytes"], 2**30),
              ("RSS a load adds (GB)", lambda r: r["load"]["added_mb"], lambda lu: lu["load_added_mb"], 1024),
              ("queries/s (one thread)", lambda r: r["queries_per_s"], lambda lu: lu["queries_per_s"], 1)]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.2))
    passages = [r["passages"] for r in rows]
    for ax, (title, bm25, lucene, unit) in zip(axes, panels):
        for label, read in (("bm25", bm25), ("lucene", lambda r, f=lucene: f(r["lucene"]))):
            points = [(r["passages"], read(r) / unit) for r in rows if read(r) is not None]
            if points:
                ax.plot(*zip(*points), "o-", label=label)
        ax.set_xscale("log")
        ax.set_xticks(passages, [f"{n / 1e6:.3g}M" for n in passages], minor=False)
        ax.set_xticks([], minor=True)
        ax.set_xlabel("passages")
        ax.set_title(title)
        ax.grid(alpha=0.3)
    axes[1].axhline(8, color="grey", linestyle="--", label="8 GB target")
    axes[3].axhline(2, color="grey", linestyle="--", label="2 GB target")
    axes[4].set_yscale("log")
    for ax in axes:
        ax.legend()
    for ax in axes[:4]:
        ax.set_ylim(bottom=0)  # after the target lines, which the top then includes
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from hf_ralm.utils import write_json_atomic

    if args.table:
        rows = records(args.records, args.label)
        print(table(rows))
        print()
        print(targets_table(rows))
        figure(rows, FIGURE)
        print(f"- {FIGURE.relative_to(REPO)}")
        return 0
    args.records.mkdir(parents=True, exist_ok=True)
    for size in (int(s) for s in args.sizes.split(",")):
        path = args.records / f"{args.label}-{size}.json"
        if args.backend == "lucene":
            if not path.exists():
                print(f"[bench] {size:,} passages: no bm25 record ({path}): measure bm25 first", file=sys.stderr)
                continue
            record = json.loads(path.read_text())
            if record["lucene"]["build_s"] is not None:
                print(f"[bench] {size:,} passages: {path} has its lucene columns", file=sys.stderr)
                continue
            write_json_atomic(str(path), measure_lucene(record, args))
            print(json.dumps(json.loads(path.read_text())["lucene"], indent=1))
            continue
        if path.exists():
            print(f"[bench] {size:,} passages: {path} is there", file=sys.stderr)
            continue
        record = measure(size, args)
        write_json_atomic(str(path), record)
        print(json.dumps(record, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
