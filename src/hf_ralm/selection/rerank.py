"""Reranking a text's windows (the paper's §6), exactly: the evaluation's [`Ranker`][hf_ralm.selection.policy.Ranker].

Strategies (``RalmConfig.rerank``: the registry's, [`hf_ralm.selection.strategies`][hf_ralm.selection.strategies],
chosen by [`PassagePolicy`][hf_ralm.selection.policy.PassagePolicy]): ``"none"`` (retrieval's top passage), ``"lm"``
(zero-shot: the candidate under which an LM finds the ranking tokens likeliest,
[`hf_ralm.selection.rules`][hf_ralm.selection.rules]), ``"oracle"`` (the reader's own NLL of the window's target tokens:
it looks at the future, an upper bound), ``"random"`` (a seeded uniform choice: a floor) and ``"predictive"`` (a trained
cross-encoder, [`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker]). With
``rerank_allow_no_passage`` the window without a passage is one more candidate (``"lm"``, ``"oracle"``,
``"predictive"``), chosen unless a passage saves ``rerank_no_passage_margin`` nats over it
([`choose_ranked`][hf_ralm.selection.rules.choose_ranked]).

When the reader ranks (``"lm"`` without a reranker LM, ``"oracle"``), every candidate's input runs once through
[`score_inputs`][hf_ralm.core.scoring.score_inputs] and yields both its ranking NLLs and its target NLLs (the ranking
tokens come just before the target and attention is causal), so the chosen candidate's target NLLs need no second pass
([`WindowRanker.window_nlls`][hf_ralm.selection.rerank.WindowRanker.window_nlls]). Inputs are batched across windows and
a passage's keys/values are computed once for every window that has it as a candidate (consecutive windows' candidate
sets overlap).

Examples:
    ```python
    outcome = rerank_windows(model, tokenizer, ids, windows, queries, candidates=candidates, config=config)
    outcome.chosen[5], outcome.ranking_nlls[5]   # (3, [41.2, 40.7, 40.9, 38.8, ...])
    ```
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import torch
from ..utils.batch_size import DEFAULT_BATCH_SIZE
from ..utils.progress import tqdm

from ..config.configuration_ralm import RalmConfig
from ..core.passage_cache import PassageKVCache
from ..core.passages import NO_PASSAGE, Passage
from ..core.scoring import WINDOWS_PER_CHUNK, reader_nlls, score_inputs
from ..core.windows import Window
from .policy import PassagePolicy
from .rankers import LMReranker
from .rules import oracle_span, ranking_span, rerank_options
from .strategies import RANKING_NLLS, TARGET_NLLS, get_strategy, ranks_target
from ..config.strategy_settings import RERANK


@dataclass
class RerankOutcome:
    """What reranking chose, per window.

    Attributes:
        chosen: per window, an index into its candidates ([`NO_PASSAGE`][hf_ralm.core.passages.NO_PASSAGE] for
            none).
        ranking_nlls: per window, one NLL per candidate, the no-passage candidate last when allowed (``None`` where
            no LM ranked).
        token_nlls: when the reader ranked, its NLL of every text token with the chosen passages (float64, NaN for
            token 0); else ``None``.
        target_nlls: when the reader ranked, per window its summed NLL of the window's scored tokens under each
            candidate, in the same order (what the oracle ranks on, and ``-log p(y | [d_i; x])`` for the predictive
            reranker's training data); else ``None``.
    """

    chosen: list[int]
    ranking_nlls: list[list[float] | None]
    token_nlls: torch.Tensor | None = None
    target_nlls: list[list[float] | None] | None = None


class WindowRanker:
    """Ranks options for windows of one text (the evaluation's [`Ranker`][hf_ralm.selection.policy.Ranker]): the reader
    on each option written over the window's start ([`reader_nlls`][hf_ralm.core.scoring.reader_nlls]: batched, with
    ``reuse_prefix_kv`` a passage's keys/values computed once in ``passage_cache``), or another LM in text. Every window
    asked about is run, also one whose only option is no passage, so that the reader's passes give the NLLs of the
    tokens every window scores ([`window_nlls`][hf_ralm.selection.rerank.WindowRanker.window_nlls]).

    Examples:
        ```python
        ranker = WindowRanker(model, tokenizer, ids, chunk)
        sums = ranker.rank(range(len(chunk)), [[p, None] for p in top], config, None)
        ranker.window_nlls(chunk[3], None)   # window 3's NLLs without a passage, from that pass
        ```

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: the text's windows that may be asked about (``items`` index them).
        batch_size: the inputs scored in one forward pass.
        reuse_prefix_kv: compute each distinct passage's keys/values once.
        passage_cache: the store to keep them in (by default one per call).
        show_progress: show a progress bar of the windows.
    """

    def __init__(self, model, tokenizer, ids: Sequence[int], windows: Sequence[Window],
                 batch_size: int = DEFAULT_BATCH_SIZE, *, reuse_prefix_kv: bool = True,
                 passage_cache: PassageKVCache | None = None, show_progress: bool = False):
        self.model, self.tokenizer, self.ids, self.windows = model, tokenizer, list(ids), list(windows)
        self.batch_size, self.reuse_prefix_kv, self.show_progress = batch_size, reuse_prefix_kv, show_progress
        self.passage_cache = passage_cache
        self._targets: dict[int, dict[Passage | None, torch.Tensor]] = {}

    def rank(self, items: Sequence[int], options: Sequence[Sequence[Passage | None]], config: RalmConfig,
             lm: LMReranker | None) -> list[list[float] | None]:
        """The summed ranking NLL of each option of each window asked about (the target's, for a strategy that ranks
        on it).

        Args:
            items: indices into ``windows``.
            options: per item, its options (a passage, or ``None`` for none).
            config: the settings (``rerank_tokens``; whether the strategy ranks on the target).
            lm: another LM that ranks in text (``None``: the reader).

        Returns:
            Per item, its options' summed NLLs (``None`` where another LM had nothing to rank).
        """
        if lm is not None:
            return self._other_lm_ranks(items, options, config, lm)
        windows = [self.windows[i] for i in items]
        oracle = ranks_target(config)
        firsts = [oracle_span(w)[0] if oracle else ranking_span(w, config.rerank_tokens)[0] for w in windows]
        sums = []
        with tqdm(total=len(windows), desc=f"Reranking ({config.rerank})", unit="win",
                  disable=not self.show_progress, leave=None) as progress:
            rows = reader_nlls(self.model, self.tokenizer, self.ids, windows, options, firsts=firsts, config=config,
                               batch_size=self.batch_size, reuse_prefix_kv=self.reuse_prefix_kv,
                               passage_cache=self.passage_cache, progress=progress)
            for w, first, window_options, window_rows in zip(windows, firsts, options, rows):
                scored = [row[w.score_begin - first :] for row in window_rows]  # the window's target tokens
                self._targets[w.index] = dict(zip(window_options, scored))
                sums.append([float(row.sum()) for row in scored] if oracle else
                            [float(row[: w.score_begin - first].sum()) for row in window_rows])
        return sums

    def window_nlls(self, window: Window, option: Passage | None) -> torch.Tensor | None:
        """The reader's NLLs of the tokens ``window`` scores with ``option`` in context, from the last pass that ran
        it.

        Args:
            window: the window.
            option: the passage in context (``None``: none).

        Returns:
            The NLLs, or ``None`` when no pass ran the window with that option.
        """
        return self._targets.get(window.index, {}).get(option)

    def target_sums(self, window: Window, options: Sequence[Passage | None]) -> list[float] | None:
        """The summed target NLL of each of ``options`` from the last pass that ran ``window`` with them.

        Args:
            window: the window.
            options: its options (a passage, or ``None`` for none).

        Returns:
            The sums, or ``None`` when no pass ran the window.
        """
        targets = self._targets.get(window.index)
        return None if targets is None else [float(targets[option].sum()) for option in options]

    def _other_lm_ranks(self, items, options, config, lm: LMReranker) -> list[list[float] | None]:
        """Another LM ranks, in text: its tokens of each candidate, of the prefix text and of the ranking text."""
        cache = PassageKVCache(lm.model) if self.reuse_prefix_kv else None
        decode, ids = self.tokenizer.decode, self.ids
        sums: dict[int, list[float]] = {}
        progress = tqdm(total=len(items), desc="Reranking (lm)", unit="win", disable=not self.show_progress,
                        leave=None)
        for start in range(0, len(items), WINDOWS_PER_CHUNK):
            group = zip(items[start : start + WINDOWS_PER_CHUNK], options[start : start + WINDOWS_PER_CHUNK])
            chunk = [(i, item_options) for i, item_options in group if item_options != [None]]  # [None]: nothing
            inputs = []
            for i, item_options in chunk:
                w = self.windows[i]
                begin, stop = ranking_span(w, config.rerank_tokens)
                inputs.extend(lm.inputs(decode(ids[w.begin : begin]), decode(ids[begin:stop]), item_options, config))
            rows = iter(score_inputs(lm.model, inputs, self.batch_size, self.reuse_prefix_kv, cache))
            for i, item_options in chunk:
                sums[i] = [float(next(rows).sum()) for _ in item_options]
            progress.update(len(items[start : start + WINDOWS_PER_CHUNK]))
        progress.close()
        return [sums.get(i) for i in items]


def rerank_windows(
    model,
    tokenizer,
    ids: Sequence[int],
    windows: Sequence[Window],
    queries: Sequence[str | None],
    *,
    candidates: Sequence[Sequence[Passage]],
    config: RalmConfig,
    reranker=None,
    batch_size: int = DEFAULT_BATCH_SIZE,
    reuse_prefix_kv: bool = True,
    passage_cache: PassageKVCache | None = None,
    show_progress: bool = True,
) -> RerankOutcome:
    """Choose the passage of every window under ``config.rerank`` (the reranking step of
    [`PassagePolicy`][hf_ralm.selection.policy.PassagePolicy]; no gate).

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        ids: the text's token ids.
        windows: any of the text's windows; the outcome's lists follow their order.
        queries: ``queries[w.index]`` is window ``w``'s query (what the predictive reranker reads).
        candidates: ``candidates[w.index]`` are the window's retrieved passages in retrieval order (at most
            ``config.rerank_candidates`` are considered).
        config: the settings (``rerank`` and its own).
        reranker: an [`LMReranker`][hf_ralm.selection.rankers.LMReranker] (``"lm"`` with another model) or a
            [`PredictiveReranker`][hf_ralm.selection.predictive.PredictiveReranker] (``"predictive"``); ``None``: the
            reader ranks.
        batch_size: the inputs scored in one forward pass.
        reuse_prefix_kv: compute each distinct passage's keys/values once.
        passage_cache: the store to keep them in.
        show_progress: show a progress bar of the windows.

    Returns:
        The [`RerankOutcome`][hf_ralm.selection.rerank.RerankOutcome].
    """
    policy = PassagePolicy(config, reranker=reranker)
    ranker = WindowRanker(model, tokenizer, ids, windows, batch_size, reuse_prefix_kv=reuse_prefix_kv,
                          passage_cache=passage_cache, show_progress=show_progress)
    pools = [list(candidates[w.index])[: config.rerank_candidates] if w.has_retrieval else [] for w in windows]
    chosen, ranking = policy.rerank([queries[w.index] for w in windows], pools, ranker, [w.index for w in windows])
    if not get_strategy(RERANK, config.rerank).needs & {RANKING_NLLS, TARGET_NLLS} or reranker is not None:
        return RerankOutcome(chosen, ranking)  # the reader did not rank: its passes hold no window's NLLs
    nll = torch.full((len(ids),), float("nan"), dtype=torch.float64)
    targets: list[list[float] | None] = []
    for w, pool, choice in zip(windows, pools, chosen):
        options = rerank_options(pool, config) or [None]
        nll[w.score_begin : w.end] = ranker.window_nlls(w, pool[choice] if choice != NO_PASSAGE else None)
        targets.append(ranker.target_sums(w, options) if pool else None)
    return RerankOutcome(chosen, ranking, nll, targets)
