"""Integration tests on the real models (SmolLM2-135M-Instruct, Gemma 3 270M) and the real data of ../shared/data.

Skipped when the models are missing, failed instead when ``HF_RALM_REQUIRE_MODELS=1``."""

from __future__ import annotations

import gzip
import itertools
import json
import math

import pytest
import torch

from conftest import SHARED_DATA, require_shared_file
from hf_ralm import RalmConfig
from hf_ralm.evaluation.pipeline import evaluate_retrieval
from hf_ralm.core.model_inputs import window_prefixes
from hf_ralm.testing import reference_window_nlls
from hf_ralm.retrieval import BM25Retriever
from hf_ralm.core.passages import Passage
from hf_ralm.core.scoring import score_windows
from hf_ralm.core.windows import plan_windows
from hf_ralm.core.data import join_rows

pytestmark = pytest.mark.integration

EVAL_TOKENS = 600
MAX_LENGTH = 128
STRIDE = 4
NUM_ARTICLES = 200


@pytest.fixture(scope="module")
def wiki_index(tmp_path_factory):
    articles_path = require_shared_file(SHARED_DATA / "wikipedia-2015-sample" / "articles.jsonl.gz")
    with gzip.open(articles_path, "rt", encoding="utf-8") as f:
        articles = [json.loads(line) for line in itertools.islice(f, NUM_ARTICLES)]
    index_dir = tmp_path_factory.mktemp("wiki") / "index"
    return BM25Retriever.build(articles, str(index_dir), show_progress=False)


@pytest.fixture(scope="module")
def wikitext_valid():
    path = require_shared_file(SHARED_DATA / "wikitext-103" / "valid.jsonl")
    with open(path, encoding="utf-8") as f:
        rows = [json.loads(line)["text"] for line in itertools.islice(f, 60)]
    return join_rows(rows)


def test_smollm2_fast_scorer_equals_reference(real_model_dir, wiki_index, wikitext_valid):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = real_model_dir("smollm2-135m-instruct")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
    tokenizer = AutoTokenizer.from_pretrained(path)
    config = RalmConfig(retrieval_stride=STRIDE, query_length=32, max_length=MAX_LENGTH, max_doc_tokens=64)

    result = evaluate_retrieval(model, tokenizer, wikitext_valid, wiki_index, config, max_eval_tokens=EVAL_TOKENS,
                                show_progress=False)
    ids, windows = result.ids, result.windows
    assert len(ids) == EVAL_TOKENS
    assert windows == plan_windows(EVAL_TOKENS, MAX_LENGTH, STRIDE)
    assert result.figures["num_windows_with_passage"] > len(windows) // 2  # real retrievals
    prefixes = window_prefixes(tokenizer, windows, result.passages, config)
    assert prefixes[0] == []
    assert any(len(p) == 64 for p in prefixes)

    fast = score_windows(model, ids, windows, prefixes, batch_size=8, reuse_prefix_kv=True, show_progress=False)
    assert math.isnan(fast[0]) and torch.isfinite(fast[1:]).all()

    # the reference loop on window 0, the first windows and every fourth one after (all of them would take a
    # minute on two busy CPU cores); the tokens they score are compared one by one and summed
    checked = [w for w in windows if w.index < 6 or w.index % 4 == 0 or w is windows[-1]]
    ref = reference_window_nlls(model, ids, checked, prefixes)
    scored = ~torch.isnan(ref)
    assert int(scored.sum()) == sum(w.num_scored for w in checked) > EVAL_TOKENS // 4
    assert (fast[scored] - ref[scored]).abs().max().item() < 1e-3
    fast_sum, ref_sum = fast[scored].sum().item(), ref[scored].sum().item()
    assert abs(fast_sum - ref_sum) <= 1e-4 * abs(ref_sum)
    # a real model on real text: a sane perplexity, and retrieval changes it
    token_ppl = math.exp(fast[1:].sum().item() / len(ids))
    assert 2 < token_ppl < 200
    some = windows[1:9]
    no_passage = score_windows(model, ids, some, [[] for _ in windows], batch_size=8, show_progress=False)
    span = slice(some[0].score_begin, some[-1].end)
    assert abs(no_passage[span].sum().item() - fast[span].sum().item()) > 1e-3 * abs(fast[span].sum().item())


def test_gemma3_bos_conventions(real_model_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(real_model_dir("gemma-3-270m"))
    assert tokenizer.bos_token_id == 2
    windows = plan_windows(40, 16, 4)
    passage = Passage("1", "Homarus gammarus", "The European lobster is a species of clawed lobster.", 1.0)
    passages = [[]] + [[passage] if w.index % 2 else [] for w in windows[1:]]

    # default (the reference's): the passage is encoded with the tokenizer's special tokens, so it starts with BOS;
    # windows without a passage get nothing
    default = window_prefixes(tokenizer, windows, passages, RalmConfig())
    assert default[0] == []
    for w in windows[1:]:
        if w.index % 2:
            assert default[w.index][0] == 2 and default[w.index].count(2) == 1
        else:
            assert default[w.index] == []

    # bos_every_window: every window starts with BOS, exactly one
    every = window_prefixes(tokenizer, windows, passages, RalmConfig(bos_every_window=True))
    assert every[0] == [2]
    for w in windows[1:]:
        assert every[w.index] == (default[w.index] if w.index % 2 else [2])

    # the evaluated text itself never gets a BOS
    assert 2 not in tokenizer(" = Homarus gammarus = \n", add_special_tokens=False)["input_ids"]
