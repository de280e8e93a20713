"""Every window's candidates scored in one pass (``score_candidates``, what the reranking tables are computed from):

* each option's ranking and target NLLs equal a plain full forward of the window with that candidate (or nothing)
  written over its start; a window without candidates has the no-passage option only;
* its records hold numbers and passage ids only; a pass interrupted and resumed, also from a copy of its folder in
  another place (a fresh clone), gives the records of an uninterrupted one and never recomputes a saved chunk;
* a pass with other settings (model, text, RALM settings, retrieval) is refused before any work.
"""

from __future__ import annotations

import json
import shutil

import pytest

from conftest import ON_CPU, make_tiny_model
from hf_ralm import RalmConfig, RunOptions
from hf_ralm.runs.store import RecordStore
from hf_ralm.errors import OutputFolderError
from hf_ralm.selection.candidates import CandidateScores, score_candidates
from hf_ralm.testing import full_nlls, ranking_positions, spec_passage_ids, write_over
from hf_ralm.core.windows import plan_windows
from test_reranking import make_candidates, make_text

CONFIG = RalmConfig(max_length=24, retrieval_stride=4, query_length=8, max_doc_tokens=6, rerank_candidates=3,
                    rerank_tokens=5)


def assert_same_pass(got: list[CandidateScores], want: list[CandidateScores]) -> None:
    """The same windows and options, and the same NLLs: to the last digit on the CPU; elsewhere to float32 rounding,
    since a GPU's kernels depend on the batch's shape and a resumed or sharded pass batches the windows after a chunk
    boundary otherwise than an uninterrupted one."""
    if ON_CPU:
        assert got == want
        return
    assert [(s.window, s.passage_ids, s.retrieval_scores) for s in got] == [
        (s.window, s.passage_ids, s.retrieval_scores) for s in want]
    for g, w in zip(got, want):
        assert g.ranking_nlls == pytest.approx(w.ranking_nlls, rel=1e-6)
        assert g.target_nlls == pytest.approx(w.target_nlls, rel=1e-6)


@pytest.fixture(scope="module")
def text(tiny_tokenizer):
    ids = make_text(tiny_tokenizer, 60, seed=3)
    windows = plan_windows(len(ids), CONFIG.max_length, CONFIG.retrieval_stride)
    return {"ids": ids, "windows": windows, "candidates": make_candidates(windows, 4, seed=5)}


def scores_of(model, tokenizer, text, **options):
    run, options = RunOptions.split({"batch_size": 3, "show_progress": False, **options})
    return score_candidates(model, tokenizer, text["ids"], text["windows"], text["candidates"], config=CONFIG, run=run,
                            **options)


def test_every_option_is_scored_as_a_plain_forward(tiny_llama, tiny_tokenizer, text):
    ids, scores = text["ids"], scores_of(tiny_llama, tiny_tokenizer, text)
    assert [s.window for s in scores] == [w.index for w in text["windows"]]
    for w, s in zip(text["windows"], scores):
        pool = text["candidates"][w.index][: CONFIG.rerank_candidates] if w.has_retrieval else []
        assert s.passage_ids == [p.id for p in pool] and s.retrieval_scores == [p.score for p in pool]
        window = ids[w.begin : w.end]
        targets, ranking = [], []
        for option in pool + [None]:
            nlls = full_nlls(tiny_llama, write_over(window, spec_passage_ids(tiny_tokenizer, option, CONFIG)), window)
            targets.append(float(nlls[w.score_begin - w.begin - 1 :].sum()))
            begin = ranking_positions(w, CONFIG.rerank_tokens).start
            ranking.append(float(nlls[begin - w.begin - 1 : w.score_begin - w.begin - 1].sum()))
        if not pool:  # window 0 and the windows whose retrieval found nothing: as they are
            assert s.ranking_nlls is None and s.target_nlls == pytest.approx(targets, abs=1e-4)
            continue
        assert s.no_passage == len(pool)
        assert s.target_nlls == pytest.approx(targets, abs=1e-4)
        assert s.ranking_nlls == pytest.approx(ranking, abs=1e-4)
    assert sum(1 for s in scores if s.passage_ids) >= 5


