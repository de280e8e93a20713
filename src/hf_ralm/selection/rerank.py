"""Which retrieved passage each window puts in context: LM-oriented reranking (the paper's §6), exactly.

Strategies (``RalmConfig.rerank``): ``"none"`` (retrieval's top passage), ``"lm"`` (zero-shot: the candidate under
which an LM finds the ranking tokens likeliest, :mod:`hf_ralm.selection.rules`), ``"oracle"`` (the reader's own
NLL of the window's target tokens: it looks at the future, an upper bound), ``"random"`` (a seeded uniform choice: a
floor) and ``"predictive"`` (a trained cross-encoder, :class:`~hf_ralm.selection.predictive.PredictiveReranker`).
With ``rerank_allow_no_passage`` the window without a passage is one more candidate (``"lm"``, ``"oracle"``),
chosen unless a passage saves ``rerank_no_passage_margin`` nats over it (:func:`choose_ranked`).

When the reader ranks (``"lm"`` without ``reranker_model``, ``"oracle"``), every candidate's input runs once through
:func:`~hf_ralm.scoring.score_inputs` and yields both its ranking NLLs and its target NLLs (the ranking tokens come
just before the target and attention is causal), so the chosen candidate's target NLLs need no second pass. Inputs
are batched across windows and a passage's keys/values are computed once for every window that has it as a
candidate (consecutive windows' candidate sets overlap).

Example:
    >>> outcome = rerank_windows(model, tokenizer, ids, windows, queries, candidates, config)   # doctest: +SKIP
    >>> outcome.chosen[5], outcome.ranking_nlls[5]                                            # doctest: +SKIP
    (3, [41.2, 40.7, 40.9, 38.8, ...])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from tqdm.auto import tqdm

from ..configuration_ralm import RalmConfig
from ..model_inputs import passage_prefix
from ..modeling_utils import model_device, resolve_max_length
from ..passage_cache import PassageKVCache
from ..passages import NO_PASSAGE, Passage
from ..scoring import ScoredInput, score_inputs
from ..windows import Window
from .rules import choose_option, fit_reranker_input, oracle_span, random_choice, ranking_span

WINDOWS_PER_CHUNK = 64  # windows whose candidate inputs are built and batched together (bounds memory)


@dataclass
class RerankOutcome:
    """Per window: ``chosen`` (index into its candidates, :data:`NO_PASSAGE` for none) and ``ranking_nlls`` (one
    per candidate, the no-passage candidate last when allowed; ``None`` where no LM ranked). When the reader ranked:
    ``target_nlls`` (per window, the reader's summed NLL of the window's scored tokens under each candidate, in the
    same order: what the oracle ranks on, and ``-log p(y | [d_i; x])`` for the predictive reranker's training data)
    and ``token_nlls`` (the reader's NLL of every text token with the chosen passages, float64, NaN for token 0);
    else ``None``. ``gate_scores``: per window, what a retrieval gate decided on (:mod:`.gates`; ``None`` where it
    decided nothing), when one did."""

    chosen: list[int]
    ranking_nlls: list[list[float] | None]
    token_nlls: torch.Tensor | None = None
    target_nlls: list[list[float] | None] | None = None
    gate_scores: list[float | None] | None = None


class LMReranker:
    """Another causal LM that ranks candidates for the reader (e.g. a small LM for a large one), in text: see
    :func:`~hf_ralm.selection.rules.fit_reranker_input` for how its input is built from its own tokens."""

    def __init__(self, model, tokenizer, max_length: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.max_length = resolve_max_length(model, max_length)

    def inputs(self, prefix_text: str, ranking_text: str, options: Sequence[Passage | None],
               config: RalmConfig) -> list[ScoredInput]:
        """Its input for each candidate (``None``: no passage), scoring its tokens of ``ranking_text``: its tokens
        of the passage, of ``prefix_text`` cut from the left, and of ``ranking_text`` (:func:`fit_reranker_input`).
        Evaluation and generation both rank with these inputs.

        Example:
            >>> inputs = reranker.inputs("the emperor of", "rome and", [passage, None], config)  # doctest: +SKIP
            >>> [float(nll.sum()) for nll in score_inputs(reranker.model, inputs)]             # doctest: +SKIP
            [11.2, 13.9]
        """
        prefix_ids = self.tokenizer(prefix_text, add_special_tokens=False)["input_ids"]
        ranking_ids = self.tokenizer(ranking_text, add_special_tokens=False)["input_ids"]
        inputs = []
        for option in options:
            passage_ids = passage_prefix(self.tokenizer, option, config)
            tokens, first = fit_reranker_input(passage_ids, prefix_ids, ranking_ids, self.max_length)
            kept = tuple(passage_ids[: self.max_length - len(ranking_ids)])
            inputs.append(ScoredInput(tokens, 0, len(tokens), kept, first))
        return inputs


def load_reranker(config: RalmConfig, reader):
    """The reranker ``config`` asks for, on ``reader``'s device and in its dtype: an :class:`LMReranker` for ``"lm"``
    with a ``reranker_model``, a :class:`~hf_ralm.selection.predictive.PredictiveReranker` for ``"predictive"``,
    else ``None`` (the reader ranks, or nothing does)."""
    if config.rerank == "predictive":
        from .predictive import PredictiveReranker

        return PredictiveReranker(config.reranker_model, device=str(model_device(reader)))
    if config.rerank != "lm" or config.reranker_model is None:
        return None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(config.reranker_model, dtype=reader.dtype)
        tokenizer = AutoTokenizer.from_pretrained(config.reranker_model)
    except OSError as error:
        raise OSError(f"Could not load the reranker LM {config.reranker_model!r} (reranker_model): it is neither a "
                      f"local model folder nor a model that could be fetched from the Hub. {error}") from error
    return LMReranker(model.to(model_device(reader)).eval(), tokenizer, config.max_length)


def rerank_windows(
    model,
    tokenizer,
    ids: Sequence[int],
    windows: Sequence[Window],
    queries: Sequence[str | None],
    candidates: Sequence[Sequence[Passage]],
    config: RalmConfig,
    reranker=None,
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    passage_cache: PassageKVCache | None = None,
    show_progress: bool = True,
) -> RerankOutcome:
    """Choose the passage of every window under ``config.rerank`` (see the module docstring).

    ``candidates[w.index]`` are the window's retrieved passages in retrieval order (at most
    ``config.rerank_candidates`` are considered); ``windows`` may be any of the text's windows, and the outcome's lists
    follow their order; ``reranker`` is an :class:`LMReranker` (``"lm"`` with another
    model) or a :class:`~hf_ralm.selection.predictive.PredictiveReranker` (``"predictive"``).
    """
    strategy = config.rerank
    pools = {w.index: list(candidates[w.index])[: config.rerank_candidates] if w.has_retrieval else []
             for w in windows}
    if strategy == "none":
        return RerankOutcome([0 if pools[w.index] else NO_PASSAGE for w in windows], [None] * len(windows))
    if strategy == "random":
        chosen = [random_choice(config.rerank_seed, w.index, len(pools[w.index])) if pools[w.index] else NO_PASSAGE
                  for w in windows]
        return RerankOutcome(chosen, [None] * len(windows))
    if strategy == "predictive":
        return _predictive(reranker, windows, queries, pools, config)
    if reranker is None and config.reranker_model is not None:
        raise ValueError(f"reranker_model={config.reranker_model!r} ranks, but no reranker was passed: pass "
                         "reranker=load_reranker(config, model).")
    if reranker is None:
        return _reader_ranks(model, tokenizer, ids, windows, pools, config, batch_size, reuse_prefix_kv, passage_cache,
                             show_progress)
    return _other_lm_ranks(reranker, tokenizer, ids, windows, pools, config, batch_size, reuse_prefix_kv,
                           show_progress)


def rerank_options(pool: list[Passage], config: RalmConfig) -> list[Passage | None]:
    """The candidates an LM ranks, in order: the retrieved ones, then no passage (``None``) when
    ``rerank_allow_no_passage`` (ties prefer a passage). Evaluation and generation both rank these.

    Example:
        >>> config = RalmConfig(rerank="lm", rerank_allow_no_passage=True)
        >>> rerank_options([Passage("1", "", "rome", 1.0)], config), rerank_options([], config)
        ([Passage(id='1', title='', text='rome', score=1.0), None], [])
    """
    return pool + [None] if pool and config.rerank_allow_no_passage else list(pool)


def choose_ranked(ranking_nlls: Sequence[float], options: Sequence[Passage | None], config: RalmConfig) -> int:
    """Index into ``options`` (:func:`rerank_options`) of the one chosen on ``ranking_nlls``: the lowest, no passage
    winning unless a passage saves ``config.rerank_no_passage_margin`` nats over it
    (:func:`~hf_ralm.selection.rules.choose_option`). Evaluation and generation both choose so.

    Example:
        >>> config = RalmConfig(rerank="lm", rerank_allow_no_passage=True, rerank_no_passage_margin=2.0)
        >>> choose_ranked([10.0, 11.5], [Passage("1", "", "rome", 1.0), None], config)   # saves 1.5 nats: none
        1
    """
    no_passage_last = len(options) > 0 and options[-1] is None
    return choose_option(list(ranking_nlls), no_passage_last, config.rerank_no_passage_margin)


def _index(choice: int, pool: list[Passage]) -> int:
    return NO_PASSAGE if choice >= len(pool) else choice


def reader_nlls(model, tokenizer, ids: Sequence[int], windows: Sequence[Window],
                options: Sequence[Sequence[Passage | None]], firsts: Sequence[int], config: RalmConfig,
                batch_size: int = 8, reuse_prefix_kv: bool = True, passage_cache: PassageKVCache | None = None,
                progress: tqdm | None = None) -> Iterator[list[torch.Tensor]]:
    """For each window in order, the reader's NLLs (float64) of the text tokens from ``firsts[i]`` to its end under
    each of ``options[i]``: the window with :func:`~hf_ralm.model_inputs.passage_prefix` of the option (``None``:
    no passage) written over its start, as the chosen passage will be. The inputs of :data:`WINDOWS_PER_CHUNK`
    windows run in one :func:`~hf_ralm.scoring.score_inputs` call (batched, each distinct passage's keys/values
    computed once with ``reuse_prefix_kv``). What ranking (:func:`rerank_windows`) and ensembles
    (:mod:`hf_ralm.ensemble`) score their candidates with.

    Example:
        >>> rows = next(reader_nlls(model, tokenizer, ids, [window], [[rome, None]], [window.score_begin], config))
        >>> [float(row.sum()) for row in rows]   # the window's target NLL with rome, and without   # doctest: +SKIP
        [11.2, 13.9]
    """
    ids = list(ids)
    passage_cache = PassageKVCache.for_model(model, passage_cache) if reuse_prefix_kv else None
    for start in range(0, len(windows), WINDOWS_PER_CHUNK):
        chunk = range(start, min(start + WINDOWS_PER_CHUNK, len(windows)))
        inputs = [ScoredInput(ids, windows[i].begin, windows[i].end, tuple(passage_prefix(tokenizer, option, config)),
                              firsts[i]) for i in chunk for option in options[i]]
        rows = iter(score_inputs(model, inputs, batch_size, reuse_prefix_kv, passage_cache))
        for i in chunk:
            yield [next(rows) for _ in options[i]]
        if progress is not None:
            progress.update(len(chunk))


def _reader_ranks(model, tokenizer, ids, windows, pools, config, batch_size, reuse_prefix_kv, passage_cache,
                  show_progress) -> RerankOutcome:
    """The reader ranks (``"lm"`` or ``"oracle"``): one input per candidate gives its ranking and target NLLs."""
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    chosen: list[int] = []
    ranking: list[list[float] | None] = []
    targets: list[list[float] | None] = []
    options = [rerank_options(pools[w.index], config) or [None] for w in windows]  # nothing retrieved: as it is
    firsts = [oracle_span(w)[0] if config.rerank == "oracle" else ranking_span(w, config.rerank_tokens)[0]
              for w in windows]
    with tqdm(total=len(windows), desc=f"Reranking ({config.rerank})", unit="win",
              disable=not show_progress, leave=None) as progress:
        rows = reader_nlls(model, tokenizer, ids, windows, options, firsts, config, batch_size, reuse_prefix_kv,
                           passage_cache, progress)
        for w, first, window_options, window_rows in zip(windows, firsts, options, rows):
            scored = [row[w.score_begin - first :] for row in window_rows]  # the window's target tokens
            if not pools[w.index]:
                chosen.append(NO_PASSAGE)
                ranking.append(None)
                targets.append(None)
                nll[w.score_begin : w.end] = scored[0]
                continue
            sums = [float(row[: w.score_begin - first].sum()) for row in window_rows]
            target_sums = [float(row.sum()) for row in scored]
            best = choose_ranked(sums if config.rerank == "lm" else target_sums, window_options, config)
            chosen.append(_index(best, pools[w.index]))
            ranking.append(sums if config.rerank == "lm" else target_sums)
            targets.append(target_sums)
            nll[w.score_begin : w.end] = scored[best]
    return RerankOutcome(chosen, ranking, nll, targets)


def _other_lm_ranks(reranker: LMReranker, tokenizer, ids, windows, pools, config, batch_size, reuse_prefix_kv,
                    show_progress) -> RerankOutcome:
    """Another LM ranks, in text: its tokens of each candidate, of the prefix text and of the ranking text."""
    chosen: list[int] = []
    ranking: list[list[float] | None] = []
    cache = PassageKVCache(reranker.model) if reuse_prefix_kv else None
    progress = tqdm(total=len(windows), desc="Reranking (lm)", unit="win", disable=not show_progress,
                    leave=None)
    for start in range(0, len(windows), WINDOWS_PER_CHUNK):
        chunk = [w for w in windows[start : start + WINDOWS_PER_CHUNK] if pools[w.index]]
        inputs, chunk_options = [], []
        for w in chunk:
            begin, stop = ranking_span(w, config.rerank_tokens)
            options = rerank_options(pools[w.index], config)
            inputs.extend(reranker.inputs(tokenizer.decode(ids[w.begin : begin]), tokenizer.decode(ids[begin:stop]),
                                          options, config))
            chunk_options.append(options)
        rows = iter(score_inputs(reranker.model, inputs, batch_size, reuse_prefix_kv, cache))
        by_window = {}
        for w, options in zip(chunk, chunk_options):
            sums = [float(next(rows).sum()) for _ in options]
            by_window[w.index] = (_index(choose_ranked(sums, options, config), pools[w.index]), sums)
        for w in windows[start : start + WINDOWS_PER_CHUNK]:
            choice, sums = by_window.get(w.index, (NO_PASSAGE, None))
            chosen.append(choice)
            ranking.append(sums)
        progress.update(len(windows[start : start + WINDOWS_PER_CHUNK]))
    progress.close()
    return RerankOutcome(chosen, ranking)


def _predictive(reranker, windows, queries, pools, config) -> RerankOutcome:
    """A trained cross-encoder scores (query, passage) pairs; its highest score wins (ties: the better rank; with
    ``rerank_allow_no_passage`` the empty passage is one more candidate)."""
    from .predictive import choose_predictive

    if reranker is None:
        raise ValueError("rerank='predictive' needs a trained reranker: pass reranker=load_reranker(config, model) "
                         "with reranker_model set to its folder or Hub id.")
    chosen = choose_predictive(reranker, [queries[w.index] for w in windows], [pools[w.index] for w in windows],
                               config)
    return RerankOutcome(chosen, [None] * len(windows))
