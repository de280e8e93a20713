"""A RALM that travels: ``push_to_hub(repo_id, push_index=True)`` uploads the config, the retriever's config, the
index under ``index/`` and a model card (checked up to the upload call: the Hub is unreachable here), and
``from_pretrained(repo_id)`` rebuilds it from the Hugging Face cache laid out as a Hub snapshot, offline."""

from __future__ import annotations

import shutil
from pathlib import Path

import huggingface_hub
import pytest

from conftest import EVAL_TEXT, ON_TEST_DEVICE
from hf_ralm import RetrievalAugmentedModel

REPO_ID = "someone/tiny-ralm"
HUB_BASE = "someone/tiny-llama"  # the base model's Hub id, which a RALM over a local folder is pushed with


@pytest.fixture()
def ralm(tiny_model_dir, tiny_index):
    return RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], max_length=16,
                                                   retrieval_stride=4, query_length=8, max_doc_tokens=8,
                                                   forbidden_titles=["Sailing"], **ON_TEST_DEVICE)


@pytest.fixture()
def uploads(monkeypatch, tmp_path):
    """What push_to_hub sends: the repository it creates and a copy of the folder it uploads."""
    sent: dict = {"created": [], "folders": []}

    def create_repo(self, repo_id, private=None, exist_ok=False, **kwargs):
        sent["created"].append((repo_id, private, exist_ok))

    def upload_folder(self, repo_id, folder_path, revision=None, commit_message=None, **kwargs):
        copy = tmp_path / f"upload-{len(sent['folders'])}"
        shutil.copytree(folder_path, copy)
        sent["folders"].append({"repo_id": repo_id, "folder": copy, "message": commit_message, "token": self.token,
                                "revision": revision, **kwargs})
        if kwargs.get("create_pr"):  # what the Hub answers: a CommitInfo with the pull request's address
            return huggingface_hub.CommitInfo(commit_url=f"https://huggingface.co/{repo_id}/commit/0456",
                                              commit_message=commit_message, commit_description="", oid="0456",
                                              pr_url=f"https://huggingface.co/{repo_id}/discussions/1")
        return f"https://huggingface.co/{repo_id}/commit/0123"

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return sent


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_push_with_the_index_uploads_config_index_and_card(ralm, uploads, tiny_index):
    url = ralm.push_to_hub(REPO_ID, push_index=True, base_model=HUB_BASE)
    assert url == f"https://huggingface.co/{REPO_ID}/commit/0123"
    assert uploads["created"] == [(REPO_ID, None, True)]
    (upload,) = uploads["folders"]
    folder = upload["folder"]
    index_files = {f"index/{name}" for name in files_in(Path(tiny_index["index_dir"]))}
    assert files_in(folder) == {"config.json", "retriever_config.json", "README.md", *index_files}
    assert "index/hf_ralm_index.json" in index_files and upload["message"].startswith("Upload In-Context RALM over ")
    card = (folder / "README.md").read_text()
    metadata = huggingface_hub.ModelCard(card).data
    assert metadata.library_name == "hf-ralm" and metadata.pipeline_tag == "text-generation"
    assert metadata.base_model == HUB_BASE  # the Hub id given, not the local folder (test_the_card_links_a_hub_base)
    assert metadata.tags == ["retrieval-augmented-generation", "in-context-ralm"]
    from hf_ralm.retrieval.base import retriever_identity

    fingerprint = retriever_identity(ralm.retriever)["corpus_fingerprint"]
    for line in ("- kind: `bm25`", f"- corpus fingerprint: `{fingerprint}`",
                 "- passages: ", "- forbidden titles: 1", "- index: included under `index/`",
                 f'model = RetrievalAugmentedModel.from_pretrained("{REPO_ID}")', "| `retrieval_stride` | 4 |"):
        assert line in card, line


def test_push_without_the_index_says_where_it_must_be(ralm, uploads):
    ralm.push_to_hub(REPO_ID, base_model=HUB_BASE)
    folder = uploads["folders"][0]["folder"]
    assert not any(name.startswith("index/") for name in files_in(folder))
    assert "- index: not included" in (folder / "README.md").read_text()


def test_the_card_shows_measured_figures(ralm, uploads):
    comparison = ralm.compare_strategies(EVAL_TEXT, ["none", "top1"], show_progress=False)
    ralm.push_to_hub(REPO_ID, push_index=True, comparison=comparison, base_model=HUB_BASE)
    card = (uploads["folders"][0]["folder"] / "README.md").read_text()
    assert "## Measured" in card and comparison.to_markdown() in card


