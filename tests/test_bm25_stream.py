"""The bm25 backend's search of query streams (retrieval/bm25_stream.py) held to the exhaustive loop written from the
formula (hf_ralm.testing.bm25): scores equal (``==``, float64), ids and order equal, on random indexes with many ties
and on an index of real Wikipedia articles with RALM-like query streams (overlapping windows of real text), whatever
the streams do between and within calls."""

from __future__ import annotations

import gzip
import itertools
import json
import math
import random
from collections import Counter

import numpy as np
import pytest

import hf_ralm.retrieval.bm25_stream as bm25_stream
from conftest import SHARED_DATA, require_shared_file, write_jsonl
from hf_ralm.retrieval.analysis import analyze_texts
from hf_ralm.retrieval.bm25 import BM25Retriever
from hf_ralm.retrieval.bm25_stream import BM25Stream
from hf_ralm.testing import reference_bm25_top_k

SCORES = np.array([0.5, 1.0, 1.5, 2.25, 3.0], np.float32)  # few distinct scores: many exact ties


def random_matrix(rng: np.random.Generator, num_docs: int, num_terms: int) -> dict:
    """A CSC score matrix as the index stores it: per term, a random set of passages (some terms in none, one in
    nearly all), each with one of a few scores."""
    data, indices, indptr = [], [], [0]
    for term in range(num_terms):
        share = 0.9 if term == 0 else (0.0 if term % 11 == 5 else rng.uniform(0.001, 0.2))
        docs = np.flatnonzero(rng.random(num_docs) < share)
        indices.append(docs.astype(np.int32))
        data.append(rng.choice(SCORES, size=len(docs)))
        indptr.append(indptr[-1] + len(docs))
    return {"data": np.concatenate(data), "indices": np.concatenate(indices),
            "indptr": np.asarray(indptr, np.int32), "num_docs": num_docs}


def term_stream(rng: random.Random, vocab: list[str], texts: int, length: int, width: int,
                step: int) -> list[list[str]]:
    """Queries as RALM makes them: windows of ``width`` terms every ``step`` of each text, the texts one after the
    other (unknown terms among them); with repeated queries, a query of unknown terms only, and an empty one."""
    queries = []
    for _ in range(texts):
        words = [rng.choice(vocab) if rng.random() > 0.05 else "unknown" for _ in range(length)]
        for end in range(step, length + 1, step):
            queries.append(words[max(0, end - width) : end])
            if rng.random() < 0.1:
                queries.append(list(queries[-1]))  # the same query again
    queries[5:5] = [[], ["unknown", "unknown"], []]
    return queries


def stream_search(stream: BM25Stream, vocab: dict[str, int], queries: list[list[str]], k: int,
                  calls: list[int]) -> list[list[tuple[int, float]]]:
    """``queries`` searched in calls of the sizes ``calls`` (repeated), as ``(id, score)`` lists."""
    found, first = [], 0
    for size in itertools.cycle(calls):
        if first >= len(queries):
            return found
        batch = [dict(Counter(vocab[t] for t in query if t in vocab)) for query in queries[first : first + size]]
        ids, scores, counts = stream.search(batch, k)
        found += [list(zip(i[:n].tolist(), s[:n].tolist())) for i, s, n in zip(ids, scores, counts.tolist())]
        first += size


@pytest.mark.parametrize("seed, num_docs, k, n_threads, calls, tile", [
    (0, 1000, 16, 1, [64], None), (1, 1000, 1, 1, [7, 1, 30], 128), (2, 700, 5, 3, [60], 300),
    (3, 257, 300, 2, [40, 3], None), (4, 3000, 16, 1, [1], 1000),
])
def test_random_streams_are_the_exhaustive_loop(seed, num_docs, k, n_threads, calls, tile):
    """Many ties (a few distinct scores): the order among them is by id; a term repeated in a query counts as often;
    k beyond the matches gives the matches; passages across several blocks of bounds and tiles; forbidden
    passages."""
    rng = np.random.default_rng(seed)
    matrix = random_matrix(rng, num_docs, 60)
    vocab = {f"t{i}": i for i in range(60)}
    queries = term_stream(random.Random(seed), list(vocab), texts=4, length=120, width=12, step=2)
    forbidden = rng.choice(num_docs, size=num_docs // 20, replace=False)
    stream = BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], num_docs, forbidden=forbidden,
                        n_threads=n_threads, tile_size=tile)
    found = stream_search(stream, vocab, queries, k, calls)
    assert found == reference_bm25_top_k(matrix, vocab, queries, k, forbidden)
    assert any(len(row) < k for row in found) and (k > num_docs or any(len(row) == k for row in found))
    assert [] in found


