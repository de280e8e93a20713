"""Generation with retrieval gates, several passages in context and ensembles (issue 10): ``generate`` gives the
tokens and scores of a plain loop that, at every step, builds every context from scratch and runs full forwards; a
stride without a passage resumes the row's plain context, which saves forward tokens and changes nothing else."""

from __future__ import annotations

import math

import pytest
import torch

from conftest import PAD_ID
from hf_ralm.testing import ScoredRetriever, full_nlls, lm_gate_margin, next_token_logits, spec_passage_ids, spec_prefix
from test_generation import assert_scores_match, generated_rows, left_pad, ralm_config, wrap
from test_reranking import WORDS

NEW_TOKENS = 12


@torch.no_grad()
def spec_generate(model, tokenizer, retriever, config, prompt, new_tokens):
    """Greedy decoding from the issue's words. At the start of stride j: retrieve the top n (num_passages or
    ensemble_size) for the last ℓ tokens; the score gate drops them when the top score over the query's maximum is
    below the threshold; the lm gate drops them unless the top passage lowers the NLL of the last s' tokens of x by
    the threshold (0 if None) (each candidate in the context the stride would give it, never x's first token in a
    context; nothing to rank on: the passage stays); then every token is predicted from [d_n; ...; d_1; x[a:]], or
    mixed over [d_j; x[a_j:]] with the softmax of the scores over τ. Returns the generated tokens, per stride its
    passages, and every step's scores."""
    s, length, x = config.retrieval_stride, config.max_length, list(prompt)
    n = max(config.num_passages, config.ensemble_size)
    strides, step_scores = [], []
    for t in range(new_tokens):
        if t % s == 0:
            s_j = min(s, new_tokens - t)
            query = tokenizer.decode(x[-config.query_length :])
            found = retriever.retrieve([query], k=n)[0][:n]
            if found and config.retrieval_gate == "score":
                found = found if found[0].score / retriever.max_scores([query])[0] >= config.gate_threshold else []
            if found and config.retrieval_gate == "lm":
                docs = [spec_passage_ids(tokenizer, found[0], config), spec_passage_ids(tokenizer, None, config)]
                starts = [max(0, len(x) + s_j + len(d) - length) for d in docs]
                first = max(len(x) - config.rerank_tokens, max(starts) + 1)
                if first < len(x):
                    nlls = [float(full_nlls(model, d + x[a:])[len(d) + first - a - 1 :].sum())
                            for d, a in zip(docs, starts)]
                    found = found if nlls[1] - nlls[0] >= lm_gate_margin(config) else []
            members = [[p] for p in found] if config.ensemble_size > 1 and found else [found]
            exps = [math.exp(p.score / config.ensemble_temperature) for p in found]
            weights = [e / sum(exps) for e in exps] if len(members) > 1 else [1.0]
            contexts = []
            for member in members:
                prefix = spec_prefix(tokenizer, member, config)
                contexts.append((prefix, max(0, len(x) + s_j + len(prefix) - length)))
            strides.append((t, found))
        mixture = 0
        for (prefix, start), weight in zip(contexts, weights):
            assert len(prefix) + len(x) - start <= length
            logits = next_token_logits(model, prefix + x[start:])
            mixture = mixture + weight * torch.softmax(logits, -1)
        scores = logits if len(contexts) == 1 else torch.log(mixture)
        step_scores.append(scores)
        x.append(int(scores.argmax()))
    return x[len(prompt) :], strides, step_scores


