"""Plain loops: one window (one candidate, one passage) at a time, full forwards, nothing batched, cached or shared,
written from the paper and docs/conventions.md with the rules of [`hf_ralm.testing.spec`][hf_ralm.testing.spec]. Slow by
design: the tests hold the fast paths to them (fp32, 1e-4) and the benchmarks time against them.

Every loop puts its inputs on the model's device ([`model_device`][hf_ralm.model_device]), so the same tests
run on a GPU, and returns per-token NLLs as float64 CPU tensors of the text's length, NaN where a token is not
scored (token 0 always): index ``t`` holds the NLL of ``ids[t]``.
"""

from __future__ import annotations

import math
from typing import Mapping, Sequence, Union

import torch

from ..config.configuration_ralm import RalmConfig
from ..core.modeling_utils import model_device
from ..core.passages import NO_PASSAGE, Passage
from ..core.windows import Window
from .spec import (
    PASSAGE_SEPARATOR, ranking_positions, spec_choice, spec_passage_ids, spec_prefix, spec_random_choice,
    target_positions, write_over,
)

PerWindow = Union[Sequence, Mapping[int, Sequence]]
"""What a loop takes per window, looked up by ``window.index``: a list over all the windows, or a dict."""


def _unscored(ids: Sequence[int]) -> torch.Tensor:
    return torch.full((len(ids),), float("nan"), dtype=torch.float64)


@torch.no_grad()
def full_nlls(model, tokens: Sequence[int], labels: Sequence[int] | None = None) -> torch.Tensor:
    """The NLL of each label after the first, predicted from the tokens before it in one full forward.

    Args:
        model: a causal LM.
        tokens: the input.
        labels: the tokens whose NLLs are computed (default: the input's own).

    Returns:
        A float64 tensor on the CPU: index ``t - 1`` holds the NLL of ``labels[t]`` predicted from ``tokens[:t]``.

    Examples:
        ```python
        full_nlls(model, write_over(window, passage_ids), window)   # the window's own tokens under the passage
        ```
    """
    device = model_device(model)
    labels = tokens if labels is None else labels
    logits = model(torch.tensor([list(tokens)], device=device)).logits[0].float()
    targets = torch.tensor(list(labels[1:]), device=device)
    return torch.nn.functional.cross_entropy(logits[:-1], targets, reduction="none").double().cpu()


@torch.no_grad()
def next_token_logits(model, tokens: Sequence[int]) -> torch.Tensor:
    """A generation step of a plain loop that rebuilds its context every step.

    Args:
        model: a causal LM.
        tokens: the context.

    Returns:
        The float32 logits after ``tokens`` from one full forward without a cache (on the model's device, where
            generation's scores are).
    """
    inputs = torch.tensor([list(tokens)], device=model_device(model))
    return model(input_ids=inputs, use_cache=False).logits[0, -1].float()


@torch.inference_mode()
def reference_window_nlls(model, ids: Sequence[int], windows: Sequence[Window], prefixes: PerWindow) -> torch.Tensor:
    """The paper's ``eval_lm.py`` loop: per window, batch 1, logits for every position, its prefix written over its
    first positions.

    Args:
        model: the reader.
        ids: the text's token ids.
        windows: its windows.
        prefixes: ``prefixes[w.index]``: the token ids written over window ``w``'s first positions.

    Returns:
        The per-token NLLs of the text's tokens (float64, NaN for token 0).

    Examples:
        ```python
        nlls = reference_window_nlls(model, ids, plan_windows(len(ids), 1024, 4), prefixes)
        ```
    """
    device = model_device(model)
    nll = _unscored(ids)
    for w in windows:
        window = torch.tensor(ids[w.begin : w.end], device=device)
        prefix = torch.tensor(prefixes[w.index][: w.length], dtype=torch.long, device=device)
        inputs = window.clone()
        inputs[: len(prefix)] = prefix
        logits = model(inputs[None]).logits[0].float()
        # position i predicts token i + 1; keep the predictions of the scored tokens only
        first = w.score_begin - w.begin
        predicted = logits[first - 1 : w.length - 1]
        targets = window[first:]
        token_nll = torch.nn.functional.cross_entropy(predicted, targets, reduction="none")
        nll[w.score_begin : w.end] = token_nll.double().cpu()
    return nll