def test_k_changing_between_calls_of_one_stream():
    """Each call's top-k starts from the stream's last top, found for another k: fewer or more passages than this k,
    which then give no floor (fewer) or the worst of them as the floor (more), never a wrong cut."""
    rng = np.random.default_rng(5)
    matrix = random_matrix(rng, 2000, 60)
    vocab = {f"t{i}": i for i in range(60)}
    queries = term_stream(random.Random(5), list(vocab), texts=2, length=80, width=12, step=2)
    stream = BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], 2000)
    first = 0
    for k in itertools.islice(itertools.cycle([16, 3, 40, 16, 1]), 20):
        batch = queries[first : first + 5] or queries[:5]
        found = stream_search(stream, vocab, batch, k, [len(batch)])
        assert found == reference_bm25_top_k(matrix, vocab, batch, k, [])
        first += 5


def test_a_tile_of_no_passages_is_refused():
    """A tile must hold at least one passage: 0 would never advance through the scores."""
    matrix = random_matrix(np.random.default_rng(0), 10, 3)
    with pytest.raises(ValueError, match="tile_size must be at least 1 passage, got 0"):
        BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], 10, tile_size=0)


def test_ties_go_to_the_lower_passage_id_at_the_cut():
    """Equal scores beyond k: the lowest ids are kept, in id order, whatever the stream held before."""
    num_docs = 600
    matrix = {"data": np.full(num_docs, 1.5, np.float32), "indices": np.arange(num_docs, dtype=np.int32)[::-1].copy(),
              "indptr": np.array([0, num_docs], np.int32), "num_docs": num_docs}
    matrix["indices"].sort()
    stream = BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], num_docs, forbidden=np.array([0, 2]))
    ids, scores, counts = stream.search([{0: 1}, {0: 2}, {0: 1}], k=3)
    assert ids.tolist() == [[1, 3, 4]] * 3 and scores.tolist() == [[1.5] * 3, [3.0] * 3, [1.5] * 3]


def test_a_thread_each_takes_a_run_of_the_batch(monkeypatch):
    """A batch over three threads: three runs, each on a stream of its own, kept for the next call."""
    rng = np.random.default_rng(9)
    matrix = random_matrix(rng, 500, 30)
    vocab = {f"t{i}": i for i in range(30)}
    queries = term_stream(random.Random(9), list(vocab), texts=2, length=60, width=10, step=2)
    stream = BM25Stream(matrix["data"], matrix["indices"], matrix["indptr"], 500, n_threads=3)
    runs = []
    run = stream._run
    monkeypatch.setattr(stream, "_run", lambda state, batch, *rest: (runs.append(len(batch)), run(state, batch, *rest)))
    assert stream_search(stream, vocab, queries, 4, [len(queries)]) == reference_bm25_top_k(matrix, vocab, queries, 4)
    assert len(runs) == 3 and sum(runs) == len(queries) and len(stream._states) == 3


def test_float64_sums_of_the_scores_are_exact():
    """The bound on a query's terms: at it, a sum of the largest score cannot lose the smallest one's last bit."""
    data = np.array([0.3, 12.5, 7.0], np.float32)
    stream = BM25Stream(data, np.array([0, 1, 2], np.int32), np.array([0, 1, 2, 3], np.int32), 3)
    limit = stream.exact_terms()
    last_bit = 2.0 ** (math.frexp(0.3)[1] - 24)
    assert float(np.float32(0.3)) % last_bit == 0 and 12.5 % last_bit == 0
    assert limit * 12.5 < 2.0 ** 53 * last_bit <= (limit + 1) * 12.5
    total = math.fsum([12.5] * limit) + float(np.float32(0.3))
    assert total - math.fsum([12.5] * limit) == float(np.float32(0.3))


def test_a_retriever_stems_each_query_word_once_across_calls(tiny_index, monkeypatch):
    """A RALM text's queries repeat most of their words: the retriever remembers each word's term between calls
    (a bounded cache), and the queries' results are those of a fresh retriever."""
    from hf_ralm.retrieval import analysis

    queries = ["Roman emperors ruled Rome", "emperors ruled Rome's provinces", "ruled Rome"]
    expected = BM25Retriever.load(tiny_index["index_dir"], n_threads=1).retrieve(queries, k=3)
    stemmed = []
    word_term = analysis.word_term
    monkeypatch.setattr(analysis, "word_term", lambda word: (stemmed.append(word), word_term(word))[1])
    retriever = BM25Retriever.load(tiny_index["index_dir"], n_threads=1)
    found = [retriever.retrieve([query], k=3)[0] for query in queries]
    assert found == expected
    assert sorted(stemmed) == sorted({"Roman", "emperors", "ruled", "Rome", "Rome's", "provinces"})


def test_without_a_writable_cache_the_kernel_still_compiles(monkeypatch):
    """numba refuses ``cache=True`` where it can write no cache (a read-only install and no cache folder): the kernel
    is compiled in the process then."""
    import numba

    njit = numba.njit

    def no_cache(**options):
        if options.get("cache"):
            raise RuntimeError("cannot cache function: no locator available")
        return njit(**options)

    monkeypatch.setattr(numba, "njit", no_cache)
    add = bm25_stream._jit(lambda a, b: a + b)
    assert add(2, 3) == 5


