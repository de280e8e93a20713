"""The bm25 index build with its analysis in parallel against one process: ``BM25Retriever.build`` of the Wikipedia
sample with ``n_threads=1`` (no worker processes) and with the default (worker processes for the CPUs this process
may use), side by side in one run, each in a fresh process, into temporary folders; and whether the two indexes are
the same, file for file.

Per build: its wall time (the build alone, not the interpreter's start and imports) and the CPU seconds of the
building process and of its workers (RUSAGE_CHILDREN), which do not depend on what else the machine runs. The
indexes must be identical: the bm25s files (matrices, vocabulary, parameters) and the passages table (its Arrow file,
``dataset_info.json``, and ``state.json`` but for ``_fingerprint``, which ``datasets`` draws from the temporary
table's path and time: it differs between any two builds). The parallel one is also compared with the cached index
of the main job (``--reference``), when that was built from the same corpus. The exit status is 1 when any differs.

    python -m benchmarks.speed.bench_bm25_parallel --json-out ~/.cache/hf-ralm/bench/bm25_parallel.json

About 7 minutes for the whole sample (666k passages: two builds of about 3.5 minutes each) on this project's
2 CPU cores while other jobs ran on them (load average 7 to 8).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.bench_common import available_cores
from benchmarks.bench_setup import BM25_INDEX, WIKIPEDIA

CHILD = """
import json, resource, sys, time
from hf_ralm.retrieval import BM25Retriever
corpus, index_dir, processes = sys.argv[1], sys.argv[2], int(sys.argv[3]) or None
t0 = time.perf_counter()
BM25Retriever.build(corpus, index_dir, show_progress=False, n_threads=processes)
seconds = time.perf_counter() - t0
cpu = {who: usage.ru_utime + usage.ru_stime for who, usage in (
    ("main", resource.getrusage(resource.RUSAGE_SELF)), ("workers", resource.getrusage(resource.RUSAGE_CHILDREN)))}
print(json.dumps({"seconds": seconds, "cpu_main": cpu["main"], "cpu_workers": cpu["workers"]}))
"""
INDEX_FILES = ("bm25s/data.csc.index.npy", "bm25s/indices.csc.index.npy", "bm25s/indptr.csc.index.npy",
               "bm25s/vocab.index.json", "bm25s/params.index.json", "passages/data-00000-of-00001.arrow",
               "passages/dataset_info.json", "passages/state.json")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", default=str(WIKIPEDIA))
    parser.add_argument("--processes", type=int, default=0,
                        help="worker processes of the parallel build (default 0: the build's default, the CPUs)")
    parser.add_argument("--reference", default=str(BM25_INDEX),
                        help="an index of the same corpus built before, compared with the parallel build when there")
    parser.add_argument("--json-out", help="write every figure to this JSON file")
    return parser.parse_args(argv)


def build(name: str, corpus: str, index_dir: str, processes: int) -> dict:
    """Build in a fresh process (``processes``: 1, or 0 for the build's default); its wall and CPU seconds."""
    print(f"[bench] {name} build ...", file=sys.stderr, flush=True)
    done = subprocess.run([sys.executable, "-c", CHILD, corpus, index_dir, str(processes)], check=True,
                          stdout=subprocess.PIPE, text=True, env={**os.environ, "TQDM_DISABLE": "1"})
    return json.loads(done.stdout.splitlines()[-1])


def file_bytes(index_dir: str, name: str) -> bytes:
    data = Path(index_dir, name).read_bytes()
    if name == "passages/state.json":  # its _fingerprint hashes the temporary table's path and time
        state = json.loads(data)
        del state["_fingerprint"]
        data = json.dumps(state, sort_keys=True).encode()
    return data


def differing_files(one: str, other: str) -> list[str]:
    return [name for name in INDEX_FILES if file_bytes(one, name) != file_bytes(other, name)]


def same_corpus(one: str, other: str) -> bool:
    from hf_ralm.retrieval import read_index_info

    infos = [read_index_info(folder) or {} for folder in (one, other)]
    return all(info.get("fingerprint") for info in infos) and infos[0]["fingerprint"] == infos[1]["fingerprint"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    command = shlex.join(["python", "-m", "benchmarks.speed.bench_bm25_parallel",
                          *(sys.argv[1:] if argv is None else argv)])
    with tempfile.TemporaryDirectory() as tmp:
        single_dir, parallel_dir = os.path.join(tmp, "single"), os.path.join(tmp, "parallel")
        single = build("single-process", args.corpus, single_dir, 1)
        parallel = build("parallel", args.corpus, parallel_dir, args.processes)
        differ = differing_files(single_dir, parallel_dir)
        reference = None
        if os.path.isdir(args.reference) and same_corpus(args.reference, parallel_dir):
            reference = differing_files(args.reference, parallel_dir)
        from hf_ralm.retrieval import read_index_info

        num_passages = read_index_info(parallel_dir)["num_passages"]
    processes = args.processes or available_cores()
    print(f"\n| build | processes | wall seconds | CPU seconds, main process | CPU seconds, workers |\n"
          f"|---|---:|---:|---:|---:|\n"
          f"| one process (n_threads=1) | 1 | {single['seconds']:.1f} | {single['cpu_main']:.1f} | "
          f"{single['cpu_workers']:.1f} |\n"
          f"| parallel analysis | 1 + {processes} workers | {parallel['seconds']:.1f} | {parallel['cpu_main']:.1f} | "
          f"{parallel['cpu_workers']:.1f} |")
    speed_up = single["seconds"] / parallel["seconds"]
    print(f"\n{num_passages:,} passages, {available_cores()} CPU cores; speed-up {speed_up:.2f}"
          f"x. The two indexes are {'identical' if not differ else 'DIFFERENT: ' + ', '.join(differ)}"
          f"{'' if reference is None else '; the parallel one and ' + args.reference + ' are '}"
          f"{'' if reference is None else 'identical' if not reference else 'DIFFERENT: ' + ', '.join(reference)}.")
    print(f"- `{command}`")
    if args.json_out:
        from hf_ralm.utils import write_json_atomic

        write_json_atomic(args.json_out, {
            "command": command, "cores": available_cores(), "processes": processes, "num_passages": num_passages,
            "single": single, "parallel": parallel, "differing_files": differ,
            "reference": None if reference is None else {"index_dir": args.reference, "differing_files": reference}})
    return 1 if differ or reference else 0


if __name__ == "__main__":
    sys.exit(main())