@torch.inference_mode()
def reference_rerank_nlls(
    model, ids: Sequence[int], windows: Sequence[Window], candidate_prefixes: PerWindow, rerank_tokens: int,
) -> tuple[list[int], torch.Tensor]:
    """The paper's ``logprob`` reranking: per window one ``(k, L)`` batch of its candidates' inputs with logits for
    every position; the candidate with the lowest summed NLL of the ``rerank_tokens`` text tokens before the window's
    scored tokens is chosen and its row scores the window.

    Args:
        model: the reader.
        ids: the text's token ids.
        windows: its windows.
        candidate_prefixes: ``candidate_prefixes[w.index]`` lists what each candidate writes over window ``w`` (a
            single entry: nothing to rank).
        rerank_tokens: ``s'``, the ranking tokens.

    Returns:
        The choice per window, and the per-token NLLs.

    Examples:
        ```python
        chosen, nlls = reference_rerank_nlls(model, ids, windows, [[p1, p2, p3] for w in windows], 16)
        ```
    """
    device = model_device(model)
    nll = _unscored(ids)
    chosen = []
    for w in windows:
        window = torch.tensor(ids[w.begin : w.end], device=device)
        inputs = window.repeat(len(candidate_prefixes[w.index]), 1)
        for row, prefix in zip(inputs, candidate_prefixes[w.index]):
            prefix = torch.tensor(prefix[: w.length], dtype=torch.long, device=device)
            row[: len(prefix)] = prefix
        logits = model(inputs).logits.float()
        # row by row over (positions, vocabulary): the (batch, vocabulary, positions) layout of cross_entropy loses
        # ~1e-4 nats per token in float32 over a 50k vocabulary
        token_nll = torch.stack([torch.nn.functional.cross_entropy(row[:-1], window[1:], reduction="none")
                                 for row in logits]).double().cpu()
        first = w.score_begin - w.begin  # token_nll[:, t - 1] is the NLL of window position t
        ranking = token_nll[:, max(1, first - rerank_tokens) - 1 : first - 1].sum(dim=1)
        best = int(torch.argmin(ranking)) if len(inputs) > 1 else 0  # argmin: the first of equal values
        chosen.append(best)
        nll[w.score_begin : w.end] = token_nll[best, first - 1 :]
    return chosen, nll


def plain_window_nlls(model, tokenizer, ids: Sequence[int], windows: Sequence[Window], in_context: PerWindow,
                      *, config: RalmConfig, separator: str = PASSAGE_SEPARATOR) -> torch.Tensor:
    """The per-token NLLs with passages in front of each window, as
    [`spec_prefix`][hf_ralm.testing.spec.spec_prefix] says, each window in one full forward.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: its windows.
        in_context: ``in_context[w.index]``: window ``w``'s passages, most relevant first (none: the window alone).
        config: the settings of the passages' encoding.
        separator: the text between two passages.

    Returns:
        The per-token NLLs (float64, NaN for token 0).
    """
    prefixes = {w.index: spec_prefix(tokenizer, in_context[w.index], config, separator) for w in windows}
    return reference_window_nlls(model, ids, windows, prefixes)


def plain_ensemble_nlls(model, tokenizer, ids: Sequence[int], windows: Sequence[Window], members: PerWindow,
                        *, config: RalmConfig) -> torch.Tensor:
    """The per-token NLLs of the ensemble: each window once per member passage, the token's probabilities mixed in
    float64 with the softmax of the members' retrieval scores over ``ensemble_temperature``.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: its windows.
        members: ``members[w.index]``: window ``w``'s member passages (none: the plain window).
        config: the settings (``ensemble_temperature``, the passages' encoding).

    Returns:
        The per-token NLLs (float64, NaN for token 0).
    """
    nll = _unscored(ids)
    for w in windows:
        found = members[w.index]
        if not found:
            nll[w.score_begin : w.end] = plain_window_nlls(model, tokenizer, ids, [w], {w.index: []},
                                                           config=config)[w.score_begin : w.end]
            continue
        exps = [math.exp(p.score / config.ensemble_temperature) for p in found]
        weights = [e / sum(exps) for e in exps]
        mixture = 0
        for passage, weight in zip(found, weights):
            row = plain_window_nlls(model, tokenizer, ids, [w], {w.index: [passage]},
                                    config=config)[w.score_begin : w.end]
            mixture = mixture + weight * torch.exp(-row)
        nll[w.score_begin : w.end] = -torch.log(mixture)
    return nll


def _window_nlls(model, tokenizer, ids: Sequence[int], w: Window, passage: Passage | None,
                 config: RalmConfig) -> torch.Tensor:
    """The window's own tokens under ``passage`` (or none) written over it: index ``t - w.begin - 1`` holds text
    position ``t``'s NLL."""
    text = ids[w.begin : w.end]
    in_context = [] if passage is None else [passage]
    return full_nlls(model, write_over(text, spec_prefix(tokenizer, in_context, config)), text)


