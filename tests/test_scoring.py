"""The core exactness test: the fast scorer (batched, ``logits_to_keep``, shared passage keys/values) gives the same
per-token NLLs as the plain reference loop, and both agree with an independent loop written here from the spec."""

from __future__ import annotations

import copy
import functools
import inspect
import math

import pytest
import torch

from conftest import ARCHS, BOS_ID, MODEL_VOCAB_SIZE, make_tiny_model
from hf_ralm.core.passage_cache import PassageKVCache
from hf_ralm.testing import reference_window_nlls
from hf_ralm.core.scoring import score_windows
from hf_ralm.core.windows import plan_windows

ATOL = 1e-4
RTOL_SUM = 1e-4
# Passages computed together in one forward against each alone: the batch's shape may pick other kernels (cuBLAS
# chooses by shape), so values agree to rounding, not bit for bit. On an H200 in float32, gemma3's keys differed by
# up to 2.8e-6 (relative 2.8e-5) with three 10-token passages in one forward (benchmarks/gpu/gpu_tests.log, 2026-11-27).
BATCHED_FORWARD_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}

# --------------------------------------------------------------------------------------------------------------
# An independent implementation, written from the spec (no hf_ralm code involved)
# --------------------------------------------------------------------------------------------------------------


def spec_windows(n: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, end, prev_end)``: windows start every ``stride`` tokens, hold at most ``max_length`` tokens and stop
    after the one that reaches the end of the text."""
    out, prev_end, begin = [], 0, 0
    while True:
        end = min(begin + max_length, n)
        out.append((begin, end, prev_end))
        if end == n:
            return out
        prev_end = end
        begin += stride


def spec_nlls(model, ids: list[int], max_length: int, stride: int, prefix_of) -> torch.Tensor:
    """One window at a time: the window's tokens with the passage written over its first positions, a full forward
    pass, and the cross-entropy of tokens ``[max(prev_end, 1), end)`` against the *text's* tokens."""
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    for index, (begin, end, prev_end) in enumerate(spec_windows(len(ids), max_length, stride)):
        inputs = list(ids[begin:end])
        passage = list(prefix_of[index])
        for position in range(min(len(passage), len(inputs))):
            inputs[position] = passage[position]
        with torch.no_grad():
            logits = model(torch.tensor([inputs], device=model.device)).logits[0].double()
        log_probs = torch.log_softmax(logits, dim=-1)
        for t in range(max(prev_end, 1), end):
            # the logits at position p predict the token at p + 1
            nll[t] = -log_probs[t - begin - 1, ids[t]].item()
    return nll


# --------------------------------------------------------------------------------------------------------------
# Inputs: random token ids and prefixes of every kind
# --------------------------------------------------------------------------------------------------------------

N_TOKENS = 90
STRIDE_LENGTHS = [(1, 6), (3, 16), (4, 32), (7, 12), (16, 64)]


