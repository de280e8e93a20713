"""The figure suite's machinery (benchmarks/figures): one CSV row per point as soon as it is measured, reruns that skip
what is done, settings never mixed, interrupted runs that keep their points, plots drawn from the CSV alone; on tiny
random models, a tiny corpus and tiny texts (not the figures' values)."""

from __future__ import annotations

import argparse
import csv
import doctest
import json
import math
import os
import tempfile

import numpy as np
import pytest
import torch
from conftest import EVAL_TEXT

from benchmarks.figures import (
    context_length,
    intervals,
    perplexity,
    plotting,
    qa_num_docs,
    query_length,
    resources,
    retrievers,
    stride,
    sweep,
)

DATA = "held-out Wikipedia"


def simple_table(tmp_path) -> sweep.Table:
    return sweep.Table(tmp_path / "fig.csv", settings=("model", "max_eval_tokens", "stride"), measures=("ppl",))


def counting_measure(calls: list, fail_at: int | None = None):
    def measure(point):
        calls.append(point["stride"])
        if len(calls) == fail_at:
            raise RuntimeError("interrupted")
        return {"ppl": 10.0 + point["stride"]}
    return measure


def test_a_row_per_point_and_a_rerun_skips_the_done_points(tmp_path):
    table, calls = simple_table(tmp_path), []
    points = [{"model": "m", "max_eval_tokens": 64, "stride": s} for s in (1, 2, 4)]
    assert sweep.run_points(table, points, counting_measure(calls), "test") == 3
    assert [(r["stride"], r["ppl"]) for r in table.read()] == [("1", "11.0"), ("2", "12.0"), ("4", "14.0")]
    assert sweep.run_points(table, points, counting_measure(calls), "test") == 0
    assert calls == [1, 2, 4]  # nothing measured again
    sweep.run_points(table, points + [{"model": "m", "max_eval_tokens": 64, "stride": 8}], counting_measure(calls), "t")
    assert calls == [1, 2, 4, 8] and len(table.read()) == 4


def test_a_changed_fixed_setting_is_measured_apart_and_labelled_apart(tmp_path):
    table, calls = simple_table(tmp_path), []
    sweep.run_points(table, [{"model": "m", "max_eval_tokens": 64, "stride": s} for s in (1, 2)],
                     counting_measure(calls), "test")
    sweep.run_points(table, [{"model": "m", "max_eval_tokens": 32, "stride": s} for s in (1, 2)],
                     counting_measure(calls), "test")
    rows = table.read()
    assert calls == [1, 2, 1, 2] and len(rows) == 4  # the old rows kept, the new ones beside them
    assert plotting.split_columns(rows, ("model",), "stride", table.settings) == ["max_eval_tokens"]
    fig, axes = plotting.panels(1)
    plotting.draw_lines(axes[0][0], rows, "stride", "ppl", ("model",), table.settings, lambda row: {})
    assert sorted(line.get_label() for line in axes[0][0].get_lines()) == ["m, max_eval_tokens=32",
                                                                           "m, max_eval_tokens=64"]
    # same series, so the same colour from the style; the split setting tells them apart by their dashes
    assert sorted(line.get_linestyle() for line in axes[0][0].get_lines()) == ["-", "--"]


def test_an_interrupted_run_keeps_the_points_measured_before(tmp_path):
    table, calls = simple_table(tmp_path), []
    points = [{"model": "m", "max_eval_tokens": 64, "stride": s} for s in (1, 2, 4)]
    with pytest.raises(RuntimeError, match="interrupted"):
        sweep.run_points(table, points, counting_measure(calls, fail_at=3), "test")
    assert [r["stride"] for r in table.read()] == ["1", "2"]
    assert not list(tmp_path.glob(".tmp-*"))  # no temporary file left behind
    calls.clear()
    sweep.run_points(table, points, counting_measure(calls), "test")
    assert calls == [4] and [r["stride"] for r in table.read()] == ["1", "2", "4"]


def test_a_csv_with_other_columns_is_refused(tmp_path):
    (tmp_path / "fig.csv").write_text("model,stride,token_ppl\nm,4,12.0\n")
    with pytest.raises(ValueError, match="move it away"):
        simple_table(tmp_path).read()


# ------------------------------------------------------------------------------------------------------------------
# Perplexity points on a tiny model
# ------------------------------------------------------------------------------------------------------------------


def write_old_csv(path, columns, rows) -> None:
    """A figure's CSV as an older version wrote it: only ``columns`` of each row (the interval columns missing or
    empty)."""
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(columns)
        writer.writerows([row[c] for c in columns] for row in rows)


