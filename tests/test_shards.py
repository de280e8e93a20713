"""Many workers on one run: worker I of N computes chunks I, I+N, ... into one --output-dir, and the results are
those of one process (``==``, fp32): through the Python API, two shard processes launched by hand, ``torchrun
--nproc_per_node 2`` (gloo), a worker killed midway and run again, and with SmolLM2-135M; a worker with other settings
is refused before any work; the worker that saves the last chunk writes eval.json, and the same command without
shards merges too (a Slurm array needs no extra step)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import hf_ralm.evaluation.pipeline as evaluation
from conftest import EVAL_TEXT, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RalmConfig
from hf_ralm.errors import OutputFolderError
from hf_ralm.runs.store import RecordStore

CHUNK = 3  # windows per chunk: the tiny text's 15 windows make 5 chunks, so 2 workers take 3 and 2
SETTINGS = {"retrieval_stride": 4, "query_length": 8, "max_length": 32, "max_doc_tokens": 12}
VOLATILE = {"num_resumed_windows", "scored_tokens_per_s", "timings", "args"}  # what differs between workers


def figures(path: Path) -> dict:
    report = json.loads((path / "eval.json").read_text())
    return {k: v for k, v in report.items() if k not in VOLATILE}


def window_records(path: Path) -> list[dict]:
    return RecordStore.read_rows(path / "windows")


def evaluate(model, tokenizer, retriever, output_dir, **options):
    return evaluation.evaluate_perplexity(model, tokenizer, EVAL_TEXT, retriever, RalmConfig(**SETTINGS),
                                          show_progress=False, output_dir=str(output_dir), chunk_size=CHUNK,
                                          **options)


@pytest.fixture(scope="module")
def one_process(tiny_llama, tiny_tokenizer, tiny_index, tmp_path_factory):
    folder = tmp_path_factory.mktemp("one")
    result = evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], folder)
    assert result.figures["num_windows"] == 15
    return folder


def test_two_shards_through_the_api_equal_one_process(one_process, tiny_llama, tiny_tokenizer, tiny_index,
                                                      tmp_path, monkeypatch):
    retriever = tiny_index["retriever"]
    first = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path, num_shards=2, shard_id=0)
    assert first.figures == {"complete": False, "num_windows": 15, "num_done_windows": 9, "num_computed_windows": 9,
                             "shard": "0 of 2 (arguments)"}
    assert not (tmp_path / "eval.json").exists()
    assert [span for span in RecordStore(tmp_path / "windows", RecordStore.read_settings(tmp_path / "windows")[0])
            .ranges()] == [(0, 3), (6, 9), (12, 15)]  # chunks 0, 2, 4
    second = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path, num_shards=2, shard_id=1)
    assert second.figures["complete"] and second.figures["num_resumed_windows"] == 9  # its 6 computed, 9 read
    assert figures(tmp_path) == figures(one_process)
    assert window_records(tmp_path) == window_records(one_process)

    def no_work(*args, **kwargs):
        raise AssertionError("a complete run must only merge")

    monkeypatch.setattr(evaluation._Evaluation, "chunk_records", no_work)
    (tmp_path / "eval.json").unlink()
    merged = evaluate(tiny_llama, tiny_tokenizer, retriever, tmp_path)  # the same command without shards: merges
    assert merged.figures["num_resumed_windows"] == 15 and figures(tmp_path) == figures(one_process)


def test_shards_of_the_environment(tiny_llama, tiny_tokenizer, tiny_index, tmp_path, monkeypatch):
    """A Slurm array's task (counted from SLURM_ARRAY_TASK_MIN) computes its shard without any flag."""
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "11")
    monkeypatch.setenv("SLURM_ARRAY_TASK_MIN", "10")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "2")
    result = evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], tmp_path)
    assert result.figures["shard"] == "1 of 2 (slurm array)" and result.figures["num_computed_windows"] == 6
    with pytest.raises(ValueError, match="workers .slurm array. share a run through its output_dir"):
        evaluation.evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"],
                                       RalmConfig(**SETTINGS), show_progress=False)


def cli(model_dir, index, data, out, *extra) -> list[str]:
    return ["eval-lm", "--model", str(model_dir), *TEST_DEVICE_ARGS, "--dataset-path", str(data), "--stride", "4",
            "--query-length", "8", "--max-length", "32", "--max-doc-tokens", "12", "--retriever", "bm25",
            "--index-dir", index, "--chunk-size", str(CHUNK), "--output-dir", str(out), *extra]


def environment() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "RANK", "WORLD_SIZE", "LOCAL_RANK"))}
    return {**env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "OMP_NUM_THREADS": "1"}


@pytest.fixture(scope="module")
def one_process_cli(tiny_model_dir, tiny_index, tmp_path_factory):
    root = tmp_path_factory.mktemp("one-cli")
    data = write_jsonl(root / "data.jsonl", [{"text": EVAL_TEXT}])
    subprocess.run([sys.executable, "-m", "hf_ralm.cli", *cli(tiny_model_dir, tiny_index["index_dir"], data,
                                                              root / "out")], check=True, env=environment())
    return {"data": data, "out": root / "out"}


