"""Saved folders and the Hub (issue 57): a RALM saved without its index loads where it was saved, its index read
there, never built or deleted there, and never followed from a Hub download; ``push_to_hub`` of a RALM over a local
base model names the base model by its Hub id (``base_model=``) or refuses; a retrieval dataset's fingerprint records
the passage length cap, its card's command runs, and a run it was not made for is refused before a window is timed."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import huggingface_hub
import pytest
from transformers import AutoModelForCausalLM

from conftest import ARTICLES, EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.cli import main
from hf_ralm.errors import SavedFolderError
from hf_ralm.retrieval.bm25 import BM25Retriever

REPO_ID = "someone/tiny-ralm"
HUB_BASE = "someone/tiny-llama"
SETTINGS = {"max_length": 16, "retrieval_stride": 4, "query_length": 8, "max_doc_tokens": 8}


def listing(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``folder`` with its size and modification time: what must not change when it is only read."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns) for p in folder.rglob("*")
            if p.is_file()}


@pytest.fixture()
def outside(tmp_path, tiny_index) -> Path:
    """A copy of the tiny BM25 index that a test may change, outside every saved folder."""
    return Path(shutil.copytree(tiny_index["index_dir"], tmp_path / "wiki-bm25"))


@pytest.fixture()
def saved(tmp_path, tiny_model_dir, outside) -> Path:
    """The tiny RALM over the index :func:`outside`, saved without its index."""
    ralm = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25", index_dir=str(outside),
                                                   **SETTINGS, **ON_TEST_DEVICE)
    ralm.save_pretrained(tmp_path / "my-ralm")
    return tmp_path / "my-ralm"


def hub_snapshot(cache: Path, repo_id: str, folder: Path) -> Path:
    """``folder`` laid out in the Hugging Face cache ``cache`` as ``snapshot_download`` leaves ``repo_id``."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    snapshot = Path(shutil.copytree(folder, repo / "snapshots" / "0123abcd"))
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text("0123abcd")
    return snapshot


# ----------------------------------------------------------------------------------------------------------------
# 1. A RALM saved without its index loads where it was saved
# ----------------------------------------------------------------------------------------------------------------


def test_a_ralm_saved_without_its_index_loads_where_it_was_saved(saved, outside, tiny_model_dir):
    """``save_pretrained`` then ``AutoModelForCausalLM.from_pretrained`` on the same machine: the index is read where
    it lies (before: SavedFolderError), retrieves as the original, and nothing in its folder changes."""
    recorded = json.loads((saved / "retriever_config.json").read_text())
    assert recorded["index_dir"] == str(outside.resolve())
    assert recorded["index_identity"]["fingerprint"] == json.loads((outside / "hf_ralm_index.json").read_text())[
        "fingerprint"]
    before = listing(outside)
    loaded = AutoModelForCausalLM.from_pretrained(str(saved), **ON_TEST_DEVICE)
    assert isinstance(loaded, RetrievalAugmentedModel)
    assert Path(loaded.retriever.index_dir) == outside.resolve()
    original = BM25Retriever.load(str(outside))
    queries = ["the sailor took the boat", "the emperor and the senate"]
    assert loaded.retriever.retrieve(queries, k=2) == original.retrieve(queries, k=2)
    assert listing(outside) == before
    given = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=str(outside), **ON_TEST_DEVICE)
    assert Path(given.retriever.index_dir) == outside  # the index given still wins


def test_a_corpus_given_never_builds_at_the_saved_outside_index(saved, outside, files):
    """With ``corpus=`` (which rebuilds a stale index) the outside index is not followed: refused in one line, and
    its folder is left as it was."""
    before = listing(outside)
    with pytest.raises(SavedFolderError) as info:
        RetrievalAugmentedModel.from_pretrained(str(saved), corpus=files["corpus"], **ON_TEST_DEVICE)
    message = str(info.value)
    assert "\n" not in message and "a corpus given would build there" in message and "index_dir=" in message
    assert listing(outside) == before


def test_an_index_changed_since_saving_is_not_followed(saved, outside):
    """Rebuilt from another corpus since the folder was saved: its identity differs, so it is refused (one line
    saying so and what to pass); given explicitly, it is opened."""
    BM25Retriever.build(str(write_jsonl(outside.parent / "other.jsonl", ARTICLES[:4])), str(outside),
                        show_progress=False)
    with pytest.raises(SavedFolderError) as info:
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)
    message = str(info.value)
    assert message.startswith(f"{saved / 'retriever_config.json'}: its index_dir {str(outside.resolve())!r} leads "
                              f"outside {str(saved)!r}, and it no longer holds the index this folder was saved with")
    assert "\n" not in message and "index_dir=" in message
    given = RetrievalAugmentedModel.from_pretrained(str(saved), index_dir=str(outside), **ON_TEST_DEVICE)
    assert len(given.retriever) == len(BM25Retriever.load(str(outside)))