@pytest.fixture()
def tiny_resources(tmp_path, tiny_llama, tiny_tokenizer, tiny_index):
    heldout = tmp_path / "heldout"
    heldout.mkdir()
    (heldout / "rows.jsonl").write_text(json.dumps({"text": EVAL_TEXT}) + "\n")
    (heldout / "titles.txt").write_text("Kingdom\n")
    args = argparse.Namespace(dtype="float32", heldout_dir=str(heldout), corpus=tiny_index["corpus"],
                              index_dir=tiny_index["index_dir"], batch_size=4, max_eval_tokens=40,
                              models=["SmolLM2-135M", "Gemma-3-270M"], datasets=[DATA], out_dir=str(tmp_path / "out"),
                              plot_only=False)
    loads = []

    def load(name, dtype):
        loads.append(name)
        return tiny_llama, tiny_tokenizer

    res = resources.Resources(args, load_reader=load)
    res.loads = loads
    return res


def test_a_missing_dense_index_is_built_in_bfloat16_and_an_existing_one_kept(tiny_resources, tmp_path, monkeypatch):
    from hf_ralm import retrieval  # the face the benchmarks import load_retriever from

    opened = []
    monkeypatch.setattr(retrieval, "load_retriever", lambda kind, **options: opened.append(options) or object())
    res = tiny_resources
    res.args.dense_index_dir = str(tmp_path / "dense")
    res.retriever("dense", resources.WHOLE, DATA)
    assert opened[-1]["encoder_dtype"] == "bfloat16" and opened[-1]["pooling"] == "mean"
    (tmp_path / "dense").mkdir()
    (tmp_path / "dense" / "hf_ralm_index.json").write_text(json.dumps({"retriever": "dense", "dtype": "float32"}))
    res._retrievers.clear()
    res.retriever("dense", resources.WHOLE, DATA)
    assert "encoder_dtype" not in opened[-1]  # built before: used in the precision it records


def test_the_subset_corpus_and_its_index_folders_come_from_bench_retrievers(tiny_resources, tmp_path):
    """The retrievers figure's lower panels: the subset is bench_retrievers.py's (its held-out titles excluded), and
    its indexes are where that script builds them (hybrid: the bm25 and dense folders it holds)."""
    res = tiny_resources
    res.args.subset_out, res.args.num_articles, res.args.seed = str(tmp_path / "subsets"), 3, 0
    sub = tmp_path / "subsets" / "subset-3-seed0"
    assert res.index_dirs("hybrid", res.subset()) == [str(sub / "index" / "hybrid" / "bm25"),
                                                      str(sub / "index" / "hybrid" / "dense")]
    assert res.index_dirs("lucene", res.subset()) == [str(sub / "index" / "lucene")]
    titles = [json.loads(line)["title"] for line in open(res.corpus_file(res.subset()), encoding="utf-8")]
    assert len(titles) == 3 and "Kingdom" not in titles  # the held-out article is never in the subset


def count_forwards(model):
    calls = []
    return calls, model.register_forward_hook(lambda *_: calls.append(1))


def test_perplexity_points_load_each_model_once_and_are_not_recomputed(tiny_resources, tiny_llama, tmp_path):
    res = tiny_resources
    points = [perplexity.point(res, model, DATA, retriever=kind, stride=s, max_length=16, max_doc_tokens=8)
              for model in res.args.models for kind, s in (("none", 4), ("bm25", 2), ("bm25", 4))]
    table = perplexity.table(str(tmp_path / "stride.csv"))
    assert sweep.run_points(table, points, lambda p: perplexity.measure(res, p), "test") == 6
    assert res.loads == ["SmolLM2-135M", "Gemma-3-270M"]  # points come model by model
    rows = table.read()
    assert [r["retriever"] for r in rows] == ["none", "bm25", "bm25"] * 2
    assert all(r["index_id"] == resources.index_identity(res.args.index_dir) for r in rows[1:3])
    assert rows[0]["index_id"] == rows[0]["query_length"] == rows[0]["corpus"] == ""
    assert [int(r["num_retrievals"]) for r in rows[:3]] == [0, 12, 6]  # (40 - 16) / s windows after window 0
    calls, hook = count_forwards(tiny_llama)
    try:
        assert sweep.run_points(table, points, lambda p: perplexity.measure(res, p), "test") == 0
    finally:
        hook.remove()
    assert calls == [] and res.loads == ["SmolLM2-135M", "Gemma-3-270M"]


