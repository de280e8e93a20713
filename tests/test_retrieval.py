"""Corpora, passages, the BM25 index (build, load, reuse) and retrieval files."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ARTICLES, write_jsonl
from hf_ralm.errors import IndexFolderError, SavedFolderError
from hf_ralm.retrieval import (
    RETRIEVER_NAMES,
    BM25Retriever,
    Retriever,
    hf_ralm_cache_dir,
    load_retriever,
    load_retriever_from_pretrained,
    read_forbidden_titles,
    retriever_class,
)
from hf_ralm.core.passages import Passage
from hf_ralm.config.passage_template import passage_text
from hf_ralm.retrieval.analysis import ANALYSIS
from hf_ralm.retrieval.index_folder import INDEX_FILE, read_index_info
from hf_ralm.retrieval.corpus import WORDS_PER_PASSAGE, corpus_fingerprint, read_corpus, split_passages
from hf_ralm.retrieval.files import load_retrieval_file, retrieval_records, save_retrieval_file
from hf_ralm.core.windows import plan_windows

# --------------------------------------------------------------------------------------------------------------
# Reading corpora
# --------------------------------------------------------------------------------------------------------------

ROWS = [
    {"id": "x1", "title": "Alpha", "text": "first article text"},
    {"id": 7, "title": "Beta", "text": "second article"},
    {"title": None, "text": "no id here"},
]


def test_read_jsonl(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps(ROWS[0]) + "\n\n" + json.dumps(ROWS[1]) + "\n" + json.dumps(ROWS[2]) + "\n")
    rows = list(read_corpus(str(path)))
    assert rows == [
        {"id": "x1", "title": "Alpha", "text": "first article text"},
        {"id": "7", "title": "Beta", "text": "second article"},  # ids become strings
        {"id": "3", "title": "", "text": "no id here"},  # missing id: line number - 1; missing title: ""
    ]


def test_read_jsonl_gz(tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl.gz", ROWS[:2], gz=True)
    with gzip.open(path, "rb") as f:  # really gzipped
        assert f.read(1) == b"{"
    assert [r["title"] for r in read_corpus(str(path))] == ["Alpha", "Beta"]
    assert [r["id"] for r in read_corpus(str(path))] == ["x1", "7"]


@pytest.mark.parametrize("gz", [False, True])
def test_read_dpr_tsv(tmp_path, gz):
    content = "id\ttext\ttitle\n1\tthe first passage\tFirst\n2\t\"quoted, text\"\tSecond\n3\tuntitled\t\n"
    path = tmp_path / ("psgs.tsv.gz" if gz else "psgs.tsv")
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(content)
    else:
        path.write_text(content)
    assert list(read_corpus(str(path))) == [
        {"id": "1", "title": "First", "text": "the first passage"},
        {"id": "2", "title": "Second", "text": "quoted, text"},
        {"id": "3", "title": "", "text": "untitled"},
    ]


def test_read_missing_corpus_file(tmp_path):
    missing = str(tmp_path / "nope.jsonl")
    with pytest.raises(FileNotFoundError) as info:
        list(read_corpus(missing))
    message = str(info.value)
    assert "Corpus file not found" in message and missing in message
    assert "JSONL" in message and "TSV" in message


def test_read_corpus_row_without_text(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(json.dumps({"id": 1, "text": "ok"}) + "\n" + json.dumps({"id": 2, "body": "x"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: corpus rows need a 'text' field, got \['body', 'id'\]"):
        list(read_corpus(str(path)))


# --------------------------------------------------------------------------------------------------------------
# Passages
# --------------------------------------------------------------------------------------------------------------


def test_split_passages_100_words():
    words = [f"w{i}" for i in range(250)]
    article = {"id": "42", "title": "Long", "text": " ".join(words[:120]) + "\n\n  " + " ".join(words[120:])}
    passages = list(split_passages([article]))
    assert WORDS_PER_PASSAGE == 100
    assert [len(p["text"].split()) for p in passages] == [100, 100, 50]
    # consecutive and non-overlapping: together they are exactly the article's words, whitespace normalised
    assert " ".join(p["text"] for p in passages).split() == words
    assert passages[1]["text"].split()[0] == "w100"
    assert all(p["title"] == "Long" and p["source_id"] == "42" for p in passages)
    assert set(passages[0]) == {"title", "text", "source_id"}


def test_split_passages_several_articles_and_sizes():
    articles = [{"id": 1, "title": "A", "text": "a b c d e"}, {"id": "2", "title": "B", "text": "f g"},
                {"id": "3", "title": "C", "text": "   "}]
    out = list(split_passages(articles, words_per_passage=2))
    assert out == [
        {"title": "A", "text": "a b", "source_id": "1"},
        {"title": "A", "text": "c d", "source_id": "1"},
        {"title": "A", "text": "e", "source_id": "1"},
        {"title": "B", "text": "f g", "source_id": "2"},
    ]  # an empty article gives no passage


def test_passage_text_and_forbidden_titles(tmp_path):
    assert passage_text("Title", "body") == "Title\nbody"
    assert passage_text("", "body") == "body"
    assert passage_text(None, "body") == "body"
    assert passage_text("T", "b", "{title}: {text}") == "T: b"
    path = tmp_path / "forbidden.txt"
    path.write_text("Nero\n\n  American Beauty (1999 film)  \n")
    assert read_forbidden_titles(str(path)) == frozenset({"Nero", "American Beauty (1999 film)"})
    assert read_forbidden_titles(None) == frozenset()


# --------------------------------------------------------------------------------------------------------------
# BM25
# --------------------------------------------------------------------------------------------------------------


def test_bm25_build_and_load(tmp_path, corpus_file):
    index_dir = tmp_path / "index"
    built = BM25Retriever.build(str(corpus_file), str(index_dir), show_progress=False)
    assert len(built) == len(ARTICLES)  # every tiny article is one passage
    assert isinstance(built, Retriever)
    assert not (tmp_path / "index.tmp").exists()  # the temporary folder was renamed
    info = read_index_info(str(index_dir))
    assert info["retriever"] == "bm25"
    assert info["num_passages"] == len(ARTICLES)
    assert info["fingerprint"] == corpus_fingerprint([str(corpus_file)], WORDS_PER_PASSAGE)
    assert info["corpus"] == [os.path.abspath(corpus_file)]
    assert (info["k1"], info["b"]) == (0.9, 0.4)

    loaded = BM25Retriever.load(str(index_dir))
    for retriever in (built, loaded):
        [top] = retriever.retrieve(["the emperor augustus and the senate of rome"], k=1)
        assert len(top) == 1
        assert top[0].title == "Rome"
        assert top[0].text == ARTICLES[0]["text"]
        assert top[0].score > 0
    assert built.retrieve(["guitar singer album"], k=1) == loaded.retrieve(["guitar singer album"], k=1)


def test_streamed_bm25_build_gives_the_scores_of_bm25s(tmp_path):
    """The streamed build's score matrix is bm25s's own (bm25s.BM25.index over every passage's terms), score for
    score to the bit, term by term (term ids are numbered differently), and so is what it retrieves."""
    import bm25s
    import numpy as np

    from hf_ralm.retrieval.analysis import analyze_texts
    from hf_ralm.retrieval.bm25 import BM25_PARAMS

    rows = ARTICLES * 3 + [{"id": f"x{i}", "title": f"Extra {i}", "text": " ".join(
        ARTICLES[i % len(ARTICLES)]["text"].split()[i % 7:] * (1 + i % 3))} for i in range(40)]
    corpus = write_jsonl(tmp_path / "corpus.jsonl", rows)
    ours = BM25Retriever.build(str(corpus), str(tmp_path / "index"), words_per_passage=12, show_progress=False)
    texts = [passage_text(p["title"], p["text"]) for p in ours.passages]
    theirs = bm25s.BM25(**BM25_PARAMS)
    theirs.index(analyze_texts(texts), show_progress=False)
    mine = ours.bm25
    assert set(mine.vocab_dict) == set(theirs.vocab_dict) and mine.scores["num_docs"] == len(texts)
    for term, j in theirs.vocab_dict.items():
        if term == "":
            continue
        i = mine.vocab_dict[term]
        for key in ("indices", "data"):
            got = mine.scores[key][mine.scores["indptr"][i] : mine.scores["indptr"][i + 1]]
            want = theirs.scores[key][theirs.scores["indptr"][j] : theirs.scores["indptr"][j + 1]]
            assert np.array_equal(got, want), (term, key)
    queries = ["the emperor of rome", "sailor boat sea", "band concert song", "a comet seen by the telescope"]
    want_ids, want_scores = theirs.retrieve(analyze_texts(queries), k=5, show_progress=False)
    found = ours.retrieve(queries, k=5)
    # the same scores rank by rank (bm25s sums in float32); among equal scores (the articles are there three times)
    # bm25s's order is its own, ours is by id: the same passages at each score
    for row, ids, scores in zip(found, want_ids, want_scores):
        kept = scores > 0
        assert np.allclose([p.score for p in row], scores[kept], rtol=1e-6, atol=0)
        ours_by_score, theirs_by_score = {}, {}
        for passage, i, score in zip(row, ids[kept], scores[kept]):
            ours_by_score.setdefault(round(passage.score, 4), set()).add(int(passage.id))
            theirs_by_score.setdefault(round(float(score), 4), set()).add(int(i))
        last = min(ours_by_score, default=None)  # the lowest score kept may have more passages than fit
        assert {s: ids for s, ids in ours_by_score.items() if s != last} == {
            s: ids for s, ids in theirs_by_score.items() if s != last}


@pytest.mark.parametrize(
    "query,title",
    [
        ("the sailor and the ship in a storm", "Sailing"),
        ("guitar singer album", "Music"),
        ("telescope comet galaxy", "Astronomy"),
        ("the knight served the queen", "Kingdom"),
    ],
)
def test_bm25_ranking(tiny_index, query, title):
    [passages] = tiny_index["retriever"].retrieve([query], k=3)
    assert passages[0].title == title
    scores = [p.score for p in passages]
    assert scores == sorted(scores, reverse=True)
    assert all(s > 0 for s in scores)


def test_bm25_batched_retrieve_and_k(tiny_index):
    retriever = tiny_index["retriever"]
    queries = ["emperor nero", "the planet moon sun", "castle throne"]
    batched = retriever.retrieve(queries, k=2)
    assert len(batched) == 3
    assert [r[0].title for r in batched] == ["Rome", "Astronomy", "Kingdom"]
    assert batched == [retriever.retrieve([q], k=2)[0] for q in queries]
    # k larger than the index: at most the passages that match
    [many] = retriever.retrieve(["the emperor"], k=50)
    assert 1 <= len(many) <= len(retriever)
    assert len({p.id for p in many}) == len(many)
    assert retriever.retrieve([], k=1) == []


def test_search_threads(tiny_index, monkeypatch):
    """Threads change nothing in what is found; by default, the CPUs this process may use (a Slurm allocation,
    not the machine's count)."""
    from hf_ralm.utils.cpus import available_cpus

    queries = ["the emperor of rome", "the sailor and the sea", "a comet", "the king sat on the throne"] * 3
    one = BM25Retriever.load(tiny_index["index_dir"], n_threads=1)
    assert BM25Retriever.load(tiny_index["index_dir"], n_threads=2).retrieve(queries, k=3) == one.retrieve(queries, k=3)
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "1")
    assert available_cpus() == 1 and BM25Retriever.load(tiny_index["index_dir"]).n_threads == 1


def test_bm25_zero_score_queries_return_nothing(tiny_index):
    retriever = tiny_index["retriever"]
    # unknown words, and only stop words (removed from queries): no passage has a positive score
    assert retriever.retrieve(["zebra xylophone", "the of and a", ""], k=3) == [[], [], []]


def test_bm25_forbidden_titles(tiny_index):
    retriever = BM25Retriever.load(tiny_index["index_dir"], forbidden_titles={"Rome", "Kingdom"})
    results = retriever.retrieve(
        ["emperor senate rome augustus", "king queen castle", "emperor and the sailor and the king"], k=5
    )
    assert results[0] == [] and results[1] == []  # only forbidden articles match
    assert results[2] and all(p.title not in {"Rome", "Kingdom"} for p in results[2])
    assert results[2][0].title == "Sailing"
    assert retriever.config()["forbidden_titles"] == ["Kingdom", "Rome"]
    # the unrestricted retriever does return them
    assert tiny_index["retriever"].retrieve(["king queen castle"], k=1)[0][0].title == "Kingdom"


def test_bm25_config(tiny_index):
    config = tiny_index["retriever"].config()
    assert config == {"type": "bm25", "index_dir": os.path.abspath(tiny_index["index_dir"]), "forbidden_titles": []}


def test_bm25_save_pretrained_round_trip(tiny_index, tmp_path):
    tiny_index["retriever"].save_pretrained(str(tmp_path))
    with open(tmp_path / "retriever_config.json") as f:
        written = json.load(f)  # an index outside the folder: its absolute path and identity
    assert {k: v for k, v in written.items() if k != "index_identity"} == tiny_index["retriever"].config()
    assert load_retriever_from_pretrained(str(tmp_path)).config() == tiny_index["retriever"].config()  # read there
    with open(tmp_path / "retriever_config.json", "w") as f:
        json.dump(tiny_index["retriever"].config(), f)  # no identity (an older save): followed only when given
    with pytest.raises(SavedFolderError, match="leads outside"):
        load_retriever_from_pretrained(str(tmp_path))
    again = load_retriever_from_pretrained(str(tmp_path), forbidden_titles=["Kingdom"],
                                           index_dir=tiny_index["index_dir"])
    assert isinstance(again, BM25Retriever) and again.forbidden_titles == {"Kingdom"}
    assert again.retrieve(["king queen castle"], k=3)[0] == []  # only the forbidden article matches
    assert again.retrieve(["emperor senate rome augustus"], k=1)[0][0].title == "Rome"


def test_bm25_build_splits_passages(tmp_path):
    article = {"id": "9", "title": "Words", "text": " ".join(f"tok{i}" for i in range(25))}
    corpus = write_jsonl(tmp_path / "c.jsonl", [article])
    retriever = BM25Retriever.build(str(corpus), str(tmp_path / "idx"), words_per_passage=10, show_progress=False)
    assert len(retriever) == 3
    assert retriever.passages["source_id"] == ["9", "9", "9"]
    [found] = retriever.retrieve(["tok22"], k=1)
    assert found[0].text == "tok20 tok21 tok22 tok23 tok24"
    assert found[0].title == "Words"


def test_bm25_build_from_rows_keeps_passages(tmp_path):
    rows = [{"id": "p1", "title": "One", "text": "alpha beta gamma delta"}, {"id": "p2", "title": "", "text": "omega"}]
    retriever = BM25Retriever.build(rows, str(tmp_path / "idx"), words_per_passage=0, show_progress=False)
    assert len(retriever) == 2
    assert retriever.info["fingerprint"] is None and retriever.info["corpus"] is None
    assert retriever.retrieve(["omega"], k=1)[0][0].text == "omega"
    assert retriever.retrieve(["gamma"], k=1)[0][0].title == "One"


def test_bm25_empty_corpus(tmp_path):
    corpus = write_jsonl(tmp_path / "empty.jsonl", [{"id": 1, "title": "T", "text": "   "}])
    with pytest.raises(ValueError, match="no passages"):
        BM25Retriever.build(str(corpus), str(tmp_path / "idx"), show_progress=False)
    assert not (tmp_path / "idx").exists()


def test_bm25_load_missing_index(tmp_path):
    with pytest.raises(FileNotFoundError, match="No hf-ralm bm25 index in .*hf-ralm index --retriever bm25"):
        BM25Retriever.load(str(tmp_path / "none"))


def test_build_or_load_reuses_and_rebuilds(tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    index_dir = tmp_path / "index"
    first = BM25Retriever.build_or_load(str(corpus), str(index_dir))
    info1 = json.loads((index_dir / INDEX_FILE).read_text())
    assert info1["fingerprint"] == corpus_fingerprint([str(corpus)], WORDS_PER_PASSAGE)
    assert len(first) == len(ARTICLES)

    # same corpus: the folder is reused as it is (a marker file survives, the index file is untouched)
    (index_dir / "marker").write_text("kept")
    mtime = (index_dir / INDEX_FILE).stat().st_mtime_ns
    again = BM25Retriever.build_or_load(str(corpus), str(index_dir))
    assert (index_dir / "marker").exists()
    assert (index_dir / INDEX_FILE).stat().st_mtime_ns == mtime
    assert len(again) == len(ARTICLES)

    # a changed corpus (same path): the marker, which hf-ralm did not write, stops the rebuild and is kept; without
    # it, rebuilt, new fingerprint, new content retrievable
    extra = {"id": "a6", "title": "Volcano", "text": "lava erupted from the volcano crater"}
    write_jsonl(corpus, ARTICLES + [extra])
    with pytest.raises(IndexFolderError, match="holds marker"):
        BM25Retriever.build_or_load(str(corpus), str(index_dir))
    assert (index_dir / "marker").read_text() == "kept"
    (index_dir / "marker").unlink()
    rebuilt = BM25Retriever.build_or_load(str(corpus), str(index_dir))
    info2 = json.loads((index_dir / INDEX_FILE).read_text())
    assert info2["fingerprint"] != info1["fingerprint"]
    assert info2["fingerprint"] == corpus_fingerprint([str(corpus)], WORDS_PER_PASSAGE)
    assert len(rebuilt) == len(ARTICLES) + 1
    assert rebuilt.retrieve(["volcano lava"], k=1)[0][0].title == "Volcano"

    # another passage size is another index
    resized = BM25Retriever.build_or_load(str(corpus), str(index_dir), words_per_passage=5)
    assert json.loads((index_dir / INDEX_FILE).read_text())["words_per_passage"] == 5
    assert len(resized) > len(ARTICLES) + 1

    # no corpus: load what is there
    assert len(BM25Retriever.build_or_load(None, str(index_dir))) == len(resized)


CONCURRENT_BUILD = """import sys, time
from hf_ralm.retrieval import BM25Retriever
build = BM25Retriever.build.__func__


def slow_build(cls, *args, **kwargs):  # slow enough for the other process to come while it builds
    with open(sys.argv[3], "a") as log:
        log.write("built\\n")
    time.sleep(1.5)
    return build(cls, *args, **kwargs)


BM25Retriever.build = classmethod(slow_build)
print(len(BM25Retriever.build_or_load(sys.argv[1], sys.argv[2])))
"""


def test_concurrent_builds_of_one_folder_build_once(tmp_path):
    """Two processes build_or_load one folder at once: one builds, the other waits on the lock, then opens it."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    script, log = tmp_path / "build.py", tmp_path / "builds.log"
    script.write_text(CONCURRENT_BUILD)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    workers = [subprocess.Popen([sys.executable, str(script), str(corpus), str(tmp_path / "index"), str(log)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(2)]
    outs = [worker.communicate(timeout=300) for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outs
    assert [out.strip() for out, _ in outs] == [str(len(ARTICLES))] * 2
    assert log.read_text() == "built\n"  # once
    assert any("Waiting for the build of" in err for _, err in outs)


def test_bm25_index_of_another_analysis_is_refused_then_rebuilt(tmp_path):
    """An index records its text analysis; one built with another (here the earlier regex + PyStemmer analysis) is
    refused on load, with how to rebuild it, and rebuilt when the corpus is given."""
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    index_dir = tmp_path / "index"
    BM25Retriever.build(str(corpus), str(index_dir), show_progress=False)
    info = json.loads((index_dir / INDEX_FILE).read_text())
    assert {key: info[key] for key in ANALYSIS} == ANALYSIS
    old = {key: value for key, value in info.items() if key not in ANALYSIS}
    old.update({"token_pattern": r"(?u)\b\w+\b", "stemmer": "porter", "stopwords": "en"})
    (index_dir / INDEX_FILE).write_text(json.dumps(old))
    refused = r"older hf-ralm: its hf_ralm_index.json records no tokenizer, filters. Rebuild it: `hf-ralm index"
    with pytest.raises(IndexFolderError, match=refused):
        BM25Retriever.load(str(index_dir))
    with pytest.raises(IndexFolderError, match=refused):
        BM25Retriever.build_or_load(None, str(index_dir))  # no corpus: nothing to rebuild from
    # recorded, but with other values (an analysis changed again): refused too
    (index_dir / INDEX_FILE).write_text(json.dumps({**old, **ANALYSIS, "stemmer": "porter"}))
    with pytest.raises(IndexFolderError, match=r"built with other settings \(\{'stemmer': 'porter'\}"):
        BM25Retriever.load(str(index_dir))
    rebuilt = BM25Retriever.build_or_load(str(corpus), str(index_dir))
    assert {key: rebuilt.info[key] for key in ANALYSIS} == ANALYSIS and "token_pattern" not in rebuilt.info
    assert rebuilt.retrieve(["Rome's emperors"], k=1)[0][0].title == "Rome"


def test_build_or_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no --corpus"):
        BM25Retriever.build_or_load(None, str(tmp_path / "idx"))
    with pytest.raises(FileNotFoundError, match="Corpus file not found: .*missing.jsonl"):
        BM25Retriever.build_or_load(str(tmp_path / "missing.jsonl"), str(tmp_path / "idx"))


def test_corpus_fingerprint(tmp_path):
    a = write_jsonl(tmp_path / "a.jsonl", ARTICLES[:2])
    b = write_jsonl(tmp_path / "b.jsonl", ARTICLES[:2])
    c = write_jsonl(tmp_path / "c.jsonl", ARTICLES[:3])
    assert corpus_fingerprint([str(a)], 100) == corpus_fingerprint([str(b)], 100)  # content, not path
    assert corpus_fingerprint([str(a)], 100) != corpus_fingerprint([str(c)], 100)
    assert corpus_fingerprint([str(a)], 100) != corpus_fingerprint([str(a)], 50)


# --------------------------------------------------------------------------------------------------------------
# load_retriever
# --------------------------------------------------------------------------------------------------------------


class ListRetriever:
    def retrieve(self, queries, k=1):
        return [[Passage("1", "T", q)] for q in queries]


def test_load_retriever(tiny_index):
    assert load_retriever(None) is None
    assert load_retriever("none") is None
    custom = ListRetriever()
    assert load_retriever(custom) is custom
    by_name = load_retriever("bm25", index_dir=tiny_index["index_dir"], corpus=tiny_index["corpus"])
    assert isinstance(by_name, BM25Retriever) and len(by_name) == len(ARTICLES)
    by_dict = load_retriever({"type": "bm25", "index_dir": tiny_index["index_dir"], "forbidden_titles": ["Rome"]})
    assert by_dict.forbidden_titles == {"Rome"}
    assert by_dict.retrieve(["emperor senate"], k=1) == [[]]


def test_load_retriever_errors():
    with pytest.raises(ValueError, match="needs an index folder"):
        load_retriever("bm25")
    with pytest.raises(ValueError, match="Unknown retriever 'dpr'; choose one of none, bm25"):
        load_retriever("dpr")
    with pytest.raises(TypeError, match="retriever takes a retriever's name"):
        load_retriever(42)


# --------------------------------------------------------------------------------------------------------------
# The registry, the base class, options
# --------------------------------------------------------------------------------------------------------------


def test_registry():
    assert RETRIEVER_NAMES == ("none", "bm25", "lucene", "dense", "hybrid")
    assert retriever_class("bm25") is BM25Retriever
    for name in RETRIEVER_NAMES[1:]:  # the optional backends' modules import without their extras
        cls = retriever_class(name)
        assert issubclass(cls, Retriever) and cls.name == name
    with pytest.raises(ValueError, match="Unknown retriever 'dpr'; choose one of none, bm25, lucene, dense, hybrid"):
        retriever_class("dpr")
    with pytest.raises(ValueError, match="'none' is no retriever.*choose one of bm25"):
        retriever_class("none")


def test_build_or_load_options(tiny_index):
    index_dir, corpus = tiny_index["index_dir"], tiny_index["corpus"]
    with pytest.raises(ValueError, match="The bm25 retriever has no option 'encoder'; its options are: n_threads"):
        BM25Retriever.build_or_load(corpus, index_dir, encoder="minilm")
    with pytest.raises(ValueError, match="no option 'encoder'"):
        load_retriever("bm25", index_dir=index_dir, encoder="minilm")
    # None means the default: accepted by every backend
    assert len(BM25Retriever.build_or_load(corpus, index_dir, encoder=None)) == len(ARTICLES)
    assert len(load_retriever("bm25", index_dir=index_dir, encoder=None)) == len(ARTICLES)


def test_from_config(tiny_index, tmp_path):
    config = tiny_index["retriever"].config()
    again = BM25Retriever.from_config(config, forbidden_titles=["Rome"])
    assert again.forbidden_titles == {"Rome"} and again.retrieve(["emperor senate"], k=1) == [[]]
    assert BM25Retriever.from_config(config, forbidden_titles=None).forbidden_titles == frozenset()  # None keeps
    with pytest.raises(ValueError, match="BM25Retriever cannot rebuild a 'dense' retriever"):
        BM25Retriever.from_config({**config, "type": "dense"})
    with pytest.raises(ValueError, match="needs a 'type'"):
        load_retriever({"index_dir": tiny_index["index_dir"]})


# --------------------------------------------------------------------------------------------------------------
# The default index folder (hf-ralm's cache)
# --------------------------------------------------------------------------------------------------------------


def test_hf_ralm_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_ralm_cache_dir() == str(tmp_path / "hf" / "hf-ralm")
    monkeypatch.delenv("HF_HOME")
    assert hf_ralm_cache_dir() == str(tmp_path / "xdg" / "hf-ralm")
    monkeypatch.setenv("XDG_CACHE_HOME", "")  # empty counts as unset
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert hf_ralm_cache_dir() == str(tmp_path / "home" / ".cache" / "hf-ralm")


def test_build_or_load_without_index_dir(corpus_file, tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    fingerprint = corpus_fingerprint([str(corpus_file)], WORDS_PER_PASSAGE)
    expected = tmp_path / "hf" / "hf-ralm" / "indexes" / f"bm25-{fingerprint[:16]}"

    with caplog.at_level("INFO", logger="hf_ralm"):
        built = BM25Retriever.build_or_load(str(corpus_file))
    assert built.index_dir == str(expected) and read_index_info(str(expected))["fingerprint"] == fingerprint
    assert f"hf-ralm: the bm25 index is in {expected}" in caplog.messages  # one logged line (info)
    assert built.retrieve(["king queen castle"], k=1)[0][0].title == "Kingdom"

    mtime = (expected / INDEX_FILE).stat().st_mtime_ns  # the same corpus finds its index again
    again = load_retriever("bm25", corpus=str(corpus_file))
    assert again.index_dir == str(expected) and (expected / INDEX_FILE).stat().st_mtime_ns == mtime
    other = BM25Retriever.build_or_load(str(corpus_file), words_per_passage=5)  # another passage size: another one
    assert other.index_dir != str(expected) and len(other) > len(built)

    with pytest.raises(ValueError, match=r"needs an index folder \(index_dir=, --index-dir\), or a corpus"):
        BM25Retriever.build_or_load(None)


# --------------------------------------------------------------------------------------------------------------
# Saved retrievers: relative index paths, save_index
# --------------------------------------------------------------------------------------------------------------


def test_save_pretrained_with_index_moves(corpus_file, tmp_path):
    index_dir = tmp_path / "index-elsewhere"
    retriever = BM25Retriever.build_or_load(str(corpus_file), str(index_dir), forbidden_titles={"Music"})
    saved = tmp_path / "saved"
    retriever.save_pretrained(saved, save_index=True)
    config = json.loads((saved / "retriever_config.json").read_text())
    assert config == {"type": "bm25", "index_dir": "index", "forbidden_titles": ["Music"]}  # relative: inside
    assert read_index_info(str(saved / "index")) == read_index_info(str(index_dir))
    assert not (saved / "index.tmp").exists()

    moved = tmp_path / "somewhere" / "else"
    shutil.move(str(saved), str(moved))
    shutil.rmtree(index_dir)  # only the copy is left
    again = load_retriever_from_pretrained(str(moved))
    assert isinstance(again, BM25Retriever) and again.index_dir == str(moved / "index")
    assert again.forbidden_titles == {"Music"}
    queries = ["king queen castle", "the band played a song", "emperor senate"]
    assert again.retrieve(queries, k=2) == retriever.retrieve(queries, k=2)

    # saved again where its index already is: recorded relatively, nothing copied over itself
    again.save_pretrained(moved, save_index=True)
    assert json.loads((moved / "retriever_config.json").read_text())["index_dir"] == "index"
    again.save_pretrained(tmp_path / "plain")  # an index outside the folder: its absolute path
    assert json.loads((tmp_path / "plain" / "retriever_config.json").read_text())["index_dir"] == str(moved / "index")


def test_saved_retriever_without_its_index(corpus_file, tmp_path):
    saved = tmp_path / "saved"
    retriever = BM25Retriever.build_or_load(str(corpus_file), str(saved / "index"))
    retriever.save_pretrained(saved)  # the index inside the folder: recorded relatively
    shutil.rmtree(saved / "index")
    with pytest.raises(FileNotFoundError, match=r"uses the index .*index'.*save_pretrained\(dir, save_index=True\)"):
        load_retriever_from_pretrained(str(saved))
    rebuilt = load_retriever_from_pretrained(str(saved), corpus=str(corpus_file))  # or rebuild it there
    assert len(rebuilt) == len(ARTICLES) and rebuilt.index_dir == str(saved / "index")


# --------------------------------------------------------------------------------------------------------------
# Retrieval files
# --------------------------------------------------------------------------------------------------------------


def _passages_for(windows):
    return [
        [] if w.index == 0 else
        [Passage(str(w.index), f"Title {w.index}", f"text of {w.index} ünïcode", 1.5 * w.index),
         Passage("x", "", "second", 0.25)] if w.index % 3 else []
        for w in windows
    ]


def test_retrieval_file_round_trip(tmp_path):
    windows = plan_windows(30, 10, 4)
    queries = [None] + [f"query {w.index}" for w in windows[1:]]
    futures = [f"future {w.index}" for w in windows]
    passages = _passages_for(windows)
    records = retrieval_records(windows, queries, futures, passages)
    assert len(records) == len(windows)
    assert records[0] == {"begin_location": 0, "end_location": 10, "future": "future 0", "query": None,
                          "retrieved_docs": []}
    assert records[1]["begin_location"] == windows[1].prev_end == 10
    assert records[1]["end_location"] == windows[1].end == 14
    assert records[1]["retrieved_docs"][0] == {"id": "1", "title": "Title 1", "text": "text of 1 ünïcode",
                                               "score": 1.5}
    path = tmp_path / "sub" / "retrieval.json"
    save_retrieval_file(str(path), records)
    assert json.loads(path.read_text(encoding="utf-8")) == records
    assert "ünïcode" in path.read_text(encoding="utf-8")  # not escaped
    assert [p.name for p in path.parent.iterdir()] == ["retrieval.json"]  # no temporary file left
    assert load_retrieval_file(str(path), windows).passages == passages


def test_retrieval_file_in_the_papers_format(tmp_path):
    """Files from the paper's prepare_retrieval_data.py: docs with only "text" and "score" (no title, no id)."""
    windows = plan_windows(20, 8, 4)
    records = [
        {"begin_location": w.prev_end, "end_location": w.end, "future": "f", "query": None if w.index == 0 else "q",
         "retrieved_docs": [] if w.index == 0 else [{"text": f"doc {w.index}", "score": 3},
                                                    {"text": "other", "score": 1.0}]}
        for w in windows
    ]
    del records[0]["retrieved_docs"]  # a record may lack the key altogether
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(records))
    passages = load_retrieval_file(str(path), windows).passages
    assert passages[0] == []
    assert passages[1] == [Passage("", "", "doc 1", 3.0), Passage("", "", "other", 1.0)]
    assert all(isinstance(p.score, float) for p in passages[2])
    # an explicit null title is fine too
    records[1]["retrieved_docs"][0]["title"] = None
    path.write_text(json.dumps(records))
    assert load_retrieval_file(str(path), windows).passages[1][0].title == ""


def test_retrieval_file_mismatches(tmp_path):
    windows = plan_windows(30, 10, 4)
    records = retrieval_records(windows, [None] * len(windows), [""] * len(windows), [[] for _ in windows])
    path = tmp_path / "r.json"
    save_retrieval_file(str(path), records)

    other = plan_windows(30, 10, 2)  # another stride: another number of windows
    with pytest.raises(ValueError, match=rf"has {len(windows)} windows but this evaluation has {len(other)}.*"
                                         "evaluate with retrieval_stride=4;"):
        load_retrieval_file(str(path), other)

    same_count = plan_windows(29, 10, 4)  # same number of windows, other locations
    assert len(same_count) == len(windows)
    with pytest.raises(ValueError, match=r"window \d+ covers \[\d+, \d+\) in the file but \[\d+, \d+\) here"):
        load_retrieval_file(str(path), same_count)

    with pytest.raises(FileNotFoundError, match="Retrieval file not found"):
        load_retrieval_file(str(tmp_path / "missing.json"), windows)
