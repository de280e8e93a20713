"""Retrieval results as datasets (issue 40 §3): ``hf-ralm retrieve --save-retrieval-dataset DIR`` writes one row per
window (Parquet) with the fingerprint of what the retrievals depend on and a dataset card; ``eval-lm --retrieval-file
DIR`` (or ``hf:REPO_ID``, here from a Hub cache laid out as ``snapshot_download`` leaves it, offline) evaluates with
them as with the paper's JSON file, and refuses a run they were not made for; ``push_retrieval_dataset`` uploads them
(checked up to the upload call: the Hub is unreachable here). The tiny model and real BM25 over the tiny corpus."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest

from conftest import (ARTICLES, EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS, TOKENIZER_VOCAB_SIZE, fail,
                      make_tiny_tokenizer, write_jsonl)
from hf_ralm.cli import main

REPO_ID = "someone/tiny-retrievals"
FIGURES = ("nll_sum", "token_ppl", "word_ppl", "num_tokens", "num_windows", "num_windows_with_passage",
           "num_retrievals", "retrieved_fraction")
DATASET_FILES = {"README.md", "retrieval_fingerprint.json", "data/train-00000-of-00001.parquet"}
DIFFERENCES = ("another tokenizer", "another text", "windows of", "a retrieval every", "queries of", "holds k=",
               "retrieved by", "another index", "other forbidden titles")


def common(model: str, dataset: str, *extra: str) -> list[str]:
    return ["--model", model, "--dataset-path", dataset, "--max-length", "16", "--stride", "4", "--query-length", "8",
            "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, *extra]


@pytest.fixture(scope="module")
def made(tmp_path_factory, tiny_model_dir, tiny_index):
    """Retrievals of EVAL_TEXT made once: the JSON file, a dataset with the passages' texts and one without, a gated
    run's JSON and dataset, and eval-lm's figures over each JSON file (the route the datasets must match)."""
    root = tmp_path_factory.mktemp("retrievals")
    paths = {"root": root, "model": str(tiny_model_dir), "text": str(write_jsonl(root / "text.jsonl",
                                                                                 [{"text": EVAL_TEXT}]))}
    paths["bm25"] = ["--retriever", "bm25", "--index-dir", tiny_index["index_dir"]]
    base = common(paths["model"], paths["text"], *paths["bm25"])
    gate = ["--retrieval-gate", "score", "--gate-threshold", "0.3"]
    main(["retrieve", *base, "--save-retrieval-file", str(root / "r.json"), "--save-retrieval-dataset",
          str(root / "with-texts")])
    main(["retrieve", *base, "--save-retrieval-dataset", str(root / "ids-only"), "--no-passage-texts"])
    main(["retrieve", *base, *gate, "--save-retrieval-file", str(root / "gated.json"), "--save-retrieval-dataset",
          str(root / "gated")])
    for name in ("r.json", "gated.json"):
        main(["eval-lm", *common(paths["model"], paths["text"], "--retrieval-file", str(root / name), "--output-dir",
                                 str(root / f"eval-{name}"))])
        paths[f"figures-{name}"] = json.loads((root / f"eval-{name}" / "eval.json").read_text())
    return paths


def eval_lm(made, out: Path, *extra: str) -> dict:
    main(["eval-lm", *common(made["model"], made["text"], "--output-dir", str(out), *extra)])
    return json.loads((out / "eval.json").read_text())


def same_figures(got: dict, expected: dict) -> None:
    assert {key: got[key] for key in FIGURES} == {key: expected[key] for key in FIGURES}
    assert got["num_windows_with_passage"] > 0


def files_in(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("name, json_file", [("with-texts", "r.json"), ("gated", "gated.json")])
def test_a_dataset_evaluates_as_its_json_file(made, tmp_path, name, json_file):
    """The dataset holds the JSON file's windows, passages and (gated) choices, one row per window, readable with
    ``datasets``; eval-lm over it gives the JSON route's figures to the last digit, and a rerun resumes."""
    import datasets

    folder = made["root"] / name
    assert files_in(folder) == DATASET_FILES
    records = json.loads((made["root"] / json_file).read_text())
    # a cache of its own: datasets keys a local folder's cache by its name and files, which a later run's pytest
    # folders repeat, so a cache kept in ~/.cache served an earlier run's rows
    rows = datasets.load_dataset(str(folder), split="train", cache_dir=str(tmp_path / "datasets-cache"))
    assert len(rows) == len(records)
    assert rows["begin_location"] == [r["begin_location"] for r in records]
    assert rows["passage_ids"] == [[d["id"] for d in r["retrieved_docs"]] for r in records]
    assert rows["texts"] == [[d["text"] for d in r["retrieved_docs"]] for r in records]
    assert rows["scores"] == [[d["score"] for d in r["retrieved_docs"]] for r in records]
    if name == "gated":
        assert rows["chosen"] == [r["chosen"] for r in records] and -1 in rows["chosen"] and 0 in rows["chosen"]
        assert rows["gate_score"] == [r.get("gate_score") for r in records]
        assert set(rows["retrieval_gate"]) == {"score"}
    else:
        assert "chosen" not in rows.column_names
    figures = eval_lm(made, tmp_path / "out", "--retrieval-file", str(folder))
    same_figures(figures, made[f"figures-{json_file}"])
    again = eval_lm(made, tmp_path / "out", "--retrieval-file", str(folder))
    assert again["num_resumed_windows"] == again["num_windows"] and again["nll_sum"] == figures["nll_sum"]


