"""The ``ralm_perplexity`` evaluate metric, by path and by bare name (offline), and the shim that ``import hf_ralm``
writes into ``evaluate``'s module cache."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest
import torch

import hf_ralm.metrics
from conftest import EVAL_TEXT
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.metrics.compute import compute_ralm_perplexity
from hf_ralm.core.data import join_rows

KEYS = ("nll_sum", "num_tokens", "num_scored", "num_words", "token_ppl", "word_ppl")
ROWS = [" = Rome = \n", ""] + [" " + s.strip() + " .\n" for s in EVAL_TEXT.split(" . ") if s.strip(" .")]


@pytest.fixture()
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")
    import evaluate

    monkeypatch.setattr(evaluate.config, "HF_EVALUATE_OFFLINE", True)  # read at import time
    return evaluate


@pytest.fixture(scope="module")
def expected(tiny_model_dir, tiny_index):
    model = RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"], retrieval_stride=4, query_length=8,
        max_length=16, max_doc_tokens=12,
    )
    result = model.evaluate_perplexity(join_rows(ROWS), show_progress=False)
    assert result.figures["num_windows_with_passage"] > 0
    return {k: result.figures[k] for k in KEYS}


def metric_kwargs(tiny_model_dir, tiny_index):
    return dict(predictions=ROWS, model_id=str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"],
                stride=4, query_length=8, max_length=16, max_doc_tokens=12)


def assert_same(figures, expected):
    assert set(figures) == {*KEYS, "perplexities", "mean_perplexity"}  # the joined text's, and each prediction's
    for k in KEYS:
        assert figures[k] == pytest.approx(expected[k], rel=1e-9), k


def test_metric_path():
    path = hf_ralm.metrics.metric_path("ralm_perplexity")
    assert os.path.isfile(os.path.join(path, "ralm_perplexity.py"))
    with pytest.raises(ValueError, match="Unknown hf-ralm metric 'bleu'; shipped metrics: ralm_perplexity"):
        hf_ralm.metrics.metric_path("bleu")


def test_compute_function(tiny_model_dir, tiny_index, expected):
    figures = compute_ralm_perplexity(**metric_kwargs(tiny_model_dir, tiny_index))
    assert_same(figures, expected)
    assert figures["num_scored"] == figures["num_tokens"] - 1
    plain = compute_ralm_perplexity(ROWS, str(tiny_model_dir), stride=4, query_length=8, max_length=16,
                                    max_doc_tokens=12)
    assert plain["nll_sum"] != pytest.approx(expected["nll_sum"], rel=1e-6)  # the retriever was used above


def test_each_prediction_has_its_own_perplexity_as_evaluates(tiny_model_dir, tiny_index):
    """``perplexities[i]``: exp of the mean NLL of prediction i's tokens after its first, with retrieval inside it;
    without retrieval and in one window, what the plain model's own loss gives (evaluate's ``perplexity``)."""
    import math

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from hf_ralm.errors import RalmWarning

    with pytest.warns(RalmWarning, match=r"8 of 9 predictions had no passage in context"):  # each fits in a window
        figures = compute_ralm_perplexity(**metric_kwargs(tiny_model_dir, tiny_index))
    model = RetrievalAugmentedModel.from_pretrained(
        str(tiny_model_dir), retriever="bm25", index_dir=tiny_index["index_dir"], retrieval_stride=4, query_length=8,
        max_length=16, max_doc_tokens=12)
    assert len(figures["perplexities"]) == len(ROWS)
    for row, perplexity in zip(ROWS, figures["perplexities"]):
        if not row.strip():
            assert math.isnan(perplexity)  # nothing to score
            continue
        result = model.evaluate_perplexity(row, show_progress=False).figures
        assert perplexity == pytest.approx(math.exp(result["nll_sum"] / result["num_scored"]), rel=1e-9)
    finite = [p for p in figures["perplexities"] if not math.isnan(p)]
    assert figures["mean_perplexity"] == pytest.approx(sum(finite) / len(finite), rel=1e-12)
    # one long prediction retrieves inside itself, and is its own joined text
    long = compute_ralm_perplexity(**{**metric_kwargs(tiny_model_dir, tiny_index), "predictions": [EVAL_TEXT]})
    assert long["perplexities"] == [pytest.approx(math.exp(long["nll_sum"] / long["num_scored"]), rel=1e-9)]
    assert model.evaluate_perplexity(EVAL_TEXT, show_progress=False).figures["num_windows_with_passage"] > 0

    texts = ["the emperor of rome and the senate", "a comet in the galaxy"]  # shorter than a window: no retrieval
    plain = compute_ralm_perplexity(texts, str(tiny_model_dir), max_length=16)["perplexities"]
    lm, tokenizer = AutoModelForCausalLM.from_pretrained(tiny_model_dir), AutoTokenizer.from_pretrained(tiny_model_dir)
    for text, perplexity in zip(texts, plain):
        ids = tokenizer(text, add_special_tokens=False, return_tensors="pt").input_ids
        with torch.no_grad():
            assert perplexity == pytest.approx(math.exp(lm(ids, labels=ids).loss.item()), rel=1e-5)


@pytest.mark.parametrize("name", sorted(hf_ralm.metrics.METRICS))
def test_metric_cards(name):
    """Each metric ships its card, as evaluate's metrics do: a README.md whose YAML header names it and whose
    "Output Values" list every value it returns."""
    import yaml

    card = open(os.path.join(hf_ralm.metrics.metric_path(name), "README.md"), encoding="utf-8").read()
    _, header, body = card.split("---\n", 2)
    header = yaml.safe_load(header)
    assert header["title"] and header["description"] and {"evaluate", "metric"} <= set(header["tags"])
    assert body.startswith(f"\n# Metric Card for {header['title']}\n")
    outputs = body.split("### Output Values", 1)[1].split("\n## ", 1)[0]
    returned = {"ralm_perplexity": (*KEYS, "perplexities", "mean_perplexity"),
                "ralm_exact_match": ("exact_match", "num_correct", "num_examples")}[name]
    assert all(f"**{key}**" in outputs for key in returned)


def test_evaluate_load_by_path(offline, tiny_model_dir, tiny_index, expected, tmp_path):
    metric = offline.load(hf_ralm.metrics.metric_path("ralm_perplexity"), cache_dir=str(tmp_path))
    assert_same(metric.compute(**metric_kwargs(tiny_model_dir, tiny_index)), expected)


def test_evaluate_load_by_bare_name(offline, tiny_model_dir, tiny_index, expected, tmp_path):
    """Resolves offline through the shim that ``import hf_ralm`` wrote."""
    metric = offline.load("ralm_perplexity", cache_dir=str(tmp_path))
    assert type(metric).__name__ == "RalmPerplexity"
    assert_same(metric.compute(**metric_kwargs(tiny_model_dir, tiny_index)), expected)


def test_shim_writer(monkeypatch, tmp_path):
    cache = tmp_path / "modules"
    monkeypatch.setenv("HF_MODULES_CACHE", str(cache))
    assert hf_ralm.metrics.modules_cache() == str(cache)
    written = hf_ralm.metrics.register_metrics()
    root = cache / "evaluate_modules" / "metrics"
    code = ("from hf_ralm.metrics.ralm_perplexity.ralm_perplexity import RalmPerplexity"
            "  # noqa: F401 (shim written by hf-ralm)\n")
    folder = root / "evaluate-metric--ralm_perplexity" / hashlib.sha256(code.encode()).hexdigest()
    target = folder / "ralm_perplexity.py"
    assert target.read_text() == code
    assert str(target) in written and len(written) == len(hf_ralm.metrics.METRICS)
    for package in (cache / "evaluate_modules", root, folder.parent, folder):
        assert (package / "__init__.py").is_file()
    assert not list(folder.glob("*.tmp"))
    # idempotent: an existing shim is left alone
    target.write_text(code + "# touched\n")
    assert hf_ralm.metrics.register_metrics() == []
    assert target.read_text().endswith("# touched\n")
    assert len(list((root / "evaluate-metric--ralm_perplexity").iterdir())) == 2  # the hash folder + __init__.py
    # the shim imports the installed metric
    namespace: dict = {}
    exec(code, namespace)
    from hf_ralm.metrics.ralm_perplexity.ralm_perplexity import RalmPerplexity

    assert namespace["RalmPerplexity"] is RalmPerplexity


def test_modules_cache_location(monkeypatch, tmp_path):
    monkeypatch.delenv("HF_MODULES_CACHE", raising=False)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert hf_ralm.metrics.modules_cache() == str(tmp_path / "hf" / "modules")
    monkeypatch.delenv("HF_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert hf_ralm.metrics.modules_cache() == str(tmp_path / "xdg" / "huggingface" / "modules")
    monkeypatch.setenv("HF_MODULES_CACHE", "~/somewhere")
    assert hf_ralm.metrics.modules_cache() == os.path.expanduser("~/somewhere")


def test_nothing_runs_at_start_up(tmp_path):
    """A plain interpreter does not touch evaluate's cache (hf-ralm installs no start-up hook), and ``import hf_ralm``
    with a cache folder that cannot be written still succeeds."""
    from importlib.metadata import files

    assert not [f for f in files("hf-ralm") or () if f.name.endswith(".pth") and "metrics" in f.name]
    cache = tmp_path / "modules"
    env = {**os.environ, "HF_MODULES_CACHE": str(cache)}
    proc = subprocess.run([sys.executable, "-c", "print('started')"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "started"
    assert not cache.exists()
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env["HF_MODULES_CACHE"] = str(blocker / "modules")
    proc = subprocess.run([sys.executable, "-c", "import hf_ralm; print('imported')"], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "imported", proc.stderr[-2000:]


def test_fresh_interpreter_loads_by_name_after_import(tmp_path, tiny_model_dir, tiny_index, expected):
    """End to end in fresh interpreters with an empty modules cache: ``import hf_ralm`` writes the shim, after which
    ``evaluate.load("ralm_perplexity")`` works offline, in that process and in a later one that never imports
    hf_ralm itself."""
    cache = tmp_path / "modules"
    shim = cache / "evaluate_modules" / "metrics" / "evaluate-metric--ralm_perplexity"
    script = f"""
import json, os, sys
import torch
torch.set_num_threads(1)
if sys.argv[2] == "import":
    assert not os.path.isdir({str(shim)!r}), "the shim was there before import hf_ralm"
    import hf_ralm
    assert os.path.isdir({str(shim)!r}), "import hf_ralm did not write the shim"
import evaluate
metric = evaluate.load("ralm_perplexity", cache_dir={str(tmp_path / 'evaluate')!r})
kwargs = json.loads(sys.argv[1])
print(json.dumps(metric.compute(**kwargs)))
"""
    kwargs = metric_kwargs(tiny_model_dir, tiny_index)
    env = {**os.environ, "HF_MODULES_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    for mode in ("import", "no-import"):
        proc = subprocess.run([sys.executable, "-c", script, json.dumps(kwargs), mode], env=env, capture_output=True,
                              text=True, timeout=300, cwd=str(tmp_path))
        assert proc.returncode == 0, proc.stderr[-3000:]
        figures = json.loads(proc.stdout.strip().splitlines()[-1])
        assert_same(figures, expected)