def test_a_folder_downloaded_from_the_hub_never_follows_an_absolute_path(saved, outside, tmp_path):
    """The same folder as a Hub snapshot (by its id, or its snapshot's path) or as ``hf download --local-dir`` leaves
    it: the absolute path is refused although the index there is the one recorded; the local copy loads."""
    cache = tmp_path / "hub-cache"
    snapshot = hub_snapshot(cache, REPO_ID, saved)
    local_dir = Path(shutil.copytree(saved, tmp_path / "downloaded"))
    (local_dir / ".cache" / "huggingface").mkdir(parents=True)
    for name, kwargs in ((REPO_ID, {"cache_dir": str(cache), "local_files_only": True}), (str(snapshot), {}),
                         (str(local_dir), {})):
        with pytest.raises(SavedFolderError) as info:
            RetrievalAugmentedModel.from_pretrained(name, **kwargs, **ON_TEST_DEVICE)
        assert "follows the paths of a folder downloaded from the Hub only inside it" in str(info.value)
    copy = Path(shutil.copytree(saved, tmp_path / "copied"))
    assert Path(RetrievalAugmentedModel.from_pretrained(str(copy), **ON_TEST_DEVICE).retriever.index_dir) == \
        outside.resolve()


# ----------------------------------------------------------------------------------------------------------------
# 2. push_to_hub over a local base model names its Hub id
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def uploads(monkeypatch, tmp_path):
    """What push_to_hub asks the Hub for: the repositories created and a copy of each folder uploaded."""
    sent: dict = {"created": [], "folders": []}

    def create_repo(self, repo_id, **kwargs):
        sent["created"].append(repo_id)

    def upload_folder(self, repo_id, folder_path, commit_message=None, **kwargs):
        sent["folders"].append((Path(shutil.copytree(folder_path, tmp_path / f"upload-{len(sent['folders'])}")),
                                commit_message))
        return f"https://huggingface.co/{repo_id}/commit/0123"

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return sent


def test_push_to_hub_over_a_local_base_model_needs_its_hub_id(saved, uploads, tiny_model_dir, tmp_path):
    """Without ``base_model=``, refused in one line naming the local folder (before: its absolute path published in
    config.json and the card); with it, the pushed config and card name the Hub id, and the RALM keeps its own."""
    ralm = RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)
    with pytest.raises(SavedFolderError) as info:
        ralm.push_to_hub(REPO_ID)
    message = str(info.value)
    assert "\n" not in message and repr(str(tiny_model_dir)) in message and "base_model=" in message
    with pytest.raises(SavedFolderError, match="is a local path"):
        ralm.push_to_hub(REPO_ID, base_model=str(tiny_model_dir))
    assert uploads == {"created": [], "folders": []}  # nothing created, nothing sent

    ralm.push_to_hub(REPO_ID, push_index=True, base_model=HUB_BASE)
    ((folder, commit_message),) = uploads["folders"]
    assert json.loads((folder / "config.json").read_text())["base_model_name_or_path"] == HUB_BASE
    card = huggingface_hub.ModelCard.load(folder / "README.md")
    assert card.data.base_model == HUB_BASE and f"# In-Context RALM over {HUB_BASE}" in card.text
    assert str(tiny_model_dir) not in card.text and commit_message == f"Upload In-Context RALM over {HUB_BASE}"
    assert ralm.config.base_model_name_or_path == str(tiny_model_dir)  # the RALM itself is unchanged
    ralm.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["base_model_name_or_path"] == \
        str(tiny_model_dir)

    # the pushed repository loads from a Hub cache holding the base model under that id too, offline
    cache = tmp_path / "hub-cache"
    hub_snapshot(cache, HUB_BASE, tiny_model_dir)
    hub_snapshot(cache, REPO_ID, folder)
    loaded = RetrievalAugmentedModel.from_pretrained(REPO_ID, cache_dir=str(cache), local_files_only=True,
                                                     **ON_TEST_DEVICE)
    assert loaded.config.base_model_name_or_path == HUB_BASE
    expected = ralm.evaluate_perplexity(EVAL_TEXT, show_progress=False).figures["token_ppl"]
    assert loaded.evaluate_perplexity(EVAL_TEXT, show_progress=False).figures["token_ppl"] == expected


