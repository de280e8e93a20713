"""The fast, exact scorer: negative log-likelihoods of every scored token of every window.

Each window's input is ``prefix_ids`` (a passage, a BOS, or nothing) written over the first positions of the window's
tokens, exactly as the reference does; what changes is how it is computed.
[`score_inputs`][hf_ralm.core.scoring.score_inputs] does it for any [`ScoredInput`][hf_ralm.core.scoring.ScoredInput] (a
reranker's candidate inputs too); [`score_windows`][hf_ralm.score_windows] for the windows of a text:

* windows of equal shape are batched (every window is exactly ``end - begin`` long, so no padding is needed);
* logits are computed only at the positions that score a token (``logits_to_keep``), not for the whole window;
* windows that share the same passage share its keys/values: a passage sits at position 0 and attention is causal,
  so its keys/values do not depend on the text after it. They come from a
  [`PassageKVCache`][hf_ralm.PassageKVCache] (computed once per distinct passage, or taken from a store the
  caller shares, e.g. with generation) and only the text after the passage is run (turn off with
  ``reuse_prefix_kv=False``); a window whose passage no other window shares runs whole, in one batch with the
  other such windows, so batches stay full.

Examples:
    ```python
    nll = score_windows(model, ids, plan_windows(len(ids), 512, 4), prefixes)
    ```
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import groupby
from typing import Iterator, Sequence

import torch
from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..utils.progress import tqdm

from ..config.configuration_ralm import RalmConfig
from ..errors import NonFiniteError, setting
from .model_inputs import passage_prefix
from .engines.reader import engine_reader
from .modeling_utils import last_logits, model_device
from .passage_cache import PassageKVCache
from .passages import Passage
from .windows import Window, place_passage


def token_nlls(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``-log p(target)`` per position, with the softmax in float32 whatever the model's dtype.

    Args:
        logits: the logits, ``(..., vocabulary)``.
        targets: the token at each position.

    Returns:
        The NLLs, one per position (float32).
    """
    log_probs = torch.log_softmax(logits.float(), dim=-1)
    return -log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def check_finite(nlls: torch.Tensor, batch: Sequence["ScoredInput"], model) -> None:
    """Check that a batch's NLLs are finite: a figure summed from a NaN or an infinity would be reported as if it were a
    result.

    Args:
        nlls: the batch's NLLs, one row per input of ``batch``.
        batch: the inputs.
        model: the reader (its precision is named).

    Raises:
        NonFiniteError: a row holds a NaN or an infinity; the message names the first such input's tokens and the
            model's precision, and says what fixes it.
    """
    bad = ~torch.isfinite(nlls)
    if not bad.any():
        return
    row, position = (int(i) for i in bad.nonzero()[0])
    item, value = batch[row], float(nlls[row, position])
    dtype = str(getattr(model, "dtype", "unknown")).removeprefix("torch.")
    fix = (f"half precision overflows in this model: load it in bfloat16 or float32 ({setting('dtype')})"
           if dtype == "float16" else
           f"the model's weights or its computation give {value} even in {dtype}: check the checkpoint, or load it "
           f"in float32 ({setting('dtype')})")
    raise NonFiniteError(f"The model's NLL of text token {item.first_scored + position} (scored in the input of text "
                         f"tokens {item.begin} to {item.end - 1}) is {value} in {dtype}: {fix}. No figure is reported "
                         "from a non-finite NLL.")


@dataclass(frozen=True)
class ScoredInput:
    """One model input and the tokens it scores: ``ids[begin:end]`` with ``prefix`` written over its first positions
    ([`place_passage`][hf_ralm.core.windows.place_passage]). Inputs that put the same prefix before what they score
    share the prefix's keys/values.

    Attributes:
        ids: the text's ids, shared, not copied (a text's ids for the reader's windows, or an input of its own).
        begin: the input's first text position.
        end: one past its last.
        prefix: what is written over its first positions (a passage's ids, a BOS, or nothing).
        first_scored: the first text position it scores (it scores up to ``end``).
    """

    ids: Sequence[int]
    begin: int
    end: int
    prefix: tuple[int, ...]
    first_scored: int

    @property
    def length(self) -> int:
        """The input's tokens: ``end - begin``."""
        return self.end - self.begin

    @property
    def num_scored(self) -> int:
        """The tokens it scores: ``end - first_scored``."""
        return self.end - self.first_scored

    @property
    def shareable_prefix(self) -> tuple[int, ...] | None:
        """The prefix as it sits in the input, when every position that scores a token lies after it (so its
        keys/values can be computed once and the rest run on top of them); else ``None``."""
        prefix = self.prefix[: self.length]
        return prefix if 0 < len(prefix) <= self.first_scored - 1 - self.begin else None

    def tokens(self) -> list[int]:
        """The input's token ids: its text with the prefix written over its first positions."""
        return place_passage(list(self.ids[self.begin : self.end]), self.prefix)


