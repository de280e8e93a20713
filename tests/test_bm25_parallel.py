"""The bm25 index build's parallel analysis: worker processes analyse the passages, and the index is the one a
single process builds, file for file (passages table, bm25s matrices, vocabulary), from any Python context (a script
without the `__main__` guard, a script on stdin, `python -c`); workers that cannot start leave the analysis to the
main process, with one log line."""

from __future__ import annotations

import contextlib
import gzip
import itertools
import json
import logging
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import hf_ralm.retrieval.analysis as analysis
import hf_ralm.retrieval.bm25 as bm25_module
import hf_ralm.utils.worker_processes as worker_processes
from conftest import ARTICLES, SHARED_DATA, require_shared_file, write_jsonl
from hf_ralm.retrieval.analysis import BATCH_TEXTS, BATCHES_PER_PROCESS, analyze, iter_analyzed
from hf_ralm.retrieval.bm25 import BM25Retriever
from hf_ralm.utils.worker_processes import WorkerDied, WorkerPool

WORDS_PER_PASSAGE = 3
INDEX_FILES = ("bm25s/data.csc.index.npy", "bm25s/indices.csc.index.npy", "bm25s/indptr.csc.index.npy",
               "bm25s/vocab.index.json", "bm25s/params.index.json", "passages/data-00000-of-00001.arrow",
               "passages/dataset_info.json")


@pytest.fixture(scope="module")
def many_passages(tmp_path_factory) -> Path:
    """A corpus of some 10,700 passages: more batches than the two workers are sent ahead, so that the build waits on
    them in turn; each article's words in an order of its own, so that passages moved or dropped change the index."""
    rng = random.Random(57)
    words = " ".join(article["text"] for article in ARTICLES).split() + ["Darwin's", "20,000", "U.S.", "e-mail"]
    rows = [{"id": f"w{i}", "title": f"Article {i}", "text": " ".join(rng.choices(words, k=rng.randint(1, 60)))}
            for i in range(1000)]
    return write_jsonl(tmp_path_factory.mktemp("parallel") / "corpus.jsonl", rows)


def assert_same_index(one: Path, other: Path) -> None:
    """The two index folders hold the same index, file for file."""
    for name in INDEX_FILES:
        assert (one / name).read_bytes() == (other / name).read_bytes(), name
    state = [json.loads((folder / "passages/state.json").read_text()) for folder in (one, other)]
    for table_state in state:  # datasets hashes the temporary table's path and time into it: any two builds differ
        del table_state["_fingerprint"]
    assert state[0] == state[1]


def spy_pools(monkeypatch) -> list[int]:
    """The number of processes of each worker pool the analysis starts from now on."""
    pools: list[int] = []
    start_pool = analysis._analyzed_in_pool

    def spied(texts, cache_size, processes, batch_size):
        pools.append(processes)
        return start_pool(texts, cache_size, processes, batch_size)

    monkeypatch.setattr(analysis, "_analyzed_in_pool", spied)
    return pools


def test_parallel_build_is_the_single_process_build(tmp_path, many_passages, monkeypatch):
    pools = spy_pools(monkeypatch)
    single = BM25Retriever.build(str(many_passages), str(tmp_path / "single"), words_per_passage=WORDS_PER_PASSAGE,
                                 show_progress=False, n_threads=1)
    assert pools == []  # one process: no pool
    assert len(single) > (2 * BATCHES_PER_PROCESS + 1.5) * BATCH_TEXTS
    parallel = BM25Retriever.build(str(many_passages), str(tmp_path / "parallel"),
                                   words_per_passage=WORDS_PER_PASSAGE, show_progress=False, n_threads=2)
    assert pools == [2]
    assert_same_index(tmp_path / "single", tmp_path / "parallel")
    assert single.passages[:] == parallel.passages[:]
    assert single.bm25.vocab_dict == parallel.bm25.vocab_dict
    query = ["the emperor of rome and the sea"]
    assert single.retrieve(query, k=5) == parallel.retrieve(query, k=5)


def test_a_build_analyses_in_as_many_processes_as_the_cpus_by_default(tmp_path, many_passages, monkeypatch):
    pools = spy_pools(monkeypatch)
    monkeypatch.setattr(bm25_module, "available_cpus", lambda: 3)
    BM25Retriever.build(str(many_passages), str(tmp_path / "three"), words_per_passage=WORDS_PER_PASSAGE,
                        show_progress=False)
    monkeypatch.setattr(bm25_module, "available_cpus", lambda: 1)
    BM25Retriever.build(str(many_passages), str(tmp_path / "one"), words_per_passage=WORDS_PER_PASSAGE,
                        show_progress=False)
    assert pools == [3]  # the build on one CPU started no pool


@pytest.mark.parametrize("num_texts", [0, 2, 3, 40])
def test_parallel_analysis_keeps_every_text_in_order(num_texts):
    """Batches of 3 texts, at most 4 per worker sent ahead: 40 texts wait on the workers' batches in turn; 2 texts
    (fewer than a batch) are analysed without workers; 3, one full batch, by the workers."""
    texts = [f"Text {i}: the {i} emperors of Rome's {i * 7} legions" for i in range(num_texts)]
    got = list(iter_analyzed(iter(texts), processes=2, batch_size=3))
    assert got == [analyze(text) for text in texts]
    assert got == list(iter_analyzed(texts))


