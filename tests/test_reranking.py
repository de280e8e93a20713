"""Zero-shot LM reranking (issue 8 §1): the fast path equals a plain loop, one window and one candidate at a time
(:func:`hf_ralm.testing.plain_rerank`), written from the issue's words:

* the candidates of window j are its top-k passages; candidate d_i overwrites the first positions of the window
  exactly as the chosen passage will; its ranking score is the summed NLL of the s' tokens just before the window's
  first scored token, given what precedes them in that input; the argmin is chosen (ties: the better retrieval rank)
  and the reader scores the window with it;
* another LM ranks in text: its tokens of the passage, then its tokens of the prefix text cut from the left to its
  window, then its tokens of the decoded ranking tokens;
* with the no-passage choice the window with nothing written over it is one more candidate;
* the oracle ranks on the window's own target tokens; random is a seeded uniform choice among the k.
"""

from __future__ import annotations

import json
import random

import pytest
import torch

from conftest import ARCHS, BOS_ID, MODEL_VOCAB_SIZE, SPECIAL_TOKENS, TINY_VOCAB_WORDS, make_tiny_model
from hf_ralm import RalmConfig
from hf_ralm.evaluation.pipeline import evaluate_perplexity
from hf_ralm.selection.rerank import rerank_windows
from hf_ralm.selection.rankers import LMReranker
from hf_ralm.selection.rules import choose_option, fit_reranker_input, rank_correlation, ranking_span
from hf_ralm.core.passages import NO_PASSAGE, Passage
from hf_ralm.retrieval.files import load_retrieval_file
from hf_ralm.testing import plain_rerank
from hf_ralm.core.windows import plan_windows

WORDS = TINY_VOCAB_WORDS[:60]


def make_text(tokenizer, num_tokens: int, seed: int) -> list[int]:
    rng = random.Random(seed)
    ids = tokenizer(" ".join(rng.choice(WORDS) for _ in range(num_tokens)), add_special_tokens=False)["input_ids"]
    assert len(ids) == num_tokens
    return ids


def make_candidates(windows, k: int, seed: int) -> list[list[Passage]]:
    """Per window up to k passages of 1 to 30 words (some longer than short windows); some windows get fewer, one
    gets none, one gets two identical passages (a tie the better rank must win)."""
    rng = random.Random(seed)
    pools = []
    for w in windows:
        count = 0 if w.index in (0, 2) else rng.choice([k, k, max(1, k - 2)])
        pool = [Passage(f"p{w.index}-{i}", rng.choice(["", "rome", "music"]),
                        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 30))), float(k - i))
                for i in range(count)]
        if w.index == 3 and len(pool) >= 2:
            pool[1] = Passage("dup", pool[0].title, pool[0].text, pool[1].score)
        pools.append(pool)
    return pools


