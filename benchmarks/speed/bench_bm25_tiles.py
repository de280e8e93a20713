"""The bm25 stream's search at several tile sizes, side by side in one run: which tile of scores suits this machine's
caches.

A query's changes are applied a tile of passages at a time (``BM25Stream(tile_size=)``), so that the scores being
changed stay in the core's cache while every changed column's postings within the tile are added. Any tile gives the
same passages; only the speed differs. This times the search alone (term ids in, passage ids out: the part of
``retrieve`` the tile changes) on the RALM query stream of ``bench_bm25_stream`` (WikiText-103 test, SmolLM2's
tokenizer, s = 4, ℓ = 32, the paper's forbidden titles, k = 16, batches of 64, one thread), each size on a stream of
its own. The sizes are timed in ``--rounds`` rounds, each round in a rotated order, so that a change of the machine's
load falls on every size alike; the figures are each size's median over the rounds, after one untimed pass (the
kernel compiled, the index's pages read in). Every size's results are checked
``==`` against the first size's. The caches' sizes are read from Linux's sysfs and printed beside the figures.

    python -m benchmarks.speed.bench_bm25_tiles --json-out ~/.cache/hf-ralm/bench/bm25_tiles.json

About 2 minutes on this project's 2 cores at the sample's 666,157 passages (the default index).
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_common import available_cores
from benchmarks.speed.bench_bm25_stream import BATCH, add_stream_arguments, stream_queries

SIZES = (1 << 13, 1 << 14, 1 << 15, 1 << 16, 1 << 17, 1 << 18, 0)
"""Tiles timed by default, in passages (8 bytes of scores each): 64 KiB to 2 MiB, and 0 for no tiles (every column
whole)."""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stream_arguments(parser)
    parser.add_argument("--rounds", type=int, default=5, help="times each size is timed (the median is reported)")
    parser.add_argument("--sizes", type=int, nargs="+", default=list(SIZES),
                        help="tile sizes in passages (0: no tiles)")
    return parser.parse_args(argv)


def cache_sizes() -> dict[str, int]:
    """This core's data and unified caches by level (``"L1d"``, ``"L2"``, ``"L3"``), in bytes, as Linux's sysfs
    gives them (empty where it does not)."""
    sizes = {}
    for entry in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size = ((entry / name).read_text().strip() for name in ("level", "type", "size"))
        except OSError:
            continue
        if kind == "Instruction":
            continue
        units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
        sizes[f"L{level}{'d' if kind == 'Data' else ''}"] = int(size[:-1]) * units[size[-1]] if size[-1] in units \
            else int(size)
    return sizes


def time_search(stream, counted: list[dict[int, int]], k: int) -> tuple[float, float, list[np.ndarray]]:
    """Wall and CPU seconds of searching ``counted`` in batches on ``stream``, and its ids, scores and counts."""
    found = []
    wall, cpu = time.perf_counter(), time.process_time()
    for first in range(0, len(counted), BATCH):
        found.append(stream.search(counted[first : first + BATCH], k))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall, cpu, [np.concatenate([batch[i] for batch in found]) for i in range(3)]


def main(argv: list[str] | None = None) -> dict:
    from hf_ralm.retrieval import BM25Retriever, read_forbidden_titles
    from hf_ralm.utils import write_json_atomic

    args = parse_args(argv)
    queries = stream_queries(args)
    retriever = BM25Retriever.load(args.index_dir, forbidden_titles=read_forbidden_titles(args.forbidden_titles),
                                   n_threads=1)
    counted = retriever._term_counts(queries)
    base = retriever._stream  # the backend's stream, with the default tile
    num_docs, default_tile = base.num_docs, base.tile_size
    sizes = [size or num_docs for size in args.sizes]

    def stream(size: int):  # the same index, a new stream (no last query yet) with this tile
        return type(base)(base.data, base.indices, base.indptr, num_docs, base.forbidden, tile_size=size)

    # untimed: compiles the kernel (or loads it from numba's cache) and reads the memory-mapped index's pages in, which
    # the first size timed would otherwise pay for
    time_search(stream(sizes[0]), counted, args.k)
    walls = {size: [] for size in sizes}
    cpus = {size: [] for size in sizes}
    first_results, identical = None, {size: True for size in sizes}
    for r in range(args.rounds):
        for size in sizes[r % len(sizes):] + sizes[: r % len(sizes)]:
            wall, cpu, results = time_search(stream(size), counted, args.k)
            walls[size].append(wall)
            cpus[size].append(cpu)
            if first_results is None:
                first_results = results
            identical[size] &= all(np.array_equal(a, b) for a, b in zip(results, first_results))
        print(f"[tiles] round {r + 1} of {args.rounds} done", flush=True)

    caches = cache_sizes()
    rows = [{"tile_passages": size, "tile_bytes": 8 * size, "tiles": -(-num_docs // size),
             "qps": len(counted) / float(np.median(walls[size])),
             "cpu_qps": len(counted) / float(np.median(cpus[size])),
             "wall_seconds": walls[size], "cpu_seconds": cpus[size], "identical": identical[size]}
            for size in sizes]
    default = next((row for row in rows if row["tile_passages"] == min(default_tile, num_docs)), None)
    figures = {"passages": num_docs, "queries": len(counted), "k": args.k, "batch": BATCH, "threads": 1,
               "rounds": args.rounds, "default_tile": default_tile, "caches": caches, "rows": rows,
               "load_average": os.getloadavg(), "cores": available_cores()}
    print(f"{num_docs:,} passages, {len(counted)} queries, k={args.k}, batches of {BATCH}, one thread, median of "
          f"{args.rounds} rounds; caches {', '.join(f'{name} {size >> 10:,} KiB' for name, size in caches.items())};"
          f" load average {' '.join(f'{x:.1f}' for x in figures['load_average'])} on {figures['cores']} cores")
    print("| tile (passages) | scores per tile | tiles | search queries/s (wall) | (CPU time) | against the default |"
          " results identical |")
    print("|---:|---:|---:|---:|---:|---:|---|")
    for row in rows:
        against = f"{row['qps'] / default['qps']:.2f}x" if default else "-"
        print(f"| {row['tile_passages']:,}{' (default)' if row is default else ''} | {row['tile_bytes'] >> 10:,} KiB "
              f"| {row['tiles']} | {row['qps']:,.0f} | {row['cpu_qps']:,.0f} | {against} | "
              f"{'yes' if row['identical'] else 'NO'} |")
    if args.json_out:
        write_json_atomic(args.json_out, figures)
    return figures


if __name__ == "__main__":
    main()
