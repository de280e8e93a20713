"""Generation with In-Context RALM is exact: ``RetrievalAugmentedModel.generate`` and ``RalmLogitsProcessor`` give
the tokens of a plain loop, written here from the spec, that rebuilds ``[passage; x[a_j:]]`` at every step and runs a
full forward; with reranking, the loop first ranks every candidate with full forwards, one at a time. Plus sources,
beam search, EOS, sampling, streamers and the passage cache."""

from __future__ import annotations

import zlib

import pytest
import torch
from transformers import LogitsProcessorList, RepetitionPenaltyLogitsProcessor
from transformers.generation.streamers import BaseStreamer

from conftest import (ARTICLES, EVAL_TEXT, MODEL_VOCAB_SIZE, PAD_ID, TEST_DEVICE, TINY_VOCAB_WORDS,
                      TOKENIZER_VOCAB_SIZE, make_tiny_model)
from hf_ralm import Passage, RalmConfig, RetrievalAugmentedModel
from hf_ralm.config.settings import RALM_FIELDS
from hf_ralm.generation import RalmLogitsProcessor, ralm_generate
from hf_ralm.core.passage_cache import PassageKVCache
from hf_ralm.selection.predictive import NO_PASSAGE_TEXT
from hf_ralm.testing import full_nlls, next_token_logits, spec_passage_ids, spec_random_choice
from test_reranking import permuted_tokenizer

MAX_LENGTH = 32
MAX_DOC_TOKENS = 10
QUERY_LENGTH = 8
NEW_TOKENS = 10


class HashRetriever:
    """Deterministic in-memory retriever: the passages depend on a hash of the query; a third of the queries get
    nothing. Passages come best first, with distinct scores."""

    def __init__(self, always: str | None = None):
        self.always = always
        self.queries: list[str] = []

    def retrieve(self, queries, k=1):
        self.queries.extend(queries)
        out = []
        for query in queries:
            h = zlib.crc32(query.encode())
            if self.always is not None:
                article = next(a for a in ARTICLES if a["id"] == self.always)
                out.append([Passage(article["id"], article["title"], article["text"], 1.0)][:k])
            elif h % 3 == 0:
                out.append([])
            else:
                order = [ARTICLES[(h + i) % len(ARTICLES)] for i in range(len(ARTICLES))]
                out.append([Passage(a["id"], a["title"], a["text"], 2.0 - 0.3 * i - (h % 7) / 10)
                            for i, a in enumerate(order[:k])])
        return out


@pytest.fixture(scope="module")
def models():
    return {arch: make_tiny_model(arch) for arch in ("gpt2", "llama", "opt", "gemma3")}


@pytest.fixture(scope="module")
def prompts(tiny_tokenizer):
    ids = tiny_tokenizer(EVAL_TEXT)["input_ids"]
    # shorter than, about and longer than max_length
    return [ids[:5], ids[10:30], ids[30:75]]


def ralm_config(stride: int, **overrides) -> RalmConfig:
    fields = dict(retrieval_stride=stride, query_length=QUERY_LENGTH, max_doc_tokens=MAX_DOC_TOKENS,
                  max_length=MAX_LENGTH)
    fields.update(overrides)
    return RalmConfig(**fields)


def left_pad(rows: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prompts left-padded, with their attention mask, on the tiny models' device (a plain model's ``generate``
    takes its inputs where the model is)."""
    width = max(len(r) for r in rows)
    ids = torch.tensor([[PAD_ID] * (width - len(r)) + r for r in rows], device=TEST_DEVICE)
    mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows], device=TEST_DEVICE)
    return ids, mask


# --------------------------------------------------------------------------------------------------------------
# The plain loop, from the spec
# --------------------------------------------------------------------------------------------------------------


@torch.no_grad()
def spec_generate(model, tokenizer, retriever, config, prompt, new_tokens, eos=None, k=1, penalty=None):
    """Greedy decoding that, at every step, builds ``[d_j; x[a_j:]]`` from scratch and runs a full forward.

    Returns the generated tokens, per stride ``(start, passages)``, and the scores of every step. With ``k > 1`` it
    mixes the ``k`` passages' next-token probabilities weighted by the softmax of their scores.
    """
    s, x, strides, step_scores = config.retrieval_stride, list(prompt), [], []
    for t in range(new_tokens):
        if t % s == 0:
            s_j = min(s, new_tokens - t)
            found = retriever.retrieve([tokenizer.decode(x[-config.query_length :])], k=k)[0][:k]
            docs = [spec_passage_ids(tokenizer, p, config) for p in found or [None]]
            starts = [max(0, len(x) + s_j + len(d) - config.max_length) for d in docs]
            weights = torch.softmax(torch.tensor([p.score for p in found], dtype=torch.float64), 0).tolist() \
                if len(found) > 1 else [1.0]
            strides.append((t, found))
        mixture = 0
        for d, a, w in zip(docs, starts, weights):
            context = d + x[a:]
            assert len(context) <= config.max_length
            logits = next_token_logits(model, context)
            mixture = mixture + w * torch.softmax(logits, -1)
        # one passage: the logits themselves (what logits processors such as the repetition penalty see)
        scores = (logits if len(docs) == 1 else torch.log(mixture))[None]
        if penalty is not None:
            scores = RepetitionPenaltyLogitsProcessor(penalty)(torch.tensor([x], device=scores.device), scores)
        step_scores.append(scores[0])
        token = int(scores.argmax())
        x.append(token)
        if token == eos:
            break
    return x[len(prompt) :], strides, step_scores


def assert_scores_match(scores, b: int, expected_scores, log_softmax: bool = False) -> None:
    """The scores generate saw for row ``b`` at each of its steps are the spec's (up to float32 summation order)."""
    for step, expected in enumerate(expected_scores):
        expected = torch.log_softmax(expected, -1) if log_softmax else expected
        torch.testing.assert_close(scores[step][b], expected, atol=1e-4, rtol=1e-4)


