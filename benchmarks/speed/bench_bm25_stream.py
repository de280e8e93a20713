"""The bm25 backend's search of a RALM query stream against bm25s's own search and an exhaustive scorer, side by side
in one run, on the whole Wikipedia sample's index (666,157 passages), one thread.

The queries are those of an evaluation of WikiText-103 test (SmolLM2's tokenizer, windows of 512 tokens every 4, the
last 32 tokens decoded: ``hf_ralm.core.plan.prepare``), the first ``--queries``, with the paper's forbidden titles,
k=16. Per path, queries/s over batches of 64 (``BM25Retriever.retrieve``, which analyses the queries and reads the
passages, the stream kept between batches as in an evaluation; bm25s's ``BM25.retrieve``, the search ``retrieve``
ran before, on the same analysed terms; the exhaustive scorer of :mod:`hf_ralm.testing.bm25`, every posting of every
query term added into a dense float64 array, on the first ``--exhaustive-queries``); the new path's search alone
(terms in, ids out); the new path's latency per query when they come one at a time (a generation row's per-stride
retrieval: p50, p99); and how many of the exhaustive scorer's queries got the same top-16 from the new path (ids,
order and scores, ``==``) and from bm25s (ids and order; its float32 sums may order two scores within rounding
differently). The first search's time (numba compiling the kernel, or loading it from its cache) is printed apart.
With ``--lucene-index`` (built by ``hf-ralm index --retriever lucene``; the default is where the benchmarks keep it),
the Lucene backend on the same queries, one thread, batches of 64, on the first ``--lucene-queries``: Anserini's
``batch_search`` for the top ``k`` (what Lucene itself costs, forbidden titles not applied) and the backend's
``retrieve`` with the forbidden titles (as an evaluation runs it: it searches 100 deep and filters); the stream's
``retrieve`` against the first of the two is the "times Lucene" figure. One thread is not one core: Lucene's JVM
compiles and collects garbage on threads of its own, which run on another core beside the search thread, so its
wall rate can exceed its CPU-time rate; ``--pin-cpu N`` runs every thread of the benchmark, the JVM's
with them, on CPU ``N`` alone (the record keeps the CPU and how many threads could still run elsewhere).

    python -m benchmarks.speed.bench_bm25_stream --json-out ~/.cache/hf-ralm/bench/bm25_stream.json

About 3 minutes on this project's 2 shared cores (the index's load and the bm25s path take most of it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks.bench_common import available_cores
from benchmarks.bench_setup import BM25_INDEX, CACHE, MODELS_DIR, SHARED

BATCH = 64


def add_stream_arguments(parser: argparse.ArgumentParser) -> None:
    """The index and the RALM query stream's flags, which ``stream_queries`` reads (shared with bench_bm25_tiles)."""
    parser.add_argument("--index-dir", default=str(BM25_INDEX))
    parser.add_argument("--data", default=str(SHARED / "wikitext-103" / "test.jsonl"))
    parser.add_argument("--tokenizer", default=str(MODELS_DIR / "smollm2-135m-instruct"))
    parser.add_argument("--forbidden-titles", default="wikitext-103")
    parser.add_argument("--queries", type=int, default=2000)
    parser.add_argument("-k", type=int, default=16)
    parser.add_argument("--json-out", help="write every figure to this JSON file")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_stream_arguments(parser)
    parser.add_argument("--bm25s-queries", type=int, default=200, help="queries timed on bm25s's search")
    parser.add_argument("--exhaustive-queries", type=int, default=200,
                        help="queries timed on the exhaustive scorer and compared with it")
    parser.add_argument("--lucene-index", default=str(CACHE / "index" / "wikipedia-2015-sample-lucene"),
                        help="the Lucene backend's index of the same corpus ('none': leave Lucene out)")
    parser.add_argument("--lucene-queries", type=int, default=500, help="queries timed on the Lucene backend")
    parser.add_argument("--scale-record",
                        help="a record of bench_bm25_scale (results/bm25-scale/bm25-<N>.json) of this index's corpus: "
                             "its queries/s columns (bm25 retrieve, Lucene batch_search) and this run's figures "
                             "(\"stream\") are written into it")
    parser.add_argument("--pin-cpu", type=int, metavar="CPU",
                        help="run the whole benchmark on this CPU alone (set before Lucene's JVM starts, whose threads "
                             "inherit it): one core in the strict sense; without it the JVM's compiler and garbage "
                             "collector may work on other cores, which the CPU-time rates count and the wall rates "
                             "do not")
    return parser.parse_args(argv)


