"""Where a run's time goes: eval-lm, --compare and generate keep retrieval's seconds and the reader's apart (bars,
eval.json, compare.json, generation's counters, the command line's last line). A retriever made slow by a known
sleep per call shows that retrieval's seconds are retrieval's: at least the sleeps, and the reader's do not hold
them."""

from __future__ import annotations

import json
import time

import pytest

from conftest import EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.cli import main
from hf_ralm.generation.texts import generate_texts_in_batches
from hf_ralm.retrieval import BM25Retriever
from hf_ralm.utils.stage_times import StageTimes

SETTINGS = dict(max_length=16, retrieval_stride=4, query_length=8, max_doc_tokens=8)
SLEEP_S = 0.03


@pytest.fixture
def slow_retrieval(monkeypatch):
    """Every ``retrieve`` call of the bm25 backend sleeps ``SLEEP_S`` first; the calls are counted."""
    calls = []
    retrieve = BM25Retriever.retrieve

    def slow(self, queries, *args, **kwargs):
        calls.append(len(queries))
        time.sleep(SLEEP_S)
        return retrieve(self, queries, *args, **kwargs)

    monkeypatch.setattr(BM25Retriever, "retrieve", slow)
    return calls


def load(model_dir, index, **settings):
    return RetrievalAugmentedModel.from_pretrained(str(model_dir), retriever="bm25", index_dir=index["index_dir"],
                                                   **ON_TEST_DEVICE, **{**SETTINGS, **settings})


def test_stage_times_add_up_what_they_time():
    times = StageTimes()
    with times.timing("retrieval"):
        time.sleep(0.02)
    with times.timing("reader"):
        pass
    assert times.retrieval_s >= 0.02 and times.reader_s < times.retrieval_s
    assert times.to_dict() == {"retrieval_s": times.retrieval_s, "reader_s": times.reader_s}
    assert str(times) == f"retrieval {times.retrieval_s:.1f} s, reader {times.reader_s:.1f} s"
    with pytest.raises(ValueError, match="'retrieval' or 'reader'"):
        with times.timing("scoring"):
            pass


def test_evaluation_keeps_retrieval_and_reader_apart(tmp_path, tiny_model_dir, tiny_index, slow_retrieval, capsys):
    model = load(tiny_model_dir, tiny_index)
    start = time.perf_counter()
    result = model.evaluate_perplexity(EVAL_TEXT, output_dir=str(tmp_path / "run"), batch_size=3, chunk_size=8)
    elapsed = time.perf_counter() - start
    # the bar's lines (a log's: stderr is no terminal here) say where the time went once a chunk is done
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Evaluating")]
    assert any("retrieval " in line and " s, reader " in line for line in lines), lines
    assert slow_retrieval, "the run retrieved nothing: the check would compare nothing"
    times = result.stage_times
    assert times.retrieval_s >= SLEEP_S * len(slow_retrieval)
    assert 0 < times.reader_s and times.retrieval_s + times.reader_s <= elapsed
    report = json.loads((tmp_path / "run" / "eval.json").read_text())["timings"]
    assert (report["retrieval_s"], report["reader_s"]) == (times.retrieval_s, times.reader_s)
    assert report["reader_s"] == pytest.approx(report["rerank_s"] + report["scoring_s"])


def test_compare_keeps_retrieval_and_reader_apart(tmp_path, tiny_model_dir, tiny_index, slow_retrieval):
    model = load(tiny_model_dir, tiny_index, rerank_candidates=3)
    comparison = model.compare_strategies(EVAL_TEXT, ["none", "top1"], output_dir=str(tmp_path / "compare"),
                                          batch_size=3, show_progress=False)
    assert slow_retrieval
    times = comparison.times
    assert times.retrieval_s >= SLEEP_S * len(slow_retrieval)
    assert 0 < times.reader_s and times.retrieval_s + times.reader_s <= comparison.seconds
    saved = json.loads((tmp_path / "compare" / "compare.json").read_text())
    assert saved["times"] == times.to_dict()
    assert f"({times})" in comparison.to_markdown().splitlines()[-1]


def test_generation_keeps_retrieval_and_reader_apart(tiny_model_dir, tiny_index, slow_retrieval):
    model = load(tiny_model_dir, tiny_index, max_length=48)
    out = model.generate(["the emperor of rome and the senate"], max_new_tokens=10, do_sample=False,
                         return_dict_in_generate=True, pad_token_id=0)
    stats = out.ralm_stats
    assert len(slow_retrieval) == 3  # strides at tokens 0, 4 and 8
    assert stats["retrieval_s"] >= SLEEP_S * 3 and stats["reader_s"] > 0

    times = StageTimes()
    generate_texts_in_batches(model.language_model, model.tokenizer, model.retriever, model.config,
                              ["the emperor", "the sailor took the boat"], batch_size=1, show_progress=False,
                              max_new_tokens=10, times=times)
    assert len(slow_retrieval) == 3 + 2 * 3  # one batch per prompt, three strides each
    assert times.retrieval_s >= SLEEP_S * 6 and times.reader_s > 0


@pytest.mark.parametrize("command", [
    ["eval-lm", "--dataset-path", "{text}"],
    ["eval-lm", "--dataset-path", "{text}", "--compare", "none,top1", "--rerank-candidates", "3"],
    ["generate", "--prompt", "the emperor of rome and the senate", "--max-new-tokens", "6"],
])
def test_the_command_line_says_where_the_time_went(tmp_path, tiny_model_dir, tiny_index, slow_retrieval, capsys,
                                                   command):
    text = tmp_path / "text.txt"
    text.write_text(EVAL_TEXT)
    settings = ["--max-length", "48" if command[0] == "generate" else "16", "--stride", "4", "--query-length", "8",
                "--max-doc-tokens", "8"]
    main([*(part.format(text=text) for part in command), "--model", str(tiny_model_dir), "--retriever", "bm25",
          "--index-dir", tiny_index["index_dir"], *TEST_DEVICE_ARGS, *settings])
    captured = capsys.readouterr()
    assert slow_retrieval
    said = captured.out if "--compare" in command else captured.err
    retrieval = float(said.split("retrieval ")[-1].split(" s")[0])
    assert retrieval >= round(SLEEP_S * len(slow_retrieval), 1) - 0.05
    assert "reader " in said.split("retrieval ")[-1]
