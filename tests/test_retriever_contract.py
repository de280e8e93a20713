"""The retriever contract (issue 41): a backend is one class and one registry line.

* A remote backend (a stand-in for a search service or a vector database, defined here, outside hf-ralm, and
  registered with ``register_retriever``) keeps no local folder: ``from_pretrained(retriever="fake-remote",
  retriever_options=...)`` opens it, ``evaluate_perplexity`` records its identity (its own ``index_record``) and
  resumes on it, and ``save_pretrained`` / ``from_pretrained`` rebuild it, with no ``index_dir`` anywhere and nothing
  written to hf-ralm's cache.
* A backend's options are one mapping, checked by the backend: one it does not take is refused in one line naming
  the backend and the options it takes.
* A backend with a local index writes only its files (``_write_index``) and opens its folder (``_load``): the
  template build-or-load finds, locks, reuses, rebuilds and refuses folders for it.
* ``identity()`` is what ``retriever_identity`` gave before it was a method, key for key.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass

import pytest

from conftest import ARTICLES, EVAL_TEXT, ON_TEST_DEVICE, write_jsonl
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.errors import IndexFolderError, SettingError
from hf_ralm.core.passages import Passage
from hf_ralm.runs.fingerprints import titles_fingerprint
from hf_ralm.retrieval import (
    RETRIEVER_NAMES,
    BM25Retriever,
    LocalIndexRetriever,
    Retriever,
    RetrieverOptions,
    load_retriever,
    register_retriever,
    retriever_class,
    retriever_identity,
    retriever_names,
)
from hf_ralm.retrieval.index_folder import INDEX_FILE, read_index_info

SERVICE = {"wiki": ARTICLES, "music": [a for a in ARTICLES if a["title"] == "Music"]}
"""What the remote service holds: its collections of documents, by name."""


@dataclass(frozen=True)
class FakeRemoteOptions(RetrieverOptions):
    collection: str = "wiki"

    def __post_init__(self):
        if self.collection not in SERVICE:
            raise ValueError(f"The fake-remote service has no collection {self.collection!r}; it has "
                             f"{', '.join(SERVICE)}.")


class FakeRemoteRetriever(Retriever):
    """Word-overlap search over a collection of the in-memory "service": no index folder, no corpus files."""

    name = "fake-remote"
    Options = FakeRemoteOptions

    def __init__(self, collection: str, forbidden_titles=frozenset()):
        self.collection = collection
        self.forbidden_titles = frozenset(forbidden_titles)
        self.requests = 0  # batches of queries sent to the service

    @classmethod
    def _open(cls, options: FakeRemoteOptions) -> "FakeRemoteRetriever":
        return cls(options.collection, options.forbidden_titles)

    def retrieve(self, queries, k=1):
        self.requests += 1
        documents = list(enumerate(SERVICE[self.collection]))
        results = []
        for query in queries:
            words = set(query.split())
            scored = [(len(words & set(doc["text"].split())), i, doc) for i, doc in documents
                      if doc["title"] not in self.forbidden_titles]
            best = sorted((hit for hit in scored if hit[0] > 0), key=lambda hit: (-hit[0], hit[1]))[:k]
            results.append([Passage(str(i), doc["title"], doc["text"], float(score)) for score, i, doc in best])
        return results

    def index_record(self):
        documents = SERVICE[self.collection]
        digest = hashlib.sha256(json.dumps(documents, sort_keys=True).encode()).hexdigest()
        return {"fingerprint": digest, "collection": self.collection, "num_passages": len(documents)}

    def config(self):
        return {**super().config(), "collection": self.collection}


@pytest.fixture(autouse=True)
def fake_remote(retriever_registry):
    """The one registry line, for each test here (the registry is hf-ralm's own again afterwards)."""
    return register_retriever(FakeRemoteRetriever)


RALM_SETTINGS = {"max_length": 16, "retrieval_stride": 4, "query_length": 8, "max_doc_tokens": 8, **ON_TEST_DEVICE}


@pytest.fixture()
def cache(tmp_path, monkeypatch):
    """hf-ralm's cache for the test (where a local index and the build locks would go)."""
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    return tmp_path / "hf-home" / "hf-ralm"


def evaluate(model, output_dir):
    return model.evaluate_perplexity(EVAL_TEXT, show_progress=False, chunk_size=4, output_dir=str(output_dir))


def test_a_remote_backend_runs_saves_and_reloads_without_a_folder(tiny_model_dir, tmp_path, cache):
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="fake-remote",
                                                    retriever_options={"collection": "wiki"},
                                                    forbidden_titles=["Sailing"], **RALM_SETTINGS)
    retriever = model.retriever
    assert isinstance(retriever, FakeRemoteRetriever) and retriever.forbidden_titles == {"Sailing"}
    fingerprint = hashlib.sha256(json.dumps(ARTICLES, sort_keys=True).encode()).hexdigest()
    identity = {"retriever": "fake-remote", "corpus_fingerprint": fingerprint,
                "index": {"collection": "wiki", "num_passages": len(ARTICLES)},
                "forbidden_titles": titles_fingerprint({"Sailing"})}
    assert retriever.identity() == identity and retriever_identity(retriever) == identity

    first = evaluate(model, tmp_path / "run")
    assert retriever.requests > 0
    settings = json.loads((tmp_path / "run" / "windows" / "settings.json").read_text())
    assert settings["retriever"] == identity
    in_context = {p.title for window in first.in_context() for p in window}
    assert in_context and "Sailing" not in in_context  # the service's passages, filtered by the backend
    assert settings["retriever"] == first.retrieval_settings["retriever"]

    model.save_pretrained(tmp_path / "saved")
    saved = json.loads((tmp_path / "saved" / "retriever_config.json").read_text())
    assert saved == {"type": "fake-remote", "forbidden_titles": ["Sailing"], "collection": "wiki"}
    card = (tmp_path / "saved" / "README.md").read_text()
    assert "- index: the fake-remote backend's own, not a local folder" in card and "index_dir" not in card
    model.save_pretrained(tmp_path / "saved-with-index", save_index=True)  # nothing local to copy
    assert not (tmp_path / "saved-with-index" / "index").exists()

    again = RetrievalAugmentedModel.from_pretrained(str(tmp_path / "saved"), **ON_TEST_DEVICE)
    assert isinstance(again.retriever, FakeRemoteRetriever) and again.retriever.identity() == identity
    resumed = evaluate(again, tmp_path / "run")  # the same identity: the first run's records are reused
    assert resumed.figures["num_resumed_windows"] == first.figures["num_windows"] > 0
    assert resumed.figures["token_ppl"] == first.figures["token_ppl"]
    assert again.retriever.requests == 0  # every window came from the records
    fresh = evaluate(again, tmp_path / "run-again")
    assert fresh.figures["token_ppl"] == first.figures["token_ppl"]
    assert not cache.exists()  # no index folder, no build lock


