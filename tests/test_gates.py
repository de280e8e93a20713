"""Retrieval gates (issue 10 §1) in evaluation, retrieval files and BM25's score normalisation: the fast path
(``evaluate_perplexity``) equals a plain loop, one window at a time, written from the issue's words
(:mod:`hf_ralm.testing`). Generation's gates are in test_generation_beyond.py."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import ARCHS, ARTICLES
from hf_ralm import RalmConfig
from hf_ralm.evaluation.pipeline import evaluate_perplexity, evaluate_retrieval
from hf_ralm.selection.gates import LM_GATE_MARGIN, lm_gate_config, normalized_top_scores, retrieved_fraction
from hf_ralm.core.passages import NO_PASSAGE, Passage
from hf_ralm.config.passage_template import passage_text
from hf_ralm.retrieval.analysis import analyze
from hf_ralm.core.windows import plan_windows
from hf_ralm.testing import ScoredRetriever, lm_gate_margin, plain_rerank, plain_window_nlls, ranking_nll
from test_reranking import WORDS, make_text


def plain_gated(model, tokenizer, ids, windows, retriever, config):
    """The issue's gates, one window at a time: (chosen per window, gate score per window, NLL of every token)."""
    chosen, gate_scores, in_context = [], [], {}
    for w in windows:
        in_context[w.index] = []
        if not w.has_retrieval:
            chosen.append(NO_PASSAGE)
            gate_scores.append(None)
            continue
        query = tokenizer.decode(ids[max(0, w.prev_end - config.query_length_for(retriever)) : w.prev_end])
        found = retriever.retrieve([query], k=config.num_retrieved)[0]
        score = None
        if found and config.retrieval_gate == "score":
            score = found[0].score / retriever.max_scores([query])[0]
            found = found if score >= config.gate_threshold else []
        choice = NO_PASSAGE
        if found:
            choice = plain_rerank(model, tokenizer, ids, [w], {w.index: found}, config=config)[0][0]
        if choice >= 0 and config.retrieval_gate == "lm":
            score = (ranking_nll(model, tokenizer, ids, w, None, config=config)
                     - ranking_nll(model, tokenizer, ids, w, found[choice], config=config))
            choice = choice if score >= lm_gate_margin(config) else NO_PASSAGE
        chosen.append(choice)
        gate_scores.append(score)
        in_context[w.index] = [found[choice]] if choice >= 0 else []
    return chosen, gate_scores, plain_window_nlls(model, tokenizer, ids, windows, in_context, config=config)


GATES = [  # (retrieval_gate, gate_threshold, rerank, other settings)
    ("score", 0.5, "none", {}),
    ("lm", None, "none", {"rerank_tokens": 6}),
    ("lm", 0.0, "random", {"rerank_candidates": 3, "rerank_tokens": 20}),  # s' beyond the window: clipped
    ("score", 0.5, "lm", {"rerank_candidates": 3, "rerank_tokens": 5}),
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("gate,threshold,rerank,settings", GATES)
def test_gates_equal_the_plain_loop(arch, gate, threshold, rerank, settings, tiny_models, tiny_tokenizer,
                                    tiny_bos_tokenizer):
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if arch == "gemma3" else tiny_tokenizer
    config = RalmConfig(retrieval_stride=3, max_length=32, query_length=6, max_doc_tokens=10, retrieval_gate=gate,
                        gate_threshold=threshold, rerank=rerank, bos_every_window=arch == "gemma3", **settings)
    ids = make_text(tokenizer, 70, seed=len(arch))
    windows = plan_windows(len(ids), 32, 3)
    retriever = ScoredRetriever(WORDS, seed=3)
    expected_chosen, expected_scores, expected_nll = plain_gated(model, tokenizer, ids, windows, retriever, config)
    for batch_size, reuse in [(1, True), (6, False)]:
        result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=batch_size,
                                     reuse_prefix_kv=reuse, show_progress=False)
        assert result.chosen == expected_chosen
        assert torch.allclose(result.token_nlls[1:], expected_nll[1:], atol=1e-4, rtol=0)
        assert [s is None for s in result.gate_scores] == [s is None for s in expected_scores]
        assert all(a is None or a == pytest.approx(b, abs=1e-3) for a, b in zip(result.gate_scores, expected_scores))
    later = [c for c, w in zip(expected_chosen, windows) if w.has_retrieval]
    assert result.figures["retrieved_fraction"] == pytest.approx(sum(c >= 0 for c in later) / len(later))
    assert result.figures["retrieval_gate"] == gate
    assert ("gate_threshold" in result.figures) == (threshold is not None)
    closed = [s for s in expected_scores if s is not None and s < (threshold or 0)]
    assert closed and len(closed) < len([s for s in expected_scores if s is not None])  # the gate opened and closed