BUILD = """import logging, resource
from hf_ralm.retrieval import BM25Retriever
logging.basicConfig()
BM25Retriever.build({corpus!r}, {index_dir!r}, show_progress=False, n_threads=2)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)
"""


@pytest.fixture(scope="module")
def sample_articles(tmp_path_factory) -> Path:
    """The first 300 articles of the Wikipedia sample: some 9,900 passages, ten batches."""
    path = require_shared_file(SHARED_DATA / "wikipedia-2015-sample" / "articles.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = [json.loads(line) for line in itertools.islice(f, 300)]
    return write_jsonl(tmp_path_factory.mktemp("sample") / "articles.jsonl", rows)


@pytest.fixture(scope="module")
def one_process_index(sample_articles, tmp_path_factory) -> Path:
    index_dir = tmp_path_factory.mktemp("one-process") / "index"
    BM25Retriever.build(str(sample_articles), str(index_dir), show_progress=False, n_threads=1)
    return index_dir


@pytest.mark.skipif(sys.platform == "win32", reason="resource.getrusage counts the workers' CPU time")
@pytest.mark.parametrize("context", ["script", "stdin", "-c"])
def test_an_unguarded_script_builds_the_one_process_index_in_parallel(context, sample_articles, one_process_index,
                                                                      tmp_path):
    """No `if __name__ == "__main__":` guard, a script on stdin (which spawn cannot re-run: its path is '-'), or
    `python -c`: the workers never import the caller's script, so each builds, in parallel, the one-process index."""
    script = BUILD.format(corpus=str(sample_articles), index_dir=str(tmp_path / "index"))
    (tmp_path / "build.py").write_text(script, encoding="utf-8")
    command = {"script": [str(tmp_path / "build.py")], "stdin": ["-"], "-c": ["-c", script]}[context]
    ended = subprocess.run([sys.executable, *command], input=script if context == "stdin" else None,
                           capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert ended.returncode == 0, ended.stderr
    assert "alone" not in ended.stderr  # no fallback to one process
    assert float(ended.stdout) > 0.2  # the workers' CPU seconds: they analysed the passages
    assert_same_index(one_process_index, tmp_path / "index")


@pytest.mark.parametrize("broken", ["no executable", "no such executable", "frozen", "a worker ends at start"])
def test_workers_that_cannot_start_leave_the_analysis_to_this_process(broken, monkeypatch, caplog):
    """No interpreter to start, or a worker that ends before it is ready: one log line, and the same terms."""
    if broken == "a worker ends at start":
        monkeypatch.setattr(worker_processes, "_BOOTSTRAP", "import sys; sys.exit('cannot start')")
    elif broken == "frozen":  # a bundled application (PyInstaller): its executable is the application
        monkeypatch.setattr(sys, "frozen", True, raising=False)
    else:
        monkeypatch.setattr(sys, "executable", "" if broken == "no executable" else "/no/such/python")
    texts = [f"Text {i}: the {i} emperors of Rome's legions" for i in range(10)]
    with caplog.at_level(logging.INFO, logger="hf_ralm"):
        got = list(iter_analyzed(texts, processes=2, batch_size=3))
    assert got == [analyze(text) for text in texts]
    assert len(caplog.records) == 1
    message = caplog.records[0].getMessage()
    assert caplog.records[0].levelno == logging.WARNING and "in this process alone" in message
    assert {"no executable": "sys.executable is empty", "no such executable": "/no/such/python",
            "frozen": "frozen application", "a worker ends at start": "cannot start"}[broken] in message


def test_a_worker_pool_answers_in_order_and_its_workers_ignore_ctrl_c():
    with WorkerPool("operator:itemgetter", (0,), processes=3) as pool:
        for worker in pool.workers:
            os.kill(worker.process.pid, signal.SIGINT)  # Ctrl-C reaches the main process alone
        assert list(pool.imap(([i] for i in range(50)), ahead=2)) == list(range(50))


def test_a_worker_that_dies_mid_work_is_one_line_not_a_hang():
    with pytest.raises(WorkerDied, match=r"ended \(exit status 1\) before its work was done: IndexError"):
        with WorkerPool("operator:itemgetter", (1,), processes=2) as pool:
            list(pool.imap([[1, 2], [3, 4], [5]], ahead=1))


def test_a_worker_killed_mid_build_stops_the_analysis_with_one_line(monkeypatch):
    class KilledWorker(WorkerPool):  # the out-of-memory killer takes a worker once it is ready
        def __init__(self, *args):
            super().__init__(*args)
            self.workers[0].process.kill()

    monkeypatch.setattr(analysis, "WorkerPool", KilledWorker)
    with pytest.raises(RuntimeError, match=r"exit status -9\) before its work was done\. To analyse in this process "
                                           r"alone, build with n_threads=1 \(--threads 1\)\.$"):
        list(iter_analyzed([f"text {i}" for i in range(40)], processes=2, batch_size=3))


@pytest.mark.parametrize("ending", ["closed early", "interrupted"])
def test_the_workers_always_end(ending):
    def items():
        yield from ([i] for i in range(10))
        raise KeyboardInterrupt

    pool = WorkerPool("operator:itemgetter", (0,), processes=2)
    processes = [worker.process for worker in pool.workers]
    with pytest.raises(KeyboardInterrupt) if ending == "interrupted" else contextlib.nullcontext():
        with pool:
            results = pool.imap(items(), ahead=1)
            assert next(results) == 0
            if ending == "closed early":
                results.close()
            else:
                list(results)
    assert all(process.poll() is not None for process in processes)