def generated_rows(sequences: torch.Tensor, prompt_width: int, eos=None) -> list[list[int]]:
    """Each row's generated tokens, up to and including its EOS."""
    rows = []
    for row in sequences[:, prompt_width:].tolist():
        if eos is not None and eos in row:
            row = row[: row.index(eos) + 1]
        rows.append(row)
    return rows


def expected_sources(strides, generated: int, stride: int) -> list[dict]:
    return [{"start": t, "end": min(t + stride, generated), "id": p.id, "title": p.title, "text": p.text,
             "score": p.score} for t, found in strides for p in found[:1] if t < generated]


def wrap(model, tokenizer, retriever, config) -> RetrievalAugmentedModel:
    fields = {k: getattr(config, k) for k in RALM_FIELDS - {"base_model_name_or_path"}}
    return RetrievalAugmentedModel.from_pretrained(model, retriever=retriever, tokenizer=tokenizer, **fields)


# --------------------------------------------------------------------------------------------------------------
# Exactness
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch,stride", [("gpt2", 1), ("gpt2", 4), ("llama", 3), ("llama", 4), ("opt", 2),
                                         ("opt", 3), ("gemma3", 3)])
def test_generate_matches_rebuild_loop(models, tiny_tokenizer, prompts, arch, stride):
    model, config, retriever = models[arch], ralm_config(stride), HashRetriever()
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    ids, mask = left_pad(prompts)
    out = ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                        pad_token_id=PAD_ID, return_dict_in_generate=True, output_scores=True)
    got = generated_rows(out.sequences, ids.shape[1])
    empty_strides = 0
    for b, prompt in enumerate(prompts):
        expected, strides, expected_scores = spec_generate(model, tiny_tokenizer, retriever, config, prompt,
                                                           NEW_TOKENS)
        assert got[b] == expected, f"row {b}"
        assert_scores_match(out.scores, b, expected_scores)
        assert out.sources[b] == expected_sources(strides, len(expected), stride)
        empty_strides += sum(1 for _, found in strides if not found)
    assert empty_strides > 0  # the case of a stride without a passage is covered
    # rows taking one token each on a full-attention cache are decoded together (Gemma-3's sliding layers: per row)
    assert (out.ralm_stats["batched_steps"] > 0) == (stride > 1 and arch != "gemma3")
    # every stride of every row retrieved once, with the decoded last ℓ tokens as its query
    assert out.ralm_stats["strides"] == len(prompts) * -(-NEW_TOKENS // stride)


def test_generate_paths_agree(models, tiny_tokenizer, prompts):
    """Batched steps, one forward per row (each prompt generated alone: a batch of one is never batched) and
    rebuilding every step (use_cache=False) give the same scores."""
    ralm = wrap(models["llama"], tiny_tokenizer, HashRetriever(), ralm_config(3))
    ids, mask = left_pad(prompts)
    common = dict(max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=PAD_ID, return_dict_in_generate=True,
                  output_scores=True)
    batched = ralm.generate(ids, attention_mask=mask, **common)
    rebuilt = ralm.generate(ids, attention_mask=mask, use_cache=False, **common)
    alone = [ralm.generate(torch.tensor([prompt]), **common) for prompt in prompts]
    assert batched.ralm_stats["batched_steps"] > 0 and all(out.ralm_stats["batched_steps"] == 0 for out in alone)
    assert torch.equal(batched.sequences, rebuilt.sequences)
    for a, b in zip(batched.scores, rebuilt.scores):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    for b, (prompt, out) in enumerate(zip(prompts, alone)):
        assert batched.sequences[b, ids.shape[1] :].tolist() == out.sequences[0, len(prompt) :].tolist(), f"row {b}"
        for batched_scores, row_scores in zip(batched.scores, out.scores):
            torch.testing.assert_close(batched_scores[b], row_scores[0], atol=1e-4, rtol=1e-4)
    per_row_tokens = sum(out.ralm_stats["forward_tokens"] for out in alone)
    assert batched.ralm_stats["forward_tokens"] == per_row_tokens
    assert per_row_tokens < rebuilt.ralm_stats["forward_tokens"]


class NewPassageEveryStride:
    """Every row retrieves a passage of its own (ten words) in a stride, and new ones the next stride, so every
    stride opens a new context in every row."""

    def __init__(self):
        self.strides = 0

    def retrieve(self, queries, k=1):
        self.strides += 1
        return [[Passage(f"s{self.strides}-{row}", "", " ".join(
            TINY_VOCAB_WORDS[(self.strides * 7 + row * 3 + i) % len(TINY_VOCAB_WORDS)] for i in range(10)), 1.0)]
            for row in range(len(queries))]


def test_a_strides_new_passages_and_their_text_run_batched(models, tiny_tokenizer):
    """Rows whose prompts have one length, each with a new passage every stride: each stride computes its new passage
    in one forward for all rows (not one a row), and runs the text after it in one forward for all rows (not one a
    row); every other step is one batched forward. The tokens and scores are the rebuild loop's."""
    model = models["llama"]
    ralm_config_ = ralm_config(4)
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, TOKENIZER_VOCAB_SIZE, (3, 12), generator=generator).to(TEST_DEVICE)
    common = dict(max_new_tokens=12, eos_token_id=None, pad_token_id=PAD_ID, return_dict_in_generate=True,
                  output_scores=True, attention_mask=torch.ones_like(ids))
    calls = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: calls.append(tuple(kwargs["input_ids"].shape)),
                                           with_kwargs=True)
    try:
        out = ralm_generate(model, tiny_tokenizer, NewPassageEveryStride(), ralm_config_, ids, **common)
    finally:
        hook.remove()
    rebuilt = ralm_generate(model, tiny_tokenizer, NewPassageEveryStride(), ralm_config_, ids, use_cache=False,
                            **common)
    assert torch.equal(out.sequences, rebuilt.sequences)
    for a, b in zip(out.scores, rebuilt.scores):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    strides = 12 // 4
    assert out.ralm_stats["passage_changes"] == 3 * (strides - 1)
    assert calls.count((1, 10)) == 0 and calls.count((3, 10)) == strides  # the passages: one forward a stride
    assert all(batch == 3 for batch, _ in calls)  # the text after them, and every step: all rows at once
    assert len(calls) == strides + 12 and out.ralm_stats["batched_steps"] == 12