def stream_queries(args: argparse.Namespace) -> list[str]:
    from transformers import AutoTokenizer

    from hf_ralm import RalmConfig, load_dataset_text, prepare

    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    config = RalmConfig(retrieval_stride=4, query_length=32)
    plan = prepare(load_dataset_text(args.data), tokenizer, config, "bm25", max_length=512,
                   max_eval_tokens=512 + 4 * (args.queries + 1))
    return [query for query in plan.queries if query is not None][: args.queries]


def pin_to_cpu(cpu: int) -> None:
    """Put this process's threads, those running and those it starts from now on, on ``cpu`` alone (a clear exit
    when the process may not run there, or the platform has no CPU affinity)."""
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("--pin-cpu needs CPU affinity (os.sched_setaffinity), which this platform lacks: Linux has it")
    allowed = sorted(os.sched_getaffinity(0))
    if cpu not in allowed:
        raise SystemExit(f"--pin-cpu {cpu}: this process may run on CPUs {allowed}; pick one of them")
    on_each_thread(lambda thread: os.sched_setaffinity(thread, {cpu}))  # numpy's BLAS pool started already


def on_each_thread(action):
    """``action(thread id)`` for each of this process's threads (Linux's /proc; where it is not there, the calling
    thread alone, id 0), what it returned in a list; a thread that ended meanwhile is left out."""
    threads = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    done = []
    for thread in threads:
        try:
            done.append(action(thread))
        except OSError:  # the thread ended meanwhile
            pass
    return done


def threads_off_cpu(cpu: int) -> int:
    """How many of this process's threads may run on a CPU other than ``cpu``."""
    return sum(cpus != {cpu} for cpus in on_each_thread(os.sched_getaffinity))


def per_second(count: int, seconds: float) -> float:
    return count / seconds if seconds else float("inf")


CPU_SECONDS: dict[str, float] = {}
"""Per path, the CPU seconds this process spent on it (the machine is shared: wall seconds include waiting)."""


