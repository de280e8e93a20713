"""The scale benchmark's table of issue 64's targets says, for each, met, by how much it is missed, or that it is not
measured: from records shaped as bench_bm25_scale writes them."""

from __future__ import annotations

from benchmarks.speed.bench_bm25_scale import SAMPLE_PASSAGES, targets_table


def record(passages: int, queries_per_s, times_lucene=None, cpu_qps=None, peak_mb=1024.0, load_mb=512.0) -> dict:
    stream = {"times_lucene": times_lucene, "cpu_qps": cpu_qps} if times_lucene is not None else None
    return {"passages": passages, "queries_per_s": queries_per_s, "stream": stream,
            "build": {"peak_mb": peak_mb}, "load": {"added_mb": load_mb}}


def test_each_target_is_met_missed_by_a_share_or_not_measured():
    rows = [record(SAMPLE_PASSAGES, 1500.0, times_lucene=25.0,
                   cpu_qps={"retrieve": 1600.0, "lucene batch_search": 100.0}),
            record(21_000_000, 9.0, peak_mb=9 * 1024.0, load_mb=1.5 * 1024)]
    lines = {line.split(" | ")[0].lstrip("| "): line for line in targets_table(rows).splitlines()[2:]}
    assert lines["bm25 queries/s, the 666k sample"].endswith("| 1,500 | missed by 25% |")
    assert lines["bm25 queries/s, 21M passages"].endswith("| 9.00 | missed by 91% |")
    assert lines["bm25 against Lucene's batch_search, the 666k sample"].endswith("| 25.00 | met |")
    assert lines["bm25 against Lucene's batch_search, CPU time, the 666k sample"].endswith("| 16.00 | missed by 20% |")
    assert lines["bm25 against Lucene's batch_search, 21M passages"].endswith("| not measured | not measured |")
    assert lines["bm25 against Lucene's batch_search, CPU time, 21M passages"].endswith(
        "| not measured | not measured |")
    assert lines["21M build peak RSS (GiB)"].endswith("| at most 8 | 9.00 | missed by 12% |")
    assert lines["21M load adds RSS (GiB)"].endswith("| 1.50 | met |")


def test_a_size_without_a_record_is_not_measured():
    assert targets_table([]).count("| not measured | not measured |") == 8


def test_the_sizes_whose_stream_run_was_pinned_to_one_cpu_are_named():
    pinned = record(SAMPLE_PASSAGES, 2100.0, times_lucene=21.0,
                    cpu_qps={"retrieve": 2100.0, "lucene batch_search": 99.0})
    pinned["stream"]["pinned_cpu"] = 1
    unpinned = record(5_000_000, 180.0, times_lucene=3.0, cpu_qps={"retrieve": 180.0, "lucene batch_search": 30.0})
    assert targets_table([pinned, unpinned]).splitlines()[-1] == (
        "The stream benchmark ran on one CPU, Lucene's JVM with it (`--pin-cpu`), at 666,157 passages.")
    assert "--pin-cpu" not in targets_table([unpinned])
