"""Saved RALM folders through the ``hf-ralm`` command line and ``from_pretrained``: ``--model SAVED`` runs with the
folder's retriever and settings (a flag given wins, and says so on stderr), and a saved folder whose files are
malformed, name paths outside it or name themselves as their base model is refused with one line naming the file and
the key (exit status 2, no traceback)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest import ON_TEST_DEVICE, TEST_DEVICE_ARGS, fail
from hf_ralm import RalmConfig, RetrievalAugmentedModel
from hf_ralm.cli import build_parser, main
from hf_ralm.cli.common import use_saved_settings
from hf_ralm.errors import SavedFolderError, SettingError
from hf_ralm.retrieval import load_retriever_from_pretrained

SAVED_SETTINGS = {"max_length": 16, "retrieval_stride": 4, "query_length": 8, "max_doc_tokens": 8}
"""The settings the saved RALM keeps: none of them is a flag's default but the stride (4)."""


@pytest.fixture(scope="module")
def saved_ralm(tmp_path_factory, tiny_model_dir, tiny_index) -> Path:
    """The tiny Llama with the BM25 index of ARTICLES and :data:`SAVED_SETTINGS`, saved with its index inside."""
    folder = tmp_path_factory.mktemp("saved") / "my-ralm"
    ralm = RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), retriever="bm25",
                                                   index_dir=tiny_index["index_dir"], **SAVED_SETTINGS,
                                                   **ON_TEST_DEVICE)
    ralm.save_pretrained(folder, save_index=True)
    return folder


@pytest.fixture()
def saved(saved_ralm, tmp_path) -> Path:
    """A copy of :func:`saved_ralm` that a test may spoil."""
    return Path(shutil.copytree(saved_ralm, tmp_path / "my-ralm"))


def eval_lm(files, model: Path, *flags: str) -> list[str]:
    return ["eval-lm", "--model", str(model), "--dataset-path", files["dataset"], *TEST_DEVICE_ARGS,
            "--output-dir", str(files["out"]), *flags]