# ----------------------------------------------------------------------------------------------------------------
# 3. A retrieval dataset records max_doc_tokens, its card's command runs, a mismatch is refused before timing
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def dataset(files, tiny_index) -> dict:
    """A retrieval dataset of EVAL_TEXT made with 16-token windows and passages cut to 8 tokens."""
    text = str(write_jsonl(files["tmp"] / "text.jsonl", [{"text": EVAL_TEXT}]))
    folder = files["tmp"] / "retrievals"
    main(["retrieve", "--model", files["model"], "--dataset-path", text, "--max-length", "16", "--stride", "4",
          "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--retriever", "bm25", "--index-dir",
          tiny_index["index_dir"], "--save-retrieval-dataset", str(folder)])
    return {"model": files["model"], "text": text, "folder": folder}


def test_the_dataset_cards_command_runs(dataset, files, capsys):
    """The card's eval-lm command, MODEL and TEXT filled in, evaluates with the dataset (before: it left out
    --max-doc-tokens, and the default, 256, cannot fit in a 16-token window: refused)."""
    card = (dataset["folder"] / "README.md").read_text()
    (command,) = [line for line in card.splitlines() if line.startswith("hf-ralm eval-lm ")]
    assert "--max-doc-tokens 8" in command and "| passage length cap | 8 |" in card
    argv = [{"MODEL": dataset["model"], "TEXT": dataset["text"], "path/to/this/folder": str(dataset["folder"])}.get(
        word, word) for word in shlex.split(command)[1:]]
    main([*argv, *TEST_DEVICE_ARGS, "--output-dir", str(files["out"])])
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["num_windows_with_passage"] > 0


@pytest.mark.parametrize("flag, value, expected", [
    ("--max-doc-tokens", "4", ["passages cut to 8 tokens and this run has passages cut to 4", "--max-doc-tokens=8"]),
    ("--stride", "2", ["a retrieval every 4 tokens and this run has a retrieval every 2", "--stride=4"]),
])
def test_a_run_the_dataset_was_not_made_for_is_refused_before_a_window_is_timed(dataset, files, capsys, flag, value,
                                                                                expected):
    """max_doc_tokens is part of the fingerprint (before: not compared), and any difference is refused before
    eval-lm times a window for its estimate (before: after it)."""
    argv = ["eval-lm", "--model", dataset["model"], "--dataset-path", dataset["text"], "--max-length", "16",
            "--stride", "4", "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--retrieval-file",
            str(dataset["folder"]), "--output-dir", str(files["out"])]
    argv[argv.index(flag) + 1] = value
    with pytest.raises(SystemExit) as info:
        main(argv)
    err = capsys.readouterr().err
    assert info.value.code == 2 and "Traceback" not in err and "one window took" not in err
    line = err.rstrip("\n").splitlines()[-1]
    assert line.startswith(f"hf-ralm: error: {dataset['folder']} ")
    for text in expected:
        assert text in line, (text, line)


def test_a_fingerprint_without_max_doc_tokens_is_read_as_not_recorded(dataset):
    """A dataset written before the cap was recorded still opens: its fingerprint has none, which no run's cap
    contradicts, and its card says so; one that records it refuses another cap."""
    from hf_ralm.retrieval.dataset import RetrievalFingerprint, retrieval_dataset_card

    info = json.loads((dataset["folder"] / "retrieval_fingerprint.json").read_text())
    recorded = RetrievalFingerprint.from_dict(info["fingerprint"])
    assert recorded.max_doc_tokens == 8
    run = RetrievalFingerprint.from_dict({**info["fingerprint"], "max_doc_tokens": 256})
    assert recorded.mismatch(recorded) is None
    assert "passages cut to 8 tokens" in recorded.mismatch(run)
    older = {key: value for key, value in info["fingerprint"].items() if key != "max_doc_tokens"}
    assert RetrievalFingerprint.from_dict(older).max_doc_tokens is None
    assert RetrievalFingerprint.from_dict(older).mismatch(run) is None
    card = str(retrieval_dataset_card({**info, "fingerprint": older}))
    (command,) = [line for line in card.splitlines() if line.startswith("hf-ralm eval-lm ")]
    assert "| passage length cap | not recorded |" in card and "--max-doc-tokens" not in command