def test_the_scripts_list_their_points_model_by_model(tiny_resources):
    args = tiny_resources.args
    args.strides, args.max_lengths, args.retrievers, args.query_lengths = [1, 64], [8, 16], ["bm25"], [8, 16]

    def settings(points, *names):
        return [tuple(p[n] for n in names) for p in points]

    models = args.models
    assert settings(stride.points(tiny_resources), "model", "retriever", "stride") == [
        (m, kind, s) for m in models for kind, s in (("none", 4), ("bm25", 1), ("bm25", 64))]
    assert settings(query_length.points(tiny_resources), "model", "retriever", "query_length") == [
        (m, kind, ell) for m in models for kind, ell in (("none", None), ("bm25", 8), ("bm25", 16))]
    assert settings(context_length.points(tiny_resources), "model", "retriever", "max_length", "context_tokens",
                    "max_doc_tokens") == [(m, kind, length, 16, None if kind == "none" else length - 4)
                                          for m in models for kind in ("none", "bm25") for length in (8, 16)]


def test_a_point_equals_the_library_evaluation(tiny_resources, tiny_llama, tiny_tokenizer):
    from hf_ralm import RalmConfig
    from hf_ralm.evaluation.pipeline import evaluate_perplexity

    res = tiny_resources
    p = perplexity.point(res, "SmolLM2-135M", DATA, stride=4, max_length=16, max_doc_tokens=8)
    measured = perplexity.measure(res, p)
    config = RalmConfig(retrieval_stride=4, query_length=32, max_length=16, max_doc_tokens=8)
    expected = evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, res.retriever("bm25", resources.WHOLE, DATA),
                                   config, max_eval_tokens=40, show_progress=False).figures
    for key in ("token_ppl", "word_ppl", "num_tokens", "num_words", "num_windows", "num_windows_with_passage"):
        assert measured[key] == pytest.approx(expected[key], rel=1e-6), key


@pytest.mark.parametrize("length", [8, 16])
def test_context_points_score_the_same_tokens_each_with_a_full_window(tiny_resources, tiny_llama, tiny_tokenizer,
                                                                      length):
    """A plain loop from the definition: the tokens [C, C+T), each scored after the L-token window of text that ends
    at its window's end (windows end every s tokens after C)."""
    res, context, s = tiny_resources, 16, 4
    p = perplexity.point(res, "SmolLM2-135M", DATA, retriever="none", stride=s, max_length=length,
                         context_tokens=context)
    measured = perplexity.measure(res, p)
    ids = tiny_tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"]
    total, n = 0.0, res.args.max_eval_tokens
    for first in range(context, context + n, s):
        end = min(first + s, context + n)
        window = torch.tensor(ids[end - length : end], device=tiny_llama.device)
        with torch.no_grad():
            logp = torch.log_softmax(tiny_llama(window[None]).logits[0].double(), -1)
        for t in range(first, end):
            total -= float(logp[t - (end - length) - 1, ids[t]])
    assert measured["nll_sum"] == pytest.approx(total, rel=1e-4)
    assert measured["num_tokens"] == n
    assert measured["token_ppl"] == pytest.approx(math.exp(total / n), rel=1e-4)


def test_eval_slice_counts_the_same_tokens_whatever_the_window_length():
    from hf_ralm.core.windows import plan_windows

    for length in (8, 16, 32):
        start, end, first = perplexity.eval_slice(context_tokens=32, max_length=length, num_tokens=20)
        assert (start + first, end) == (32, 52)
        for w in plan_windows(end - start, length, 4)[1:]:
            assert w.length == length and w.score_begin >= first  # full windows, only counted tokens after 0
    with pytest.raises(ValueError, match="context_tokens"):
        perplexity.eval_slice(context_tokens=8, max_length=16, num_tokens=20)


# ------------------------------------------------------------------------------------------------------------------
# Intervals: every point keeps its token NLLs; an older CSV is filled in
# ------------------------------------------------------------------------------------------------------------------


def test_block_intervals_hold_the_figure_and_widen_with_the_spread():
    rng = np.random.default_rng(1)
    calm, noisy = rng.normal(2.5, 0.2, 1024), rng.normal(2.5, 2.0, 1024)
    for nlls in (calm, noisy):
        low, high = intervals.ppl_interval(nlls)
        assert low < math.exp(nlls.mean()) < high
    width = [np.subtract(*intervals.ppl_interval(nlls))[()] for nlls in (calm, noisy)]
    assert abs(width[1]) > 5 * abs(width[0])
    # the paired change: a constant shift is known exactly, noise shared by both sides cancels
    assert intervals.change_interval(noisy + 0.05, noisy) == pytest.approx((100 * math.expm1(0.05),) * 2)
    low, high = intervals.change_interval(calm + rng.normal(0.05, 0.1, 1024), calm)
    assert low < 100 * math.expm1(0.05) < high and high - low < 3
    # a first window held fixed: its tokens dilute the change in every resample and add no spread of their own
    diluted = intervals.change_interval(np.r_[np.zeros(512), np.full(512, 0.1)], np.zeros(1024), fixed=512)
    assert diluted == pytest.approx((100 * math.expm1(0.05),) * 2)
    # the paper's count: token 0, never scored, is in the denominator
    assert intervals.ppl_interval(np.full(64, 2.0), unscored=1) == pytest.approx((math.exp(2.0 * 64 / 65),) * 2)
    with pytest.raises(ValueError, match="same tokens"):
        intervals.change_interval(calm, calm[:-1])