def edit_json(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


# ----------------------------------------------------------------------------------------------------------------
# --model SAVED: the folder's retriever and settings, unless a flag is given
# ----------------------------------------------------------------------------------------------------------------


def test_eval_lm_on_a_saved_ralm_uses_its_retriever_and_settings(files, capsys, saved_ralm):
    """No --retriever and no settings flags: the saved BM25 retriever retrieves, with the saved window and query
    (before: --retriever's default, none, replaced it, and every setting's default the saved one)."""
    main(eval_lm(files, saved_ralm))
    assert "overrides the saved folder" not in capsys.readouterr().err
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["args"]["retriever"] == "bm25" and report["num_retrievals"] > 0
    assert report["max_length"] == 16
    args = report["args"]
    assert (args["max_length"], args["stride"], args["query_length"], args["max_doc_tokens"]) == (16, 4, 8, 8)
    assert "command_flags" not in args  # what the parser saw is no argument of the run


def test_a_flag_given_wins_over_the_saved_setting_and_says_so(files, capsys, saved_ralm):
    main(eval_lm(files, saved_ralm, "--stride", "8", "--max-doc-tokens", "8"))
    err = capsys.readouterr().err
    assert "hf-ralm: warning: --stride 8 overrides the saved folder's retrieval_stride 4" in err.splitlines()
    assert "--max-doc-tokens" not in err  # given, but the saved value: nothing replaced
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["args"]["stride"] == 8 and report["args"]["max_length"] == 16
    assert report["args"]["retriever"] == "bm25" and report["num_retrievals"] > 0


def test_another_retriever_given_replaces_the_saved_one_and_says_so(files, capsys, saved_ralm):
    main(eval_lm(files, saved_ralm, "--retriever", "none"))
    assert "hf-ralm: warning: --retriever none overrides the saved folder's retriever bm25" in capsys.readouterr().err
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["num_retrievals"] == 0 and report["max_length"] == 16


@pytest.mark.parametrize("flag,value,expected", [
    ("--stride", "0", "--stride must be at least 1, got 0"),
    ("--ensemble-temperature", "0", "--ensemble-temperature must be a positive number"),
])
def test_a_value_wrong_whatever_the_folder_holds_is_refused_before_the_folder_is_looked_up(
        files, capsys, monkeypatch, flag, value, expected):
    """A Hub id's lookup (whether it is a saved RALM) waits on the network: a usage error must not wait for it."""
    def looked_up(*args, **kwargs):
        raise AssertionError("the saved folder was looked up before the flags were checked")

    monkeypatch.setattr("hf_ralm.loading_ralm.saved_ralm_settings", looked_up)
    fail(capsys, files, ["eval-lm", "--model", "someone/some-model", "--dataset-path", files["dataset"], flag, value],
         expected)


def test_retrieve_on_a_saved_ralm_uses_its_retriever(files, capsys, saved_ralm):
    """The other commands that take --model get the folder's retriever through the same code."""
    path = files["tmp"] / "retrieved.json"
    main(["retrieve", "--model", str(saved_ralm), "--dataset-path", files["dataset"], *TEST_DEVICE_ARGS,
          "--save-retrieval-file", str(path)])
    windows = json.loads(path.read_text())
    assert len(windows) > 1 and all(window["retrieved_docs"] for window in windows[1:])  # the saved 16-token windows


def test_eval_qa_on_a_saved_ralm_takes_its_retriever_but_keeps_its_own_max_length(saved_ralm, capsys):
    """eval-qa's --max-length is the length of its prompts, no RALM setting: the saved window does not replace it."""
    args = build_parser().parse_args(["eval-qa", "--model", str(saved_ralm), "--questions", "questions.jsonl"])
    use_saved_settings(args)
    assert args.retriever == "bm25" and args.max_length is None and "command_flags" not in vars(args)
    assert capsys.readouterr().err == ""


def test_eval_qa_with_the_questions_own_passages_does_not_take_the_saved_retriever(saved_ralm, capsys):
    """--use-ctxs takes no retrieval: the saved retriever is not put in its place (which --use-ctxs would refuse as a
    --retriever the user never gave)."""
    args = build_parser().parse_args(["eval-qa", "--model", str(saved_ralm), "--questions", "questions.jsonl",
                                      "--use-ctxs"])
    use_saved_settings(args)
    assert args.retriever == "none" and capsys.readouterr().err == ""


# ----------------------------------------------------------------------------------------------------------------
# Paths a saved folder names outside it
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["absolute", "parent"])
@pytest.mark.parametrize("key", ["corpus", "forbidden_titles"])
def test_a_saved_path_outside_the_folder_is_refused(files, capsys, saved, key, how):
    """A corpus or a forbidden-titles file that retriever_config.json names outside the folder is refused (before:
    read, and the corpus indexed into the folder's index); given by the caller, it is used."""
    outside = Path(files["corpus"] if key == "corpus" else files["tmp"] / "titles.txt")
    outside.write_text("Rome\n") if key == "forbidden_titles" else None
    recorded = str(outside) if how == "absolute" else os.path.relpath(outside, saved)
    edit_json(saved / "retriever_config.json", lambda config: {**config, key: recorded})
    fail(capsys, files, eval_lm(files, saved), f"{saved / 'retriever_config.json'}: its {key} {recorded!r} leads "
         f"outside {str(saved)!r}", f"--{key.replace('_', '-')}=")
    with pytest.raises(SavedFolderError, match=f"its {key} .* leads outside"):
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)
    with pytest.raises(SavedFolderError, match=f"its {key} .* leads outside"):
        load_retriever_from_pretrained(str(saved))
    given = load_retriever_from_pretrained(str(saved), **{key: [str(outside)] if key == "corpus" else ["Rome"]})
    assert given.retrieve(["the sailor took the boat"], k=1)[0][0].title == "Sailing"