def window_inputs(
    ids: Sequence[int], windows: Sequence[Window], prefixes: Sequence[Sequence[int]]
) -> list[ScoredInput]:
    """The reader's input of every window.

    Args:
        ids: the text's token ids.
        windows: its windows.
        prefixes: ``prefixes[w.index]`` is written over window ``w``'s first positions.

    Returns:
        Per window, its [`ScoredInput`][hf_ralm.core.scoring.ScoredInput], scoring what the window scores.
    """
    return [ScoredInput(ids, w.begin, w.end, tuple(prefixes[w.index]), w.score_begin) for w in windows]


def score_inputs(
    model,
    inputs: Sequence[ScoredInput],
    batch_size: int = DEFAULT_BATCH_SIZE,
    reuse_prefix_kv: bool = True,
    passage_cache: PassageKVCache | None = None,
    *,
    progress: tqdm | WindowShare | None = None,
) -> list[torch.Tensor]:
    """The NLLs of the scored tokens of every input, in order.

    Inputs of equal length that score equally many tokens run in one batch (no padding needed) and the LM head runs only
    where a token is scored. With ``reuse_prefix_kv``, inputs that share a prefix are grouped by prefix: its keys/values
    come from ``passage_cache`` (computed once per distinct prefix) and only the rest is run; an input whose prefix no
    other input shares (and the store does not hold) runs whole, batched with the other such inputs of its shape. An
    engine reader (a [`Reader`][hf_ralm.Reader], e.g. vLLM's) gets all the inputs in one call and batches them
    itself.

    Args:
        model: the reader.
        inputs: the inputs.
        batch_size: the inputs run in one forward pass.
        reuse_prefix_kv: compute each shared prefix's keys/values once.
        passage_cache: the store the prefixes' keys/values are taken from and kept in (by default one per call).
        progress: advanced by the inputs scored.

    Returns:
        Per input, the NLLs of its scored tokens (float64, on the CPU).

    Raises:
        NonFiniteError: the model gives a NaN or infinite NLL.
    """
    reader = engine_reader(model)
    if reader is not None:
        nlls = reader.score_inputs(inputs)
        if progress is not None:
            progress.update(len(inputs))
        return nlls
    nlls: list[torch.Tensor | None] = [None] * len(inputs)
    for members, batch_nll, _, _ in _scored_batches(model, inputs, batch_size, reuse_prefix_kv, passage_cache):
        for i, row in zip(members, batch_nll):
            nlls[i] = row
        if progress is not None:
            progress.update(len(members))
    return nlls


def score_continuations(model, inputs: Sequence[ScoredInput], batch_size: int = DEFAULT_BATCH_SIZE,
                        reuse_prefix_kv: bool = True, passage_cache: PassageKVCache | None = None
                        ) -> list[tuple[float, bool]]:
    """lm-evaluation-harness's ``(logprob, is_greedy)`` of each input's scored tokens, batched and computed as
    [`score_inputs`][hf_ralm.core.scoring.score_inputs] computes the NLLs (the same batches, passages' keys/values
    reused; an engine reader's all in one call).

    Args:
        model: the reader.
        inputs: the inputs.
        batch_size: the inputs run in one forward pass.
        reuse_prefix_kv: compute each shared prefix's keys/values once.
        passage_cache: the store of the prefixes' keys/values.

    Returns:
        Per input, the summed log-probability of its scored tokens, and whether each of them is the model's most
            likely next token there (greedy decoding would produce them).

    Examples:
        ```python
        score_continuations(model, [ScoredInput(ids, 0, len(ids), (), len(context_ids))])   # [(-7.9, False)]
        ```
    """
    reader = engine_reader(model)
    if reader is not None:
        return reader.score_continuations(inputs)
    scores: list[tuple[float, bool] | None] = [None] * len(inputs)
    for members, batch_nll, logits, targets in _scored_batches(model, inputs, batch_size, reuse_prefix_kv,
                                                               passage_cache):
        greedy = (logits.argmax(-1) == targets).all(-1).tolist()
        for i, row, is_greedy in zip(members, batch_nll, greedy):
            scores[i] = (-float(row.sum()), bool(is_greedy))
    return scores


