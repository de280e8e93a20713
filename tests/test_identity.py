"""A run's identity, one function for every run that keeps records: the reader, every RALM setting under its own
name and the window length the plan resolved, plus the run's own parts."""

from __future__ import annotations

import json

import pytest

from hf_ralm import RalmConfig, RunOptions
from hf_ralm.config.settings import RALM_FIELDS
from hf_ralm.core.windows import plan_windows
from hf_ralm.core.identity import run_identity
from hf_ralm.core.modeling_utils import model_identity
from hf_ralm.core.plan import prepare, window_length
from hf_ralm.evaluation.window_records import run_settings
from hf_ralm.selection import score_candidates


def test_every_setting_and_the_window_length_are_in_it(tiny_llama):
    config = RalmConfig(retrieval_stride=2, max_length=16)
    identity = run_identity(tiny_llama, config, window_length=16, data="3 tokens, x")
    assert {name: identity[name] for name in RALM_FIELDS} == {name: getattr(config, name) for name in RALM_FIELDS}
    assert identity["window_length"] == 16 and identity["data"] == "3 tokens, x"
    assert {key: identity[key] for key in model_identity(tiny_llama)} == model_identity(tiny_llama)


def test_a_part_may_not_replace_a_setting(tiny_llama):
    with pytest.raises(ValueError, match="'retrieval_stride'"):
        run_identity(tiny_llama, RalmConfig(), window_length=16, retrieval_stride=1)


def test_the_evaluation_and_the_candidate_pass_record_it(tiny_llama, tiny_tokenizer, tmp_path):
    config = RalmConfig(retrieval_stride=4, query_length=8, max_length=16, max_doc_tokens=4)
    ids = tiny_tokenizer.encode("the emperor of rome ruled the empire for years", add_special_tokens=False)
    evaluation = run_settings(model=tiny_llama, tokenizer=tiny_tokenizer, ids=ids, retriever=None, config=config,
                              retrieval_file=None, max_length=16, batch_size=2, reuse_prefix_kv=True, scored=True,
                              chunk_size=8)
    assert RALM_FIELDS <= set(evaluation) and evaluation["window_length"] == 16
    windows = plan_windows(len(ids), 16, 4)
    score_candidates(tiny_llama, tiny_tokenizer, ids, windows, [[] for _ in windows], config=config,
                     run=RunOptions(output_dir=str(tmp_path / "pass"), batch_size=2, show_progress=False),
                     settings={"data": "test"}, max_length=16)
    stored = json.loads((tmp_path / "pass" / "settings.json").read_text())
    assert RALM_FIELDS <= set(stored) and stored["window_length"] == 16 and stored["data"] == "test"


def test_the_plan_resolves_the_window_length_once(tiny_llama, tiny_tokenizer):
    config = RalmConfig(max_length=16)
    plan = prepare("the emperor of rome ruled", tiny_tokenizer, config, model=tiny_llama)
    assert plan.max_length == window_length(tiny_llama, config) == 16
    assert prepare("the emperor", tiny_tokenizer, config, max_length=8).max_length == 8
    with pytest.raises(TypeError, match="exactly one"):
        prepare("the emperor", tiny_tokenizer, config, model=tiny_llama, max_length=8)
    with pytest.raises(TypeError, match="exactly one"):
        prepare("the emperor", tiny_tokenizer, config)