def test_blocks_are_contiguous_so_a_run_of_bad_tokens_is_one_draw():
    # 1,024 tokens, all 2.0 but one 32-token run of 6.0: resampled token by token the run would almost never vanish;
    # resampled in blocks it is one of 32 blocks, missing from about a third of the draws
    nlls = np.full(1024, 2.0)
    nlls[320:352] = 6.0
    low, high = intervals.ppl_interval(nlls)
    assert low == pytest.approx(math.exp(2.0))
    assert high > math.exp(nlls.mean())


def test_an_older_csv_without_intervals_is_read_and_a_put_replaces_its_row(tmp_path):
    old = ["model", "stride", "ppl"]
    (tmp_path / "fig.csv").write_text(",".join(old) + "\nm,4,12.0\nm,8,13.0\n")
    table = sweep.Table(tmp_path / "fig.csv", settings=("model", "stride"), measures=("ppl", "low", "high"),
                        optional=("low", "high"))
    assert table.read()[0] == {"model": "m", "stride": "4", "ppl": "12.0", "low": "", "high": ""}
    table.put({"model": "m", "stride": 4, "ppl": 12.0, "low": 11.0, "high": 13.0})
    assert [(r["stride"], r["low"]) for r in table.read()] == [("4", "11.0"), ("8", "")]
    assert (tmp_path / "fig.csv").read_text().splitlines()[0] == "model,stride,ppl,low,high"
    calls = []
    measure = counting_measure(calls)
    points = [{"model": "m", "stride": s} for s in (4, 8)]
    assert sweep.run_points(table, points, lambda p: {**measure(p), "low": 1, "high": 2}, "t",
                            redo=lambda row: not row["low"]) == 1
    assert calls == [8] and [r["low"] for r in table.read()] == ["11.0", "1"]


def test_points_keep_their_token_nlls_and_an_old_row_gets_its_interval(tiny_resources, tmp_path):
    res = tiny_resources
    points = [perplexity.point(res, "SmolLM2-135M", DATA, retriever=kind, stride=4, max_length=16, max_doc_tokens=8)
              for kind in ("none", "bm25")]
    path = str(tmp_path / "stride.csv")
    table, kept = perplexity.table(path), perplexity.records(path)
    assert sweep.run_points(table, points, perplexity.keeping(res, table, kept), "test") == 2
    rows = table.read()
    for row in rows:
        nlls = kept.get(row)
        assert len(nlls) == int(row["num_tokens"]) - 1  # token 0 is never scored
        assert float(row["nll_sum"]) == pytest.approx(nlls.sum(), rel=1e-6)
        low, high = intervals.bounds(row)
        assert low < float(row["token_ppl"]) < high
    change, = perplexity.changes(rows, kept)
    # the first window (15 tokens) is held fixed and the 24 tokens after it are one block: the interval is the change
    bounds = [float(change[c]) for c in ("change_low", "change_high")]
    assert bounds == pytest.approx([float(change["change"])] * 2, rel=1e-4)
    moved = intervals.change_interval(kept.get(rows[1]), kept.get(rows[0]), block=4, fixed=15, unscored=1)
    assert moved[0] < float(change["change"]) < moved[1]
    assert "against none" in perplexity.describe(change)

    # the CSV as the first figures were written: no interval columns, no token records, the index named by an id
    # that an older version of its metadata gave; its times must stay
    columns = [c for c in table.columns if c not in perplexity.INTERVAL]
    old_rows = [{**row, "wall_s": "123.0", "index_id": row["index_id"] and "0ld1d"} for row in rows]
    write_old_csv(path, columns, old_rows)
    os.remove(kept.path)
    assert [intervals.bounds(r) for r in table.read()] == [None, None]
    assert sweep.run_points(table, points, perplexity.keeping(res, table, kept, refill=True), "test",
                            redo=lambda row: not intervals.bounds(row)) == 2
    filled = table.read()
    assert [r["wall_s"] for r in filled] == ["123.0", "123.0"]
    assert [r["index_id"] for r in filled] == [r["index_id"] for r in rows]  # the index's current id
    assert [intervals.bounds(r) for r in filled] == [intervals.bounds(r) for r in rows]
    assert kept.get(filled[1]) is not None

    # a row that the point does not reproduce is not given an interval
    write_old_csv(path, columns, [{**old_rows[1], "nll_sum": str(2 * float(old_rows[1]["nll_sum"]))}])
    with pytest.raises(ValueError, match="the row was measured with something else"):
        sweep.run_points(table, points[1:], perplexity.keeping(res, table, kept, refill=True), "test",
                         redo=lambda row: not intervals.bounds(row))