@pytest.mark.parametrize("arch", ARCHS)
def test_lm_gate_threshold_is_a_margin_in_nats(arch, tiny_models, tiny_tokenizer, tiny_bos_tokenizer):
    """A positive lm gate threshold closes the windows whose passage saves fewer nats than it, and equals the plain
    loop; the threshold lies mid-way among the windows' positive gate scores (tiny models' scale differs by arch)."""
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if arch == "gemma3" else tiny_tokenizer
    common = dict(retrieval_stride=3, max_length=32, query_length=6, max_doc_tokens=10, retrieval_gate="lm",
                  rerank_tokens=6, bos_every_window=arch == "gemma3")
    ids = make_text(tokenizer, 70, seed=len(arch))
    windows = plan_windows(len(ids), 32, 3)
    retriever = ScoredRetriever(WORDS, seed=3)
    plain_chosen, scores, _ = plain_gated(model, tokenizer, ids, windows, retriever,
                                          RalmConfig(gate_threshold=0.0, **common))  # the gate at 0 nats
    helped = sorted(s for s in scores if s is not None and s >= 0)
    middle = len(helped) // 2
    assert helped[middle] - helped[middle - 1] > 1e-3  # no window's score at the threshold, where float noise decides
    threshold = (helped[middle - 1] + helped[middle]) / 2
    config = RalmConfig(gate_threshold=threshold, **common)
    expected_chosen, _, expected_nll = plain_gated(model, tokenizer, ids, windows, retriever, config)
    result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=4, show_progress=False)
    assert result.chosen == expected_chosen
    assert torch.allclose(result.token_nlls[1:], expected_nll[1:], atol=1e-4, rtol=0)
    assert result.figures["gate_threshold"] == threshold
    opened = [i for i, (s, c) in enumerate(zip(scores, plain_chosen)) if s is not None and c >= 0]
    assert [i for i in opened if expected_chosen[i] >= 0] == [i for i in opened if scores[i] >= threshold]
    assert 0 < sum(c >= 0 for c in expected_chosen) < len(opened)  # it kept some passages the 0-nat gate kept


def test_score_gate_thresholds_zero_and_one(tiny_llama, tiny_tokenizer):
    """Threshold 0 keeps every passage (the paper); 1 none (no passage reaches the query's maximum)."""
    ids = make_text(tiny_tokenizer, 60, seed=1)
    common = dict(retrieval_stride=4, max_length=24, query_length=6, max_doc_tokens=8)
    retriever = ScoredRetriever(WORDS, seed=2)
    always = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever, RalmConfig(**common),
                                 show_progress=False)
    results = {t: evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever,
                                      RalmConfig(retrieval_gate="score", gate_threshold=t, **common),
                                      show_progress=False) for t in (0.0, 1.0)}
    assert results[0.0].chosen == always.chosen and results[0.0].figures["nll_sum"] == always.figures["nll_sum"]
    plain = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, RalmConfig(**common), show_progress=False)
    assert results[1.0].figures["retrieved_fraction"] == 0.0 < always.figures["retrieved_fraction"] < 1.0
    assert results[1.0].figures["nll_sum"] == pytest.approx(plain.figures["nll_sum"], rel=1e-9)
    assert plain.figures["retrieved_fraction"] == 0.0