def test_unbatchable_cache_decodes_row_by_row(models, tiny_tokenizer, prompts):
    """Gemma-3's sliding-window cache layers cannot be left-padded into one batch: its rows are decoded one by one,
    and give what rebuilding every step gives."""
    ralm = wrap(models["gemma3"], tiny_tokenizer, HashRetriever(), ralm_config(3))
    ids, mask = left_pad(prompts)
    common = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=PAD_ID,
                  return_dict_in_generate=True, output_scores=True)
    per_row = ralm.generate(ids, **common)
    rebuilt = ralm.generate(ids, use_cache=False, **common)
    assert per_row.ralm_stats["batched_steps"] == 0
    assert torch.equal(per_row.sequences, rebuilt.sequences)
    for a, b in zip(per_row.scores, rebuilt.scores):
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    assert per_row.ralm_stats["forward_tokens"] < rebuilt.ralm_stats["forward_tokens"]


@pytest.mark.parametrize("reader_arch", ["llama", "opt"])
def test_logits_processor_matches_rebuild_loop(models, tiny_tokenizer, prompts, reader_arch):
    """A plain ``generate`` of another model, with the processor in its ``logits_processor``, decodes what the
    reader decodes with In-Context RALM."""
    reader, config, retriever = models[reader_arch], ralm_config(3), HashRetriever()
    processor = RalmLogitsProcessor(reader, tiny_tokenizer, retriever, config, max_new_tokens=NEW_TOKENS)
    ids, mask = left_pad(prompts)
    out = models["gpt2"].generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                  eos_token_id=None, pad_token_id=PAD_ID, return_dict_in_generate=True,
                                  output_scores=True, logits_processor=LogitsProcessorList([processor]))
    got = generated_rows(out.sequences, ids.shape[1])
    for b, prompt in enumerate(prompts):
        expected, strides, expected_scores = spec_generate(reader, tiny_tokenizer, retriever, config, prompt,
                                                           NEW_TOKENS)
        assert got[b] == expected, f"row {b}"
        assert_scores_match(out.scores, b, expected_scores, log_softmax=True)
        assert processor.sources[b] == expected_sources(strides, NEW_TOKENS, 3)

    # reused for a second generation: detected as new, same result
    again = models["gpt2"].generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                    eos_token_id=None, pad_token_id=PAD_ID,
                                    logits_processor=LogitsProcessorList([processor]))
    assert torch.equal(again, out.sequences)
    processor.reset()
    assert processor.sources == []