@pytest.fixture()
def hub_cache(made, tmp_path, monkeypatch):
    """The dataset with texts, laid out in a Hugging Face cache as ``snapshot_download(repo_type="dataset")`` leaves
    a Hub dataset repository, with the Hub and ``datasets`` offline."""
    import datasets
    import huggingface_hub.constants as hub_constants

    repo = tmp_path / "hub" / f"datasets--{REPO_ID.replace('/', '--')}"
    shutil.copytree(made["root"] / "with-texts", repo / "snapshots" / "0123abcd")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123abcd")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(hub_constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(hub_constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    return repo


def test_a_hub_dataset_loads_from_the_cache_offline(made, tmp_path, hub_cache, capsys):
    figures = eval_lm(made, tmp_path / "out", "--retrieval-file", f"hf:{REPO_ID}")
    same_figures(figures, made["figures-r.json"])
    line = fail(capsys, {"out": tmp_path / "out2", "tmp": tmp_path},
                ["eval-lm", *common(made["model"], made["text"], "--retrieval-file", "hf:someone/not-there")],
                "The retrieval dataset 'hf:someone/not-there' could not be fetched from the Hugging Face Hub")
    assert "HF_HUB_OFFLINE=1" in line


def test_passages_without_texts_are_fetched_by_id(made, tmp_path, capsys):
    import datasets

    folder = made["root"] / "ids-only"
    assert "texts" not in datasets.load_dataset(str(folder), split="train",
                                                cache_dir=str(tmp_path / "datasets-cache")).column_names
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path},
         ["eval-lm", *common(made["model"], made["text"], "--retrieval-file", str(folder), "--output-dir",
                             str(tmp_path / "out"))],
         "holds the passages' ids without their texts", "--retriever=bm25")
    figures = eval_lm(made, tmp_path / "out", "--retrieval-file", str(folder), *made["bm25"])
    same_figures(figures, made["figures-r.json"])


@pytest.fixture(scope="module")
def other_tokenizer(tmp_path_factory):
    """The tiny tokenizer with one more token: the same ids for EVAL_TEXT, another vocabulary."""
    tokenizer = make_tiny_tokenizer()
    tokenizer.add_tokens(["zebra"])
    folder = tmp_path_factory.mktemp("other-tokenizer")
    tokenizer.save_pretrained(folder)
    return str(folder)


@pytest.fixture(scope="module")
def other_index(tmp_path_factory):
    from hf_ralm.retrieval.bm25 import BM25Retriever

    root = tmp_path_factory.mktemp("other-index")
    BM25Retriever.build(str(write_jsonl(root / "corpus.jsonl", ARTICLES[:4])), str(root / "index"),
                        show_progress=False)
    return str(root / "index")