def test_lm_gate_on_the_readers_ranking_is_the_no_passage_choice(tiny_llama, tiny_tokenizer):
    """With the reader ranking the candidates, the lm gate gives the choices of rerank_allow_no_passage, its margin
    (the default, 2 nats) that of the no-passage choice."""
    ids = make_text(tiny_tokenizer, 60, seed=2)
    common = dict(retrieval_stride=4, max_length=32, query_length=6, max_doc_tokens=10, rerank="lm",
                  rerank_candidates=3, rerank_tokens=6)
    retriever = ScoredRetriever(WORDS, seed=5)
    gated = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever, RalmConfig(retrieval_gate="lm", **common),
                                show_progress=False)
    allowed = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever,
                                  RalmConfig(rerank_allow_no_passage=True, rerank_no_passage_margin=2.0, **common),
                                  show_progress=False)
    assert gated.chosen == allowed.chosen and NO_PASSAGE in gated.chosen[1:]
    assert gated.figures["nll_sum"] == pytest.approx(allowed.figures["nll_sum"], rel=1e-9)


def test_lm_gate_config_is_reranking_with_two_candidates():
    config = lm_gate_config(RalmConfig(retrieval_gate="lm", rerank="predictive", reranker_model="x", rerank_tokens=7))
    assert (config.rerank, config.rerank_candidates, config.rerank_allow_no_passage, config.reranker_model,
            config.rerank_tokens, config.retrieval_gate) == ("lm", 1, True, None, 7, "always")
    assert config.rerank_no_passage_margin == LM_GATE_MARGIN == 2.0 and config.gate_threshold is None  # the default
    assert lm_gate_config(RalmConfig(retrieval_gate="lm", gate_threshold=1.5)).rerank_no_passage_margin == 1.5


@pytest.mark.parametrize("gate,threshold", [("score", 0.5), ("lm", None)])
def test_gated_retrieval_file_is_reused(tmp_path, tiny_llama, tiny_tokenizer, gate, threshold):
    """The file records each window's choice (-1 where the gate closed) and gate score; evaluating it with the default
    gate gives the gated figures without retrieving or gating again."""
    ids = make_text(tiny_tokenizer, 60, seed=6)
    common = dict(retrieval_stride=4, max_length=32, query_length=6, max_doc_tokens=10)
    config = RalmConfig(retrieval_gate=gate, gate_threshold=threshold, **common)
    retriever = ScoredRetriever(WORDS, seed=2)
    result = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever, config, show_progress=False)
    path = tmp_path / "gated.json"
    path.write_text(json.dumps(result.retrieval_records(tiny_tokenizer)))
    records = json.loads(path.read_text())
    assert [r["chosen"] for r in records] == result.chosen and -1 in result.chosen[1:]
    assert all(r["retrieval_gate"] == gate and r["rerank"] == "none" for r in records)
    assert all(("gate_threshold" in r) == (gate == "score") for r in records)
    assert [r.get("gate_score") for r in records] == result.gate_scores
    again = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, RalmConfig(**common), retrieval_file=str(path),
                                show_progress=False)
    assert again.chosen == result.chosen and again.gate_scores == result.gate_scores
    assert again.figures["nll_sum"] == pytest.approx(result.figures["nll_sum"], rel=1e-9)
    for key in ("retrieved_fraction", "retrieval_gate"):
        assert again.figures[key] == result.figures[key]
    with pytest.raises(ValueError, match=rf"already records gated choices \(retrieval_gate={gate}\)"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, config, retrieval_file=str(path),
                            show_progress=False)