def permuted_tokenizer():
    """A tokenizer over the same words with other ids (a reranker whose vocabulary differs from the reader's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = list(reversed(TINY_VOCAB_WORDS))
    tok = Tokenizer(models.WordLevel(vocab={t: i for i, t in enumerate(SPECIAL_TOKENS + words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", unk_token="<unk>",
                                   pad_token="<pad>")


SETTINGS = [  # (stride, max_length, k, rerank_tokens, num_tokens)
    (4, 32, 4, 6, 60),
    (2, 20, 3, 16, 41),   # s' larger than the room before the scored tokens: clipped to the window
    (3, 48, 5, 4, 50),    # a text barely longer than the window
    (4, 64, 3, 8, 40),    # a text shorter than the window: window 0 alone, nothing to rerank
]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stride,max_length,k,rerank_tokens,num_tokens", SETTINGS)
@pytest.mark.parametrize("strategy,allow_none,margin", [
    ("lm", False, 0.0), ("lm", True, 0.0), ("lm", True, 0.05), ("oracle", False, 0.0), ("oracle", True, 0.0)])
def test_reader_ranking_equals_plain_loop(arch, stride, max_length, k, rerank_tokens, num_tokens, strategy, allow_none,
                                          margin, tiny_models, tiny_tokenizer, tiny_bos_tokenizer):
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if arch == "gemma3" else tiny_tokenizer
    config = RalmConfig(retrieval_stride=stride, max_length=max_length, max_doc_tokens=12, rerank=strategy,
                        rerank_candidates=k - 1, rerank_tokens=rerank_tokens, rerank_allow_no_passage=allow_none,
                        rerank_no_passage_margin=margin, bos_every_window=arch == "gemma3")
    ids = make_text(tokenizer, num_tokens, seed=stride)
    windows = plan_windows(len(ids), max_length, stride)
    candidates = make_candidates(windows, k, seed=max_length)  # k passages, k-1 considered: fewer than retrieved
    expected_chosen, expected_nll = plain_rerank(model, tokenizer, ids, windows, candidates, config=config)
    for batch_size, reuse in [(1, True), (5, True), (8, False)]:
        outcome = rerank_windows(model, tokenizer, ids, windows, [None] * len(windows), candidates=candidates,
                                 config=config,
                                 batch_size=batch_size, reuse_prefix_kv=reuse, show_progress=False)
        assert outcome.chosen == expected_chosen
        assert torch.allclose(outcome.token_nlls[1:], expected_nll[1:], atol=1e-4, rtol=0)
        options = [len(c[: k - 1]) + (allow_none and bool(c)) for c in candidates]
        expected_counts = [o if w.has_retrieval else 0 for o, w in zip(options, windows)]
        assert [len(r) if r else 0 for r in outcome.ranking_nlls] == expected_counts
        assert [len(t) if t else 0 for t in outcome.target_nlls] == expected_counts
        for w, choice, sums in zip(windows, outcome.chosen, outcome.target_nlls):  # the chosen one's target NLLs
            if sums is not None:
                best = len(candidates[w.index][: k - 1]) if choice == NO_PASSAGE else choice
                assert sums[best] == pytest.approx(float(expected_nll[w.score_begin : w.end].sum()), abs=1e-3)
    if len(windows) > 3:
        assert expected_chosen[3] != 1  # the duplicate of candidate 0 never wins over it
        part = rerank_windows(model, tokenizer, ids, windows[2:4], [None] * len(windows), candidates=candidates,
                              config=config,
                              show_progress=False)  # any of the windows: the outcome follows their order
        assert part.chosen == expected_chosen[2:4]


@pytest.mark.parametrize("reader_arch,reranker_arch", [("llama", "gpt2"), ("opt", "gemma3")])
@pytest.mark.parametrize("allow_none", [False, True])
def test_other_lm_ranking_equals_plain_loop(reader_arch, reranker_arch, allow_none, tiny_models, tiny_tokenizer):
    reader = tiny_models[reader_arch]
    reranker = LMReranker(make_tiny_model(reranker_arch, seed=7), permuted_tokenizer(), max_length=40)
    config = RalmConfig(retrieval_stride=4, max_length=32, max_doc_tokens=12, rerank="lm", rerank_candidates=4,
                        rerank_tokens=5, rerank_allow_no_passage=allow_none)
    ids = make_text(tiny_tokenizer, 70, seed=3)
    windows = plan_windows(len(ids), 32, 4)
    candidates = make_candidates(windows, 4, seed=5)
    expected_chosen, expected_nll = plain_rerank(reader, tiny_tokenizer, ids, windows, candidates, config=config,
                                                 reranker=reranker)
    outcome = rerank_windows(reader, tiny_tokenizer, ids, windows, [None] * len(windows), candidates=candidates,
                             config=config,
                             reranker=reranker, batch_size=3, show_progress=False)
    assert outcome.chosen == expected_chosen
    assert outcome.token_nlls is None  # the reader still has to score the chosen passages
    assert len(set(expected_chosen[1:])) > 1  # the choice depends on the window


def test_no_passage_margin_asks_a_passage_to_save_that_many_nats():
    assert choose_option([3.0, 2.0, 4.0], no_passage_last=True) == 1  # no margin: the lowest
    assert choose_option([3.0, 2.0, 4.0], no_passage_last=True, no_passage_margin=2.0) == 1  # saves exactly 2: kept
    assert choose_option([3.0, 2.0, 4.0], no_passage_last=True, no_passage_margin=2.5) == 2  # saves 2 < 2.5: none
    assert choose_option([3.0, 2.0, 4.0], no_passage_last=False, no_passage_margin=9.0) == 1  # no such candidate
    assert choose_option([5.0, 4.0], no_passage_last=True, no_passage_margin=-1.5) == 0  # below zero: passages favoured
    assert choose_option([7.0], no_passage_last=True, no_passage_margin=1.0) == 0  # nothing else to choose


def test_random_is_seeded_and_uniform(tiny_llama, tiny_tokenizer):
    config = RalmConfig(retrieval_stride=2, max_length=16, max_doc_tokens=12, rerank="random", rerank_candidates=4,
                        rerank_seed=3)
    ids = make_text(tiny_tokenizer, 200, seed=1)
    windows = plan_windows(len(ids), 16, 2)
    candidates = [[Passage(str(i), "", "rome", 0.0) for i in range(4)] if w.has_retrieval else [] for w in windows]
    chosen = rerank_windows(tiny_llama, tiny_tokenizer, ids, windows, [None] * len(windows), candidates=candidates,
                            config=config,
                            show_progress=False).chosen
    assert chosen == plain_rerank(tiny_llama, tiny_tokenizer, ids, windows, candidates, config=config)[0]
    counts = [chosen[1:].count(i) for i in range(4)]
    assert min(counts) > 0.6 * len(chosen[1:]) / 4  # roughly uniform over ~90 windows
    again = RalmConfig(**{**config.to_dict(), "rerank_seed": 4})
    assert rerank_windows(tiny_llama, tiny_tokenizer, ids, windows, [None] * len(windows), candidates=candidates,
                          config=again,
                          show_progress=False).chosen != chosen


def test_evaluate_perplexity_reranks_a_paper_retrieval_file(tmp_path, tiny_llama, tiny_tokenizer):
    """End to end: a retrieval file with k candidates (the paper's layout, no ranking) is reranked by the reader in
    evaluate_perplexity; the written file records the choices and ranking NLLs, and evaluating it again (no
    rerank) gives the same figures with one forward per window."""
    config = RalmConfig(retrieval_stride=4, max_length=32, max_doc_tokens=12, rerank="lm", rerank_candidates=4,
                        rerank_tokens=6)
    ids = make_text(tiny_tokenizer, 60, seed=4)
    windows = plan_windows(len(ids), 32, 4)
    candidates = make_candidates(windows, 4, seed=9)
    records = [{"begin_location": w.prev_end, "end_location": w.end, "future": "", "query": "q",
                "retrieved_docs": [p.to_dict() for p in candidates[w.index]]} for w in windows]
    path = tmp_path / "paper.json"
    path.write_text(json.dumps(records))
    expected_chosen, expected_nll = plain_rerank(tiny_llama, tiny_tokenizer, ids, windows, candidates, config=config)

    result = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, config, retrieval_file=str(path),
                                 show_progress=False)
    assert result.chosen == expected_chosen
    assert torch.allclose(result.token_nlls[1:], expected_nll[1:], atol=1e-4, rtol=0)
    assert result.figures["rerank"] == "lm" and result.figures["rerank_candidates"] == 4
    assert result.in_context()[5] == ([candidates[5][expected_chosen[5]]] if expected_chosen[5] >= 0 else [])

    reranked = tmp_path / "reranked.json"
    reranked.write_text(json.dumps(result.retrieval_records(tiny_tokenizer)))
    saved = json.loads(reranked.read_text())
    assert [item.get("chosen") for item in saved] == expected_chosen
    assert all("ranking_nll" in d for item in saved[1:] for d in item["retrieved_docs"])
    assert load_retrieval_file(str(reranked), windows).rerank == "lm"
    plain = RalmConfig(retrieval_stride=4, max_length=32, max_doc_tokens=12)
    again = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, plain, retrieval_file=str(reranked),
                                show_progress=False)
    assert again.chosen == expected_chosen and again.figures["rerank"] == "lm"
    assert again.figures["token_ppl"] == pytest.approx(result.figures["token_ppl"], rel=1e-9)
    with pytest.raises(ValueError, match="already records reranked choices"):
        evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, None, config, retrieval_file=str(reranked),
                            show_progress=False)


def test_fit_reranker_input():
    assert fit_reranker_input([1, 2, 3], [4, 5, 6, 7], [8, 9], max_length=7) == ([1, 2, 3, 6, 7, 8, 9], 5)
    assert fit_reranker_input([1, 2, 3], [4], [8, 9], max_length=10) == ([1, 2, 3, 4, 8, 9], 4)
    assert fit_reranker_input([1], [4, 5, 6], [8], max_length=9) == ([1, 4, 5, 6, 8], 4)  # the whole prefix fits
    assert fit_reranker_input([1, 2, 3, 4, 5], [6], [8, 9], max_length=4) == ([1, 2, 8, 9], 2)  # passage gives way
    with pytest.raises(ValueError, match="cannot hold"):
        fit_reranker_input([1], [2], [3, 4, 5], max_length=3)


def test_rank_correlation_is_spearmans_rho():
    rng = random.Random(0)
    for n in (2, 5, 17):
        ranking, target = [rng.random() for _ in range(n)], [rng.random() for _ in range(n)]
        order = {name: sorted(range(n), key=values.__getitem__) for name, values in
                 (("ranking", ranking), ("target", target))}
        rank = {name: {i: r for r, i in enumerate(o)} for name, o in order.items()}
        # the textbook form for distinct values: 1 - 6 sum(d^2) / (n (n^2 - 1))
        d2 = sum((rank["ranking"][i] - rank["target"][i]) ** 2 for i in range(n))
        assert rank_correlation(ranking, target) == pytest.approx(1 - 6 * d2 / (n * (n * n - 1)), abs=1e-12)
    assert rank_correlation([1.0, 2.0, 3.0], [10.0, 20.0, 30.0]) == pytest.approx(1.0)
    assert rank_correlation([1.0, 2.0, 3.0], [30.0, 20.0, 10.0]) == pytest.approx(-1.0)
    # a tie keeps the candidates' order: [5, 5, 1] ranks as [1, 2, 0], the same order as [2, 3, 1]
    assert rank_correlation([5.0, 5.0, 1.0], [2.0, 3.0, 1.0]) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="two equally long lists of at least 2"):
        rank_correlation([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="at least 2"):
        rank_correlation([1.0], [1.0])


def test_ranking_span_is_clipped_to_the_window():
    windows = plan_windows(40, max_length=10, stride=3)
    assert ranking_span(windows[1], 4) == (6, 10)  # window [3, 13) scores [10, 13)
    assert ranking_span(windows[1], 50) == (4, 10)  # never the window's first token


def test_a_configured_reranker_must_be_passed(tiny_llama, tiny_tokenizer):
    """One check, whoever chooses (evaluation per window, generation per stride): the policy's."""
    config = RalmConfig(retrieval_stride=4, max_length=16, max_doc_tokens=12, rerank="lm",
                        reranker_model="some/small-lm")
    windows = plan_windows(20, 16, 4)
    with pytest.raises(ValueError, match="no reranker was given: pass reranker=load_reranker"):
        rerank_windows(tiny_llama, tiny_tokenizer, list(range(4, 24)), windows, [None] * len(windows),
                       candidates=[[Passage("1", "", "rome")]] * len(windows), config=config, show_progress=False)
    predictive = RalmConfig(retrieval_stride=4, max_length=16, max_doc_tokens=12, rerank="predictive",
                            reranker_model="me/reranker")
    with pytest.raises(ValueError, match="rerank='predictive' needs its trained reranker"):
        rerank_windows(tiny_llama, tiny_tokenizer, list(range(4, 24)), windows, [None] * len(windows),
                       candidates=[[Passage("1", "", "rome")]] * len(windows), config=predictive, show_progress=False)


def test_config_rejects_bad_rerank_settings():
    with pytest.raises(ValueError, match="rerank must be one of"):
        RalmConfig(rerank="best")
    with pytest.raises(ValueError, match="needs reranker_model"):
        RalmConfig(rerank="predictive")
    with pytest.raises(ValueError, match="rerank_allow_no_passage"):
        RalmConfig(rerank="random", rerank_allow_no_passage=True)
    # a trained reranker may take the empty passage as one more candidate, but its scores have no nats for a margin
    assert RalmConfig(rerank="predictive", reranker_model="r", rerank_allow_no_passage=True).rerank_allow_no_passage
    with pytest.raises(ValueError, match="rerank='predictive' does not compute"):
        RalmConfig(rerank="predictive", reranker_model="r", rerank_allow_no_passage=True, rerank_no_passage_margin=1.0)
    with pytest.raises(ValueError, match="rerank_tokens must be at least 1"):
        RalmConfig(rerank="lm", rerank_tokens=0)
    assert RalmConfig(rerank="lm").num_retrieved == 16 and RalmConfig().num_retrieved == 1
    assert BOS_ID < MODEL_VOCAB_SIZE