# ------------------------------------------------------------------------------------------------------------------
# QA points
# ------------------------------------------------------------------------------------------------------------------


class StubQa:
    """Two questions, with the tiny corpus's passages as what BM25 would have retrieved."""

    def __init__(self, index_dir):
        self.index_dir = index_dir
        self.questions = [{"question": "who ruled rome", "answers": ["the emperor"]},
                          {"question": "where did the ship sail", "answers": ["the island"]}]

    def with_passages(self):
        from conftest import ARTICLES

        return [{**q, "ctxs": ARTICLES[i : i + 2]} for i, q in enumerate(self.questions)]


def test_qa_points_write_their_rows_and_resume(tiny_resources, tiny_index, tiny_llama, tmp_path):
    res = tiny_resources
    res.args.questions, res.args.num_docs, res.args.work_dir = "nq.jsonl.gz", [0, 1, 2], str(tmp_path / "qa")
    res.args.models = ["SmolLM2-135M"]
    qa = StubQa(tiny_index["index_dir"])
    table = sweep.Table(tmp_path / "qa.csv", qa_num_docs.SETTINGS, qa_num_docs.MEASURES)
    points = qa_num_docs.points(res, qa)
    assert sweep.run_points(table, points, lambda p: qa_num_docs.measure(res, qa, table, p), "qa") == 3
    rows = table.read()
    assert [(r["num_docs"], r["retriever"], r["num_questions"]) for r in rows] == [
        ("0", "none", "2"), ("1", "bm25", "2"), ("2", "bm25", "2")]
    assert rows[0]["has_answer"] == "0.0" and rows[2]["has_answer"] == "100.0"  # every answer is in 2 passages
    assert rows[0]["index_id"] == "" and rows[2]["index_id"] == resources.index_identity(tiny_index["index_dir"])
    calls, hook = count_forwards(tiny_llama)
    try:
        assert sweep.run_points(table, points, lambda p: qa_num_docs.measure(res, qa, table, p), "qa") == 0
    finally:
        hook.remove()
    assert calls == []
    qa_num_docs.plot(rows, str(tmp_path / "qa.png"))
    assert (tmp_path / "qa.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------------------------------------------------------
# Plots from the CSV alone
# ------------------------------------------------------------------------------------------------------------------


def fake_rows(**varied) -> list[dict]:
    """Perplexity rows as read from a CSV (strings): one per combination of the ``varied`` values."""
    import itertools

    base = {name: "" for name in (*perplexity.SETTINGS, *perplexity.MEASURES)}
    base.update(model="SmolLM2-135M", data=DATA, dtype="float32", max_eval_tokens="2048", max_length="512",
                stride="4", query_length="32", retriever="bm25", corpus=resources.WHOLE, index_id="abc",
                measured_at="2026-01-01T00:00:00+00:00")
    names = list(varied)
    rows = []
    for values in itertools.product(*varied.values()):
        row = {**base, **dict(zip(names, values))}
        if row["retriever"] == "none":
            row.update(query_length="", corpus="", index_id="")
        seed = sum(map(ord, "".join(values)))
        row.update(token_ppl=str(15 + seed % 7 / 10), wall_s=str(10 + seed % 5), num_retrievals=str(100 + seed % 9))
        rows.append(row)
    return rows


def write_rows(path, rows):
    table = sweep.Table(path, perplexity.SETTINGS, perplexity.MEASURES)
    for row in rows:
        table.put(row)


@pytest.mark.parametrize("script, rows", [
    (stride, fake_rows(model=["SmolLM2-135M", "Gemma-3-270M"], stride=["1", "4", "64"])
     + fake_rows(retriever=["none"])),
    (query_length, fake_rows(retriever=["bm25", "dense", "none"], query_length=["8", "32"])),
    (context_length, fake_rows(retriever=["bm25", "none"], max_length=["256", "2048"], context_tokens=["2048"])),
    (retrievers, fake_rows(retriever=["bm25", "lucene", "dense", "hybrid"], corpus=[resources.WHOLE, "subset"])
     + fake_rows(retriever=["none"])),
])
def test_plot_only_draws_the_png_from_the_csv(tmp_path, script, rows):
    write_rows(tmp_path / f"{script.NAME}.csv", rows)
    drawn = script.main(["--plot-only", "--out-dir", str(tmp_path)])
    assert len(drawn) == len({perplexity.table("").key(row) for row in rows})  # a row per point
    assert (tmp_path / f"{script.NAME}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_context_length_draws_one_line_per_retriever_whatever_the_passage_cap(tmp_path, monkeypatch):
    # the passage cap follows L (252 at L=256, 256 above): it must not split a retriever's line in two
    rows = fake_rows(retriever=["bm25"], max_length=["512", "1024", "2048"], context_tokens=["2048"],
                     max_doc_tokens=["256"])
    rows += fake_rows(retriever=["bm25"], max_length=["256"], context_tokens=["2048"], max_doc_tokens=["252"])
    rows += fake_rows(retriever=["none"], max_length=["256", "512", "1024", "2048"], context_tokens=["2048"])
    figures = []
    monkeypatch.setattr(plotting, "save", lambda fig, *args: figures.append(fig))
    context_length.plot(rows, str(tmp_path / "context_length.png"))
    top = figures[0].axes[0]
    assert sorted(len(line.get_xdata()) for line in top.get_lines()) == [4, 4]


def test_cut_axes_are_marked_and_bars_drawn_only_where_a_point_has_an_interval():
    fig, axes = plotting.panels(2)
    cut, whole = axes[0]
    rows = [{"model": "m", "x": "1", "ppl": "20", "low": "19", "high": "21"},
            {"model": "m", "x": "2", "ppl": "21", "low": "", "high": ""}]
    plotting.draw_lines(cut, rows, "x", "ppl", ("model",), (), lambda row: {},
                        interval=lambda row: intervals.bounds(row, "low", "high"))
    bars, = cut.containers
    assert len(bars.lines[2][0].get_segments()) == 1  # one error bar: the second point has no interval
    plotting.error_bars(cut, [3], [20.0], [(20.0 + 1e-12, 20.0 + 1e-12)], "k")  # a zero-width interval, rounded
    assert cut.containers[-1].lines[2][0].get_segments()[0][0][1] == 20.0
    whole.plot([1, 2], [20, 21])
    whole.set_ylim(0, 25)
    before = [len(ax.get_lines()) for ax in (cut, whole)]
    plotting.mark_cut_axes(fig)
    assert [len(ax.get_lines()) - n for ax, n in zip((cut, whole), before)] == [2, 0]


def test_plot_only_without_a_csv_says_so(tmp_path):
    with pytest.raises(SystemExit, match="run without --plot-only"):
        stride.main(["--plot-only", "--out-dir", str(tmp_path)])


def test_best_query_lengths_feed_the_retrievers_figure():
    rows = fake_rows(retriever=["bm25", "dense"], query_length=["8", "16", "32", "64"])
    best = query_length.best_query_lengths(rows)
    for kind in ("bm25", "dense"):
        mine = [r for r in rows if r["retriever"] == kind]
        wanted = min(mine, key=lambda r: float(r["token_ppl"]))["query_length"]
        assert best[("SmolLM2-135M", DATA, kind, "2048")] == int(wanted)
    given = dict([retrievers.kind_and_length("dense=128")])
    for kind, source in (("lucene", "bm25"), ("hybrid", "dense")):
        assert retrievers.query_length(given, best, "SmolLM2-135M", DATA, kind, 2048) == best[
            ("SmolLM2-135M", DATA, source, "2048")]
    assert retrievers.query_length(given, best, "SmolLM2-135M", DATA, "dense", 2048) == 128
    assert retrievers.query_length(given, {}, "Gemma-3-270M", DATA, "bm25", 2048) == 32  # the paper's default


def test_a_bad_query_length_flag_is_a_usage_error(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        retrievers.main(["--plot-only", "--out-dir", str(tmp_path), "--query-length", "bm25=long"])
    assert exit_info.value.code == 2
    assert "KIND=ℓ with KIND one of bm25, lucene, dense, hybrid" in capsys.readouterr().err


def test_the_dtype_flag_shows_the_default_each_script_runs():
    per_model = sweep.parser("doc")
    assert per_model.parse_args([]).dtype is None  # each model in the tables' dtype
    assert "SmolLM2 in float32 and Gemma in bfloat16" in " ".join(per_model.format_help().split())
    qa = sweep.parser("doc", texts=False, dtype="bfloat16")
    assert qa.parse_args([]).dtype == "bfloat16"
    assert "(default: bfloat16)" in qa.format_help()


@pytest.mark.parametrize("module", [sweep, perplexity, plotting, resources, query_length, context_length, retrievers,
                                    intervals])
def test_examples_in_docstrings(module, tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the examples' mkdtemp() folders, pruned by pytest
    assert doctest.testmod(module).failed == 0


def test_gate_points_pair_with_no_retrieval_window_by_window():
    """gate_tables' units: the windows nothing was ranked for together, then each ranked window; a gate's units, a
    per-token evaluation's and no retrieval's line up, and add up to what the perplexity divides."""
    from types import SimpleNamespace

    from benchmarks.tables import gate_tables, table_runs
    from hf_ralm.core.windows import plan_windows

    run = SimpleNamespace(windows=plan_windows(40, max_length=16, stride=4))
    rng = np.random.default_rng(0)
    token_nlls = torch.tensor(np.r_[np.nan, rng.uniform(1, 3, 39)])
    sums = [float(token_nlls[w.score_begin : w.end].sum()) for w in run.windows]
    p = {"base_nll": sums[0], "ranking": [None] + [[0.0, 0.0]] * (len(sums) - 1),
         "targets": [None] + [[s + 0.5, s] for s in sums[1:]], "num_tokens": 40}
    counts = gate_tables.unit_counts(run, p)
    assert counts.tolist() == [15] + [4] * 6 and counts.sum() == 39
    none = np.array(table_runs.chosen_units(p, lambda i, ranking, targets: 1))
    assert gate_tables.token_units(run, p, token_nlls) == pytest.approx(none)
    always = np.array(table_runs.chosen_units(p, lambda i, ranking, targets: 0))
    assert always.sum() == pytest.approx(table_runs.chosen_nll(p, lambda i, ranking, targets: 0))
    # +0.5 nats in each of 6 windows, over the paper's 40 tokens: the same in every resample
    low, high = intervals.change_interval(always, none, block=2, counts=counts, fixed=1, unscored=1)
    assert low == pytest.approx(100 * math.expm1(3.0 / 40)) and high == pytest.approx(low)


def test_whole_set_rows_resample_articles_and_pair_each_strategy_with_no_retrieval():
    from benchmarks.tables import scale_tables

    rng = np.random.default_rng(0)
    tokens = rng.integers(2000, 6000, 40).astype(float)
    none = tokens * rng.uniform(2.8, 3.3, 40)
    top1 = none + tokens * 0.07  # +0.07 nats a token in every article: the paired change has no spread
    gate = none - tokens * rng.normal(0.01, 0.02, 40)
    sums = scale_tables.ArticleSums([f"a{i}" for i in range(40)], np.c_[none, top1, gate], tokens, tokens * 0.8,
                                    np.array([0, 1000, 180]), 1000)
    rows = {row["strategy"]: row for row in scale_tables.bootstrap_rows(sums)}
    for row in rows.values():
        assert row["token_ppl_low"] < row["token_ppl"] < row["token_ppl_high"]
        assert row["word_ppl_low"] < row["word_ppl"] < row["word_ppl_high"]
    assert rows["none"]["vs_none"] == rows["none"]["vs_none_low"] == rows["none"]["vs_none_high"] == 0
    assert rows["top1"]["vs_none_low"] == pytest.approx(math.expm1(0.07)) == rows["top1"]["vs_none_high"]
    assert rows["lm-gate"]["vs_none_low"] < rows["lm-gate"]["vs_none"] < rows["lm-gate"]["vs_none_high"]
    assert rows["lm-gate"]["retrieved_fraction"] == 0.18
    assert rows["top1"]["vs_top1"] == rows["top1"]["vs_top1_low"] == rows["top1"]["vs_top1_high"] == 0
    assert rows["none"]["vs_top1_low"] == pytest.approx(math.expm1(-0.07)) == rows["none"]["vs_top1_high"]
    assert rows["lm-gate"]["vs_top1_low"] < rows["lm-gate"]["vs_top1"] < rows["lm-gate"]["vs_top1_high"] < 0


def test_a_missing_held_out_text_names_the_command_that_makes_it_with_the_committed_settings(monkeypatch, tmp_path):
    from benchmarks.tables import scale_tables

    monkeypatch.setitem(scale_tables.TEXTS, "held out", ("heldout-100", tmp_path / "rows.jsonl"))
    message = scale_tables.load_pass("held out", None, False)
    assert message.startswith(f"{tmp_path / 'rows.jsonl'} is missing") and "benchmarks/data/make_heldout.py" in message
    assert f"--out-dir {tmp_path} --num-articles 100 --min-words 1000 --max-words 1200 --seed 0" in message


def test_a_bfloat16_point_found_again_within_1_percent_is_measured_anew_and_a_float32_one_is_not(tiny_resources,
                                                                                                 tmp_path):
    """--fill-intervals on a figure's row: bfloat16's arithmetic order moves an NLL sum by about 0.1%, so a bfloat16
    row found again within 1% is replaced by the new measurement; float32 paths agree to 1e-6, so there a row 0.5%
    off was measured with something else and is refused, as is a bfloat16 one 2% off."""
    res = tiny_resources
    path = str(tmp_path / "stride.csv")
    table, kept = perplexity.table(path), perplexity.records(path)
    columns = [c for c in table.columns if c not in perplexity.INTERVAL]

    def refill(dtype: str, factor: float) -> dict:
        res.args.dtype = dtype
        point = perplexity.point(res, "SmolLM2-135M", DATA, retriever="bm25", stride=4, max_length=16,
                                 max_doc_tokens=8)
        measured = perplexity.measure(res, point)
        measured.pop("token_nlls")
        old = {**point, **measured, "nll_sum": str(factor * measured["nll_sum"]), "wall_s": "123.0"}
        write_old_csv(path, columns, [{c: "" if old.get(c) is None else old[c] for c in columns}])
        sweep.run_points(table, [point], perplexity.keeping(res, table, kept, refill=True), "test",
                         redo=lambda row: not intervals.bounds(row))
        return table.row(point), measured

    row, measured = refill("bfloat16", 1.005)
    assert float(row["nll_sum"]) == pytest.approx(measured["nll_sum"], rel=1e-9) and row["wall_s"] != "123.0"
    assert intervals.bounds(row) is not None
    for dtype, factor in (("bfloat16", 1.02), ("float32", 1.005)):
        with pytest.raises(ValueError, match="the row was measured with something else"):
            refill(dtype, factor)


def test_gate_rows_without_an_interval_get_it_measured_again_and_keep_the_rest(tiny_resources, tiny_llama,
                                                                               tiny_tokenizer, tmp_path, monkeypatch):
    """``gate_tables.py --fill-intervals`` on an older CSV (no paired change columns): every row gains its interval,
    keeps its times; a row up to 1% off is measured anew (bf16's arithmetic order), one further off refused rather
    than overwritten."""
    from benchmarks.tables import gate_tables, table_runs

    monkeypatch.setitem(table_runs.SETTINGS, "max_length", 16)
    monkeypatch.setitem(table_runs.SETTINGS, "query_length", 8)
    monkeypatch.setitem(table_runs.SETTINGS, "max_doc_tokens", 8)
    monkeypatch.setattr(table_runs, "load_reader", lambda *args: (tiny_llama, tiny_tokenizer))
    figures = tmp_path / "figures"
    argv = ["--max-eval-tokens", "40", "--readers", "SmolLM2-135M", "--data", DATA, "--thresholds", "0.2",
            "--lm-thresholds", "0", "--ensemble-temperature", "inf", "--max-context-doc-tokens", "8",
            "--batch-size", "4", "--out", str(tmp_path / "passes"), "--figures-dir",
            str(figures), "--index-dir", tiny_resources.args.index_dir, "--heldout-dir",
            tiny_resources.args.heldout_dir, "--device", "cpu"]
    assert gate_tables.main(argv) == 0
    path = figures / "gate_results.csv"
    table = gate_tables.Table(str(path), gate_tables.SETTINGS, gate_tables.MEASURES, optional=gate_tables.CHANGE)
    rows = table.read()
    assert len(rows) == 10 and all(row["vs_none_low"] for row in rows)
    none, = (row for row in rows if row["method"] == "none")
    assert float(none["vs_none"]) == float(none["vs_none_low"]) == float(none["vs_none_high"]) == 0

    def write_old(old_rows):  # the CSV as the first gate figures were written: the change columns empty
        write_old_csv(path, table.columns, [{**row, **dict.fromkeys(gate_tables.CHANGE, "")} for row in old_rows])

    write_old([{**row, "seconds": "123.0"} for row in rows])
    assert gate_tables.main(argv + ["--fill-intervals"]) == 0
    filled = table.read()
    assert [r["seconds"] for r in filled] == ["123.0"] * 10
    kept = gate_tables.SETTINGS + gate_tables.CHANGE
    assert [[row[c] for c in kept] for row in filled] == [[row[c] for c in kept] for row in rows]

    # a row 0.5% off (bf16 arithmetic order, an lm gate's choice at its threshold): measured anew
    gate = next(row for row in rows if row["method"] == "lm gate")
    write_old([{**gate, "token_ppl": str(1.005 * float(gate["token_ppl"])), "seconds": "123.0"}])
    assert gate_tables.main(argv + ["--fill-intervals"]) == 0
    anew = table.row(gate)
    assert [anew[c] for c in kept + ("token_ppl",)] == [gate[c] for c in kept + ("token_ppl",)]
    assert anew["seconds"] != "123.0"

    always = next(row for row in rows if row["method"] == "always")
    write_old([{**always, "token_ppl": str(2 * float(always["token_ppl"]))}])
    with pytest.raises(ValueError, match="the row was measured with something else"):
        gate_tables.main(argv + ["--fill-intervals"])
