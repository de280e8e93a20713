"""Resumable evaluation (issue 11): an evaluation interrupted after some chunks and run again ends with exactly the
figures of an uninterrupted run, counts the windows it resumed, refuses to mix other settings, and Ctrl-C leaves a
consistent folder. Interruptions are injected after a chunk's work is done but before it is saved (the worst case)."""

from __future__ import annotations

import json
import os
import shutil
import socket

import pytest
import torch

import hf_ralm.evaluation.pipeline as evaluation
import hf_ralm.runs.store as records
from conftest import EVAL_TEXT, crashed_chunk, make_tiny_model, write_jsonl
from hf_ralm import RalmConfig
from hf_ralm.runs.store import TMP_PREFIX
from hf_ralm.runs.fingerprints import digest
from hf_ralm.evaluation.window_records import WindowRecordWriter
from hf_ralm.cli import main
from hf_ralm.errors import OutputFolderError

CHUNK = 4  # windows per chunk: the tiny text has 15 windows of stride 4, so 4 chunks
BASE = {"retrieval_stride": 4, "query_length": 8, "max_length": 32, "max_doc_tokens": 12}
SETUPS = {
    "plain": {},
    "rerank-lm": {"rerank": "lm", "rerank_candidates": 3, "rerank_tokens": 6},  # the reader ranks and scores at once
    "ensemble": {"ensemble_size": 2},
    "score-gate": {"retrieval_gate": "score", "gate_threshold": 0.3},
}
VOLATILE = {"num_resumed_windows", "scored_tokens_per_s", "timings", "args"}  # what a resumed run may change


def same_figures(a: dict, b: dict) -> bool:
    return {k: v for k, v in a.items() if k not in VOLATILE} == {k: v for k, v in b.items() if k not in VOLATILE}


def interrupt_after(monkeypatch, chunks_done: int, error: type[BaseException] = RuntimeError) -> None:
    """The next evaluation computes ``chunks_done`` chunks and then the next one, and stops before saving that."""
    real, calls = evaluation._Evaluation.chunk_records, []

    def stopping(*args, **kwargs):
        records = real(*args, **kwargs)
        calls.append(1)
        if len(calls) > chunks_done:
            raise error("injected interruption")
        return records

    monkeypatch.setattr(evaluation._Evaluation, "chunk_records", stopping)


def evaluate(model, tokenizer, retriever, output_dir=None, overwrite=False, text=EVAL_TEXT, **settings):
    config = RalmConfig(**{**BASE, **settings})
    return evaluation.evaluate_perplexity(model, tokenizer, text, retriever, config, show_progress=False,
                                          output_dir=None if output_dir is None else str(output_dir),
                                          overwrite=overwrite, chunk_size=CHUNK)


def saved_chunks(folder) -> list[str]:
    return sorted(p.name for p in (folder / "windows").iterdir() if p.name.startswith("chunk-"))


def chunk_names(count: int) -> list[str]:
    """The names of the first ``count`` chunks of CHUNK windows: named by the windows they hold."""
    return [f"chunk-{i * CHUNK:08d}-{(i + 1) * CHUNK:08d}.json.gz" for i in range(count)]