def test_a_saved_forbidden_titles_file_inside_the_folder_is_read_there(saved):
    (saved / "titles.txt").write_text("Rome\n")
    edit_json(saved / "retriever_config.json", lambda config: {**config, "forbidden_titles": "titles.txt"})
    assert load_retriever_from_pretrained(str(saved)).forbidden_titles == {"Rome"}


def test_a_saved_reranker_outside_the_folder_is_refused(saved, tiny_model_dir):
    edit_json(saved / "config.json", lambda config: {**config, "rerank": "lm", "reranker_model": str(tiny_model_dir)})
    with pytest.raises(SavedFolderError, match=f"config.json: its reranker_model '{tiny_model_dir}' leads outside"):
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)
    given = RetrievalAugmentedModel.from_pretrained(str(saved), reranker_model=str(tiny_model_dir), **ON_TEST_DEVICE)
    assert given.config.reranker_model == str(tiny_model_dir)


# ----------------------------------------------------------------------------------------------------------------
# Saved files that are malformed
# ----------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("content,expected", [
    ({"index_dir": "index"}, "it has no 'type' key"),
    (["bm25"], "it holds a list, not a JSON object"),
    ({"type": "bm26", "index_dir": "index"}, "its type 'bm26' is no retriever hf-ralm knows"),
    ({"type": "bm25", "index_dir": 3}, "its index_dir is a number, not a string"),
    ("not json", "is not a JSON file"),
])
def test_a_malformed_retriever_config_is_refused(files, capsys, saved, content, expected):
    """Before: a KeyError or TypeError traceback from from_pretrained (and the command line never read the file)."""
    path = saved / "retriever_config.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    fail(capsys, files, eval_lm(files, saved), f"{path}: {expected}", "save_pretrained(dir)")
    with pytest.raises(SavedFolderError, match=expected):
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)


def test_an_older_folder_whose_config_holds_no_retriever_object_is_refused(saved):
    (saved / "retriever_config.json").unlink()
    edit_json(saved / "config.json", lambda config: {**config, "retriever": "bm25"})
    with pytest.raises(SavedFolderError, match="config.json: its retriever holds a string, not a JSON object"):
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)


def test_a_saved_ralm_that_names_itself_as_its_base_model_is_refused(files, capsys, saved):
    """Before: a RecursionError, thousands of lines of traceback."""
    edit_json(saved / "config.json", lambda config: {**config, "base_model_name_or_path": str(saved)})
    fail(capsys, files, eval_lm(files, saved), f"{saved / 'config.json'}: its base_model_name_or_path",
         "is this folder itself")


def test_a_chain_of_saved_ralms_that_comes_back_is_refused(saved, tmp_path):
    other = Path(shutil.copytree(saved, tmp_path / "other-ralm"))
    edit_json(saved / "config.json", lambda config: {**config, "base_model_name_or_path": str(other)})
    edit_json(other / "config.json", lambda config: {**config, "base_model_name_or_path": str(saved)})
    with pytest.raises(SavedFolderError, match=f"{other / 'config.json'}: its base_model_name_or_path '{saved}' is "
                                               "the saved RALM"):
        RetrievalAugmentedModel.from_pretrained(str(saved), **ON_TEST_DEVICE)


def test_a_saved_passage_template_with_an_unknown_field_is_refused(files, capsys, saved):
    """Before: a KeyError at the first passage put in context."""
    edit_json(saved / "config.json", lambda config: {**config, "passage_template": "{nope}: {text}"})
    fail(capsys, files, eval_lm(files, saved), f"{saved / 'config.json'}: passage_template '{{nope}}: {{text}}' uses "
         "the field {nope}", "{title} and {text}")


@pytest.mark.parametrize("template", ["{nope}", "{title.upper}", "{0}", "{title", "{text:d}"])
def test_a_passage_template_that_passages_cannot_fill_is_refused(template):
    with pytest.raises(SettingError, match="passage_template .* may use only {title} and {text}"):
        RalmConfig(passage_template=template)
    assert RalmConfig(passage_template="Title: {title!r}\n{text:>4}").passage_text("A", "b") == "Title: 'A'\n   b"