CASES = [  # (arch, stride, settings)
    ("gpt2", 3, dict(retrieval_gate="score", gate_threshold=0.5)),
    ("llama", 4, dict(retrieval_gate="lm", gate_threshold=0.0, rerank_tokens=6)),
    ("opt", 2, dict(retrieval_gate="lm", gate_threshold=0.0, rerank_tokens=30)),  # s' beyond the shortest context
    ("gpt2", 4, dict(retrieval_gate="lm", gate_threshold=0.05, rerank_tokens=6)),  # the passage must save 0.05 nats
    ("gemma3", 3, dict(retrieval_gate="score", gate_threshold=0.5, bos_every_window=True)),
    ("llama", 3, dict(num_passages=3, max_context_doc_tokens=26)),
    ("opt", 4, dict(num_passages=2, max_context_doc_tokens=14, retrieval_gate="score", gate_threshold=0.5)),
    ("gemma3", 2, dict(num_passages=3, bos_every_window=True)),
    ("gpt2", 3, dict(ensemble_size=3, ensemble_temperature=0.5, retrieval_gate="score", gate_threshold=0.5)),
]


@pytest.mark.parametrize("arch,stride,settings", CASES)
def test_generate_equals_the_plain_loop(arch, stride, settings, tiny_models, tiny_tokenizer, tiny_bos_tokenizer):
    tokenizer = tiny_bos_tokenizer if settings.get("bos_every_window") else tiny_tokenizer
    model, retriever, config = tiny_models[arch], ScoredRetriever(WORDS, seed=stride), ralm_config(stride, **settings)
    ralm = wrap(model, tokenizer, retriever, config)
    prompts = [tokenizer("the emperor of rome and the senate")["input_ids"],
               tokenizer(" ".join(["the sailor took the ship to the island in a storm ."] * 3))["input_ids"]]
    ids, mask = left_pad(prompts)
    common = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                  pad_token_id=PAD_ID, return_dict_in_generate=True, output_scores=True)
    out = ralm.generate(ids, **common)
    got = generated_rows(out.sequences, ids.shape[1])
    with_passage = 0
    for b, prompt in enumerate(prompts):
        expected, strides, expected_scores = spec_generate(model, tokenizer, retriever, config, prompt, NEW_TOKENS)
        assert got[b] == expected, f"row {b}"
        assert_scores_match(out.scores, b, expected_scores)
        assert [(s["start"], s["id"]) for s in out.sources[b]] == [(t, p.id) for t, found in strides for p in found]
        with_passage += sum(1 for _, found in strides if found)
    stats = out.ralm_stats
    assert stats["strides_with_passage"] == with_passage
    assert stats["retrieved_fraction"] == pytest.approx(with_passage / stats["strides"])
    if config.retrieval_gate != "always":
        assert stats["gated_strides"] > 0 and 0 < with_passage < stats["strides"]
    rebuilt = ralm.generate(ids, use_cache=False, **common)  # full forwards everywhere, ranking included
    assert torch.equal(rebuilt.sequences, out.sequences) and rebuilt.sources == out.sources


def test_a_stride_without_a_passage_resumes_the_plain_context(tiny_models, tiny_tokenizer):
    """Gated strides between passage strides resume the row's plain context: the same tokens and scores as
    rebuilding it, fewer forward tokens (the prefill of the text already in its cache)."""
    model, retriever = tiny_models["llama"], ScoredRetriever(WORDS, seed=1)
    config = ralm_config(2, retrieval_gate="score", gate_threshold=0.5, max_length=64)
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    ids, mask = left_pad([tiny_tokenizer("the king and the queen sat on the throne of the castle")["input_ids"]])
    common = dict(attention_mask=mask, max_new_tokens=20, do_sample=False, eos_token_id=None, pad_token_id=PAD_ID,
                  return_dict_in_generate=True, output_scores=True)
    kept = ralm.generate(ids, **common)
    rebuilt = ralm.generate(ids, keep_plain_context=False, **common)
    assert torch.equal(kept.sequences, rebuilt.sequences)
    for a, b in zip(kept.scores, rebuilt.scores):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert kept.ralm_stats["plain_contexts_resumed"] > 0 == rebuilt.ralm_stats["plain_contexts_resumed"]
    saved = rebuilt.ralm_stats["forward_tokens"] - kept.ralm_stats["forward_tokens"]
    assert saved == kept.ralm_stats["plain_tokens_reused"] > 0