def _summed(nlls: torch.Tensor, w: Window, positions: range) -> float:
    return sum(float(nlls[t - w.begin - 1]) for t in positions)


def ranking_nll(model, tokenizer, ids: Sequence[int], w: Window, passage: Passage | None, *,
                config: RalmConfig) -> float:
    """The summed NLL of a window's ranking tokens with a passage written over the window.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        w: the window.
        passage: the passage (``None``: none).
        config: the settings (``rerank_tokens``, the passage's encoding).

    Returns:
        The sum over the last ``rerank_tokens`` tokens before the window's first scored token (never its first
            token).
    """
    return _summed(_window_nlls(model, tokenizer, ids, w, passage, config), w,
                   ranking_positions(w, config.rerank_tokens))


def other_lm_ranking_nll(reranker, tokenizer, ids: Sequence[int], w: Window, option: Passage | None,
                         *, config: RalmConfig) -> float:
    """The summed NLL another LM gives a window's ranking tokens, in text: its tokens of the passage (cut to leave room
    for the ranking tokens), then its tokens of the window's text before the ranking tokens cut from the left to the
    room left, then its tokens of the ranking tokens' text.

    Args:
        reranker: the other LM: its ``model``, ``tokenizer`` and ``max_length``.
        tokenizer: the reader's tokenizer (the text's ids are its tokens).
        ids: the text's token ids.
        w: the window.
        option: the passage (``None``: none).
        config: the settings (``rerank_tokens``, the passage's encoding).

    Returns:
        The sum of the other LM's NLLs of its ranking tokens.
    """
    rtok = reranker.tokenizer
    begin = ranking_positions(w, config.rerank_tokens).start
    passage = spec_passage_ids(rtok, option, config)
    prefix = rtok(tokenizer.decode(ids[w.begin : begin]), add_special_tokens=False)["input_ids"]
    ranking = rtok(tokenizer.decode(ids[begin : w.score_begin]), add_special_tokens=False)["input_ids"]
    passage = passage[: reranker.max_length - len(ranking)]
    room = reranker.max_length - len(ranking) - len(passage)
    tokens = passage + (prefix[-room:] if room > 0 else []) + ranking
    return float(full_nlls(reranker.model, tokens)[-len(ranking) :].sum())


def plain_rerank(model, tokenizer, ids: Sequence[int], windows: Sequence[Window], candidates: PerWindow,
                 *, config: RalmConfig, reranker=None) -> tuple[list[int], torch.Tensor]:
    """Reranking one window and one candidate at a time: the first ``rerank_candidates`` of ``candidates[w.index]`` (and
    no passage last, with ``rerank_allow_no_passage``), each written over the window as the chosen passage will be and
    ranked by [`ranking_nll`][hf_ralm.testing.loops.ranking_nll] (``"lm"``; with ``reranker``,
    [`other_lm_ranking_nll`][hf_ralm.testing.loops.other_lm_ranking_nll]) or by the NLL of the window's own scored
    tokens (``"oracle"``), or one of them drawn (``"random"``); the window is then scored with the choice.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: its windows.
        candidates: ``candidates[w.index]``: window ``w``'s retrieved passages, in retrieval order.
        config: the settings (``rerank`` and its own).
        reranker: another LM that ranks, in text (``None``: the reader).

    Returns:
        The choice per window ([`NO_PASSAGE`][hf_ralm.core.passages.NO_PASSAGE] for none) and the NLL of every
            token.

    Examples:
        ```python
        chosen, nlls = plain_rerank(model, tokenizer, ids, windows, candidates, config=RalmConfig(rerank="lm"))
        ```
    """
    nll = _unscored(ids)
    chosen = []
    for w in windows:
        pool = list(candidates[w.index])[: config.rerank_candidates] if w.has_retrieval else []
        options = pool + ([None] if pool and config.rerank_allow_no_passage else [])
        if not pool:
            best = 0
        elif config.rerank == "random":
            best = spec_random_choice(config.rerank_seed, w.index, len(pool))
        else:
            positions = target_positions(w) if config.rerank == "oracle" else ranking_positions(w, config.rerank_tokens)
            scores = [other_lm_ranking_nll(reranker, tokenizer, ids, w, option, config=config) if reranker is not None
                      else _summed(_window_nlls(model, tokenizer, ids, w, option, config), w, positions)
                      for option in options]
            best = spec_choice(scores, config.rerank_no_passage_margin if options[-1] is None else None)
        choice = options[best] if options else None
        chosen.append(NO_PASSAGE if choice is None else best)
        scored = _window_nlls(model, tokenizer, ids, w, choice, config)
        nll[w.score_begin : w.end] = scored[w.score_begin - w.begin - 1 :]
    return chosen, nll