@torch.inference_mode()
def _scored_batches(model, inputs: Sequence[ScoredInput], batch_size: int, reuse_prefix_kv: bool,
                    passage_cache: PassageKVCache | None) -> Iterator[tuple[list[int], torch.Tensor, torch.Tensor,
                                                                            torch.Tensor]]:
    """The batches [`score_inputs`][hf_ralm.core.scoring.score_inputs] runs: per batch, the indices of its inputs, the
    NLLs of their scored tokens (float64, on the CPU, checked finite:
    [`check_finite`][hf_ralm.core.scoring.check_finite]), the logits that predict those tokens (``batch × num_scored ×
    vocabulary``) and the tokens."""
    if passage_cache is not None and not reuse_prefix_kv:
        raise ValueError("passage_cache holds passages' keys/values for reuse: it needs reuse_prefix_kv=True.")
    if reuse_prefix_kv:
        passage_cache = PassageKVCache.for_model(model, passage_cache)
    device = model_device(model)
    groups: dict[tuple, list[int]] = defaultdict(list)
    for i, item in enumerate(inputs):
        shared = item.shareable_prefix if reuse_prefix_kv else None
        groups[(shared, item.length, item.num_scored)].append(i)
    # A prefix only one input puts first (and the store does not hold) saves nothing when computed apart: that input
    # runs whole, batched with the other inputs of its shape whatever their prefixes.
    for key in [key for key, members in groups.items()
                if key[0] is not None and len(members) == 1 and key[0] not in passage_cache]:
        groups[(None, *key[1:])] += groups.pop(key)
    prefixes = {i: key[0] for key, members in groups.items() for i in members}
    if reuse_prefix_kv and passage_cache.stacks_rows():
        # Inputs with different passages of one length run in one batch (as large as batch_size, not only as large as
        # one passage's group) on the passages' stacked keys/values; each passage's inputs stay together.
        by_length: dict[tuple, list[int]] = defaultdict(list)
        for (shared, length, num_scored), members in groups.items():
            by_length[(None if shared is None else len(shared), length, num_scored)] += members
        groups = by_length
    for (_, _, num_scored), members in groups.items():
        for start in range(0, len(members), batch_size):
            batch_members = members[start : start + batch_size]
            batch = [inputs[i] for i in batch_members]
            targets = torch.tensor([list(x.ids[x.first_scored : x.end]) for x in batch], device=device)
            runs = [(prefix, len(list(run))) for prefix, run in groupby(prefixes[i] for i in batch_members)]
            if runs[0][0] is None:
                tokens = torch.tensor([x.tokens() for x in batch], device=device)
                logits = last_logits(model, tokens, num_scored + 1)
            else:
                if len(runs) == 1:
                    cache, _ = passage_cache.get(runs[0][0])  # a private copy, one row: repeated for the batch
                    cache.batch_repeat_interleave(len(batch))
                else:
                    cache = passage_cache.stacked(*zip(*runs))
                skip = len(runs[0][0])
                suffix = torch.tensor([list(x.ids[x.begin + skip : x.end]) for x in batch], device=device)
                logits = last_logits(model, suffix, num_scored + 1, cache=cache)
            logits = logits[:, :-1]
            batch_nll = token_nlls(logits, targets).double().cpu()
            check_finite(batch_nll, batch, model)
            yield batch_members, batch_nll, logits, targets


def score_windows(
    model,
    ids: Sequence[int],
    windows: Sequence[Window],
    prefixes: Sequence[Sequence[int]],
    batch_size: int = DEFAULT_BATCH_SIZE,
    *,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
    passage_cache: PassageKVCache | None = None,
) -> torch.Tensor:
    """The NLL of every token of a text, each scored in its window with the window's prefix in front.

    Args:
        model: the reader (a transformers causal LM, or an engine reader such as [`VllmReader`][hf_ralm.VllmReader]).
        ids: the text's token ids.
        windows: its windows ([`plan_windows`][hf_ralm.plan_windows]).
        prefixes: ``prefixes[w.index]`` overwrites the start of window ``w``: a passage's token ids, ``[bos]`` or
            ``[]`` ([`window_prefixes`][hf_ralm.window_prefixes]).
        batch_size: the windows run in one forward pass.
        reuse_prefix_kv: compute each distinct passage's keys/values once and reuse them for the windows that share
            it (exact: a passage sits at position 0 and attention is causal).
        show_progress: show a progress bar of the windows.
        passage_cache: a [`PassageKVCache`][hf_ralm.PassageKVCache] of ``model`` to take the passages' keys/values
            from and keep them in (by default a store of this call's own).

    Returns:
        A float64 tensor of ``len(ids)`` NLLs, NaN where no window scores the token (token 0).

    Raises:
        NonFiniteError: the model gives a NaN or infinite NLL (the message names the tokens and the precision).

    Examples:
        ```python
        nll = score_windows(model, plan.ids, plan.windows, window_prefixes(tokenizer, plan.windows, passages, config))
        float(nll[1:].sum())   # the summed NLL of the scored tokens
        ```
    """
    ids = list(ids)
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    with tqdm(total=len(windows), desc="Scoring windows", unit="win", disable=not show_progress,
              leave=None) as progress:
        rows = score_inputs(model, window_inputs(ids, windows, prefixes), batch_size, reuse_prefix_kv, passage_cache,
                            progress=progress)
    for w, row in zip(windows, rows):
        nll[w.score_begin : w.end] = row
    return nll


