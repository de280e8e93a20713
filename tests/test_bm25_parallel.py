"""The bm25 index build's parallel analysis: worker processes analyse the passages, and the index is the one a
single process builds, file for file (passages table, bm25s matrices, vocabulary)."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

import hf_ralm.retrieval.analysis as analysis
import hf_ralm.retrieval.bm25 as bm25_module
from conftest import ARTICLES, write_jsonl
from hf_ralm.retrieval.analysis import BATCH_TEXTS, BATCHES_PER_PROCESS, analyze, iter_analyzed
from hf_ralm.retrieval.bm25 import BM25Retriever

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
    for name in INDEX_FILES:
        assert (tmp_path / "single" / name).read_bytes() == (tmp_path / "parallel" / name).read_bytes(), name
    state = [json.loads((tmp_path / folder / "passages/state.json").read_text()) for folder in ("single", "parallel")]
    for table_state in state:  # datasets hashes the temporary table's path and time into it: any two builds differ
        del table_state["_fingerprint"]
    assert state[0] == state[1]
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


SCRIPT = """from hf_ralm.retrieval.analysis import iter_analyzed
{guard}print(len(list(iter_analyzed(["the emperor of rome ruled"] * 10, processes=2, batch_size=3))))
"""


@pytest.mark.parametrize("guarded", [True, False])
def test_workers_are_spawned_and_an_unguarded_script_gets_one_line(guarded, tmp_path):
    """The workers are spawned (a forked one can hang on a lock of another thread, pyarrow's or a JVM's), so they
    import the script that started them: under the `__main__` guard it runs; without it, one line says what to do,
    rather than workers restarted for ever."""
    import subprocess
    import sys

    script = tmp_path / "build.py"
    script.write_text(SCRIPT.format(guard='if __name__ == "__main__":\n    ' if guarded else ""), encoding="utf-8")
    ended = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    if guarded:
        assert ended.returncode == 0 and ended.stdout.strip() == "10", ended.stderr
    else:
        assert ended.returncode == 1 and 'must run its code under `if __name__ == "__main__":`' in ended.stderr