def random_ids(n: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(4, MODEL_VOCAB_SIZE, (n,), generator=g).tolist()


def make_prefixes(windows, seed: int = 1, window0=()) -> list[list[int]]:
    """Per-window prefixes cycling through every case, two consecutive windows sharing one (as a retrieval with a
    stable top passage does), so that shared keys/values are reused across windows:

    empty (no passage retrieved), a lone BOS, a short passage, one exactly as long as the unscored part of the
    window (the longest whose keys/values can be reused), one token longer, one longer than the window, and one of
    300 tokens (longer than max_doc_tokens-like caps and than the model's positions)."""
    prefixes = [list(window0)]
    for w in windows[1:]:
        case = (w.index // 2) % 7
        boundary = w.score_begin - 1 - w.begin  # positions before the first one that predicts a scored token
        length = [0, 1, 5, boundary, boundary + 1, w.length + 3, 300][case]
        generator = torch.Generator().manual_seed(seed * 1000 + w.index // 2)  # the same for both windows of a pair
        passage = torch.randint(4, MODEL_VOCAB_SIZE, (300,), generator=generator).tolist()[:length]
        if case == 1:
            passage = [BOS_ID]
        elif case in (2, 5):
            passage[0] = BOS_ID  # some passages start with BOS, like Gemma's
        prefixes.append(passage)
    return prefixes


@functools.lru_cache(maxsize=None)
def _reference_case(arch: str, stride: int, max_length: int):
    model = make_tiny_model(arch)
    ids = random_ids(N_TOKENS, seed=stride * 100 + max_length)
    windows = plan_windows(len(ids), max_length, stride)
    prefixes = make_prefixes(windows, seed=stride + max_length)
    ref = reference_window_nlls(model, ids, windows, prefixes)
    return model, ids, windows, prefixes, ref


def assert_close(got: torch.Tensor, want: torch.Tensor, what: str = "") -> None:
    assert got.shape == want.shape, what
    assert got.dtype == torch.float64, what
    assert math.isnan(got[0]) and math.isnan(want[0]), f"token 0 is never scored {what}"
    assert torch.isfinite(got[1:]).all(), f"every token but 0 is scored {what}"
    assert torch.isfinite(want[1:]).all(), what
    diff = (got[1:] - want[1:]).abs().max().item()
    assert diff <= ATOL, f"max per-token difference {diff} {what}"
    total_got, total_want = got[1:].sum().item(), want[1:].sum().item()
    assert abs(total_got - total_want) <= RTOL_SUM * abs(total_want), f"sums {total_got} vs {total_want} {what}"


# --------------------------------------------------------------------------------------------------------------
# Fast scorer == reference == independent loop
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stride,max_length", STRIDE_LENGTHS)
def test_reference_matches_independent_loop(arch, stride, max_length):
    model, ids, windows, prefixes, ref = _reference_case(arch, stride, max_length)
    assert [(w.begin, w.end, w.prev_end) for w in windows] == spec_windows(len(ids), max_length, stride)
    mine = spec_nlls(model, ids, max_length, stride, prefixes)
    assert_close(ref, mine, f"reference vs spec loop, {arch} s={stride} L={max_length}")


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("stride,max_length", STRIDE_LENGTHS)
@pytest.mark.parametrize("reuse,batch_size", [(True, 1), (True, 3), (True, 8), (False, 1), (False, 5)])
def test_fast_scorer_matches_reference(arch, stride, max_length, reuse, batch_size):
    model, ids, windows, prefixes, ref = _reference_case(arch, stride, max_length)
    fast = score_windows(model, ids, windows, prefixes, batch_size=batch_size, reuse_prefix_kv=reuse,
                         show_progress=False)
    assert_close(fast, ref, f"{arch} s={stride} L={max_length} reuse={reuse} batch={batch_size}")


@pytest.mark.parametrize("arch", ARCHS)
def test_fast_scorer_matches_independent_loop(arch):
    model, ids, windows, prefixes, _ = _reference_case(arch, 3, 16)
    mine = spec_nlls(model, ids, 16, 3, prefixes)
    fast = score_windows(model, ids, windows, prefixes, batch_size=4, show_progress=False)
    assert_close(fast, mine, arch)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("n", [2, 3, 9])
@pytest.mark.parametrize("window0", [(), (BOS_ID,)])
def test_text_shorter_than_window(arch, n, window0, tiny_models):
    model = tiny_models[arch]
    ids = random_ids(n, seed=n)
    windows = plan_windows(n, 16, 4)
    assert len(windows) == 1
    prefixes = [list(window0)]
    ref = reference_window_nlls(model, ids, windows, prefixes)
    for reuse in (True, False):
        fast = score_windows(model, ids, windows, prefixes, reuse_prefix_kv=reuse, show_progress=False)
        assert_close(fast, ref, f"{arch} n={n}")
    assert_close(spec_nlls(model, ids, 16, 4, prefixes), ref, f"{arch} n={n} spec")


@pytest.mark.parametrize("arch", ARCHS)
def test_all_empty_prefixes(arch, tiny_models):
    """Empty retrieval everywhere: the text alone in every window."""
    model = tiny_models[arch]
    ids = random_ids(50, seed=7)
    windows = plan_windows(50, 12, 4)
    prefixes = [[] for _ in windows]
    ref = reference_window_nlls(model, ids, windows, prefixes)
    for reuse, batch in ((True, 8), (False, 2)):
        assert_close(score_windows(model, ids, windows, prefixes, batch, reuse_prefix_kv=reuse, show_progress=False),
                     ref, arch)
    assert_close(spec_nlls(model, ids, 12, 4, prefixes), ref, arch)


@pytest.mark.parametrize("arch", ARCHS)
def test_one_shared_passage_for_every_window(arch, tiny_models):
    """One passage for all windows after window 0 (a single group with reused keys/values, in several batches, so
    the shared cache must be copied, not extended, from one batch to the next)."""
    model = tiny_models[arch]
    ids = random_ids(70, seed=11)
    windows = plan_windows(70, 20, 2)
    passage = [BOS_ID] + random_ids(9, seed=12)
    prefixes = [[BOS_ID]] + [passage for _ in windows[1:]]
    ref = reference_window_nlls(model, ids, windows, prefixes)
    for batch in (1, 2, 7, 64):
        fast = score_windows(model, ids, windows, prefixes, batch_size=batch, show_progress=False)
        assert_close(fast, ref, f"{arch} batch={batch}")


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_shared_passage_cache(arch, tiny_models):
    """A passage cache handed to score_windows gets the passages' keys/values, and a second call (here, on another
    text with the same passages) takes them from it instead of computing them again, with the same NLLs."""
    model, ids, windows, prefixes, ref = _reference_case(arch, 3, 16)
    store = PassageKVCache(model)
    first = score_windows(model, ids, windows, prefixes, batch_size=4, show_progress=False, passage_cache=store)
    assert_close(first, ref, arch)
    assert store.misses > 0 and len(store) == store.misses  # every distinct reused passage computed once
    computed = store.computed_tokens
    other_ids = random_ids(N_TOKENS, seed=99)
    second = score_windows(model, other_ids, windows, prefixes, batch_size=4, show_progress=False,
                           passage_cache=store)
    assert store.computed_tokens == computed and store.hits > 0
    assert_close(second, reference_window_nlls(model, other_ids, windows, prefixes), arch)


def test_passage_cache_must_fit_the_call(tiny_models):
    model, ids, windows, prefixes, _ = _reference_case("llama", 3, 16)
    with pytest.raises(ValueError, match="another model"):
        score_windows(model, ids, windows, prefixes, show_progress=False,
                      passage_cache=PassageKVCache(tiny_models["opt"]))
    with pytest.raises(ValueError, match="reuse_prefix_kv=True"):
        score_windows(model, ids, windows, prefixes, reuse_prefix_kv=False, show_progress=False,
                      passage_cache=PassageKVCache(model))


def test_the_prefix_matters(tiny_models):
    """Guard against a vacuous comparison: the prefixes change the NLLs far beyond the tolerance."""
    model, ids, windows, prefixes, ref = _reference_case("llama", 3, 16)
    without = reference_window_nlls(model, ids, windows, [[] for _ in windows])
    assert (without[1:] - ref[1:]).abs().max().item() > 100 * ATOL
    shifted = [[] for _ in windows]  # passages given to the wrong windows
    shifted[1:] = prefixes[2:] + prefixes[1:2]
    wrong = score_windows(model, ids, windows, shifted, show_progress=False)
    assert (wrong[1:] - ref[1:]).abs().max().item() > 100 * ATOL


def test_token_positions_matter(tiny_models):
    """Guard: scoring one token late or with a shifted context would be detected."""
    model, ids, windows, prefixes, ref = _reference_case("gpt2", 4, 32)
    assert (ref[2:] - ref[1:-1]).abs().max().item() > 100 * ATOL


# --------------------------------------------------------------------------------------------------------------
# How the fast path computes
# --------------------------------------------------------------------------------------------------------------


class ForwardRecorder:
    """Wraps ``model.forward`` (keeping its signature) to record what every call got and returned."""

    def __init__(self, model):
        self.model = model
        self.calls: list[dict] = []
        original = model.forward

        @functools.wraps(original)
        def forward(*args, **kwargs):
            out = original(*args, **kwargs)
            input_ids = kwargs.get("input_ids", args[0] if args else None)
            self.calls.append({
                "logits_to_keep": kwargs.get("logits_to_keep"),
                "input_len": input_ids.shape[1],
                "batch": input_ids.shape[0],
                "has_cache": kwargs.get("cache", kwargs.get("past_key_values")) is not None,  # the name by version
                "logits_len": out.logits.shape[1],
            })
            return out

        self._original = original
        model.forward = forward

    def restore(self):
        self.model.forward = self._original

    def __enter__(self) -> "ForwardRecorder":
        return self

    def __exit__(self, *exc) -> None:
        self.restore()


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("reuse", [True, False])
def test_fast_path_computes_logits_only_for_scored_positions(arch, reuse):
    model = make_tiny_model(arch)
    ids = random_ids(60, seed=3)
    windows = plan_windows(60, 16, 4)
    passage = [BOS_ID] + random_ids(6, seed=4)
    prefixes = [[]] + [passage] * (len(windows) - 1)
    with ForwardRecorder(model) as recorder:
        fast = score_windows(model, ids, windows, prefixes, batch_size=4, reuse_prefix_kv=reuse,
                             show_progress=False)
    ref = reference_window_nlls(model, ids, windows, prefixes)
    assert_close(fast, ref, arch)

    # a window always scores at least one token, so only the calls that compute a passage's keys/values ask for 1
    scoring_calls = [c for c in recorder.calls if c["logits_to_keep"] != 1]
    prefix_calls = [c for c in recorder.calls if c["logits_to_keep"] == 1]
    for call in recorder.calls:
        assert call["logits_to_keep"] is not None, "the fast path must pass logits_to_keep"
        assert call["logits_len"] == call["logits_to_keep"], "the LM head ran on more positions than asked"
    # every scoring call asks for exactly the scored positions plus the one that predicts nothing in the window
    num_scored = {w.num_scored for w in windows}
    for call in scoring_calls:
        assert call["logits_to_keep"] - 1 in num_scored
        assert call["logits_to_keep"] <= call["input_len"]
    total_logit_rows = sum(c["logits_to_keep"] * c["batch"] for c in recorder.calls)
    full_rows = sum(w.length for w in windows)
    assert total_logit_rows <= sum(w.num_scored + 1 for w in windows) + len(prefix_calls)
    assert total_logit_rows < full_rows / 2
    if reuse:
        # the passage's keys/values are computed once and reused by the later windows
        assert len(prefix_calls) == 1 and prefix_calls[0]["input_len"] == len(passage)
        assert any(c["has_cache"] for c in scoring_calls)
        assert all(c["input_len"] == 16 - len(passage) for c in scoring_calls if c["has_cache"])
    else:
        assert not prefix_calls
        assert not any(c["has_cache"] for c in recorder.calls)


def test_model_without_logits_to_keep_falls_back(tiny_models):
    """A model whose forward does not take ``logits_to_keep`` still gets exact scores (logits cut afterwards)."""
    model = copy.deepcopy(tiny_models["gpt2"])
    original = model.forward
    seen = []

    cache_name = "cache" if "cache" in inspect.signature(original).parameters else "past_key_values"

    def forward(input_ids=None, past_key_values=None, use_cache=None):  # an older model's names: no logits_to_keep,
        seen.append(input_ids.shape)                                      # the cache as past_key_values
        return original(input_ids=input_ids, use_cache=use_cache, **{cache_name: past_key_values})

    model.forward = forward
    ids = random_ids(40, seed=5)
    windows = plan_windows(40, 12, 3)
    prefixes = make_prefixes(windows, seed=9)
    fast = score_windows(model, ids, windows, prefixes, batch_size=3, show_progress=False)
    assert seen
    model.forward = original
    assert_close(fast, reference_window_nlls(model, ids, windows, prefixes))


def test_windows_are_batched(tiny_models):
    model = copy.deepcopy(tiny_models["opt"])
    ids = random_ids(80, seed=6)
    windows = plan_windows(80, 16, 4)
    prefixes = [[] for _ in windows]
    recorder = ForwardRecorder(model)
    try:
        score_windows(model, ids, windows, prefixes, batch_size=8, show_progress=False)
    finally:
        recorder.restore()
    assert sum(c["batch"] for c in recorder.calls) == len(windows)
    assert max(c["batch"] for c in recorder.calls) == 8
    assert len(recorder.calls) < len(windows)


def test_windows_with_passages_of_their_own_are_batched_together(tiny_models):
    """Each window its own passage (nothing to share): with keys/values reuse on, the windows still run in full
    batches, and their NLLs equal the window-by-window ones within 1e-6 relative (float32)."""
    model = copy.deepcopy(tiny_models["llama"])
    ids = random_ids(120, seed=7)
    windows = plan_windows(len(ids), 24, 4)
    generator = torch.Generator().manual_seed(3)
    prefixes = [[]] + [torch.randint(4, MODEL_VOCAB_SIZE, (5 + w.index % 4,), generator=generator).tolist()
                       for w in windows[1:]]
    one_by_one = score_windows(model, ids, windows, prefixes, batch_size=1, show_progress=False)
    recorder = ForwardRecorder(model)
    try:
        batched = score_windows(model, ids, windows, prefixes, batch_size=8, show_progress=False)
    finally:
        recorder.restore()
    full, rest = divmod(len(windows) - 1, 8)
    expected = [1] + [8] * full + ([rest] if rest else [])  # window 0 (shorter) alone, the others in full batches
    assert sorted(c["batch"] for c in recorder.calls) == sorted(expected)
    torch.testing.assert_close(batched, one_by_one, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(batched, reference_window_nlls(model, ids, windows, prefixes))


@pytest.mark.parametrize("arch", ARCHS)
def test_windows_with_different_passages_run_in_one_batch(arch, tiny_models):
    """A new passage every 2 windows (what retrieval gives: consecutive queries overlap), passages of two lengths, the
    longer past gemma3's sliding window: the windows whose passages have one length run in full batches on the
    passages' stacked keys/values, each batch's new passages computed together in one forward (one forward a passage
    leaves a GPU idle), and every NLL equals the window-by-window one (within 1e-6 relative) and the plain reference
    loop's."""
    model = copy.deepcopy(tiny_models[arch])
    ids = random_ids(24 + 4 * 32, seed=8)  # 32 windows after the first, each of 24 tokens scoring 4
    windows = plan_windows(len(ids), 24, 4)
    passages = [random_ids(10 if k % 3 else 6, seed=40 + k) for k in range(16)]  # 6 short ones, 10 long ones
    prefixes = [[]] + [passages[(w.index - 1) // 2] for w in windows[1:]]
    one_by_one = score_windows(model, ids, windows, prefixes, batch_size=1, show_progress=False)
    store = PassageKVCache(model)
    with ForwardRecorder(model) as recorder:
        batched = score_windows(model, ids, windows, prefixes, batch_size=8, show_progress=False,
                                passage_cache=store)
    torch.testing.assert_close(batched, one_by_one, rtol=1e-6, atol=0, equal_nan=True)
    assert_close(batched, reference_window_nlls(model, ids, windows, prefixes), arch)
    distinct = {tuple(p) for p in prefixes[1:]}
    assert store.misses == len(distinct) == len(store)  # each passage computed once
    by_length = {n: sum(len(p) == n for p in prefixes[1:]) for n in (6, 10)}  # windows per passage length
    full_windows = [c["batch"] for c in recorder.calls if c["input_len"] in (24 - 6, 24 - 10)]  # after passages
    assert sorted(full_windows) == sorted(b for n in by_length.values() for b in [8] * (n // 8) + [n % 8] if b)
    passage_forwards = [c for c in recorder.calls if c["input_len"] in (6, 10)]
    assert sum(c["batch"] for c in passage_forwards) == len(distinct)
    assert len(passage_forwards) == len(full_windows)  # one forward for the new passages of each batch


def test_stacked_rows_equal_each_passage_alone(tiny_models):
    """PassageKVCache.stacked gives each passage's keys/values as get() does, repeated as asked, and leaves what the
    store holds unchanged; a store too small to hold a passage still serves the batch."""
    model = tiny_models["gemma3"]
    rome, paris, oslo = (random_ids(10, seed=s) for s in (1, 2, 3))
    for store in (PassageKVCache(model), PassageKVCache(model, max_bytes=0)):
        store.get(rome)
        stored = copy.deepcopy(store.get(rome)[0]) if len(store) else None
        batch = store.stacked([rome, paris, oslo], [2, 1, 3])
        for layer, *alone in zip(batch.layers, *(PassageKVCache(model).get(p)[0].layers for p in (rome, paris, oslo))):
            for name in ("keys", "values"):
                want = torch.cat([getattr(a, name).expand(n, *getattr(a, name).shape[1:])
                                  for a, n in zip(alone, (2, 1, 3))])
                torch.testing.assert_close(getattr(layer, name), want, **BATCHED_FORWARD_TOLERANCE)
        if stored is not None:
            for a, b in zip(stored.layers, store.get(rome)[0].layers):
                assert torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values)
    with pytest.raises(ValueError, match="one length"):
        PassageKVCache(model).stacked([rome, rome[:5]], [1, 1])


def test_prefill_computes_each_length_in_one_forward_and_counts_as_gets_would(tiny_models):
    model = copy.deepcopy(tiny_models["llama"])
    rome, paris, oslo = random_ids(10, seed=1), random_ids(10, seed=2), random_ids(6, seed=3)
    store = PassageKVCache(model)
    store.get(oslo)
    with ForwardRecorder(model) as recorder:
        got = store.prefill([rome, paris, rome, oslo])
    assert [(c["batch"], c["input_len"]) for c in recorder.calls] == [(2, 10)]  # rome and paris together
    assert (store.misses, store.hits) == (3, 2)  # oslo's first get, then: rome, paris missed; rome again, oslo hit
    for passage, (cache, logits) in zip([rome, paris, rome, oslo], got):
        alone, alone_logits = PassageKVCache(model).get(passage)
        torch.testing.assert_close(logits, alone_logits, rtol=1e-5, atol=1e-6)
        for layer, want in zip(cache.layers, alone.layers):
            torch.testing.assert_close(layer.keys, want.keys, rtol=1e-5, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# Lower precision
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["llama", "gemma3"])
def test_bfloat16_is_close_to_float32(arch, tiny_models):
    model32 = tiny_models[arch]
    model16 = copy.deepcopy(model32).to(torch.bfloat16)
    ids = random_ids(60, seed=8)
    windows = plan_windows(60, 16, 4)
    prefixes = make_prefixes(windows, seed=10)
    nll32 = score_windows(model32, ids, windows, prefixes, show_progress=False)
    nll16 = score_windows(model16, ids, windows, prefixes, show_progress=False)
    assert nll16.dtype == torch.float64
    assert torch.isfinite(nll16[1:]).all()
    s32, s16 = nll32[1:].sum().item(), nll16[1:].sum().item()
    assert abs(s16 - s32) <= 0.02 * abs(s32)
    # not just the sum: token by token it is close too, and it really ran in bf16 (not bit-identical)
    assert (nll16[1:] - nll32[1:]).abs().mean().item() < 0.05
    assert not torch.equal(nll16, nll32)
