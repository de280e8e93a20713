"""Several passages in context and probability ensembles in evaluation (issue 10 §2, §3): the fast path equals the
plain loops of :mod:`hf_ralm.testing`; the evaluation's ensemble gives the per-token probabilities of generation's
``RalmLogitsProcessor`` ensemble on the same passages; the command line's flags."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import EVAL_TEXT, MODEL_VOCAB_SIZE, TEST_DEVICE, TEST_DEVICE_ARGS, write_jsonl
from hf_ralm import RalmConfig
from hf_ralm.core.ensemble import ensemble_log_weights, ensemble_member_nlls, mix_nlls, mix_window_nlls
from hf_ralm.evaluation.pipeline import evaluate_perplexity
from hf_ralm.generation import RalmLogitsProcessor
from hf_ralm.core.model_inputs import context_indices, context_prefix, passage_prefix
from hf_ralm.core.passages import Passage
from hf_ralm.testing import ScoredRetriever, plain_ensemble_nlls, plain_rerank, plain_window_nlls
from hf_ralm.core.windows import plan_windows
from test_reranking import WORDS, make_text


def plain_in_context(model, tokenizer, ids, windows, retriever, config) -> dict:
    """Per window, the passages in context: the top n retrieved, or after reranking the chosen one first and then
    the others in retrieval order; none for window 0 or when nothing was retrieved (or no passage was chosen)."""
    in_context = {}
    for w in windows:
        in_context[w.index] = []
        if not w.has_retrieval:
            continue
        query = tokenizer.decode(ids[max(0, w.prev_end - config.query_length) : w.prev_end])
        found = retriever.retrieve([query], k=config.num_retrieved)[0]
        if not found:
            continue
        choice = 0 if config.rerank == "none" else plain_rerank(model, tokenizer, ids, [w], {w.index: found},
                                                                config=config)[0][0]
        if choice >= 0:
            in_context[w.index] = ([found[choice]] + found[:choice] + found[choice + 1 :])[: config.num_passages]
    return in_context


PASSAGE_CASES = [  # (arch, stride, max_length, n, max_doc_tokens, cap, num_tokens, rerank)
    ("gpt2", 3, 32, 2, 8, None, 60, "none"),
    ("llama", 4, 32, 3, 10, 18, 60, "none"),      # the cap binds: the least relevant passage is cut or left out
    ("opt", 4, 48, 3, 12, None, 52, "none"),      # a text barely longer than the window
    ("opt", 4, 64, 3, 12, None, 40, "none"),      # a text shorter than the window: window 0 alone
    ("gemma3", 2, 40, 3, 12, None, 61, "none"),   # BOS every window
    ("llama", 3, 32, 2, 10, None, 60, "lm"),      # after reranking: the chosen passage first
    ("gpt2", 3, 32, 1, 10, 6, 60, "none"),        # one passage, cut by the cap
]


@pytest.mark.parametrize("arch,stride,max_length,n,max_doc_tokens,cap,num_tokens,rerank", PASSAGE_CASES)
def test_several_passages_equal_the_plain_loop(arch, stride, max_length, n, max_doc_tokens, cap, num_tokens, rerank,
                                               tiny_models, tiny_tokenizer, tiny_bos_tokenizer):
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if arch == "gemma3" else tiny_tokenizer
    extra = dict(rerank_candidates=4, rerank_tokens=6) if rerank != "none" else {}
    config = RalmConfig(retrieval_stride=stride, max_length=max_length, query_length=6, max_doc_tokens=max_doc_tokens,
                        num_passages=n, max_context_doc_tokens=cap, rerank=rerank, bos_every_window=arch == "gemma3",
                        **extra)
    ids = make_text(tokenizer, num_tokens, seed=stride + n)
    windows = plan_windows(len(ids), max_length, stride)
    retriever = ScoredRetriever(WORDS, seed=n, max_words=30 if arch == "gemma3" else 12)
    in_context = plain_in_context(model, tokenizer, ids, windows, retriever, config)
    expected = plain_window_nlls(model, tokenizer, ids, windows, in_context, config=config)
    for batch_size, reuse in [(1, True), (5, False)]:
        result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=batch_size,
                                     reuse_prefix_kv=reuse, show_progress=False)
        assert torch.allclose(result.token_nlls[1:], expected[1:], atol=1e-4, rtol=0)
        assert result.in_context() == [in_context[w.index] for w in windows]
    assert result.figures["num_passages"] == n
    if len(windows) > 2:
        sizes = {len(in_context[w.index]) for w in windows[1:]}
        assert 0 in sizes and (n == 1 or (sizes & set(range(1, n)) and n in sizes))  # fewer than n found somewhere
    if cap is not None:
        lengths = [len(passage_prefix(tokenizer, p, config)) for w in windows for p in in_context[w.index]]
        assert max(lengths) > 0 and sum(lengths) > cap  # the cap bound somewhere


def test_passages_are_separated(monkeypatch, tiny_llama, tiny_tokenizer):
    """The separator goes between two passages (the tiny tokenizer has no tokens for a blank line: use a word)."""
    monkeypatch.setattr("hf_ralm.core.model_inputs.PASSAGE_SEPARATOR", ". ,")
    config = RalmConfig(retrieval_stride=4, max_length=40, query_length=6, max_doc_tokens=8, num_passages=3,
                        max_context_doc_tokens=20)
    rome, music = Passage("1", "rome", "the emperor"), Passage("2", "", "the band played")
    sep = tiny_tokenizer.encode(". ,", add_special_tokens=False)
    assert context_prefix(tiny_tokenizer, [rome, music], config) == (
        passage_prefix(tiny_tokenizer, music, config) + sep + passage_prefix(tiny_tokenizer, rome, config))
    ids = make_text(tiny_tokenizer, 60, seed=2)
    windows = plan_windows(len(ids), 40, 4)
    retriever = ScoredRetriever(WORDS, seed=4)
    in_context = plain_in_context(tiny_llama, tiny_tokenizer, ids, windows, retriever, config)
    expected = plain_window_nlls(tiny_llama, tiny_tokenizer, ids, windows, in_context, config=config, separator=". ,")
    result = evaluate_perplexity(tiny_llama, tiny_tokenizer, ids, retriever, config, show_progress=False)
    assert torch.allclose(result.token_nlls[1:], expected[1:], atol=1e-4, rtol=0)


def test_passages_must_leave_room_for_a_stride(tiny_llama, tiny_tokenizer):
    """Several passages that together leave no room for a stride in the window would cover the tokens it scores:
    refused when met, naming the setting to lower, whether L is given or the model's maximum (128 for the tiny
    models); a run that puts no passage in context is not refused for a length it never uses."""
    config = RalmConfig(retrieval_stride=2, max_length=32, max_doc_tokens=12, num_passages=3)  # valid: not met yet
    with pytest.raises(ValueError, match=r"^max_length \(32\) cannot hold the passages of 36 tokens "
                                         r"\(max_context_doc_tokens: 36\) and the retrieval_stride \(2\) tokens after "
                                         r"it: lower max_context_doc_tokens to at most 30 or raise max_length to at "
                                         r"least 38\."):
        config.check_room(32, 36)
    config.check_room(32, 30)
    assert RalmConfig(retrieval_stride=2, max_length=32, max_doc_tokens=12, num_passages=3,
                      max_context_doc_tokens=30).context_doc_tokens == 30
    too_many = RalmConfig(max_doc_tokens=50, num_passages=3)
    with pytest.raises(ValueError, match=r"^The model's maximum length \(128\) cannot hold the passages of 150 tokens "
                                         r"\(max_context_doc_tokens: 150\)"):
        too_many.check_room(128, 150)
    result = evaluate_perplexity(tiny_llama, tiny_tokenizer, list(range(4, 40)), None, too_many, show_progress=False)
    assert result.figures["num_retrievals"] == 0


def test_context_indices_and_one_passage():
    assert context_indices(0, 5, 3) == [0, 1, 2] and context_indices(3, 5, 3) == [3, 0, 1]
    assert context_indices(0, 2, 3) == [0, 1] and context_indices(-1, 4, 2) == [] and context_indices(0, 0, 2) == []


ENSEMBLE_CASES = [  # (arch, n, temperature, gate threshold)
    ("gpt2", 2, 1.0, None),
    ("llama", 4, 0.5, None),
    ("opt", 3, 2.0, 0.4),      # windows behind a closed score gate are plain windows
    ("gemma3", 8, 1.0, None),  # more members than passages found
]


@pytest.mark.parametrize("arch,n,temperature,threshold", ENSEMBLE_CASES)
def test_ensemble_equals_the_plain_mixture(arch, n, temperature, threshold, tiny_models, tiny_tokenizer,
                                           tiny_bos_tokenizer):
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if arch == "gemma3" else tiny_tokenizer
    config = RalmConfig(retrieval_stride=3, max_length=32, query_length=6, max_doc_tokens=10, ensemble_size=n,
                        ensemble_temperature=temperature, bos_every_window=arch == "gemma3",
                        retrieval_gate="score" if threshold else "always", gate_threshold=threshold)
    ids = make_text(tokenizer, 60, seed=n)
    windows = plan_windows(len(ids), 32, 3)
    retriever = ScoredRetriever(WORDS, seed=n)
    members = {}
    for w in windows:
        query = tokenizer.decode(ids[max(0, w.prev_end - 6) : w.prev_end])
        found = retriever.retrieve([query], k=n)[0][:n] if w.has_retrieval else []
        bound = retriever.max_scores([query])[0]
        members[w.index] = [] if found and threshold and found[0].score / bound < threshold else found
    expected = plain_ensemble_nlls(model, tokenizer, ids, windows, members, config=config)
    for batch_size, reuse in [(2, True), (7, False)]:
        result = evaluate_perplexity(model, tokenizer, ids, retriever, config, batch_size=batch_size,
                                     reuse_prefix_kv=reuse, show_progress=False)
        assert torch.allclose(result.token_nlls[1:], expected[1:], atol=1e-4, rtol=0)
    assert {len(m) for m in members.values()} >= {0, 1, n}  # no member, one (the window's passage alone), n
    assert result.figures["ensemble_size"] == n and result.figures["ensemble_temperature"] == temperature
    assert result.in_context() == [members[w.index] for w in windows]
    assert all(call[1] == n for call in retriever.calls)


def test_smaller_ensembles_and_other_temperatures_from_one_pass(tiny_llama, tiny_tokenizer):
    """The first n members of an ensemble of 4, mixed at any τ, are the ensemble of n at that τ (what
    benchmarks/tables/gate_tables.py measures every n and τ with)."""
    ids = make_text(tiny_tokenizer, 60, seed=4)
    windows = plan_windows(len(ids), 32, 3)
    retriever = ScoredRetriever(WORDS, seed=4)
    base = dict(retrieval_stride=3, max_length=32, query_length=6, max_doc_tokens=10)
    queries = [tiny_tokenizer.decode(ids[max(0, w.prev_end - 6) : w.prev_end]) if w.has_retrieval else None
               for w in windows]
    passages = [retriever.retrieve([q], k=4)[0] if q else [] for q in queries]
    members, rows = ensemble_member_nlls(tiny_llama, tiny_tokenizer, ids, windows, passages,
                                         config=RalmConfig(**base, ensemble_size=4), show_progress=False)
    assert max(len(m) for m in members) == 4
    for n, temperature in [(2, 1.0), (3, 0.5), (4, 3.0)]:
        config = RalmConfig(**base, ensemble_size=n, ensemble_temperature=temperature)
        own, own_rows = ensemble_member_nlls(tiny_llama, tiny_tokenizer, ids, windows, passages, config=config,
                                             batch_size=3, show_progress=False)  # its own pass, over n members
        expected = mix_window_nlls(windows, [[p.score for p in m] for m in own], own_rows, len(ids), temperature)
        mixed = mix_window_nlls(windows, [[p.score for p in m[:n]] for m in members], rows, len(ids), temperature)
        assert torch.allclose(mixed[1:], expected[1:], atol=1e-6, rtol=0)


def test_mixture_in_log_space():
    rows = [torch.tensor([0.5, 30.0], dtype=torch.float64), torch.tensor([2.0, 800.0], dtype=torch.float64)]
    log_weights = ensemble_log_weights([3.0, 1.0], temperature=0.5)
    weights = torch.softmax(torch.tensor([6.0, 2.0], dtype=torch.float64), 0)
    expected_first = -torch.log(weights[0] * torch.exp(-rows[0][0]) + weights[1] * torch.exp(-rows[1][0]))
    mixed = mix_nlls(rows, log_weights)
    assert float(mixed[0]) == pytest.approx(float(expected_first), abs=1e-12)
    assert float(mixed[1]) == pytest.approx(30.0 - float(log_weights[0]), abs=1e-9)  # exp(-800) underflows: exact


@pytest.mark.parametrize("arch,n,temperature,bos", [("llama", 2, 1.0, False), ("opt", 3, 0.7, False),
                                                    ("gemma3", 4, 1.0, True)])
def test_ensemble_equals_the_logits_processors(arch, n, temperature, bos, tiny_models, tiny_tokenizer,
                                               tiny_bos_tokenizer):
    """Teacher-forced through the text, ``RalmLogitsProcessor(ensemble_size=n)`` gives every token after the first
    window the probability the evaluation's ensemble gives it: the evaluation's window j is generation's stride j-1
    from the prompt ids[:L] (the text is L + a multiple of s tokens long, so the last stride is full too)."""
    model = tiny_models[arch]
    tokenizer = tiny_bos_tokenizer if bos else tiny_tokenizer
    stride, length = 3, 32
    config = RalmConfig(retrieval_stride=stride, max_length=length, query_length=6, max_doc_tokens=10,
                        ensemble_size=n, ensemble_temperature=temperature, bos_every_window=bos)
    ids = make_text(tokenizer, length + 8 * stride, seed=n)
    retriever = ScoredRetriever(WORDS, seed=7)
    result = evaluate_perplexity(model, tokenizer, ids, retriever, config, show_progress=False)
    processor = RalmLogitsProcessor(model, tokenizer, retriever, config, max_new_tokens=len(ids) - length)
    scores = torch.zeros(1, MODEL_VOCAB_SIZE, device=TEST_DEVICE)  # where a generating model's scores would be
    for t in range(length, len(ids)):
        log_probs = processor(torch.tensor([ids[:t]], device=TEST_DEVICE), scores)[0]
        assert float(-log_probs[ids[t]]) == pytest.approx(float(result.token_nlls[t]), abs=1e-4), t
    assert processor.stats["strides"] == 8 and processor.stats["strides_with_passage"] > 0
    mixed = [s for s in processor.sources[0] if "weight" in s]
    assert mixed and processor.stats["empty_retrievals"] > 0  # strides that mixed, and one without a passage


def test_cli_several_passages_ensembles_and_gates(tmp_path, tiny_model_dir, tiny_index, capsys):
    from hf_ralm.cli import main  # here: the command line needs datasets, which the GPU machine lacks (docs/gpu.md)

    data = write_jsonl(tmp_path / "data.jsonl", [{"text": EVAL_TEXT}])
    common = ["--model", str(tiny_model_dir), *TEST_DEVICE_ARGS, "--dataset-path", str(data), "--stride", "4",
              "--query-length", "8", "--max-length", "32", "--max-doc-tokens", "8", "--retriever", "bm25",
              "--index-dir", tiny_index["index_dir"]]

    def evaluate(*flags) -> dict:
        out = tmp_path / f"run{len(list(tmp_path.iterdir()))}"
        main(["eval-lm", *common, *flags, "--output-dir", str(out)])
        return json.loads((out / "eval.json").read_text())

    one, two = evaluate(), evaluate("--num-passages", "2", "--max-context-doc-tokens", "12")
    assert (one["num_passages"], two["num_passages"]) == (1, 2) and one["token_ppl"] != two["token_ppl"]
    mixed = evaluate("--ensemble", "2", "--ensemble-temperature", "0.5")
    assert mixed["ensemble_size"] == 2 and mixed["ensemble_temperature"] == 0.5
    gated = evaluate("--retrieval-gate", "score", "--gate-threshold", "0.45")
    assert gated["retrieval_gate"] == "score" and gated["gate_threshold"] == 0.45
    assert 0 < gated["retrieved_fraction"] < one["retrieved_fraction"] == 1.0
    main(["retrieve", *common, "--retrieval-gate", "score", "--gate-threshold", "0.45", "--save-retrieval-file",
          str(tmp_path / "gated.json")])
    reused = evaluate("--retrieval-file", str(tmp_path / "gated.json"))
    assert reused["token_ppl"] == pytest.approx(gated["token_ppl"], rel=1e-9)
    assert reused["retrieved_fraction"] == gated["retrieved_fraction"]
    never = evaluate("--retrieval-gate", "lm", "--gate-threshold", "1e6")  # no passage saves a million nats
    assert never["gate_threshold"] == 1e6 and never["retrieved_fraction"] == 0.0
    kept = evaluate("--retrieval-gate", "lm", "--gate-threshold=-1e6")  # every passage does better than that
    assert kept["retrieved_fraction"] == 1.0 and kept["token_ppl"] == pytest.approx(one["token_ppl"], rel=1e-9)
    capsys.readouterr()
    for flags, message in [(["--retrieval-gate", "score"], "--retrieval-gate='score' needs --gate-threshold"),
                           (["--ensemble", "2", "--num-passages", "2"], "--ensemble=2 mixes the top passages"),
                           (["--num-passages", "0"], "--num-passages must be at least 1, got 0")]:
        with pytest.raises(SystemExit) as info:
            main(["eval-lm", *common, *flags])
        assert info.value.code == 2 and message in capsys.readouterr().err
