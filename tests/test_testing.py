"""hf_ralm.testing, the plain loops every exactness test holds the fast paths to, is a spec of its own: it encodes
passages as docs/conventions.md says (checked here token by token, with and without a BOS), imports none of the code
it checks, and the library's inputs agree with it; the old home warns; the test device is checked at session start."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from conftest import BOS_ID, REPO_ROOT, SPECIAL_TOKENS, TINY_VOCAB_WORDS, device_problem
from hf_ralm import RalmConfig
from hf_ralm.core.model_inputs import context_prefix, passage_prefix
from hf_ralm.core.passages import Passage
from hf_ralm.testing import spec_passage_ids, spec_prefix
from test_architecture import PACKAGE, imported_modules

ROME = Passage("1", "rome", "the emperor of rome")
BAND = Passage("2", "", "the band and the singer")
KING = Passage("3", "castle", "the king and the queen")


def ids(text: str) -> list[int]:
    """The tiny tokenizer's ids of whitespace-separated words, from its vocabulary's layout (not the tokenizer)."""
    vocab = SPECIAL_TOKENS + TINY_VOCAB_WORDS
    return [vocab.index(word) for word in text.split()]


@pytest.mark.parametrize("bos", [False, True])
def test_a_passage_is_encoded_as_the_conventions_say(bos, tiny_tokenizer, tiny_bos_tokenizer):
    """title + newline + text (the text alone without a title), the tokenizer's default special tokens (Gemma-like:
    a BOS; GPT-2-like: none), cut to max_doc_tokens; no passage puts nothing."""
    tokenizer, first = (tiny_bos_tokenizer, [BOS_ID]) if bos else (tiny_tokenizer, [])
    whole = RalmConfig(max_doc_tokens=256)
    assert spec_passage_ids(tokenizer, ROME, whole) == first + ids("rome the emperor of rome")
    assert spec_passage_ids(tokenizer, BAND, whole) == first + ids("the band and the singer")
    assert spec_passage_ids(tokenizer, None, whole) == []
    assert spec_passage_ids(tokenizer, ROME, RalmConfig(max_doc_tokens=3)) == (first + ids("rome the emperor"))[:3]
    template = RalmConfig(max_doc_tokens=256, passage_template="{title} , {text}")
    assert spec_passage_ids(tokenizer, ROME, template) == first + ids("rome , the emperor of rome")


@pytest.mark.parametrize("bos", [False, True])
def test_bos_every_window_puts_one_bos_first_within_max_doc_tokens(bos, tiny_tokenizer, tiny_bos_tokenizer):
    tokenizer = tiny_bos_tokenizer if bos else tiny_tokenizer
    config = RalmConfig(max_doc_tokens=3, bos_every_window=True)
    assert spec_passage_ids(tokenizer, ROME, config) == [BOS_ID] + ids("rome the")
    assert spec_passage_ids(tokenizer, None, config) == [BOS_ID]


def test_several_passages_are_capped_most_relevant_first(tiny_tokenizer):
    """[d_n; sep; ...; sep; d_1], each cut to max_doc_tokens, the total (separators included) capped by
    max_context_doc_tokens (at most and by default n x max_doc_tokens): taken from the most relevant on, the first
    that does not fit cut at its end, the rest left out."""
    config = RalmConfig(max_doc_tokens=4, num_passages=3, max_context_doc_tokens=8)
    # the tiny tokenizer has no token for a blank line: a word separator shows where it goes
    assert spec_prefix(tiny_tokenizer, [ROME, BAND, KING], config, separator=". ,") == (
        ids("the band and the") + ids("rome the emperor of"))
    assert spec_prefix(tiny_tokenizer, [BAND, ROME, KING], RalmConfig(max_doc_tokens=4, num_passages=3), ". ,") == (
        ids("castle the") + ids("rome the emperor of . ,") + ids("the band and the"))
    assert spec_prefix(tiny_tokenizer, [], RalmConfig(bos_every_window=True)) == [BOS_ID]


@pytest.mark.parametrize("bos", [False, True])
@pytest.mark.parametrize("settings", [
    dict(max_doc_tokens=256), dict(max_doc_tokens=3), dict(max_doc_tokens=3, bos_every_window=True),
    dict(max_doc_tokens=5, num_passages=3), dict(max_doc_tokens=5, num_passages=3, max_context_doc_tokens=9),
    dict(max_doc_tokens=4, num_passages=2, bos_every_window=True, passage_template="{title} , {text}"),
])
def test_the_library_puts_what_the_spec_says(bos, settings, tiny_tokenizer, tiny_bos_tokenizer, monkeypatch):
    monkeypatch.setattr("hf_ralm.core.model_inputs.PASSAGE_SEPARATOR", ". ,")
    tokenizer = tiny_bos_tokenizer if bos else tiny_tokenizer
    config = RalmConfig(**settings)
    for passage in (ROME, BAND, KING, None):
        assert passage_prefix(tokenizer, passage, config) == spec_passage_ids(tokenizer, passage, config)
    for passages in ([], [ROME], [ROME, BAND], [KING, BAND, ROME]):
        assert context_prefix(tokenizer, passages, config) == spec_prefix(tokenizer, passages, config, ". ,")


CHECKED = {"core/model_inputs", "core/scoring", "core/ensemble", "core/passage_cache", "core/batching"}
"""What the plain loops check (with every module of selection/ and generation/): they import none of it."""


def test_the_spec_imports_no_code_it_checks():
    """Only values and arithmetic (windows, passages, settings) and where a model's inputs go."""
    allowed = {"config/configuration_ralm", "core/modeling_utils", "core/passages", "core/windows"}
    for path in sorted((PACKAGE / "testing").glob("*.py")):
        imported = {module for _, module in imported_modules(path) if not module.startswith("testing/")}
        assert imported <= allowed, f"{path.name} imports {sorted(imported - allowed)}"
        assert not imported & CHECKED and not any(m.startswith(("selection/", "generation/")) for m in imported)


@pytest.mark.parametrize("name,problem", [
    ("meta", "the meta device holds no values"), ("gpu", "'gpu' is not a PyTorch device name"),
    ("cuda:99", "cuda device(s) on this machine"),
])
def test_a_test_device_that_cannot_run_the_models_is_named(name, problem):
    assert problem in device_problem(name)
    assert device_problem("cpu") is None


def test_a_bad_test_device_stops_the_session_with_one_line():
    """Not hundreds of failures: one usage error before any test runs."""
    env = {**os.environ, "HF_RALM_TEST_DEVICE": "meta"}
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/test_windows.py"],
                         cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in (run.stdout + run.stderr).splitlines() if line.strip()]
    assert lines == ["ERROR: HF_RALM_TEST_DEVICE='meta' cannot run the tests: the meta device holds no values, so no "
                     "figure can be compared there. Set it to a device this machine has, or to cpu (the default)."]
