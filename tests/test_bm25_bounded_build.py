"""The bm25 build's bounded memory (issue 64): the passages' term counts go to files in the build folder a batch at a
time and the score matrix is written from them a range of terms per pass, each pass holding at most
``memory_budget`` bytes of postings. The index is the same bytes whatever the budget and the batches, its scores are
the formula's (a plain loop here), and the spilled counts are gone once the build ends, whether it succeeded or
failed."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

import hf_ralm.retrieval.bm25_index as bm25_index
from conftest import ARTICLES, write_jsonl
from hf_ralm import passage_text
from hf_ralm.errors import SettingError
from hf_ralm.retrieval import analyze, passage_rows, read_corpus
from hf_ralm.retrieval.bm25 import BM25_PARAMS, BM25Retriever
from test_bm25_parallel import assert_same_index

WORDS_PER_PASSAGE = 3


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """Some 2,000 passages of the test articles' words (and a few that the analysis splits or drops), each article's
    words in an order of its own, so that a posting moved between passages or terms changes the files."""
    rng = random.Random(64)
    words = " ".join(article["text"] for article in ARTICLES).split() + ["Darwin's", "20,000", "U.S.", "the", "of"]
    rows = [{"id": f"w{i}", "title": f"Article {i % 37}", "text": " ".join(rng.choices(words, k=rng.randint(1, 30)))}
            for i in range(400)]
    return write_jsonl(tmp_path_factory.mktemp("bounded") / "corpus.jsonl", rows)


def test_tiny_budget_and_batches_build_the_same_files(tmp_path, corpus, monkeypatch):
    whole = BM25Retriever.build(str(corpus), str(tmp_path / "whole"), words_per_passage=WORDS_PER_PASSAGE,
                                show_progress=False, n_threads=1)
    monkeypatch.setattr(bm25_index, "BATCH_DOCS", 7)  # some 300 spilled batches
    budget = 64 * bm25_index.POSTING_BYTES
    BM25Retriever.build(str(corpus), str(tmp_path / "tiny"), words_per_passage=WORDS_PER_PASSAGE,
                        show_progress=False, n_threads=1, memory_budget=budget)
    assert_same_index(tmp_path / "whole", tmp_path / "tiny")
    assert len(whole) > 1000


def test_each_pass_holds_at_most_the_budget(tmp_path, corpus):
    passages = (analyze(passage_text(row["title"], row["text"]))
                for row in passage_rows(read_corpus(str(corpus)), WORDS_PER_PASSAGE))
    counts = bm25_index.count_terms(passages, str(tmp_path / "spill"), batch_docs=7)
    budget = 64 * bm25_index.POSTING_BYTES
    passes = [(len(data), len(terms)) for data, _, terms in
              bm25_index.term_postings(counts, BM25_PARAMS["k1"], BM25_PARAMS["b"], budget)]
    assert len(passes) > 20 and sum(held for held, _ in passes) == counts.num_pairs
    # over the budget only where one term alone has more postings than it holds
    assert all(held * bm25_index.POSTING_BYTES <= budget or terms == 1 for held, terms in passes)
    assert any(terms == 1 and held * bm25_index.POSTING_BYTES > budget for held, terms in passes)


def formula_matrix(corpus: Path) -> dict[str, np.ndarray]:
    """bm25s's CSC score matrix of the corpus from the formula, term by term: Lucene's idf as float32, the term
    frequency part in float64, the score rounded to float32; terms numbered by first appearance."""
    k1, b = BM25_PARAMS["k1"], BM25_PARAMS["b"]
    passages = [analyze(passage_text(row["title"], row["text"]))
                for row in passage_rows(read_corpus(str(corpus)), WORDS_PER_PASSAGE)]
    vocab: dict[str, int] = {}
    for terms in passages:
        for term in terms:
            vocab.setdefault(term, len(vocab))
    postings: list[list[tuple[int, int]]] = [[] for _ in vocab]  # per term: (passage, count)
    for number, terms in enumerate(passages):
        for term in sorted(set(terms), key=vocab.__getitem__):
            postings[vocab[term]].append((number, terms.count(term)))
    avg_length = sum(map(len, passages)) / len(passages)
    data, indices, indptr = [], [], [0]
    for column in postings:
        idf = np.float32(math.log(1 + (len(passages) - len(column) + 0.5) / (len(column) + 0.5)))
        for number, tf in column:
            length_part = k1 * ((1 - b) + b * len(passages[number]) / avg_length)
            data.append(np.float32(float(idf) * (tf / (length_part + tf))))
            indices.append(number)
        indptr.append(len(data))
    return {"data": np.asarray(data, dtype=np.float32), "indices": np.asarray(indices, dtype=np.int32),
            "indptr": np.asarray(indptr, dtype=np.int32)}


def test_the_files_are_the_formula_saved_by_numpy(tmp_path, corpus):
    BM25Retriever.build(str(corpus), str(tmp_path / "index"), words_per_passage=WORDS_PER_PASSAGE,
                        show_progress=False, n_threads=1, memory_budget=100 * bm25_index.POSTING_BYTES)
    for name, array in formula_matrix(corpus).items():
        np.save(tmp_path / f"{name}.npy", array)  # the bytes bm25s's own save writes
        built = (tmp_path / "index" / "bm25s" / f"{name}.csc.index.npy").read_bytes()
        assert built == (tmp_path / f"{name}.npy").read_bytes(), name


def test_spilled_counts_are_written_and_then_gone(tmp_path, corpus, monkeypatch):
    seen = {}
    save = bm25_index.save_bm25s

    def spied(folder, counts, params, memory_budget):  # the counts are on disk, not in memory, while the matrix is made
        seen.update({name: (Path(counts.folder) / name).stat().st_size for name in ("term_ids", "lengths")},
                    pairs=counts.num_pairs, docs=counts.num_docs, folder=Path(counts.folder))
        save(folder, counts, params, memory_budget)

    monkeypatch.setattr("hf_ralm.retrieval.bm25.save_bm25s", spied)
    index = tmp_path / "index"
    BM25Retriever.build(str(corpus), str(index), words_per_passage=WORDS_PER_PASSAGE, show_progress=False,
                        n_threads=1)
    assert seen["term_ids"] == 4 * seen["pairs"] and seen["lengths"] == 4 * seen["docs"] > 0
    assert seen["folder"].is_relative_to(str(index) + ".tmp")  # in the build folder
    assert not seen["folder"].exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]
    assert not [p for p in index.rglob("*") if "term" in p.name or p.suffix == ".bin"]

    def fails(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr("hf_ralm.retrieval.bm25.save_bm25s", fails)
    with pytest.raises(KeyboardInterrupt):
        BM25Retriever.build(str(corpus), str(tmp_path / "failed"), words_per_passage=WORDS_PER_PASSAGE,
                            show_progress=False, n_threads=1)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["index"]


@pytest.mark.parametrize("budget", [0, -8, 1.5, "2GB"])
def test_memory_budget_is_a_number_of_bytes(tmp_path, corpus, budget):
    with pytest.raises(SettingError, match="memory_budget must be"):
        BM25Retriever.build(str(corpus), str(tmp_path / "index"), show_progress=False, memory_budget=budget)


def test_passages_table_is_written_in_place_as_save_to_disk_would(tmp_path, corpus, monkeypatch):
    """``Dataset.save_to_disk`` copied the table through a memory map: the whole table (13 GB at 21M passages) in the
    build's resident memory. The table is now written where the index keeps it, and its folder is the one
    ``save_to_disk`` writes."""
    from datasets import Dataset, load_from_disk

    def copies(*args, **kwargs):
        raise AssertionError("the passages' table was copied")

    with monkeypatch.context() as patch:
        patch.setattr(Dataset, "save_to_disk", copies)
        built = BM25Retriever.build(str(corpus), str(tmp_path / "index"), words_per_passage=WORDS_PER_PASSAGE,
                                    show_progress=False, n_threads=1)
    passages = tmp_path / "index" / "passages"
    Dataset.from_file(str(passages / "data-00000-of-00001.arrow")).save_to_disk(str(tmp_path / "saved"))
    for name in ("data-00000-of-00001.arrow", "dataset_info.json"):
        assert (passages / name).read_bytes() == (tmp_path / "saved" / name).read_bytes(), name
    state = [json.loads((folder / "state.json").read_text()) for folder in (passages, tmp_path / "saved")]
    for table_state in state:
        del table_state["_fingerprint"]
    assert state[0] == state[1]
    assert load_from_disk(str(passages))[:] == built.passages[:] == load_from_disk(str(tmp_path / "saved"))[:]
    assert sorted(p.name for p in passages.iterdir()) == ["data-00000-of-00001.arrow", "dataset_info.json",
                                                          "state.json"]