def test_logits_processor_ensemble_matches_mixture_loop(models, tiny_tokenizer, prompts):
    reader, config, retriever = models["llama"], ralm_config(4), HashRetriever()
    processor = RalmLogitsProcessor(reader, tiny_tokenizer, retriever, config, ensemble_size=2,
                                    max_new_tokens=NEW_TOKENS)
    ids, mask = left_pad(prompts)
    out = models["opt"].generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False,
                                 eos_token_id=None, pad_token_id=PAD_ID,
                                 logits_processor=LogitsProcessorList([processor]))
    mixtures = 0
    for b, prompt in enumerate(prompts):
        expected, strides, _ = spec_generate(reader, tiny_tokenizer, retriever, config, prompt, NEW_TOKENS, k=2)
        assert generated_rows(out, ids.shape[1])[b] == expected, f"row {b}"
        mixtures += sum(1 for _, found in strides if len(found) == 2)
    assert mixtures > 0  # a mixture of two passages was exercised


@pytest.mark.parametrize("ensemble_size", [0, -1, 1.5, True, "2"])
def test_logits_processor_refuses_bad_ensemble_size(models, tiny_tokenizer, ensemble_size):
    with pytest.raises(ValueError, match=r"^ensemble_size must be a positive integer .*got "):
        RalmLogitsProcessor(models["llama"], tiny_tokenizer, HashRetriever(), ralm_config(4),
                            ensemble_size=ensemble_size)


# --------------------------------------------------------------------------------------------------------------
# Generation features
# --------------------------------------------------------------------------------------------------------------


def test_stops_at_eos_per_row(models, tiny_tokenizer, prompts):
    model, config, retriever = models["llama"], ralm_config(3), HashRetriever()
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    first, _, _ = spec_generate(model, tiny_tokenizer, retriever, config, prompts[0], NEW_TOKENS)
    # row 0 stops in the middle of a stride (the batch of rows then shrinks); the others may or may not stop
    stop = next(i for i in range(4, NEW_TOKENS) if i % 3 != 0 and first[i] not in first[:i])
    eos = first[stop]
    ids, mask = left_pad(prompts)
    out = ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=eos, pad_token_id=PAD_ID,
                        return_dict_in_generate=True)
    got = generated_rows(out.sequences, ids.shape[1], eos=eos)
    assert got[0] == first[: stop + 1]
    assert out.ralm_stats["batched_steps"] > 0
    for b, prompt in enumerate(prompts):
        expected, strides, _ = spec_generate(model, tiny_tokenizer, retriever, config, prompt, NEW_TOKENS, eos=eos)
        assert got[b] == expected
        assert out.sequences[b, ids.shape[1] + len(expected) :].eq(PAD_ID).all()
        assert out.sources[b] == expected_sources(strides, len(expected), 3)
    assert all(source["end"] <= stop + 1 for source in out.sources[0])


def test_source_spans(models, tiny_tokenizer, prompts):
    ralm = wrap(models["opt"], tiny_tokenizer, HashRetriever(), ralm_config(4))
    ids, mask = left_pad(prompts)
    out = ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=PAD_ID,
                        return_dict_in_generate=True)
    assert len(out.sources) == len(prompts)
    ids_by_title = {a["title"]: a["id"] for a in ARTICLES}
    for row in out.sources:
        for source in row:
            assert set(source) == {"start", "end", "id", "title", "text", "score"}
            assert source["start"] % 4 == 0 and source["end"] == min(source["start"] + 4, NEW_TOKENS)
            assert ids_by_title[source["title"]] == source["id"]
        starts = [s["start"] for s in row]
        assert starts == sorted(set(starts))


def test_beam_search_is_refused(models, tiny_tokenizer, prompts):
    ralm = wrap(models["llama"], tiny_tokenizer, HashRetriever(), ralm_config(3))
    with pytest.raises(ValueError, match="greedy decoding and sampling only"):
        ralm.generate(torch.tensor([prompts[0]]), max_new_tokens=4, num_beams=2)