@pytest.mark.parametrize("setup", SETUPS)
def test_interrupted_then_resumed_equals_uninterrupted(setup, tmp_path, monkeypatch, tiny_llama, tiny_tokenizer,
                                                       tiny_index):
    retriever, settings = tiny_index["retriever"], SETUPS[setup]
    whole = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "whole", **settings)
    assert whole.figures["num_windows"] > 3 * CHUNK and whole.figures["num_resumed_windows"] == 0
    settings_digest = digest(WindowRecordWriter.read_settings(tmp_path / "whole" / "windows")[0])
    assert json.loads((tmp_path / "whole" / "eval.json").read_text()) == {**whole.figures, "timings": whole.timings,
                                                                          "settings_digest": settings_digest}

    interrupt_after(monkeypatch, 2)
    with pytest.raises(RuntimeError, match="injected"):
        evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "cut", **settings)
    assert saved_chunks(tmp_path / "cut") == chunk_names(2)
    assert not (tmp_path / "cut" / "eval.json").exists()
    monkeypatch.undo()

    resumed = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "cut", **settings)
    assert resumed.figures["num_resumed_windows"] == 2 * CHUNK
    assert same_figures(resumed.figures, whole.figures)  # to the last digit: nll_sum, token_ppl, word_ppl, counts
    assert torch.equal(resumed.token_nlls[1:], whole.token_nlls[1:])
    assert resumed.passages == whole.passages and resumed.chosen == whole.chosen
    assert resumed.ranking_nlls == whole.ranking_nlls and resumed.gate_scores == whole.gate_scores
    report = json.loads((tmp_path / "cut" / "eval.json").read_text())
    assert report["num_resumed_windows"] == 2 * CHUNK and report["token_ppl"] == whole.figures["token_ppl"]
    # without an output folder the same chunks give the same figures
    assert same_figures(evaluate(tiny_llama, tiny_tokenizer, retriever, **settings).figures, whole.figures)


def test_rerun_of_a_finished_run_computes_nothing(tmp_path, monkeypatch, tiny_llama, tiny_tokenizer, tiny_index):
    first = evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], tmp_path)
    interrupt_after(monkeypatch, 0)  # any chunk computed would fail
    again = evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], tmp_path)
    assert again.figures["num_resumed_windows"] == first.figures["num_windows"]
    assert same_figures(again.figures, first.figures)


def test_keyboard_interrupt_leaves_complete_chunks_only(tmp_path, monkeypatch, tiny_llama, tiny_tokenizer,
                                                        tiny_index):
    retriever = tiny_index["retriever"]
    whole = evaluate(tiny_llama, tiny_tokenizer, retriever)
    interrupt_after(monkeypatch, 1, KeyboardInterrupt)
    with pytest.raises(KeyboardInterrupt):
        evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path)
    assert saved_chunks(tmp_path) == chunk_names(1)
    assert not (tmp_path / "eval.json").exists()
    monkeypatch.undo()

    # Ctrl-C while a chunk is being written: its temporary file goes, the complete chunks stay
    real_write = records.write_durably

    def cut_write(final, write, tmp):
        def half(path):
            path.write_bytes(b"\x1f\x8b half a chunk")
            raise KeyboardInterrupt

        real_write(final, half, tmp)

    monkeypatch.setattr(records, "write_durably", cut_write)
    with pytest.raises(KeyboardInterrupt):
        evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path)
    assert saved_chunks(tmp_path) == chunk_names(1)
    assert not list((tmp_path / "windows").glob(TMP_PREFIX + "*")) and not (tmp_path / "eval.json").exists()
    monkeypatch.undo()

    # a kill (SIGKILL) in the middle of a write leaves a temporary file: it is never read, and replaced
    crashed_chunk(tmp_path / "windows", CHUNK, 2 * CHUNK)
    resumed = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path)
    assert resumed.figures["num_resumed_windows"] == CHUNK and same_figures(resumed.figures, whole.figures)
    assert not list((tmp_path / "windows").glob(TMP_PREFIX + "*"))


def pause_after(monkeypatch, chunks_done: int, during) -> list:
    """The next evaluation runs ``during()`` once it has saved ``chunks_done`` chunks, then goes on (``during``
    runs unpatched); returns a list that holds a value once ``during`` has run."""
    real, calls, ran = evaluation._Evaluation.chunk_records, [], []

    def pausing(*args, **kwargs):
        calls.append(1)
        if len(calls) == chunks_done + 1:
            monkeypatch.undo()
            ran.append(during())
        return real(*args, **kwargs)

    monkeypatch.setattr(evaluation._Evaluation, "chunk_records", pausing)
    return ran


