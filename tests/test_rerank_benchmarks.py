"""The reranking benchmarks' own logic: what they print and refuse without a model (the passes themselves are the
library's, tested elsewhere)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from benchmarks.tables import rerank_tables, reranker_scores, train_rerankers
from hf_ralm.runs.store import RecordStore


def test_score_summary_chooses_as_the_reranker_does():
    scores = [[0.2, 0.9, 0.5, 0.9],   # the empty passage ties the best passage: the passage (rank 2) is chosen
              [0.7, 0.1, 0.0, 0.3],   # rank 1 is best
              [0.1, 0.2, 0.3, 1.0]]   # the empty passage leads: no passage
    summary = reranker_scores.score_summary(scores, with_empty=True)
    assert summary["no_passage_chosen"] == pytest.approx(1 / 3)
    assert summary["rank1_chosen"] == pytest.approx(1 / 3)
    assert summary["passage_score_spread_median"] == pytest.approx(0.7)
    assert (summary["empty_lead_min"], summary["empty_lead_median"], summary["empty_lead_max"]) == pytest.approx(
        (-0.4, 0.0, 0.7))
    # without the empty passage every score is a passage's, and no lead is reported
    plain = reranker_scores.score_summary([[0.2, 0.9, 0.5, 0.9], [0.7, 0.1, 0.0, 0.3]], with_empty=False)
    assert plain["rank1_chosen"] == 0.5 and "no_passage_chosen" not in plain


def test_from_records_refuses_incomplete_records_and_computes_nothing(tmp_path):
    args = rerank_tables.parse_args(["--from-records", "--runs-dir", str(tmp_path)])
    folder = tmp_path / "pass"
    with RecordStore(folder, {"k": 16}, chunk_size=2) as store:
        store.add([{"window": i, "chosen": 0} for i in range(4)])
    rerank_tables.require_records(args, folder, 4, "the test pass")  # complete: goes on
    with pytest.raises(SystemExit, match=r"holds 4 of the 5 records of the test pass\. Run without --from-records"):
        rerank_tables.require_records(args, folder, 5, "the test pass")
    # without --from-records a pass may compute what is missing
    rerank_tables.require_records(rerank_tables.parse_args([]), folder, 5, "the test pass")


def test_from_records_takes_no_reranker_folder(capsys):
    with pytest.raises(SystemExit):
        rerank_tables.parse_args(["--from-records", "--predictive", "models/reranker"])
    assert "--from-records reads the predictive rows from the records" in capsys.readouterr().err


def test_a_record_without_its_model_is_kept_and_said(tmp_path, capsys):
    runs, models = tmp_path / "runs", tmp_path / "models"
    runs.mkdir()
    record = {"variant": "passages", "size": 1000, "results": {"nll_reranker": 11.5}}
    (runs / "passages-1000.json").write_text(json.dumps(record))
    args = train_rerankers.parse_args(["--runs-dir", str(runs), "--models-dir", str(models)])
    assert train_rerankers.train_one(args, "passages", 1000, data=None, summary={}) == record
    assert "its record is here, its model is not" in capsys.readouterr().err
    (models / "passages-1000").mkdir(parents=True)
    (models / "passages-1000" / "model.safetensors").write_bytes(b"")
    assert train_rerankers.train_one(args, "passages", 1000, data=None, summary={}) == record
    assert capsys.readouterr().err == ""


def test_the_paired_interval_against_top1_resamples_blocks_of_windows_and_keeps_the_first():
    from benchmarks.tables.rerank_tables import paired_interval
    from hf_ralm.core.windows import plan_windows

    windows = plan_windows(160, max_length=32, stride=4)  # window 0 scores 31 tokens, then 32 windows of 4
    top1 = [10.0] * len(windows)
    shifted = [10.0] + [10.4] * (len(windows) - 1)  # +0.1 nats a token after the first window
    exact = math.expm1(0.4 * (len(windows) - 1) / 160)  # over the paper's 160 tokens, token 0 included
    assert paired_interval(shifted, top1, windows, 160) == pytest.approx((exact, exact))
    noisy = [10.0] + [10.0 + d for d in np.random.default_rng(0).normal(0.4, 1.0, len(windows) - 1)]
    low, high = paired_interval(noisy, top1, windows, 160)
    assert low < math.expm1((sum(noisy) - sum(top1)) / 160) < high