def test_a_backends_options_are_one_mapping_it_checks(tiny_model_dir, tmp_path, cache):
    with pytest.raises(ValueError, match=r"^The fake-remote retriever has no option 'index_dir'; its options are: "
                                         r"collection, forbidden_titles\.$"):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="fake-remote",
                                                index_dir=str(tmp_path / "index"), **RALM_SETTINGS)
    with pytest.raises(ValueError, match="no collection 'news'; it has wiki, music"):
        load_retriever("fake-remote", collection="news")
    with pytest.raises(SettingError, match="^forbidden_titles: given both by name and in retriever_options"):
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="fake-remote",
                                                retriever_options={"forbidden_titles": ["Rome"]},
                                                forbidden_titles=["Music"], **RALM_SETTINGS)
    music = load_retriever({"type": "fake-remote", "collection": "music"}, forbidden_titles=["Rome"])
    assert music.config() == {"type": "fake-remote", "forbidden_titles": ["Rome"], "collection": "music"}
    assert [p.title for p in music.retrieve(["the band played a song"], k=3)[0]] == ["Music"]
    titles = tmp_path / "titles.txt"
    titles.write_text("Rome\nMusic\n")  # forbidden titles given as a file are read, wherever they are given
    assert load_retriever("fake-remote", forbidden_titles=str(titles)).forbidden_titles == {"Rome", "Music"}
    assert not cache.exists()


def test_the_registry_takes_a_backend_once_per_name():
    assert retriever_class("fake-remote") is FakeRemoteRetriever
    assert register_retriever(FakeRemoteRetriever) is FakeRemoteRetriever  # again: nothing changes
    assert "fake-remote" in retriever_names() and "fake-remote" not in RETRIEVER_NAMES  # hf-ralm's own
    impostor = type("Impostor", (FakeRemoteRetriever,), {"name": "bm25"})
    with pytest.raises(ValueError, match="The retriever name 'bm25' is taken \\(hf_ralm.retrieval.bm25.BM25Retriever"):
        register_retriever(impostor)
    with pytest.raises(ValueError, match="'none' is taken"):
        register_retriever(type("Nothing", (FakeRemoteRetriever,), {"name": "none"}))
    with pytest.raises(TypeError, match="takes a Retriever subclass"):
        register_retriever(dict)
    assert retriever_class("bm25") is BM25Retriever
    with pytest.raises(ValueError, match="Unknown retriever 'dpr'; choose one of none, bm25, .*fake-remote"):
        retriever_class("dpr")