def test_sampling_and_penalty(models, tiny_tokenizer, prompts):
    model, config, retriever = models["llama"], ralm_config(3), HashRetriever()
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    prompt = torch.tensor([prompts[2]])
    common = dict(max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=PAD_ID)
    greedy = ralm.generate(prompt, do_sample=False, **common)
    top1 = ralm.generate(prompt, do_sample=True, top_k=1, **common)
    assert torch.equal(greedy, top1)
    torch.manual_seed(0)
    first = ralm.generate(prompt, do_sample=True, temperature=1.5, top_p=0.9, top_k=50, **common)
    torch.manual_seed(0)
    second = ralm.generate(prompt, do_sample=True, temperature=1.5, top_p=0.9, top_k=50, **common)
    assert torch.equal(first, second)

    penalized = ralm.generate(prompt, do_sample=False, repetition_penalty=1.5, **common)
    expected, _, _ = spec_generate(model, tiny_tokenizer, retriever, config, prompts[2], NEW_TOKENS, penalty=1.5)
    assert penalized[0, prompt.shape[1] :].tolist() == expected


class CollectingStreamer(BaseStreamer):
    def __init__(self):
        self.chunks, self.ended = [], False

    def put(self, value):
        self.chunks.append(value.reshape(-1).tolist())

    def end(self):
        self.ended = True


def test_streamer_and_text_prompt(models, tiny_tokenizer):
    ralm = wrap(models["gpt2"], tiny_tokenizer, HashRetriever(), ralm_config(3))
    streamer = CollectingStreamer()
    out = ralm.generate("the emperor of rome and the senate", max_new_tokens=5, eos_token_id=None,
                        pad_token_id=PAD_ID, streamer=streamer)
    prompt = tiny_tokenizer("the emperor of rome and the senate")["input_ids"]
    assert streamer.ended
    assert streamer.chunks[0] == prompt
    assert [c[0] for c in streamer.chunks[1:]] == out[0, len(prompt) :].tolist()
    assert out.shape == (1, len(prompt) + 5)


def test_no_per_token_host_copies_of_the_logits(models, tiny_tokenizer, monkeypatch):
    """Generation reads only token ids back from the device: no vocabulary-wide tensor (logits, scores) is copied to
    the host (``cpu``, ``tolist``, ``numpy``, ``item``) or moved to another device while it decodes, and text prompts
    come back as sequences on the model's device."""
    ralm = wrap(models["llama"], tiny_tokenizer, HashRetriever(), ralm_config(2))
    copies = []
    for name in ("cpu", "tolist", "numpy", "item", "to"):
        real = getattr(torch.Tensor, name)

        def spy(self, *args, _real=real, _name=name, **kwargs):
            out = _real(self, *args, **kwargs)
            moved = _name != "to" or (isinstance(out, torch.Tensor) and out.device != self.device)
            if self.dim() and self.shape[-1] >= MODEL_VOCAB_SIZE and moved:
                copies.append((_name, tuple(self.shape)))
            return out

        monkeypatch.setattr(torch.Tensor, name, spy)
    out = ralm.generate(["the emperor of rome", "the sailor took the boat to the"], max_new_tokens=6,
                        eos_token_id=None, pad_token_id=PAD_ID)
    monkeypatch.undo()
    assert copies == [] and out.shape[1] > 6
    assert out.device == ralm.language_model.get_input_embeddings().weight.device


def test_passage_cache_is_hit(models, tiny_tokenizer, prompts):
    """One passage everywhere: its keys/values are computed once and reused by every stride and row, and a context
    whose passage and start did not change is extended, not rebuilt."""
    model, config = models["llama"], ralm_config(2)
    retriever = HashRetriever(always="a3")
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    passage = tiny_tokenizer.encode(config.passage_text("Music", ARTICLES[2]["text"]), max_length=MAX_DOC_TOKENS,
                                    truncation=True)
    prefills = []
    hook = model.register_forward_pre_hook(lambda m, args, kwargs: prefills.append(kwargs["input_ids"].shape[1]),
                                           with_kwargs=True)
    try:
        cache = PassageKVCache(model)
        ids, mask = left_pad([prompts[2], prompts[0]])   # the long prompt slides, the short one does not
        out = ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=None,
                            pad_token_id=PAD_ID, return_dict_in_generate=True, passage_cache=cache)
    finally:
        hook.remove()
    strides = 2 * (NEW_TOKENS // 2)  # two rows
    stats = out.ralm_stats
    assert stats["strides"] == strides and stats["passage_changes"] == 0
    # the long row rebuilds its context every stride (its start moves), the short one keeps it after the first
    assert stats["contexts_rebuilt"] == NEW_TOKENS // 2 + 1 and stats["contexts_kept"] == NEW_TOKENS // 2 - 1
    assert cache.misses == 1 and cache.hits == stats["contexts_rebuilt"] - 1
    assert cache.computed_tokens == len(passage)
    # the passage ran through the model once (the generate of transformers runs no forward of its own)
    assert prefills.count(len(passage)) == 1
    for b, prompt in enumerate([prompts[2], prompts[0]]):
        expected, _, _ = spec_generate(model, tiny_tokenizer, retriever, config, prompt, NEW_TOKENS)
        assert generated_rows(out.sequences, ids.shape[1])[b] == expected

    # a second call with the same store computes no passage at all
    ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, eos_token_id=None, pad_token_id=PAD_ID,
                  passage_cache=cache)
    assert cache.misses == 1