def in_batches(function, items: list, batch: int = BATCH, name: str = "") -> tuple[list, float]:
    """What ``function`` gives for ``items``, ``batch`` at a time, and the wall seconds it took (CPU seconds in
    :data:`CPU_SECONDS` under ``name``)."""
    found, start, cpu = [], time.perf_counter(), time.process_time()
    for first in range(0, len(items), batch):
        found.extend(function(items[first : first + batch]))
    CPU_SECONDS[name] = time.process_time() - cpu
    return found, time.perf_counter() - start


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    if args.pin_cpu is not None:  # before the libraries' imports, which may start thread pools
        pin_to_cpu(args.pin_cpu)
    from hf_ralm.retrieval import BM25Retriever, analyze_texts, read_forbidden_titles
    from hf_ralm.testing import reference_bm25_top_k
    from hf_ralm.utils import write_json_atomic

    queries = stream_queries(args)
    forbidden = read_forbidden_titles(args.forbidden_titles)
    start = time.perf_counter()
    retriever = BM25Retriever.load(args.index_dir, forbidden_titles=forbidden, n_threads=1)
    load_seconds = time.perf_counter() - start
    k = args.k
    start = time.perf_counter()
    retriever.retrieve(queries[:1], k=k)
    first_seconds = time.perf_counter() - start  # compiles the kernel, or loads it from numba's cache

    def fresh() -> BM25Retriever:  # the same index, no stream yet
        return BM25Retriever.load(args.index_dir, forbidden_titles=forbidden, n_threads=1)

    retriever = fresh()
    found, retrieve_seconds = in_batches(lambda batch: retriever.retrieve(batch, k=k), queries, name="retrieve")
    terms = analyze_texts(queries)
    counted = retriever._term_counts(queries)
    searcher = fresh()._stream
    work = []  # per query: postings added, blocks of bounds read, whether it started from zero
    searched, search_seconds = in_batches(lambda batch: [searcher.search(batch, k), work.append(searcher.work)][:1],
                                          counted, name="search")
    work = np.concatenate(work)
    ids = np.concatenate([batch[0] for batch in searched])
    scores = np.concatenate([batch[1] for batch in searched])
    sizes = np.concatenate([batch[2] for batch in searched])

    old = retriever.bm25
    old_found, bm25s_seconds = in_batches(lambda batch: list(zip(*old.retrieve(
        batch, k=k, weight_mask=retriever._weight_mask, n_threads=1, show_progress=False))),
        terms[: args.bm25s_queries], name="bm25s")

    matrix, vocab = old.scores, old.vocab_dict
    forbidden_ids = np.flatnonzero(retriever._weight_mask == 0) if retriever._weight_mask is not None else []
    exhaustive, exhaustive_seconds = in_batches(
        lambda batch: reference_bm25_top_k(matrix, vocab, batch, k, forbidden_ids), terms[: args.exhaustive_queries],
        name="exhaustive")

    lucene = lucene_figures(args, queries, forbidden)

    one_at_a_time, latencies = fresh(), []
    for query in queries:
        start = time.perf_counter()
        one_at_a_time.retrieve([query], k=k)
        latencies.append(time.perf_counter() - start)

    same = sum(ids[q, : sizes[q]].tolist() == [i for i, _ in want] and
               scores[q, : sizes[q]].tolist() == [s for _, s in want] for q, want in enumerate(exhaustive))
    same_retrieve = sum([(int(p.id), p.score) for p in found[q]] == want for q, want in enumerate(exhaustive))
    same_bm25s = sum([int(i) for i, s in zip(*old_found[q]) if s > 0] == [i for i, _ in want]
                     for q, want in enumerate(exhaustive[: len(old_found)]))
    figures = {
        "passages": len(retriever), "queries": len(queries), "k": k, "batch": BATCH, "threads": 1,
        "mean_terms_per_query": float(np.mean([len(t) for t in terms])),
        "load_seconds": load_seconds, "first_search_seconds": first_seconds,
        "retrieve_qps": per_second(len(queries), retrieve_seconds),
        "search_qps": per_second(len(queries), search_seconds),
        "bm25s_qps": per_second(len(old_found), bm25s_seconds), "bm25s_queries": len(old_found),
        "exhaustive_qps": per_second(len(exhaustive), exhaustive_seconds), "exhaustive_queries": len(exhaustive),
        "one_at_a_time_p50_ms": 1000 * float(np.percentile(latencies, 50)),
        "one_at_a_time_p99_ms": 1000 * float(np.percentile(latencies, 99)),
        "cpu_qps": {name: per_second(len(old_found) if name == "bm25s" else len(exhaustive) if name == "exhaustive"
                                     else lucene["queries"] if name.startswith("lucene") else len(queries), seconds)
                    for name, seconds in CPU_SECONDS.items()},
        "per_query": {"postings_added": float(work[:, 0].mean()), "blocks_read": float(work[:, 1].mean()),
                      "blocks": searcher.num_blocks, "started_from_zero": int(work[:, 2].sum()),
                      "postings_of_whole_queries": float(np.mean([searcher.postings(q) for q in counted]))},
        "exact_terms": searcher.exact_terms(),
        "same_top_k_as_exhaustive": {"search": same, "retrieve": same_retrieve, "bm25s_ids": same_bm25s},
        "lucene": lucene, "load_average": os.getloadavg(), "cores": available_cores(),
        "pinned_cpu": args.pin_cpu,
        "threads_off_the_pinned_cpu": None if args.pin_cpu is None else threads_off_cpu(args.pin_cpu),
    }
    if lucene:
        figures["times_lucene"] = figures["retrieve_qps"] / lucene["batch_search_qps"]
    print(f"{figures['passages']:,} passages, {len(queries)} queries (about {figures['mean_terms_per_query']:.1f} "
          f"terms each), k={k}, batches of {BATCH}, one thread; load average "
          f"{' '.join(f'{x:.1f}' for x in figures['load_average'])}; this process on {figures['cores']} cores"
          + ("" if args.pin_cpu is None else f" (pinned to CPU {args.pin_cpu}, Lucene's JVM with it: "
                                             f"{figures['threads_off_the_pinned_cpu']} threads may run elsewhere)"))
    print(f"index load {load_seconds:.1f} s, first search {first_seconds:.2f} s (kernel compiled or loaded)")
    cpu = figures["cpu_qps"]
    print("| path | queries | queries/s (wall) | queries/s (CPU time) | top-16 identical to exhaustive |")
    print("|---|---|---|---|---|")
    print(f"| bm25 retrieve (stream) | {len(queries)} | {figures['retrieve_qps']:,.0f} | {cpu['retrieve']:,.0f} | "
          f"{same_retrieve} of {len(exhaustive)} |")
    print(f"| its search alone (terms in, ids out) | {len(queries)} | {figures['search_qps']:,.0f} | "
          f"{cpu['search']:,.0f} | {same} of {len(exhaustive)} |")
    print(f"| bm25s BM25.retrieve (before) | {len(old_found)} | {figures['bm25s_qps']:,.1f} | {cpu['bm25s']:,.1f} | "
          f"{same_bm25s} of {len(old_found)} (ids) |")
    print(f"| exhaustive (hf_ralm.testing.bm25) | {len(exhaustive)} | {figures['exhaustive_qps']:,.1f} | "
          f"{cpu['exhaustive']:,.1f} | - |")
    if lucene:
        print(f"| Lucene batch_search, top {k} | {lucene['queries']} | {lucene['batch_search_qps']:,.1f} | "
              f"{cpu['lucene batch_search']:,.1f} | - |")
        print(f"| lucene retrieve, forbidden titles | {lucene['queries']} | {lucene['retrieve_qps']:,.1f} | "
              f"{cpu['lucene retrieve']:,.1f} | - |")
        print(f"bm25 retrieve (stream) against Lucene's batch_search: {figures['times_lucene']:.1f}x (target: 20x)")
    per_query = figures["per_query"]
    print(f"per query of the stream: {per_query['postings_added']:,.0f} postings added (a whole query's terms: "
          f"{per_query['postings_of_whole_queries']:,.0f}), {per_query['blocks_read']:.0f} of "
          f"{per_query['blocks']:,} blocks read; {per_query['started_from_zero']} queries started from zero; "
          f"sums exact up to {figures['exact_terms']:,} terms a query")
    print(f"one query at a time (retrieve): p50 {figures['one_at_a_time_p50_ms']:.2f} ms, "
          f"p99 {figures['one_at_a_time_p99_ms']:.2f} ms")
    if args.scale_record:
        fill_scale_record(args.scale_record, figures)
    if args.json_out:
        write_json_atomic(args.json_out, figures)
    return figures