def test_a_pushed_ralm_loads_from_the_hub_cache_offline(ralm, uploads, tmp_path, tiny_model_dir):
    """The uploaded folder, laid out as huggingface_hub lays out a downloaded snapshot (its base model too, under the
    Hub id it was pushed with), loads by its repository id without a network (``local_files_only``) and evaluates as
    the original: same passages, same perplexity."""
    ralm.push_to_hub(REPO_ID, push_index=True, base_model=HUB_BASE)
    cache = tmp_path / "hub-cache"
    base = cache / f"models--{HUB_BASE.replace('/', '--')}"
    shutil.copytree(tiny_model_dir, base / "snapshots" / "0123abcd")
    (base / "refs").mkdir()
    (base / "refs" / "main").write_text("0123abcd")
    repo = cache / f"models--{REPO_ID.replace('/', '--')}"
    shutil.copytree(uploads["folders"][0]["folder"], repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    loaded = RetrievalAugmentedModel.from_pretrained(REPO_ID, cache_dir=str(cache), local_files_only=True,
                                                     **ON_TEST_DEVICE)
    assert Path(loaded.retriever.index_dir).resolve() == (repo / "snapshots" / "0123abcd" / "index").resolve()
    assert loaded.retriever.forbidden_titles == ralm.retriever.forbidden_titles
    assert loaded.config.to_dict() == {**ralm.config.to_dict(), "base_model_name_or_path": HUB_BASE,
                                       "transformers_version": loaded.config.to_dict().get("transformers_version")}
    expected = ralm.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    got = loaded.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    assert [[p.id for p in w] for w in got.passages] == [[p.id for p in w] for w in expected.passages]
    assert got.figures["token_ppl"] == expected.figures["token_ppl"]


def test_push_to_hub_takes_transformers_keyword_arguments(ralm, uploads):
    with pytest.raises(TypeError):
        ralm.push_to_hub(REPO_ID, True)  # push_index, like every argument after repo_id, is keyword-only
    url = ralm.push_to_hub(REPO_ID, push_index=False, private=True, token="hf_token", create_pr=True,
                           commit_message="A RALM", commit_description="over the tiny corpus", revision="dev",
                           tags=["wikipedia", "in-context-ralm"], base_model=HUB_BASE)
    assert url == f"https://huggingface.co/{REPO_ID}/discussions/1"  # a pull request's address
    assert uploads["created"] == [(REPO_ID, True, True)]
    (upload,) = uploads["folders"]
    assert {k: upload[k] for k in ("message", "commit_description", "token", "revision", "create_pr")} == {
        "message": "A RALM", "commit_description": "over the tiny corpus", "token": "hf_token", "revision": "dev",
        "create_pr": True}
    card = huggingface_hub.ModelCard.load(upload["folder"] / "README.md")
    assert card.data.tags == ["retrieval-augmented-generation", "in-context-ralm", "wikipedia"]  # once each


def test_the_card_carries_the_measured_figures_as_model_index(ralm, uploads):
    comparison = ralm.compare_strategies(EVAL_TEXT, ["none", "top1"], show_progress=False)
    ralm.push_to_hub(REPO_ID, comparison=comparison, dataset="wikitext", base_model=HUB_BASE)
    card = huggingface_hub.ModelCard.load(uploads["folders"][0]["folder"] / "README.md")
    results = card.data.eval_results
    assert card.data.model_name == REPO_ID
    assert {(r.task_type, r.dataset_type, r.dataset_name, r.metric_type) for r in results} == {
        ("text-generation", "wikitext", "wikitext", "perplexity")}
    assert {(r.metric_config, r.metric_name): r.metric_value for r in results} == {
        (row.strategy, f"{unit} perplexity ({row.strategy})"): getattr(row, f"{unit}_ppl")
        for row in comparison.rows for unit in ("token", "word")}
    assert "## Measured on wikitext" in str(card) and comparison.to_markdown() in str(card)


def test_the_card_links_a_hub_base_model_only():
    from hf_ralm import RalmConfig
    from hf_ralm.model_card import ralm_model_card

    assert ralm_model_card(RalmConfig(base_model_name_or_path="HuggingFaceTB/SmolLM2-135M"), None).data.base_model \
        == "HuggingFaceTB/SmolLM2-135M"
    assert ralm_model_card(RalmConfig(base_model_name_or_path="/models/smollm2"), None).data.base_model is None


def test_save_pretrained_writes_a_model_card(ralm, tmp_path):
    ralm.save_pretrained(tmp_path / "saved")
    assert huggingface_hub.ModelCard.load(tmp_path / "saved" / "README.md").data.library_name == "hf-ralm"