def test_overwrite_under_a_live_worker_is_refused_and_a_worker_whose_folder_was_replaced_stops(
        tmp_path, monkeypatch, tiny_llama, tiny_tokenizer, tiny_index):
    """Issue 38: worker A (max_doc_tokens 12) paused after its first chunk, worker B (max_doc_tokens 10) overwrites.
    B is refused, naming A, and A goes on; and should the folder be replaced anyway (deleted by hand, B run there),
    A stops before its next chunk, saving nothing more, and B's rerun prints B's own figures."""
    retriever = tiny_index["retriever"]

    def overwrite():
        with pytest.raises(OutputFolderError, match=rf"being computed by {socket.gethostname()}:{os.getpid()} "):
            evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "a", overwrite=True, max_doc_tokens=10)
        return "refused"

    ran = pause_after(monkeypatch, 1, overwrite)
    a = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "a")
    assert ran == ["refused"] and a.figures["num_resumed_windows"] == 0
    assert same_figures(a.figures, evaluate(tiny_llama, tiny_tokenizer, retriever).figures)
    a_digest = digest(WindowRecordWriter.read_settings(tmp_path / "a" / "windows")[0])
    assert json.loads((tmp_path / "a" / "eval.json").read_text())["settings_digest"] == a_digest

    def replace():
        shutil.rmtree(tmp_path / "b")
        return evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "b", max_doc_tokens=10)

    ran = pause_after(monkeypatch, 1, replace)
    with pytest.raises(OutputFolderError, match=r"b/windows/settings.json changed while this run computed"):
        evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "b")
    b, b_digest = ran[0], digest(WindowRecordWriter.read_settings(tmp_path / "b" / "windows")[0])
    assert saved_chunks(tmp_path / "b") == saved_chunks(tmp_path / "a")  # B's, none of A's:
    assert {WindowRecordWriter.read_chunk_file(path)["settings_digest"]
            for path in WindowRecordWriter.complete_chunks(tmp_path / "b" / "windows")} == {b_digest}
    report = json.loads((tmp_path / "b" / "eval.json").read_text())
    assert report["token_ppl"] == b.figures["token_ppl"] != a.figures["token_ppl"]
    assert report["settings_digest"] == b_digest
    rerun = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path / "b", max_doc_tokens=10)
    assert rerun.figures["num_resumed_windows"] == rerun.figures["num_windows"]
    assert same_figures(rerun.figures, b.figures)


@pytest.mark.parametrize("change, named", [
    ({"retrieval_stride": 2}, "'retrieval_stride': stored 4, given 2"),
    ({"max_doc_tokens": 10}, "'max_doc_tokens': stored 12, given 10"),
    ({"text": EVAL_TEXT + " the end ."}, "'data'"),
    ({"retriever": None}, "'retriever'"),
])
def test_other_settings_are_refused_by_name_or_overwritten(change, named, tmp_path, monkeypatch, tiny_llama,
                                                           tiny_tokenizer, tiny_index):
    interrupt_after(monkeypatch, 1)
    with pytest.raises(RuntimeError):
        evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], tmp_path)
    monkeypatch.undo()
    kwargs = {"retriever": tiny_index["retriever"], **change}
    with pytest.raises(OutputFolderError, match=named) as info:
        evaluate(tiny_llama, tiny_tokenizer, output_dir=tmp_path, **kwargs)
    assert "overwrite" in str(info.value)
    assert saved_chunks(tmp_path) == chunk_names(1)  # nothing was touched

    fresh = evaluate(tiny_llama, tiny_tokenizer, output_dir=tmp_path, overwrite=True, **kwargs)
    assert fresh.figures["num_resumed_windows"] == 0
    assert same_figures(fresh.figures, evaluate(tiny_llama, tiny_tokenizer, **kwargs).figures)