@pytest.mark.parametrize("what, flags, expected", [
    ("text", ["--max-eval-tokens", "40"], ["was made for another text (", "--max-eval-tokens"]),
    ("tokenizer", ["--tokenizer", "OTHER_TOKENIZER"], ["was made with another tokenizer", "--tokenizer="]),
    ("window length", ["--max-length", "20"],
     ["windows of 16 tokens and this run has windows of 20", "--max-length=16"]),
    ("stride", ["--stride", "2"], ["a retrieval every 4 tokens and this run has a retrieval every 2", "--stride=4"]),
    ("query length", ["--query-length", "4"],
     ["queries of 8 tokens and this run has queries of 4", "--query-length=8"]),
    ("k", ["--ensemble", "2"], ["holds k=1 passages per window and this run retrieves k=2", "--ensemble"]),
    ("forbidden titles", ["BM25", "--forbidden-titles", "TITLES"],
     ["other forbidden titles (0 titles", "this run's: 1 titles", "--forbidden-titles"]),
    ("index", ["--retriever", "bm25", "--index-dir", "OTHER_INDEX"],
     ["was retrieved from another index (corpus ", "--index-dir"]),
])
def test_a_dataset_made_for_another_run_is_refused(made, tmp_path, capsys, other_tokenizer, other_index, what, flags,
                                                   expected):
    """Each dependency of the fingerprint, changed alone, refuses the dataset in one line naming it and the setting
    that matches it (the JSON file of the same retrievals is not checked this way: its windows are, see
    test_cli)."""
    titles = tmp_path / "titles.txt"
    titles.write_text("Sailing\n")
    replace = {"OTHER_TOKENIZER": [other_tokenizer], "OTHER_INDEX": [other_index], "TITLES": [str(titles)],
               "BM25": made["bm25"]}
    flags = [value for flag in flags for value in replace.get(flag, [flag])]
    argv = common(made["model"], made["text"], "--retrieval-file", str(made["root"] / "with-texts"), "--output-dir",
                  str(tmp_path / "out"))
    for flag, value in zip(flags[::2], flags[1::2]):  # a changed setting replaces the dataset's own
        if flag in argv:
            argv[argv.index(flag) + 1] = value
        else:
            argv += [flag, value]
    line = fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path}, ["eval-lm", *argv],
                f"{made['root'] / 'with-texts'} ", *expected, "hf-ralm retrieve --save-retrieval-dataset")
    named = [phrase for phrase in DIFFERENCES if phrase in line]
    assert len(named) == 1, line  # the one difference, not a list of all


def test_forbidden_titles_need_the_retriever_to_be_checked(made, tmp_path, capsys):
    titles = tmp_path / "titles.txt"
    titles.write_text("Sailing\n")
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path},
         ["eval-lm", *common(made["model"], made["text"], "--retrieval-file", str(made["root"] / "with-texts"),
                             "--forbidden-titles", str(titles))],
         "--forbidden-titles are checked against the retrieval dataset through the run's retriever")


def test_the_fingerprint_and_the_card(made, tiny_tokenizer):
    """The fingerprint names every dependency, is stored beside the data and in its Parquet metadata, and the card
    (a Hub dataset card: YAML header, data files) says what the dataset is and how to use it."""
    import pyarrow.parquet as pq
    from huggingface_hub import DatasetCard

    from hf_ralm.runs.fingerprints import ids_fingerprint
    from hf_ralm.retrieval.base import retriever_identity
    from hf_ralm.retrieval.bm25 import BM25Retriever

    folder = made["root"] / "with-texts"
    info = json.loads((folder / "retrieval_fingerprint.json").read_text())
    parquet = pq.read_schema(folder / "data" / "train-00000-of-00001.parquet")
    assert json.loads(parquet.metadata[b"hf_ralm"]) == info
    fingerprint = info["fingerprint"]
    assert fingerprint["retriever"] == retriever_identity(BM25Retriever.load(made["bm25"][3]))
    assert fingerprint["retriever"]["forbidden_titles"].startswith("0 titles")
    assert (fingerprint["window_length"], fingerprint["retrieval_stride"], fingerprint["query_length"],
            fingerprint["k"]) == (16, 4, 8, 1)
    assert fingerprint["text"] == ids_fingerprint(tiny_tokenizer(EVAL_TEXT, add_special_tokens=False)["input_ids"])
    assert fingerprint["tokenizer"] == Path(made["model"]).name  # a local folder's name, not its path
    assert fingerprint["vocabulary"].startswith(f"{TOKENIZER_VOCAB_SIZE} tokens, ")
    assert fingerprint["selection"] == {"rerank": "none", "retrieval_gate": "always"}
    gated = json.loads((made["root"] / "gated" / "retrieval_fingerprint.json").read_text())["fingerprint"]
    assert gated["selection"]["retrieval_gate"] == "score" and gated["selection"]["gate_threshold"] == 0.3
    assert info["passage_texts"] is True
    assert info["num_windows"] == len(json.loads((made["root"] / "r.json").read_text()))
    assert info["reproduce"]["command"].startswith(f"hf-ralm retrieve --model {made['model']} ")

    card = DatasetCard.load(folder / "README.md")
    assert "hf-ralm" in card.data.tags
    assert card.data.configs == [{"config_name": "default",
                                  "data_files": [{"split": "train", "path": "data/*.parquet"}]}]
    assert card.data.to_dict()["hf_ralm"]["fingerprint"] == info["fingerprint_digest"]
    for text in ("# In-Context RALM retrievals (bm25)", "--max-length 16 --stride 4 --query-length 8 "
                 "--max-doc-tokens 8 --retrieval-file path/to/this/folder", f"Digest `{info['fingerprint_digest']}`",
                 f"| corpus fingerprint | `{fingerprint['retriever']['corpus_fingerprint']}` |",
                 "| stride s | 4 |", "the passages with their texts",
                 "`window`, `begin_location`, `end_location`, `query`, `future`, `passage_ids`, `titles`, `texts`, "
                 "`scores`"):
        assert text in card.text, text
    ids_card = (made["root"] / "ids-only" / "README.md").read_text()
    assert "without their texts: evaluating fetches them by id from the index" in ids_card


