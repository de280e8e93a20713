"""``eval-lm --compare`` / ``model.compare_strategies``: several selection strategies from one reader pass, each row
equal to the separate ``eval-lm`` run of that strategy (tiny models, real BM25 over the tiny corpus)."""

from __future__ import annotations

import csv
import json

import pytest

from conftest import EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RetrievalAugmentedModel, RunOptions
from hf_ralm.cli import main
from hf_ralm.evaluation.compare import STRATEGIES, compare_strategies
from hf_ralm.errors import SettingError

SETTINGS = dict(max_length=16, retrieval_stride=4, query_length=8, max_doc_tokens=8, rerank_candidates=3,
                rerank_tokens=4)
SEPARATE = {  # what a separate eval-lm run of each strategy sets
    "none": {"retriever": None},
    "top1": {},
    "lm-gate": {"retrieval_gate": "lm"},
    "zero-shot": {"rerank": "lm"},
    "zero-shot-no-passage": {"rerank": "lm", "rerank_allow_no_passage": True},
    "oracle": {"rerank": "oracle"},
    "random": {"rerank": "random"},
}


def load(model_dir, index, **settings):
    options = {"retriever": "bm25", "index_dir": index["index_dir"], **SETTINGS, **settings}
    return RetrievalAugmentedModel.from_pretrained(str(model_dir), **ON_TEST_DEVICE, **options)


def figures_of_separate_run(model_dir, index, strategy: str, **settings) -> dict:
    model = load(model_dir, index, **{**SEPARATE[strategy], **settings})
    return model.evaluate_perplexity(EVAL_TEXT, batch_size=3, show_progress=False).figures


def test_every_row_equals_its_separate_run(tiny_model_dir, tiny_index):
    assert set(SEPARATE) == set(STRATEGIES)
    model = load(tiny_model_dir, tiny_index)
    comparison = model.compare_strategies(EVAL_TEXT, list(STRATEGIES), batch_size=3, show_progress=False)
    assert comparison.k == 3 and comparison.num_windows > 10
    assert [r.strategy for r in comparison.rows] == list(STRATEGIES)
    fractions = set()
    for row in comparison.rows:
        separate = figures_of_separate_run(tiny_model_dir, tiny_index, row.strategy)
        assert row.token_ppl == pytest.approx(separate["token_ppl"], rel=1e-6), row.strategy
        assert row.word_ppl == pytest.approx(separate["word_ppl"], rel=1e-6), row.strategy
        assert row.num_windows_with_passage == separate["num_windows_with_passage"], row.strategy
        assert row.retrieved_fraction == pytest.approx(separate["retrieved_fraction"]), row.strategy
        fractions.add(row.retrieved_fraction)
    assert comparison.num_tokens == separate["num_tokens"] and comparison.num_words == separate["num_words"]
    assert len(fractions) >= 3  # the strategies chose differently: the check compared something
    assert len({round(r.token_ppl, 6) for r in comparison.rows}) >= 4


def test_the_lm_gate_row_takes_its_margin_from_the_config(tiny_model_dir, tiny_index):
    model = load(tiny_model_dir, tiny_index, retrieval_gate="lm", gate_threshold=0.3)
    row = model.compare_strategies(EVAL_TEXT, ["top1", "lm-gate"], show_progress=False).row("lm-gate")
    separate = figures_of_separate_run(tiny_model_dir, tiny_index, "lm-gate", gate_threshold=0.3)
    assert row.token_ppl == pytest.approx(separate["token_ppl"], rel=1e-6)
    assert row.num_windows_with_passage == separate["num_windows_with_passage"]
    unmargined = load(tiny_model_dir, tiny_index, retrieval_gate="lm", gate_threshold=0.0)
    at_zero = unmargined.compare_strategies(EVAL_TEXT, ["lm-gate"], show_progress=False).rows[0]
    assert at_zero.num_windows_with_passage > row.num_windows_with_passage  # the margin closes some