def test_two_shard_processes_launched_by_hand(one_process_cli, tiny_model_dir, tiny_index, tmp_path):
    argv = cli(tiny_model_dir, tiny_index["index_dir"], one_process_cli["data"], tmp_path)
    workers = [subprocess.Popen([sys.executable, "-m", "hf_ralm.cli", *argv, "--num-shards", "2", "--shard-id",
                                 str(i)], env=environment(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for i in (0, 1)]
    outs = [w.communicate() for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outs
    assert figures(tmp_path) == figures(one_process_cli["out"])
    assert window_records(tmp_path) == window_records(one_process_cli["out"])
    printed = [json.loads(out) for out, _ in outs]
    assert sum("token_ppl" in p for p in printed) >= 1  # the worker that saved the last chunk printed the results


def test_torchrun_two_ranks(one_process_cli, tiny_model_dir, tiny_index, tmp_path, tmp_path_factory):
    argv = cli(tiny_model_dir, tiny_index["index_dir"], one_process_cli["data"], tmp_path)
    scratch = tmp_path_factory.mktemp("torchelastic")  # torchrun's own folder, which it leaves behind in $TMPDIR
    run = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                          "29517", "-m", "hf_ralm.cli", *argv], env={**environment(), "TMPDIR": str(scratch)},
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    assert figures(tmp_path) == figures(one_process_cli["out"])
    assert window_records(tmp_path) == window_records(one_process_cli["out"])
    report = json.loads((tmp_path / "eval.json").read_text())
    assert report["num_resumed_windows"] in (6, 9)  # rank 0 wrote it: its own chunks computed, the others read


SLOW_WORKER = """import sys, time
import hf_ralm.evaluation.pipeline as evaluation
from hf_ralm.cli import main
real = evaluation._Evaluation.chunk_records
def slow(*args, **kwargs):  # the tiny model is quick: a chunk that takes a while, so the kill lands between chunks
    records = real(*args, **kwargs)
    time.sleep(2)
    return records
evaluation._Evaluation.chunk_records = slow
main(sys.argv[1:])
"""


def test_a_worker_killed_midway_and_run_again(one_process_cli, tiny_model_dir, tiny_index, tmp_path):
    argv = cli(tiny_model_dir, tiny_index["index_dir"], one_process_cli["data"], tmp_path, "--num-shards", "2",
               "--shard-id", "0")
    slow = subprocess.Popen([sys.executable, "-c", SLOW_WORKER, *argv], env=environment(),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    windows = tmp_path / "windows"
    deadline = time.time() + 300
    while time.time() < deadline and not RecordStore.complete_chunks(windows):
        time.sleep(0.05)
    slow.send_signal(signal.SIGKILL)  # after its first chunk, before its last
    slow.wait()
    saved = len(RecordStore.complete_chunks(windows))
    assert 1 <= saved < 3 and not (tmp_path / "eval.json").exists()
    for shard in ("0", "1"):
        subprocess.run([sys.executable, "-m", "hf_ralm.cli", *argv[:-1], shard], env=environment(), check=True,
                       capture_output=True)
    assert figures(tmp_path) == figures(one_process_cli["out"])
    assert window_records(tmp_path) == window_records(one_process_cli["out"])


def test_a_worker_with_other_settings_is_refused_before_any_work(tiny_llama, tiny_tokenizer, tiny_index, tmp_path,
                                                                 monkeypatch):
    evaluate(tiny_llama, tiny_tokenizer, tiny_index["retriever"], tmp_path, num_shards=2, shard_id=0)

    def no_work(*args, **kwargs):
        raise AssertionError("a refused worker must not compute")

    monkeypatch.setattr(evaluation._Evaluation, "chunk_records", no_work)
    with pytest.raises(OutputFolderError, match="'max_doc_tokens': stored 12, given 10"):
        evaluation.evaluate_perplexity(tiny_llama, tiny_tokenizer, EVAL_TEXT, tiny_index["retriever"],
                                       RalmConfig(**{**SETTINGS, "max_doc_tokens": 10}), show_progress=False,
                                       output_dir=str(tmp_path), chunk_size=CHUNK, num_shards=2, shard_id=1)


@pytest.mark.integration
def test_two_shards_with_smollm2(real_model_dir, tiny_index, tmp_path):
    model = real_model_dir("smollm2-135m-instruct")
    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT * 2}])
    base = ["eval-lm", "--model", str(model), *TEST_DEVICE_ARGS, "--dataset-path", str(data), "--stride", "8",
            "--max-length", "48", "--max-doc-tokens", "16", "--retriever", "bm25", "--index-dir",
            tiny_index["index_dir"], "--chunk-size", "4"]
    subprocess.run([sys.executable, "-m", "hf_ralm.cli", *base, "--output-dir", str(tmp_path / "one")], check=True,
                   env=environment(), capture_output=True)
    sharded = [*base, "--output-dir", str(tmp_path / "two"), "--num-shards", "2", "--shard-id"]
    workers = [subprocess.Popen([sys.executable, "-m", "hf_ralm.cli", *sharded, str(i)], env=environment(),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in (0, 1)]
    assert [w.wait() for w in workers] == [0, 0]
    assert figures(tmp_path / "two") == figures(tmp_path / "one")
    assert window_records(tmp_path / "two") == window_records(tmp_path / "one")