@pytest.fixture()
def uploads(monkeypatch, tmp_path):
    """What the Hub client is asked to do: the repositories created and a copy of each folder uploaded."""
    sent: dict = {"created": [], "folders": []}

    def create_repo(self, repo_id, repo_type=None, private=None, exist_ok=False, **kwargs):
        sent["created"].append({"repo_id": repo_id, "repo_type": repo_type, "private": private, "exist_ok": exist_ok,
                                "token": self.token})

    def upload_folder(self, repo_id, folder_path, repo_type=None, revision=None, commit_message=None,
                      allow_patterns=None, **kwargs):
        if sent.get("fail"):
            raise RuntimeError("401 Unauthorized")
        copy = tmp_path / f"upload-{len(sent['folders'])}"
        shutil.copytree(folder_path, copy, ignore=lambda folder, names: [
            n for n in names if (Path(folder) / n).is_file() and not any(
                (Path(folder) / n).relative_to(folder_path).match(pattern) for pattern in allow_patterns)])
        sent["folders"].append({"repo_id": repo_id, "repo_type": repo_type, "folder": copy,
                                "message": commit_message, "revision": revision})
        return f"https://huggingface.co/datasets/{repo_id}/commit/0123"

    monkeypatch.setattr(huggingface_hub.HfApi, "create_repo", create_repo)
    monkeypatch.setattr(huggingface_hub.HfApi, "upload_folder", upload_folder)
    return sent


def test_push_uploads_the_dataset_with_its_card(made, tmp_path, uploads):
    from hf_ralm.retrieval import push_retrieval_dataset

    folder = tmp_path / "mine"
    shutil.copytree(made["root"] / "with-texts", folder)
    (folder / ".tmp-left-over").write_text("x")
    url = push_retrieval_dataset(folder, REPO_ID, private=True, token="hf_secret", commit_message="Add retrievals")
    assert url == f"https://huggingface.co/datasets/{REPO_ID}/commit/0123"
    assert uploads["created"] == [{"repo_id": REPO_ID, "repo_type": "dataset", "private": True, "exist_ok": True,
                                   "token": "hf_secret"}]
    (upload,) = uploads["folders"]
    assert (upload["repo_id"], upload["repo_type"], upload["message"]) == (REPO_ID, "dataset", "Add retrievals")
    assert files_in(upload["folder"]) == DATASET_FILES
    card = (upload["folder"] / "README.md").read_text()
    assert f"--retrieval-file hf:{REPO_ID}" in card and f'load_dataset("{REPO_ID}", split="train")' in card
    assert (folder / "README.md").read_text() == card  # hf-ralm's own card now names the repository

    edited = card + "\nMy notes.\n"
    (folder / "README.md").write_text(edited)
    push_retrieval_dataset(folder, "someone/another")
    assert (uploads["folders"][1]["folder"] / "README.md").read_text() == edited  # a card you edited stays yours

    uploads["fail"] = True
    with pytest.raises(OSError, match=r"Could not push .*401 Unauthorized.*The dataset is saved there"):
        push_retrieval_dataset(folder, REPO_ID)
    with pytest.raises(FileNotFoundError, match="No retrieval dataset folder"):
        push_retrieval_dataset(tmp_path / "nothing", REPO_ID)