def test_an_interrupted_pass_resumes_from_a_copy_and_never_recomputes(tiny_llama, tiny_tokenizer, text, tmp_path,
                                                                      monkeypatch):
    whole = scores_of(tiny_llama, tiny_tokenizer, text)
    folder = tmp_path / "runs" / "pass"
    calls = []
    import hf_ralm.selection.candidates as candidates

    real = candidates.rerank_windows

    def interrupted(model, tokenizer, ids, windows, *args, **kwargs):
        calls.append([w.index for w in windows])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(model, tokenizer, ids, windows, *args, **kwargs)

    monkeypatch.setattr(candidates, "rerank_windows", interrupted)
    with pytest.raises(KeyboardInterrupt):
        scores_of(tiny_llama, tiny_tokenizer, text, output_dir=folder, chunk_size=4, settings={"data": "t"})
    assert len(RecordStore.complete_chunks(folder)) == 2
    stored = json.dumps([row for path in RecordStore.complete_chunks(folder)
                         for row in RecordStore.read_chunk_file(path)["rows"]])
    assert not any(p.text in stored for pool in text["candidates"] for p in pool)  # ids and numbers only

    clone = tmp_path / "clone" / "runs" / "pass"  # a fresh clone of the repository, elsewhere
    shutil.copytree(folder, clone)
    shutil.rmtree(folder)
    calls.clear()
    resumed = scores_of(tiny_llama, tiny_tokenizer, text, output_dir=clone, chunk_size=4, settings={"data": "t"})
    assert calls[0][0] == 8  # it went on with the first window not saved
    assert [c for call in calls for c in call] == [w.index for w in text["windows"][8:]]
    assert_same_pass(resumed, whole)
    calls.clear()
    again = scores_of(tiny_llama, tiny_tokenizer, text, output_dir=clone, chunk_size=4, settings={"data": "t"})
    assert calls == []
    assert_same_pass(again, whole)
    assert all(isinstance(s, CandidateScores) for s in again)


def test_a_pass_is_shared_by_the_workers_its_run_options_name(tiny_llama, tiny_tokenizer, text, tmp_path,
                                                              monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")  # a launcher's environment: a caller sharded by it passes its shard
    monkeypatch.setenv("RANK", "1")
    whole = scores_of(tiny_llama, tiny_tokenizer, text)  # one process: no output folder needed
    options = dict(output_dir=tmp_path / "pass", chunk_size=4, num_shards=2, settings={"data": "t"})
    first = scores_of(tiny_llama, tiny_tokenizer, text, shard_id=1, **options)
    assert [s.window for s in first] == [w.index for w in text["windows"] if w.index // 4 % 2 == 1]
    assert_same_pass(scores_of(tiny_llama, tiny_tokenizer, text, shard_id=0, **options), whole)


def test_a_pass_with_other_settings_is_refused_before_any_work(tiny_llama, tiny_tokenizer, text, tmp_path,
                                                               monkeypatch):
    folder = tmp_path / "pass"
    short = {**text, "windows": text["windows"][:4]}
    scores_of(tiny_llama, tiny_tokenizer, short, output_dir=folder, chunk_size=2, settings={"data": "t"})

    def no_work(*args, **kwargs):
        raise AssertionError("a refused pass must not compute")

    monkeypatch.setattr("hf_ralm.selection.candidates.rerank_windows", no_work)
    with pytest.raises(OutputFolderError, match="'data': stored 't', given 'u'"):
        scores_of(tiny_llama, tiny_tokenizer, text, output_dir=folder, settings={"data": "u"})
    with pytest.raises(OutputFolderError, match="'reader_parameters'"):
        scores_of(make_tiny_model("gpt2"), tiny_tokenizer, text, output_dir=folder, settings={"data": "t"})
    with pytest.raises(OutputFolderError, match="'rerank_tokens': stored 5, given 6"):
        score_candidates(tiny_llama, tiny_tokenizer, text["ids"], text["windows"], text["candidates"],
                         config=RalmConfig(**{**CONFIG.to_dict(), "rerank_tokens": 6}), settings={"data": "t"},
                         run=RunOptions(batch_size=3, output_dir=folder, show_progress=False))
    other_text = {**text, "ids": list(reversed(text["ids"]))}
    with pytest.raises(OutputFolderError, match="'tokens': stored '60 tokens"):
        scores_of(tiny_llama, tiny_tokenizer, other_text, output_dir=folder, settings={"data": "t"})