WINDOWS_PER_CHUNK = 64  # windows whose candidate inputs are built and batched together (bounds memory)


class WindowShare:
    """A progress bar of ``windows`` windows advanced by their ``inputs`` inputs as they are scored: ``update(n)``
    inputs moves it by the windows' share done (whole windows), so that it reaches ``windows`` with the last input.

    Examples:
        >>> import io
        >>> bar = tqdm(total=4, file=io.StringIO())
        >>> share = WindowShare(bar, windows=4, inputs=68)
        >>> share.update(17); share.update(8); bar.n
        1
        >>> share.update(43); bar.n
        4
    """

    def __init__(self, bar: tqdm, windows: int, inputs: int):
        self.bar, self.windows, self.inputs, self.done, self.shown = bar, windows, inputs, 0, 0

    def update(self, n: int) -> None:
        """Count ``n`` more inputs scored, moving the bar by the whole windows they complete."""
        self.done += n
        shown = self.windows if self.done >= self.inputs else self.done * self.windows // self.inputs
        if shown > self.shown:
            self.bar.update(shown - self.shown)
            self.shown = shown


def reader_nlls(model, tokenizer, ids: Sequence[int], windows: Sequence[Window],
                options: Sequence[Sequence[Passage | None]], *, firsts: Sequence[int], config: RalmConfig,
                batch_size: int = DEFAULT_BATCH_SIZE, reuse_prefix_kv: bool = True,
                passage_cache: PassageKVCache | None = None, progress: tqdm | None = None
                ) -> Iterator[list[torch.Tensor]]:
    """The reader's NLLs of each window under each of its options: what ranking
    ([`rerank_windows`][hf_ralm.selection.rerank.rerank_windows]) and ensembles
    ([`hf_ralm.core.ensemble`][hf_ralm.core.ensemble]) score their candidates with.

    Each option's input is the window with [`passage_prefix`][hf_ralm.passage_prefix] of the option written over its
    start, as the chosen passage will be. The inputs of [`WINDOWS_PER_CHUNK`][hf_ralm.core.scoring.WINDOWS_PER_CHUNK]
    windows run in one [`score_inputs`][hf_ralm.core.scoring.score_inputs] call (batched, each distinct passage's
    keys/values computed once with ``reuse_prefix_kv``).

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: the windows.
        options: ``options[i]`` are window ``i``'s options (a passage, or ``None`` for none).
        firsts: ``firsts[i]`` is the first text position whose NLL is returned for window ``i``.
        config: the settings the passages are encoded under (and the room a prefix has).
        batch_size: the inputs run in one forward pass.
        reuse_prefix_kv: compute each distinct passage's keys/values once.
        passage_cache: the store to keep them in.
        progress: a bar of windows, advanced as their inputs are scored.

    Yields:
        For each window in order, one float64 row per option: the NLLs of the text tokens from ``firsts[i]`` to the
            window's end.

    Raises:
        SettingError: a window cannot hold an option's prefix and a stride.

    Examples:
        ```python
        rows = next(reader_nlls(model, tokenizer, ids, [window], [[rome, None]],
                                firsts=[window.score_begin], config=config))
        [float(row.sum()) for row in rows]   # [11.2, 13.9]: the window's target NLL with rome, and without
        ```
    """
    ids = list(ids)
    passage_cache = PassageKVCache.for_model(model, passage_cache) if reuse_prefix_kv else None
    for start in range(0, len(windows), WINDOWS_PER_CHUNK):
        chunk = range(start, min(start + WINDOWS_PER_CHUNK, len(windows)))
        inputs = []
        for i in chunk:
            for option in options[i]:
                prefix = tuple(passage_prefix(tokenizer, option, config))
                # every window with retrieval holds L - s tokens before its scored ones
                config.check_room(windows[i].length - windows[i].num_scored + config.retrieval_stride, len(prefix))
                inputs.append(ScoredInput(ids, windows[i].begin, windows[i].end, prefix, firsts[i]))
        # the bar of windows advances as their inputs are scored, batch by batch, not once per 64 windows
        scored = None if progress is None else WindowShare(progress, len(chunk), len(inputs))
        rows = iter(score_inputs(model, inputs, batch_size, reuse_prefix_kv, passage_cache, progress=scored))
        for i in chunk:
            yield [next(rows) for _ in options[i]]