def test_command_line_prints_the_table_and_writes_json_and_csv(tiny_model_dir, tiny_index, tmp_path, capsys):
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    argv = ["eval-lm", "--model", str(tiny_model_dir), "--dataset-path", str(data), "--retriever", "bm25",
            "--index-dir", tiny_index["index_dir"], "--max-length", "16", "--stride", "4", "--query-length", "8",
            "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--output-dir", str(tmp_path / "out"),
            "--compare", "none,top1,lm-gate"]
    main(argv)
    out = capsys.readouterr().out
    assert out.startswith("| strategy | token ppl | word ppl | windows with a passage | reader inputs per window |")
    report = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert [r["strategy"] for r in report["rows"]] == ["none", "top1", "lm-gate"]
    for r in report["rows"]:
        assert f"| {r['strategy']} | {r['token_ppl']:.3f} | {r['word_ppl']:.3f} |" in out
    with open(tmp_path / "out" / "compare.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert [float(r["token_ppl"]) for r in rows] == [r["token_ppl"] for r in report["rows"]]
    assert report["rows"][0]["retrieved_fraction"] == 0.0 and report["rows"][1]["retrieved_fraction"] > 0

    main(argv)  # a rerun reads the reader pass back
    capsys.readouterr()
    again = json.loads((tmp_path / "out" / "compare.json").read_text())
    assert again["num_resumed_windows"] == again["num_windows"] and again["rows"] == report["rows"]


def test_bad_strategy_lists(tiny_model_dir, tiny_index, tmp_path, capsys):
    with pytest.raises(SettingError, match="compare takes a comma-separated list of strategies among none, top1, "
                                           "lm-gate, .*; got top-1"):
        load(tiny_model_dir, tiny_index).compare_strategies(EVAL_TEXT, ["top-1"], show_progress=False)
    model = load(tiny_model_dir, tiny_index, retriever=None)
    with pytest.raises(SettingError, match="needs a retriever"):
        compare_strategies(model.language_model, model.tokenizer, EVAL_TEXT, None, model.config, strategies=["top1"])


def test_two_workers_give_the_one_process_table(tiny_model_dir, tiny_index, tmp_path):
    model = load(tiny_model_dir, tiny_index)
    strategies = ["none", "top1", "lm-gate"]
    one = model.compare_strategies(EVAL_TEXT, strategies, batch_size=3, show_progress=False)
    out = tmp_path / "sharded"
    options = dict(batch_size=3, show_progress=False, output_dir=str(out), chunk_size=4, num_shards=2)
    first = model.compare_strategies(EVAL_TEXT, strategies, shard_id=1, **options)
    assert not first.complete and first.rows == [] and first.shard == "1 of 2 (arguments)"
    assert 0 < first.num_done_windows < one.num_windows
    assert "1 of 2" in first.to_markdown() and not (out / "compare.json").exists()
    second = model.compare_strategies(EVAL_TEXT, strategies, shard_id=0, **options)
    assert second.complete and second.num_resumed_windows == first.num_done_windows
    assert [(r.strategy, r.nll_sum, r.num_windows_with_passage) for r in second.rows] == \
        [(r.strategy, r.nll_sum, r.num_windows_with_passage) for r in one.rows]
    assert "num_done_windows" not in json.loads((out / "compare.json").read_text())

    # a rerun with another chunk size reads everything back and computes nothing
    again = model.compare_strategies(EVAL_TEXT, strategies, batch_size=3, show_progress=False, output_dir=str(out),
                                     chunk_size=5)
    assert again.num_resumed_windows == again.num_windows and again.rows == second.rows


def test_run_options_or_their_fields_as_keywords(tiny_model_dir, tiny_index, tmp_path):
    model = load(tiny_model_dir, tiny_index)
    strategies = ["none", "top1"]
    run = RunOptions(batch_size=3, show_progress=False, output_dir=str(tmp_path / "run"))
    direct = compare_strategies(model.language_model, model.tokenizer, EVAL_TEXT, model.retriever, model.config,
                                strategies=strategies, run=run)
    n = direct.num_windows
    chunks = sorted(path.name for path in (tmp_path / "run").glob("candidates-k*/chunk-*"))
    assert chunks == [f"chunk-{a:08d}-{min(a + 32, n):08d}.json.gz" for a in range(0, n, 32)]  # compare's own size
    flat = model.compare_strategies(EVAL_TEXT, strategies, batch_size=3, show_progress=False,
                                    output_dir=str(tmp_path / "flat"), chunk_size=4)
    assert flat.rows == direct.rows and len(list((tmp_path / "flat").glob("candidates-k*/chunk-*"))) == -(-n // 4)
    again = model.compare_strategies(EVAL_TEXT, strategies, run=run)
    assert again.num_resumed_windows == n and again.rows == direct.rows
    over = model.compare_strategies(EVAL_TEXT, strategies, run=run, output_dir=str(tmp_path / "kw"), chunk_size=4)
    assert over.num_resumed_windows == 0 and over.rows == direct.rows  # the keywords over run's fields
    assert len(list((tmp_path / "kw").glob("candidates-k*/chunk-*"))) == -(-n // 4) > 1


def test_a_sharded_pass_needs_an_output_folder(tiny_model_dir, tiny_index):
    with pytest.raises(SettingError, match="2 workers .* give one"):
        load(tiny_model_dir, tiny_index).compare_strategies(EVAL_TEXT, ["top1"], num_shards=2, shard_id=0,
                                                            show_progress=False)