def test_retrieve_pushes_to_the_hub(made, tmp_path, uploads, capsys):
    import pyarrow.parquet as pq

    folder = tmp_path / "pushed"
    main(["retrieve", *common(made["model"], made["text"], *made["bm25"]), "--save-retrieval-dataset", str(folder),
          "--push-to-hub", REPO_ID])
    assert f"pushed {folder} to the Hub dataset {REPO_ID}: https://huggingface.co/datasets/{REPO_ID}/commit/0123" \
        in capsys.readouterr().err
    (upload,) = uploads["folders"]
    assert files_in(upload["folder"]) == DATASET_FILES
    assert f"--retrieval-file hf:{REPO_ID}" in (upload["folder"] / "README.md").read_text()
    rows = [pq.read_table(folder / "data" / "train-00000-of-00001.parquet").replace_schema_metadata()
            for folder in (upload["folder"], made["root"] / "with-texts")]
    assert rows[0].equals(rows[1])  # the rows of the same retrieval (the metadata names the command that made it)


def test_retrieve_writes_only_into_a_new_folder_or_its_own_dataset(made, tmp_path, capsys):
    """A folder holding anything else is refused before the run, its files untouched; an earlier retrieval dataset is
    replaced."""
    argv = ["retrieve", *common(made["model"], made["text"], *made["bm25"])]
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (theirs / "notes.txt").write_text("mine")
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path}, [*argv, "--save-retrieval-dataset", str(theirs)],
         f"{theirs} holds files hf-ralm did not write (notes.txt)", "--save-retrieval-dataset")
    assert files_in(theirs) == {"notes.txt"}
    ours = tmp_path / "ours"
    shutil.copytree(made["root"] / "ids-only", ours)
    main([*argv, "--save-retrieval-dataset", str(ours)])
    assert json.loads((ours / "retrieval_fingerprint.json").read_text())["passage_texts"] is True
    for flags, message in ((["--no-passage-texts", "--save-retrieval-file", str(tmp_path / "r.json")],
                            "--no-passage-texts is about the dataset of --save-retrieval-dataset DIR"),
                           ([], "needs --save-retrieval-file OUT (the paper's JSON) or --save-retrieval-dataset DIR")):
        fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path}, [*argv, *flags], message)
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path},
         ["retrieve", *common(made["model"], made["text"]), "--save-retrieval-dataset", str(tmp_path / "new")],
         "--save-retrieval-dataset records what a retriever found: give --retriever")


def test_a_mixed_or_foreign_folder_is_refused(made, tmp_path, capsys):
    mixed = tmp_path / "mixed"
    shutil.copytree(made["root"] / "with-texts", mixed)
    shutil.copy(made["root"] / "ids-only" / "data" / "train-00000-of-00001.parquet", mixed / "data")
    argv = ["eval-lm", *common(made["model"], made["text"], "--output-dir", str(tmp_path / "out"))]
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path}, [*argv, "--retrieval-file", str(mixed)],
         "data/train-00000-of-00001.parquet was not written with its retrieval_fingerprint.json")
    fail(capsys, {"out": tmp_path / "out", "tmp": tmp_path}, [*argv, "--retrieval-file", str(tmp_path)],
         f"{tmp_path} is no retrieval dataset: it has no retrieval_fingerprint.json")


def test_the_python_api(tiny_model_dir, tiny_index, tmp_path):
    """``RalmEvalResult.save_retrieval_dataset`` and ``evaluate_perplexity(retrieval_file=DIR)``: the live run's
    figures again; results whose passages were read (not retrieved here) have no fingerprint to save."""
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                    index_dir=tiny_index["index_dir"], max_length=16,
                                                    retrieval_stride=4, query_length=8, max_doc_tokens=8,
                                                    **ON_TEST_DEVICE)
    live = model.evaluate_perplexity(EVAL_TEXT, show_progress=False)
    live.save_retrieval_dataset(str(tmp_path / "d"), model.tokenizer, argv=["my-script.py"])
    assert json.loads((tmp_path / "d" / "retrieval_fingerprint.json").read_text())["reproduce"]["command"] == \
        "my-script.py"
    again = model.evaluate_perplexity(EVAL_TEXT, retrieval_file=str(tmp_path / "d"), show_progress=False)
    assert again.figures["nll_sum"] == live.figures["nll_sum"] and again.figures["num_windows_with_passage"] > 0
    with pytest.raises(ValueError, match="its passages were not retrieved here"):
        again.save_retrieval_dataset(str(tmp_path / "e"), model.tokenizer)