def test_score_gate_needs_the_retrievers_maximum(tmp_path, tiny_llama, tiny_tokenizer):
    ids = make_text(tiny_tokenizer, 40, seed=3)
    common = dict(retrieval_stride=4, max_length=24, query_length=6, max_doc_tokens=8)
    plain = evaluate_retrieval(tiny_llama, tiny_tokenizer, ids, ScoredRetriever(WORDS), RalmConfig(**common),
                               show_progress=False)
    path = tmp_path / "plain.json"
    path.write_text(json.dumps(plain.retrieval_records(tiny_tokenizer)))
    gated = RalmConfig(retrieval_gate="score", gate_threshold=0.2, **common)
    with pytest.raises(ValueError, match="only the retriever knows"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, gated, retrieval_file=str(path),
                            show_progress=False)

    class NoBound:
        def retrieve(self, queries, k=1):
            return [[Passage("1", "", "rome", 3.0)] for _ in queries]

    with pytest.raises(ValueError, match="NoBound has none: use retrieval_gate='lm'"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, NoBound(), gated, show_progress=False)


def test_bm25_max_score_is_the_sum_of_the_query_terms_idf(tiny_index):
    retriever = tiny_index["retriever"]
    documents = [set(analyze(passage_text(a["title"], a["text"]))) for a in ARTICLES]
    queries = ["the emperor of rome and rome", "a comet in the galaxy", "the zebra", "nero"]
    bounds = retriever.max_scores(queries)
    for query, bound in zip(queries, bounds):
        terms = [t for t in analyze(query) if any(t in d for d in documents)]  # unknown terms: none
        df = [sum(t in d for d in documents) for t in terms]
        assert bound == pytest.approx(sum(math.log(1 + (5 - n + 0.5) / (n + 0.5)) for n in df), rel=1e-6)
    assert bounds[0] > retriever.max_scores(["the emperor of rome"])[0]  # a repeated term counts again
    assert bounds[2] == 0.0  # nothing in the index: nothing can be retrieved either
    found = retriever.retrieve(queries, k=5)
    assert all(0 < p.score < bound for passages, bound in zip(found, bounds) for p in passages)
    scores = normalized_top_scores(retriever, queries, found)
    assert scores[2] is None and all(0 < s < 1 for s in scores if s is not None)


def test_retrieved_fraction_counts_windows_after_the_first():
    windows = plan_windows(12, max_length=6, stride=2)  # four windows
    passages = [[], [Passage("1", "", "a")], [], [Passage("2", "", "b")]]
    assert retrieved_fraction(windows, passages, [-1, 0, -1, -1]) == pytest.approx(1 / 3)
    assert retrieved_fraction(windows[:1], passages, [-1]) is None


@pytest.mark.parametrize("settings,message", [
    (dict(retrieval_gate="sometimes"), "retrieval_gate must be one of always, score, lm"),
    (dict(retrieval_gate="score"), "retrieval_gate='score' needs gate_threshold"),
    (dict(retrieval_gate="score", gate_threshold=1.5), "gate_threshold must be a number from 0 to 1"),
    (dict(retrieval_gate="score", gate_threshold=True), "gate_threshold must be a number from 0 to 1"),
    (dict(gate_threshold=0.5), "gate_threshold is the threshold of retrieval_gate='score' or 'lm'"),
    (dict(retrieval_gate="lm", gate_threshold=float("nan")), "The lm gate's gate_threshold is the nats"),
    (dict(rerank="lm", rerank_no_passage_margin=1.0), "set rerank_allow_no_passage=True, or drop the margin"),
    (dict(rerank="lm", rerank_allow_no_passage=True, rerank_no_passage_margin="1"), "must be a finite number"),
    (dict(retrieval_gate="lm", num_passages=2), "retrieval_gate='lm' weighs one passage against none"),
    (dict(retrieval_gate="lm", ensemble_size=2), "use retrieval_gate='score' with an ensemble"),
])
def test_config_rejects_bad_gate_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        RalmConfig(**settings)