def fill_scale_record(path: str, figures: dict) -> None:
    """Write this run's queries/s into a bench_bm25_scale record of the same corpus (refused for another one)."""
    from hf_ralm.utils import write_json_atomic

    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    if record["passages"] != figures["passages"]:
        raise SystemExit(f"{path} is the record of {record['passages']:,} passages, this index holds "
                         f"{figures['passages']:,}")
    record["queries_per_s"] = figures["retrieve_qps"]
    if figures["lucene"]:
        record["lucene"]["queries_per_s"] = figures["lucene"]["batch_search_qps"]
    record["stream"] = figures
    write_json_atomic(path, record)


def lucene_figures(args: argparse.Namespace, queries: list[str], forbidden) -> dict | None:
    """The Lucene backend on the first ``--lucene-queries`` queries, one thread, batches of 64: Anserini's
    ``batch_search`` for the top ``k`` and the backend's ``retrieve`` with the forbidden titles (``None`` without
    ``--lucene-index``). The JVM's CPU time is this process's, so the CPU rates count it."""
    if args.lucene_index == "none":
        return None
    from hf_ralm.retrieval import LuceneRetriever

    asked = queries[: args.lucene_queries]
    start = time.perf_counter()
    plain = LuceneRetriever.load(args.lucene_index, n_threads=1)
    load_seconds = time.perf_counter() - start
    filtered = LuceneRetriever.load(args.lucene_index, forbidden_titles=forbidden, n_threads=1)
    plain.retrieve(asked[:BATCH], k=args.k)  # the JVM's first searches (its compiler warming up) are not timed
    _, search_seconds = in_batches(lambda batch: plain._searcher.batch_search(batch, args.k, 1), asked,
                                   name="lucene batch_search")
    _, retrieve_seconds = in_batches(lambda batch: filtered.retrieve(batch, k=args.k), asked, name="lucene retrieve")
    return {"queries": len(asked), "load_seconds": load_seconds,
            "batch_search_qps": per_second(len(asked), search_seconds),
            "retrieve_qps": per_second(len(asked), retrieve_seconds)}


if __name__ == "__main__":
    main()