def test_passage_cache_is_bounded(models, tiny_tokenizer):
    model = models["gpt2"]
    one = PassageKVCache(model)
    one.get([5, 6, 7, 8])
    size = one.bytes
    cache = PassageKVCache(model, max_bytes=2 * size)
    for ids in ([5, 6, 7, 8], [9, 10, 11, 12], [5, 6, 7, 8], [13, 14, 15, 16]):
        cache.get(ids)
    assert cache.bytes <= 2 * size and len(cache) == 2
    assert [5, 6, 7, 8] in cache and [9, 10, 11, 12] not in cache  # least recently used went first
    assert cache.hits == 1 and cache.misses == 3


# --------------------------------------------------------------------------------------------------------------
# Reranking: the plain loop ranks every candidate with a full forward, one at a time
# --------------------------------------------------------------------------------------------------------------

K = 4  # candidates (the retriever has 5 articles)
# the tiny models' vocabulary is larger than the tokenizer's: ids without text are never generated, so that any LM
# can rank the text generated so far
TEXT_ONLY = dict(suppress_tokens=list(range(TOKENIZER_VOCAB_SIZE, MODEL_VOCAB_SIZE)))


class KeywordReranker:
    """Stands in for the trained cross-encoder: a passage scores the number of the query's words it holds; the empty
    passage (no passage, with ``rerank_allow_no_passage``) scores 3.5, so it wins unless a passage holds four."""

    def __init__(self):
        self.queries: list[str] = []

    def scores(self, query: str, texts: list[str]) -> list[float]:
        return [sum(word in text.split() for word in query.split()) if text != NO_PASSAGE_TEXT else 3.5
                for text in texts]

    def choose(self, prefixes, candidates):
        self.queries.extend(prefixes)
        return [max(range(len(texts)), key=lambda i: (self.scores(query, texts)[i], -i))
                for query, texts in zip(prefixes, candidates)]


def spec_ranking_nll(model, tokenizer, config, x, doc, start, first, reranker, option) -> float:
    """The summed NLL of the ranking tokens ``x[first:]`` under one candidate, in one full forward."""
    if reranker is None or isinstance(reranker, KeywordReranker):  # the reader, on [d; x[a:]]
        return float(full_nlls(model, doc + x[start:])[len(doc) + first - start - 1 :].sum())
    rtok, room = reranker.tokenizer, reranker.max_length  # another LM, in text
    ranking = rtok(tokenizer.decode(x[first:]), add_special_tokens=False)["input_ids"]
    passage = spec_passage_ids(rtok, option, config)[: room - len(ranking)]
    before = rtok(tokenizer.decode(x[:first]), add_special_tokens=False)["input_ids"]
    keep = room - len(ranking) - len(passage)
    tokens = passage + (before[-keep:] if keep > 0 else []) + ranking
    return float(full_nlls(reranker.model, tokens)[-len(ranking) :].sum())


@torch.no_grad()
def spec_rerank_generate(model, tokenizer, retriever, config, prompt, new_tokens, reranker=None):
    """Greedy decoding with reranking, from the spec. At each stride: retrieve k candidates; each candidate (and no
    passage when allowed) gets the stride's context ``[d_i; x[a_i:]]``; the ranking tokens are the last s' tokens
    of x, never the first of x in a context; the lowest summed NLL wins (ties: the better rank). Then every token
    is decoded with a full forward of ``[d; x[a:]]`` (ids without text suppressed). Returns the generated tokens,
    per stride ``(start, pool, choice)`` (-1: no passage) and the scores of every step."""
    s, x, strides, step_scores = config.retrieval_stride, list(prompt), [], []
    for t in range(new_tokens):
        if t % s == 0:
            s_j = min(s, new_tokens - t)
            query = tokenizer.decode(x[-config.query_length :])
            pool = retriever.retrieve([query], k=config.rerank_candidates)[0][: config.rerank_candidates]
            options = pool + [None] * (bool(pool) and config.rerank_allow_no_passage)
            docs = [spec_passage_ids(tokenizer, option, config) for option in options]
            starts = [max(0, len(x) + s_j + len(d) - config.max_length) for d in docs]
            if not pool:
                choice = -1
            elif config.rerank == "random":
                key = (zlib.crc32(" ".join(map(str, prompt)).encode()) << 32) + t // s
                choice = spec_random_choice(config.rerank_seed, key, len(pool))
            elif config.rerank == "predictive":  # the empty passage is no passage's text
                texts = [config.passage_text(p.title, p.text) if p else NO_PASSAGE_TEXT for p in options]
                scores = reranker.scores(query, texts)
                best = min(range(len(options)), key=lambda i: (-scores[i], i))
                choice = best if best < len(pool) else -1
            else:
                first = max(len(x) - config.rerank_tokens, max(starts) + 1)
                scores = [spec_ranking_nll(model, tokenizer, config, x, d, a, first, reranker, option)
                          for d, a, option in zip(docs, starts, options)] if first < len(x) else [0.0]
                best = min(range(len(scores)), key=lambda i: (scores[i], i))
                choice = best if best < len(pool) else -1
            doc = docs[choice] if choice >= 0 else spec_passage_ids(tokenizer, None, config)
            start = max(0, len(x) + s_j + len(doc) - config.max_length)
            strides.append((t, pool, choice))
        logits = next_token_logits(model, doc + x[start:])
        logits[TOKENIZER_VOCAB_SIZE:] = float("-inf")
        step_scores.append(logits)
        x.append(int(logits.argmax()))
    return x[len(prompt) :], strides, step_scores


