"""Never report a number that no configuration produced (issue 38): non-finite NLLs stop a run, ``--dtype auto``
never picks a precision a model family overflows in, reports are strict JSON, a retrieval file must belong to the
text it is used with, a passage from the evaluated article itself is reported, and a setting beyond the model's limit
is refused rather than capped."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import ARTICLES, EVAL_TEXT, ON_TEST_DEVICE, TEST_DEVICE_ARGS, fail, make_tiny_model, write_jsonl
from hf_ralm.cli import main
from hf_ralm.errors import NonFiniteError, SettingError
from hf_ralm.core.placement import resolve_dtype
from hf_ralm.core.scoring import ScoredInput, check_finite
from hf_ralm.utils.atomic import write_json_atomic


def tiny_flags(files, *extra: str) -> list[str]:
    return ["--model", files["model"], "--dataset-path", files["dataset"], "--max-length", "16", "--stride", "4",
            "--query-length", "8", "--max-doc-tokens", "8", *TEST_DEVICE_ARGS, "--output-dir", str(files["out"]),
            *extra]


# ----------------------------------------------------------------------------------------------------------------
# Non-finite NLLs
# ----------------------------------------------------------------------------------------------------------------


@pytest.fixture()
def nan_model_dir(tmp_path, tiny_tokenizer):
    """The tiny Llama with one NaN in its output layer: every logit, hence every NLL, is NaN."""
    model = make_tiny_model("llama")
    with torch.no_grad():
        model.lm_head.weight[5, 3] = float("nan")
    model.save_pretrained(tmp_path / "nan-model")
    tiny_tokenizer.save_pretrained(tmp_path / "nan-model")
    return str(tmp_path / "nan-model")


def test_a_nan_nll_stops_eval_lm_with_one_line(files, capsys, nan_model_dir):
    files["model"] = nan_model_dir
    line = fail(capsys, files, ["eval-lm", *tiny_flags(files)], "NLL of text token 1", "is nan in float32",
                "load it in float32 (--dtype)", "No figure is reported")
    assert "half precision" not in line
    assert not files["out"].exists() or not list(files["out"].glob("**/chunk-*"))  # no record of it either


def test_a_nan_nll_stops_the_python_api(nan_model_dir, tiny_tokenizer):
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(nan_model_dir, **ON_TEST_DEVICE, max_length=16)
    with pytest.raises(NonFiniteError, match="is nan in float32"):
        model.evaluate_perplexity(EVAL_TEXT, show_progress=False)


def test_half_precision_overflow_names_the_fix():
    class HalfModel:
        dtype = torch.float16

    item = ScoredInput(list(range(20)), 4, 12, (), 8)
    nlls = torch.tensor([[1.0, 2.0, float("inf"), 1.0]], dtype=torch.float64)
    with pytest.raises(NonFiniteError) as info:
        check_finite(nlls, [item], HalfModel())
    message = info.value.render({"dtype": "--dtype"})
    assert "text token 10 (scored in the input of text tokens 4 to 11) is inf in float16" in message
    assert "half precision overflows in this model: load it in bfloat16 or float32 (--dtype)" in message
    check_finite(torch.ones(2, 3, dtype=torch.float64), [item, item], HalfModel())  # finite: nothing to say


@pytest.mark.parametrize("model_type,expected", [
    ("llama", torch.float16), ("gemma3_text", torch.float32), ("gemma", torch.float32), ("t5", torch.float32),
    (None, torch.float16),
])
def test_auto_dtype_avoids_float16_for_families_that_overflow(monkeypatch, model_type, expected):
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: False)  # a V100 or a T4
    cuda = torch.device("cuda")
    if expected is torch.float32:
        with pytest.warns(UserWarning, match=f"{model_type}.*overflow.*float32"):
            assert resolve_dtype("device-default", cuda, model_type) is expected
    else:
        assert resolve_dtype("device-default", cuda, model_type) is expected
    monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda *a, **k: True)
    assert resolve_dtype("device-default", cuda, model_type) is torch.bfloat16
    assert resolve_dtype("float16", cuda, model_type) is torch.float16  # asked for: given


def test_reports_are_strict_json(tmp_path):
    with pytest.raises(ValueError):
        write_json_atomic(str(tmp_path / "eval.json"), {"token_ppl": math.nan})
    assert not (tmp_path / "eval.json").exists()


# ----------------------------------------------------------------------------------------------------------------
# Inputs that do not belong together
# ----------------------------------------------------------------------------------------------------------------


def test_a_retrieval_file_of_another_text_is_refused(files, capsys):
    made = files["tmp"] / "made.json"
    argv = tiny_flags(files, "--retriever", "bm25", "--corpus", files["corpus"], "--index-dir", files["index"],
                      "--save-retrieval-file", str(made))
    argv[argv.index("--output-dir") + 1] = str(files["tmp"] / "retrieved")
    main(["retrieve", *argv])
    capsys.readouterr()
    words = EVAL_TEXT.split()
    other = " ".join(words[:20] + list(reversed(words[20:])))  # same length, same window layout, another text
    files["dataset"] = str(write_jsonl(files["tmp"] / "other.jsonl", [{"text": other}]))
    fail(capsys, files, ["eval-lm", *tiny_flags(files, "--retrieval-file", str(made))],
         f"{made} was made for another text: window", "there and", "here", "hf-ralm retrieve")
    files["dataset"] = str(write_jsonl(files["tmp"] / "same.jsonl", [{"text": EVAL_TEXT}]))
    main(["eval-lm", *tiny_flags(files, "--retrieval-file", str(made))])  # its own text: accepted
    assert json.loads((files["out"] / "eval.json").read_text())["complete"]


@pytest.fixture()
def leaky_corpus(tmp_path):
    """The tiny corpus plus an article that is the evaluated text itself."""
    return str(write_jsonl(tmp_path / "leaky.jsonl", ARTICLES + [{"id": "a9", "title": "The Text", "text": EVAL_TEXT}]))


def test_passages_that_hold_the_evaluated_text_are_reported(files, capsys, leaky_corpus):
    argv = ["eval-lm", *tiny_flags(files, "--retriever", "bm25", "--corpus", leaky_corpus, "--index-dir",
                                   str(files["tmp"] / "leaky-index"), "--query-length", "12")]
    main(argv)
    err = capsys.readouterr().err
    report = json.loads((files["out"] / "eval.json").read_text())
    assert report["text_in_passage_fraction"] > 0.5
    assert "hf-ralm: warning: in " in err and "the passage holds the evaluated text itself" in err
    assert "most often from 'The Text'" in err and "--forbidden-titles" in err
    assert any("holds the evaluated text itself" in w for w in report["warnings"])

    titles = files["tmp"] / "titles.txt"
    titles.write_text("The Text\n")
    main([*argv, "--forbidden-titles", str(titles), "--output-dir", str(files["tmp"] / "excluded")])
    err = capsys.readouterr().err
    excluded = json.loads((files["tmp"] / "excluded" / "eval.json").read_text())
    assert "evaluated text itself" not in err and "warnings" not in excluded
    assert excluded["text_in_passage_fraction"] < 0.5


def test_compare_reports_leakage_too(tiny_model_dir, tmp_path, leaky_corpus):
    from hf_ralm import RetrievalAugmentedModel

    model = RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), **ON_TEST_DEVICE, retriever="bm25", corpus=leaky_corpus, index_dir=str(tmp_path / "index"),
        max_length=16, retrieval_stride=4, query_length=12, max_doc_tokens=8)
    with pytest.warns(UserWarning, match="holds the evaluated text itself"):
        comparison = model.compare_strategies(EVAL_TEXT, ["none", "top1"], show_progress=False)
    assert comparison.warnings and "Warning: in " in comparison.to_markdown()


def test_a_max_length_beyond_the_model_is_refused(files, capsys):
    fail(capsys, files, ["eval-lm", *tiny_flags(files, "--max-length", "1000000")],
         "--max-length 1000000 exceeds the 128 positions this model has")
    with pytest.raises(SettingError, match="exceeds the 128 positions"):
        from hf_ralm import RetrievalAugmentedModel

        RetrievalAugmentedModel.from_pretrained(files["model"], **ON_TEST_DEVICE, max_length=4096).evaluate_perplexity(
            EVAL_TEXT, show_progress=False)


# ----------------------------------------------------------------------------------------------------------------
# Smaller frictions
# ----------------------------------------------------------------------------------------------------------------


def test_a_text_of_whitespace_is_scored_with_a_warning():
    from hf_ralm.errors import RalmWarning
    from hf_ralm.core.plan import tokenize_text

    class Characters:  # a tokenizer with a token per character, spaces included (as byte-level BPEs have)
        def __call__(self, text, add_special_tokens=False):
            return {"input_ids": [ord(c) for c in text]}

    with pytest.warns(RalmWarning, match=r"only whitespace \(5 characters\)"):
        assert tokenize_text(Characters(), "  \n  ") == [32, 32, 10, 32, 32]


@pytest.mark.parametrize("env,flags,alone", [
    ({}, [], False),
    ({"HF_RALM_IGNORE_SLURM": "1"}, [], True),
    ({}, ["--num-shards", "1"], True),
])
def test_sharding_from_a_slurm_array_is_announced_and_can_be_turned_off(files, capsys, monkeypatch, env, flags,
                                                                        alone):
    for name, value in {"SLURM_ARRAY_TASK_ID": "0", "SLURM_ARRAY_TASK_COUNT": "3", **env}.items():
        monkeypatch.setenv(name, value)
    main(["eval-lm", *tiny_flags(files, "--chunk-size", "4", *flags)])  # several chunks: one worker's are a part
    err = capsys.readouterr().err
    announced = "hf-ralm: worker 0 of 3 (0 to 2), from the Slurm array" in err
    assert announced is not alone
    if announced:
        assert "give --num-shards 1 or set HF_RALM_IGNORE_SLURM=1" in err
        assert err.index("worker 0 of 3") < err.index("windows of L=16")  # before any work
    assert (files["out"] / "eval.json").is_file() is alone


def test_generate_shows_its_progress(files, capsys):
    main(["generate", "--model", files["model"], *TEST_DEVICE_ARGS, "--prompt", "the king", "--max-new-tokens", "6"])
    err = capsys.readouterr().err
    assert "Generating:" in err and "0/6 [" in err  # a bar over the new tokens (it clears itself when done)
