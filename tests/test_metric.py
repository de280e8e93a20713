"""The ``ralm_perplexity`` evaluate metric, by path and by bare name (offline), and the shim that ``import hf_ralm``
writes into ``evaluate``'s module cache."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

import hf_ralm.metrics
from conftest import EVAL_TEXT
from hf_ralm import RetrievalAugmentedModel
from hf_ralm.metrics.compute import compute_ralm_perplexity
from hf_ralm.data import join_rows

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
    assert set(figures) == set(KEYS)
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