# --------------------------------------------------------------------------------------------------------------
# Real passages: an index of the sample's first 300 articles, windows of real text as queries
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def articles() -> list[dict]:
    path = require_shared_file(SHARED_DATA / "wikipedia-2015-sample" / "articles.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in itertools.islice(f, 320)]


@pytest.fixture(scope="module")
def real_index(tmp_path_factory, articles) -> str:
    folder = tmp_path_factory.mktemp("real-bm25")
    corpus = write_jsonl(folder / "articles.jsonl", articles[:300])
    BM25Retriever.build(str(corpus), str(folder / "index"), show_progress=False, n_threads=1)
    return str(folder / "index")


def word_windows(text: str, width: int = 24, step: int = 3, count: int = 60) -> list[str]:
    """RALM-like queries: the last ``width`` words every ``step`` words (consecutive ones share most words)."""
    words = text.split()
    return [" ".join(words[max(0, end - width) : end]) for end in range(step, step * count + 1, step)]


def real_queries(articles: list[dict]) -> list[str]:
    """Streams of three texts, one after the other: two articles not in the index and one that is."""
    return (word_windows(articles[305]["text"]) + word_windows(articles[310]["text"])
            + word_windows(articles[7]["text"]) + ["", "the of and", articles[7]["text"][:200]] * 2)


def reference_hits(retriever: BM25Retriever, queries: list[str], k: int) -> list[list[tuple[int, float]]]:
    titles = retriever.passages["title"]
    forbidden = [i for i, title in enumerate(titles) if title in retriever.forbidden_titles]
    return reference_bm25_top_k(retriever.bm25.scores, retriever.bm25.vocab_dict, analyze_texts(queries), k,
                                forbidden)


def hits(found) -> list[list[tuple[int, float]]]:
    return [[(int(p.id), p.score) for p in row] for row in found]


@pytest.mark.parametrize("k, calls", [(16, [64]), (1, [5, 17]), (16, [1])])
def test_real_streams_are_the_exhaustive_loop(real_index, articles, k, calls):
    """The retriever's own path (analysis, search, passages) on real text: scores ``==`` the float64 sum, ids and
    order those of the loop; the stream kept between calls of any size; forbidden titles never returned."""
    forbidden = {articles[7]["title"], articles[12]["title"]}
    retriever = BM25Retriever.load(real_index, forbidden_titles=forbidden, n_threads=1)
    queries = real_queries(articles)
    found, first = [], 0
    for size in itertools.cycle(calls):
        if first >= len(queries):
            break
        found += retriever.retrieve(queries[first : first + size], k=k)
        first += size
    assert hits(found) == reference_hits(retriever, queries, k)
    assert all(p.title not in forbidden for row in found for p in row)
    assert found[-6] == [] and found[-5] == []  # an empty query, and stop words only


def test_real_streams_over_threads_and_k_beyond_the_matches(real_index, articles):
    retriever = BM25Retriever.load(real_index, n_threads=2)
    queries = real_queries(articles) + ["zyzzyva quetzalcoatlus"]
    k = len(retriever) + 10
    found = retriever.retrieve(queries[-40:], k=k)
    assert hits(found) == reference_hits(retriever, queries[-40:], k)
    assert len(found[-1]) < len(retriever)


def test_real_scores_agree_with_bm25s_within_float32_rounding(real_index, articles):
    """bm25s sums the float32 scores in float32: the same passages, its scores within rounding of ours, the order
    the same but where two scores are that close."""
    retriever = BM25Retriever.load(real_index, n_threads=1)
    queries = real_queries(articles)[:90]
    found = retriever.retrieve(queries, k=16)
    ids, scores = retriever.bm25.retrieve(analyze_texts(queries), k=16, show_progress=False, n_threads=1)
    for row, their_ids, their_scores in zip(found, ids, scores):
        ours = np.array([p.score for p in row])
        assert np.allclose(ours, their_scores[: len(row)], rtol=1e-6, atol=0)
        for rank, (passage, theirs) in enumerate(zip(row, their_ids)):
            close = np.isclose(ours, ours[rank], rtol=1e-6, atol=0)  # ours tied with this one within rounding
            assert int(passage.id) == theirs or theirs in {int(row[j].id) for j in np.flatnonzero(close)} or \
                close[-1]  # at the cut, bm25s may keep another passage within rounding


def test_the_real_index_sums_exactly(real_index):
    """The claim behind the exactness: the index's scores span few enough binary orders that a float64 sum of a
    RALM query's terms (32 tokens, and the query before it) is exact."""
    stream = BM25Retriever.load(real_index, n_threads=1)._stream
    data = np.asarray(stream.data)
    smallest, largest = float(data[data > 0].min()), float(data.max())
    bits = math.log2(64 * largest) - (math.frexp(smallest)[1] - 24)
    assert bits < 53 and stream.exact_terms() >= 64