def test_identity_is_what_the_index_records_key_for_key(tiny_index):
    """The identity runs record (results/*/settings.json): kind, corpus fingerprint, the index's own record
    without its files and corpus paths, forbidden titles; in this order, so that its JSON is the same too."""
    retriever = BM25Retriever.load(tiny_index["index_dir"], forbidden_titles={"Rome"})
    info = read_index_info(tiny_index["index_dir"])
    expected = {"retriever": "bm25", "corpus_fingerprint": info["fingerprint"],
                "index": {k: v for k, v in info.items() if k not in ("files", "corpus", "fingerprint")},
                "forbidden_titles": titles_fingerprint({"Rome"})}
    assert json.dumps(retriever.identity()) == json.dumps(expected) == json.dumps(retriever_identity(retriever))
    assert retriever.identity()["index"]["num_passages"] == len(retriever)

    class Plain:  # anything with a batched retrieve is still a retriever
        def retrieve(self, queries, k=1):
            return [[] for _ in queries]

    assert retriever_identity(Plain()) == {"retriever": "Plain", "corpus_fingerprint": None}


class WordListRetriever(LocalIndexRetriever):
    """A local backend written against the template: its files and its opening, nothing of the folder's handling."""

    name = "word-list"
    index_files = ("passages.json",)
    index_settings = {"scoring": "shared words"}
    writes = 0

    def __init__(self, index_dir, forbidden_titles=frozenset()):
        self.index_dir, self.forbidden_titles = index_dir, frozenset(forbidden_titles)
        with open(os.path.join(index_dir, "passages.json"), encoding="utf-8") as f:
            self.passages = json.load(f)

    @classmethod
    def _write_index(cls, tmp_dir, passages, paths, options, show_progress):
        cls.writes += 1
        rows = [{"title": row["title"], "text": row["text"]} for row in passages]
        with open(os.path.join(tmp_dir, "passages.json"), "w", encoding="utf-8") as f:
            json.dump(rows, f)
        return len(rows), dict(cls.index_settings)

    @classmethod
    def _load(cls, index_dir, options):
        return cls(index_dir, options.forbidden_titles)

    def retrieve(self, queries, k=1):
        return [[Passage(str(i), row["title"], row["text"], 1.0) for i, row in enumerate(self.passages)
                 if set(query.split()) & set(row["text"].split()) and row["title"] not in self.forbidden_titles][:k]
                for query in queries]


def test_a_local_backend_writes_only_its_files(tmp_path, cache, caplog):
    corpus = str(write_jsonl(tmp_path / "corpus.jsonl", ARTICLES))
    built = WordListRetriever.build_or_load(corpus, str(tmp_path / "index"), words_per_passage=10)
    assert WordListRetriever.writes == 1 and len(built.passages) > len(ARTICLES)
    info = read_index_info(str(tmp_path / "index"))
    assert info["retriever"] == "word-list" and info["scoring"] == "shared words" and "passages.json" in info["files"]
    assert built.identity()["index"]["num_passages"] == len(built.passages)
    again = WordListRetriever.from_options(corpus=corpus, index_dir=str(tmp_path / "index"), words_per_passage=10)
    assert WordListRetriever.writes == 1 and again.passages == built.passages  # reused
    WordListRetriever.build_or_load(corpus, str(tmp_path / "index"))  # another passage size: rebuilt
    assert WordListRetriever.writes == 2
    by_cache = WordListRetriever.build_or_load(corpus)  # no folder given: one in the cache, by the fingerprint
    assert os.path.dirname(by_cache.index_dir) == str(cache / "indexes")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "todo.txt").write_text("mine")
    with pytest.raises(IndexFolderError, match="is not an hf-ralm index folder"):  # a folder that is no index: refused
        WordListRetriever.build_or_load(corpus, str(tmp_path / "notes"))
    assert os.listdir(tmp_path / "notes") == ["todo.txt"]
    BM25Retriever.build(corpus, str(tmp_path / "bm25"), show_progress=False)
    with pytest.raises(IndexFolderError, match="holds a 'bm25' index, not a word-list one"):  # another backend's
        WordListRetriever.build_or_load(corpus, str(tmp_path / "bm25"))
    assert read_index_info(str(tmp_path / "bm25"))["retriever"] == "bm25"
    with pytest.raises(ValueError, match="The word-list retriever has no option 'n_threads'; its options are: "
                                         "corpus, index_dir, words_per_passage, forbidden_titles"):
        WordListRetriever.build_or_load(corpus, str(tmp_path / "index"), n_threads=2)
    assert os.path.isfile(tmp_path / "index" / INDEX_FILE)