def expected_reranked_sources(strides, generated: int, stride: int) -> list[dict]:
    return [{"start": t, "end": min(t + stride, generated), "id": pool[c].id, "title": pool[c].title,
             "text": pool[c].text, "score": pool[c].score, "rank": c} for t, pool, c in strides if c >= 0]


@pytest.fixture(scope="module")
def rerank_prompts(prompts):
    return prompts + [prompts[0][:1]]  # a one-token prompt: nothing to rank on at first


def check_reranked(out, prompt_width, rerank_prompts, model, tokenizer, retriever, config, reranker=None):
    """``out`` (a generate output with scores) holds the plain loop's tokens, scores, sources and counts."""
    got = generated_rows(out.sequences, prompt_width)
    reranked = no_passage = 0
    ranks = []
    for b, prompt in enumerate(rerank_prompts):
        expected, strides, expected_scores = spec_rerank_generate(model, tokenizer, retriever, config, prompt,
                                                                  NEW_TOKENS, reranker)
        assert got[b] == expected, f"row {b}"
        assert_scores_match(out.scores, b, expected_scores)
        assert out.sources[b] == expected_reranked_sources(strides, NEW_TOKENS, config.retrieval_stride)
        reranked += sum(1 for _, pool, _ in strides if pool)
        no_passage += sum(1 for _, pool, choice in strides if pool and choice < 0)
        ranks += [choice for _, pool, choice in strides if pool]
    assert out.ralm_stats["reranked_strides"] == reranked > 0
    assert out.ralm_stats["no_passage_chosen"] == no_passage
    assert out.ralm_stats["empty_retrievals"] > 0  # a stride without candidates is covered
    return ranks


RERANK_CASES = [  # (arch, stride, rerank, allow no passage, s', bos_every_window)
    ("gpt2", 3, "lm", False, 6, False),
    ("llama", 4, "lm", True, 6, False),
    ("opt", 2, "lm", True, 20, False),     # s' beyond the shortest context: clipped to it
    ("gemma3", 3, "lm", True, 6, True),    # sliding-window layers; no passage is a BOS
    ("llama", 3, "random", False, 16, False),
]


@pytest.mark.parametrize("arch,stride,rerank,allow_none,rerank_tokens,bos", RERANK_CASES)
def test_reranked_generate_matches_plain_loop(models, tiny_tokenizer, rerank_prompts, arch, stride, rerank,
                                              allow_none, rerank_tokens, bos):
    model, retriever = models[arch], HashRetriever()
    config = ralm_config(stride, rerank=rerank, rerank_candidates=K, rerank_tokens=rerank_tokens,
                         rerank_allow_no_passage=allow_none, bos_every_window=bos, rerank_seed=5)
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    ids, mask = left_pad(rerank_prompts)
    common = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                  pad_token_id=PAD_ID, return_dict_in_generate=True, output_scores=True, **TEXT_ONLY)
    out = ralm.generate(ids, **common)
    ranks = check_reranked(out, ids.shape[1], rerank_prompts, model, tiny_tokenizer, retriever, config)
    assert any(rank > 0 for rank in ranks)  # reranking changed the passage somewhere
    assert (out.ralm_stats["no_passage_chosen"] > 0) == allow_none
    if rerank == "lm":  # the ranking inputs took their passages' keys/values from the store the contexts use
        cache = out.ralm_stats["passage_cache"]
        assert cache["hits"] + cache["misses"] > out.ralm_stats["contexts_rebuilt"]
    rebuilt = ralm.generate(ids, use_cache=False, **common)  # full forwards everywhere, ranking included
    assert torch.equal(rebuilt.sequences, out.sequences) and rebuilt.sources == out.sources


@pytest.fixture(scope="module")
def reranker_dir(tmp_path_factory):
    """Another LM with another vocabulary (the same words, other ids), saved as a model folder."""
    path = tmp_path_factory.mktemp("reranker-lm")
    make_tiny_model("gpt2", seed=7).save_pretrained(path)
    permuted_tokenizer().save_pretrained(path)
    return str(path)