def test_settings_of_a_run_stopped_before_its_first_chunk_are_compared_too(tmp_path, monkeypatch, tiny_llama,
                                                                           tiny_tokenizer):
    """The settings file is made once, by the first worker, and always compared: a worker of another configuration
    that comes before the first chunk is saved is refused as well (overwrite starts afresh)."""
    interrupt_after(monkeypatch, 0)
    with pytest.raises(RuntimeError):
        evaluate(tiny_llama, tiny_tokenizer, None, tmp_path, max_doc_tokens=10)
    monkeypatch.undo()
    assert saved_chunks(tmp_path) == []
    with pytest.raises(OutputFolderError, match="'max_doc_tokens': stored 10, given 12"):
        evaluate(tiny_llama, tiny_tokenizer, None, tmp_path)
    assert evaluate(tiny_llama, tiny_tokenizer, None, tmp_path, overwrite=True).figures["num_resumed_windows"] == 0


def test_another_model_is_refused(tmp_path, tiny_llama, tiny_tokenizer):
    evaluate(tiny_llama, tiny_tokenizer, None, tmp_path)
    with pytest.raises(OutputFolderError, match="'reader_class'"):
        evaluate(make_tiny_model("gpt2"), tiny_tokenizer, None, tmp_path)


def test_python_path_through_the_model(tmp_path, monkeypatch, tiny_model_dir, tiny_index):
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                    index_dir=tiny_index["index_dir"], **BASE)
    whole = model.evaluate_perplexity(EVAL_TEXT, show_progress=False, chunk_size=CHUNK)
    interrupt_after(monkeypatch, 3)
    with pytest.raises(RuntimeError):
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False, chunk_size=CHUNK, output_dir=str(tmp_path))
    monkeypatch.undo()
    resumed = model.evaluate_perplexity(EVAL_TEXT, show_progress=False, chunk_size=CHUNK, output_dir=str(tmp_path))
    assert resumed.figures["num_resumed_windows"] == 3 * CHUNK and same_figures(resumed.figures, whole.figures)


def test_cli_eval_lm_and_retrieve_resume(tmp_path, monkeypatch, tiny_model_dir, tiny_index, capsys):
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    common = ["--model", str(tiny_model_dir), "--dataset-path", str(data), "--stride", "4", "--query-length", "8",
              "--max-length", "32", "--max-doc-tokens", "12", "--retriever", "bm25", "--index-dir",
              tiny_index["index_dir"], "--rerank", "lm", "--rerank-candidates", "3", "--chunk-size", str(CHUNK)]

    def command(name, folder, *extra):
        out = ["--save-retrieval-file", str(tmp_path / f"{folder}.json")] if name == "retrieve" else []
        main([name, *common, "--output-dir", str(tmp_path / folder), *out, *extra])
        return json.loads((tmp_path / folder / "eval.json").read_text())

    wholes = {}
    for name in ("eval-lm", "retrieve"):
        whole = wholes[name] = command(name, f"{name}-whole")
        interrupt_after(monkeypatch, 2)
        with pytest.raises(RuntimeError):
            command(name, f"{name}-cut")
        monkeypatch.undo()
        assert not (tmp_path / f"{name}-cut" / "eval.json").exists()
        resumed = command(name, f"{name}-cut")
        assert resumed["num_resumed_windows"] == 2 * CHUNK and same_figures(resumed, whole)
    assert (json.loads((tmp_path / "retrieve-cut.json").read_text())
            == json.loads((tmp_path / "retrieve-whole.json").read_text()))
    again = command("eval-lm", "eval-lm-cut", "--overwrite")
    assert again["num_resumed_windows"] == 0 and same_figures(again, wholes["eval-lm"])

    interrupt_after(monkeypatch, 1, KeyboardInterrupt)  # Ctrl-C: one line, status 130, and the folder resumes
    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        command("eval-lm", "eval-lm-ctrl-c")
    monkeypatch.undo()
    assert info.value.code == 130
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        "hf-ralm: interrupted (--output-dir holds complete chunks only: run the same command to resume)")
    assert command("eval-lm", "eval-lm-ctrl-c")["num_resumed_windows"] == CHUNK

    capsys.readouterr()
    with pytest.raises(SystemExit) as info:
        command("eval-lm", "eval-lm-cut", "--stride", "2")
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert info.value.code == 2 and err.startswith("hf-ralm: error: ") and "Traceback" not in err
    assert "'--stride': stored 4, given 2" in err and "--overwrite" in err