@pytest.mark.parametrize("reader_arch,allow_none", [("opt", True), ("gemma3", False)])
def test_other_lm_reranks_generation_in_text(models, tiny_tokenizer, rerank_prompts, reranker_dir, reader_arch,
                                             allow_none):
    """``reranker_model`` names another LM: the model loads it (its ``reranker``) and generate ranks with it."""
    model, retriever = models[reader_arch], HashRetriever()
    config = ralm_config(3, rerank="lm", rerank_candidates=K, rerank_tokens=5, reranker_model=reranker_dir,
                         rerank_allow_no_passage=allow_none)
    ralm = wrap(model, tiny_tokenizer, retriever, config)
    ids, mask = left_pad(rerank_prompts)
    out = ralm.generate(ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                        pad_token_id=PAD_ID, return_dict_in_generate=True, output_scores=True, **TEXT_ONLY)
    assert ralm.reranker.tokenizer.convert_tokens_to_ids("rome") != tiny_tokenizer.convert_tokens_to_ids("rome")
    ranks = check_reranked(out, ids.shape[1], rerank_prompts, model, tiny_tokenizer, retriever, config,
                           ralm.reranker)
    assert any(rank > 0 for rank in ranks)
    with pytest.raises(ValueError, match="no reranker was given: pass reranker=load_reranker"):
        ralm_generate(model, tiny_tokenizer, retriever, config, ids, max_new_tokens=2)


@pytest.mark.parametrize("allow_none", [False, True])
def test_predictive_reranker_sees_the_query_and_passage_texts(models, tiny_tokenizer, rerank_prompts, allow_none):
    model, retriever, reranker = models["llama"], HashRetriever(), KeywordReranker()
    config = ralm_config(4, rerank="predictive", rerank_candidates=K, reranker_model="unused-here",
                         rerank_allow_no_passage=allow_none)
    ids, mask = left_pad(rerank_prompts)
    out = ralm_generate(model, tiny_tokenizer, retriever, config, ids, attention_mask=mask, reranker=reranker,
                        max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None, pad_token_id=PAD_ID,
                        return_dict_in_generate=True, output_scores=True, **TEXT_ONLY)
    queries = list(reranker.queries)
    ranks = check_reranked(out, ids.shape[1], rerank_prompts, model, tiny_tokenizer, retriever, config, reranker)
    assert any(rank > 0 for rank in ranks)
    assert (-1 in ranks) == allow_none  # with the empty passage, some strides go without a passage
    assert set(queries) <= set(retriever.queries) and len(queries) == out.ralm_stats["reranked_strides"]


def test_logits_processor_reranks_as_generate(models, tiny_tokenizer, rerank_prompts):
    reader, retriever = models["llama"], HashRetriever()
    config = ralm_config(3, rerank="lm", rerank_candidates=K, rerank_tokens=6, rerank_allow_no_passage=True)
    ids, mask = left_pad(rerank_prompts)
    common = dict(attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False, eos_token_id=None,
                  pad_token_id=PAD_ID, return_dict_in_generate=True)
    expected = ralm_generate(reader, tiny_tokenizer, retriever, config, ids, rerank_batch_size=3, **common)
    processor = RalmLogitsProcessor(reader, tiny_tokenizer, retriever, config, max_new_tokens=NEW_TOKENS)
    out = models["gpt2"].generate(ids, logits_processor=LogitsProcessorList([processor]), **common)
    assert torch.equal(out.sequences, expected.sequences)
    assert processor.sources == expected.sources
    assert any(source["rank"] > 0 for row in expected.sources for source in row)
    assert processor.stats["reranked_strides"] == expected.ralm_stats["reranked_strides"]


def test_generation_refuses_the_oracle_and_an_ensemble(models, tiny_tokenizer):
    model, prompt = models["llama"], torch.tensor([[5, 6, 7]])
    oracle = wrap(model, tiny_tokenizer, HashRetriever(), ralm_config(3, rerank="oracle"))
    with pytest.raises(ValueError, match=r"^rerank='oracle' ranks the candidates on the very tokens they are to "
                                         r"predict, which generation has not produced yet"):
        oracle.generate(prompt, max_new_tokens=2)
    with pytest.raises(ValueError, match=r"^ensemble_size=2 mixes the top passages .* not combined"):
        RalmLogitsProcessor(model, tiny_tokenizer, HashRetriever(), ralm_config(3, rerank="lm"), ensemble_size=2)
    with pytest.raises(ValueError, match="rerank='predictive' needs its trained reranker"):
        ralm_generate(model, tiny_tokenizer, HashRetriever(), ralm_config(3, rerank="predictive", reranker_model="x"),
                      prompt, max_new_tokens=2)