def test_progress_within_a_chunk_is_shown_per_batch_of_windows(monkeypatch, tiny_llama, tiny_tokenizer, tiny_index):
    """A chunk (256 windows by default) takes minutes on a CPU: the run's bar advances with every batch of the stage
    that scores it, which shows no bar of its own (a nested bar left the run's standing at 0, and cursor codes in a
    log)."""
    import hf_ralm.runs.harness as runs
    import hf_ralm.core.scoring as scoring
    from hf_ralm.utils.progress import tqdm

    bars = []

    class Recorded(tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.updates = []
            if not self.disable:  # the bars shown
                bars.append(self)

        def update(self, n=1):
            self.updates.append(n)
            return super().update(n)

    monkeypatch.setattr(runs, "tqdm", Recorded)  # the run harness draws the run's bar
    monkeypatch.setattr(scoring, "tqdm", Recorded)
    config = RalmConfig(**BASE)
    result = evaluation.evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"], config,
                                            batch_size=2, chunk_size=100)
    (run,) = bars  # one chunk holds them all, and its scoring shows no bar
    assert run.desc == "Evaluating" and sum(run.updates) == result.figures["num_windows"]
    assert max(run.updates) <= 2 and len(run.updates) >= result.figures["num_windows"] // 2


@pytest.mark.cpu_only(reason="batch_size='auto' starts at 8 on a CPU (64 on a GPU)")
def test_batch_size_auto_halves_on_out_of_memory_and_resumes_without_overwrite(
        tiny_llama, tiny_tokenizer, tiny_index, tmp_path, monkeypatch):
    """``batch_size="auto"`` (8 on a CPU) meets a device that holds 2 windows: each chunk that fails runs again with
    half the batch, the run ends with the records of a batch-2 run, and its settings record "auto", so a resume after
    the error (which starts again at 8) needs no overwrite, while a fixed batch size there is refused."""
    real, sizes = evaluation.score_windows, []

    def small_device(model, ids, windows, prefixes, batch_size, *args, **kwargs):
        sizes.append(batch_size)
        if batch_size > 2:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
        return real(model, ids, windows, prefixes, batch_size, *args, **kwargs)

    def run(folder, batch_size, **options):
        return evaluation.evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"],
                                              RalmConfig(**BASE), show_progress=False, output_dir=str(folder),
                                              chunk_size=CHUNK, batch_size=batch_size, **options)

    fixed = run(tmp_path / "fixed", 2)
    whole_chunks = evaluation._Evaluation.chunk_records
    monkeypatch.setattr(evaluation, "score_windows", small_device)
    interrupt_after(monkeypatch, 1)
    with pytest.raises(RuntimeError, match="injected"):
        run(tmp_path / "auto", "auto")
    assert sizes[:3] == [8, 4, 2] and set(sizes[3:]) == {2}  # halved twice, then kept
    assert records.RecordStore.read_settings(tmp_path / "auto" / "windows")[0]["batch_size"] == "auto"
    monkeypatch.setattr(evaluation._Evaluation, "chunk_records", whole_chunks)  # no interruption now
    sizes.clear()
    resumed = run(tmp_path / "auto", "auto")  # no overwrite
    assert sizes[:3] == [8, 4, 2] and resumed.figures["num_resumed_windows"] == CHUNK
    assert same_figures(resumed.figures, fixed.figures)
    torch.testing.assert_close(resumed.token_nlls, fixed.token_nlls, rtol=0, atol=0, equal_nan=True)
    chunks = [records.RecordStore.read_chunk_file(path) for path in
              records.RecordStore.complete_chunks(tmp_path / "auto" / "windows")]
    assert {chunk["batch_size"] for chunk in chunks} == {2}
    with pytest.raises(OutputFolderError, match="'batch_size': stored 'auto', given 2"):
        run(tmp_path / "auto", 2)
