"""Several passage-selection strategies on the same windows, from one reader pass: ``hf-ralm eval-lm --compare
none,top1,lm-gate`` and ``model.compare_strategies(text)``.

The reader runs each window once with each of its first ``k`` retrieved passages and once without a passage
(``hf_ralm.selection.candidates.score_candidates``: every option's ranking NLL, of the last ``rerank_tokens``
prefix tokens, and target NLL, of the window's scored tokens). A strategy is a choice of option per window, so its
perplexity is the sum of the chosen options' target NLLs, the same figures a separate ``eval-lm`` run of that
strategy gives (``none``: ``--retriever none``; ``top1``: the plain run; ``lm-gate``: ``--retrieval-gate lm``;
``zero-shot``: ``--rerank lm``; ``zero-shot-no-passage``: ``--rerank lm --rerank-allow-no-passage``; ``oracle`` and
``random``: ``--rerank oracle`` / ``random``). ``k`` is 1 unless a strategy chooses among several passages
(``rerank_candidates``, 16).

The strategies are the registry's rows (the strategies registry's ``comparison_rows``): each row is the settings of
that separate run, and its choices are the selection policy's own, read from the pass
(``hf_ralm.selection.candidates.choose_from_scores``), so a strategy registered from outside the package that needs no
more than the pass holds is a row too, under its name.

Examples:
    ```python
    comparison = compare_strategies(model, tokenizer, text, retriever, RalmConfig(max_length=512),
                                    strategies=["none", "top1", "lm-gate"], run=RunOptions(output_dir="runs/compare"))
    print(comparison.to_markdown())   # one row per strategy: token ppl, word ppl, share with a passage, inputs
    ```
"""

from __future__ import annotations

import csv
import dataclasses
import io
import os
import time
import warnings as python_warnings
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Iterator, Sequence

from ..core.batching import BatchSize
from ..config.configuration_ralm import RalmConfig
from ..errors import SettingError, setting
from .pipeline import no_retrieval_warning, text_in_passage
from ..core.modeling_utils import model_device
from ..core.perplexity import perplexity_figures
from ..core.plan import prepare
from ..runs.store import RecordStore
from ..retrieval.base import Retriever, retriever_identity
from ..runs.harness import RunOptions
from ..selection.candidates import CandidateScores, choose_from_scores, score_candidates
from ..selection.strategies import ComparisonRow, comparison_rows, reader_inputs_per_window
from ..config.strategy_settings import reranks
from ..utils.atomic import write_json_atomic, write_text_atomic
from ..utils.stage_times import StageTimes

COMPARE_FILE = "compare.json"
COMPARE_CSV = "compare.csv"
CANDIDATES_DIR = "candidates-k{k}"  # the reader pass's records under the output folder, one folder per k


class _Rows(Mapping):
    """The registry's ``--compare`` rows by name, read when asked for (a strategy registered since is there)."""

    def __getitem__(self, name: str) -> ComparisonRow:
        return comparison_rows()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(comparison_rows())

    def __len__(self) -> int:
        return len(comparison_rows())


STRATEGIES: Mapping[str, ComparisonRow] = _Rows()
"""Every strategy ``compare_strategies`` knows, by the name ``--compare`` takes (no retrieval, then the
registered strategies' rows: the strategies registry's ``comparison_rows``)."""

SELECTION_DEFAULTS = ("rerank", "reranker_model", "rerank_allow_no_passage", "rerank_no_passage_margin",
                      "retrieval_gate", "gate_threshold", "num_passages", "ensemble_size")
"""The settings a row starts from at their defaults (the paper's selection, one passage per option, as the pass
scores them) before its own are applied."""


def row_config(name: str, config: RalmConfig, k: int) -> RalmConfig | None:
    """The settings of the separate run strategy ``name`` gives the figures of.

    Args:
        name: the strategy.
        config: the settings the comparison runs with.
        k: the candidates per window.

    Returns:
        ``config``'s settings, with the selection at its defaults (``SELECTION_DEFAULTS``) over ``k`` candidates, then
            the row's own settings; ``None`` for no retrieval.

    Examples:
        >>> row_config("zero-shot", RalmConfig(rerank_tokens=8), k=16).rerank, row_config("none", RalmConfig(), 1)
        ('lm', None)
    """
    row = STRATEGIES[name]
    if row.settings is None:
        return None
    defaults = {setting_name: getattr(RalmConfig, setting_name) for setting_name in SELECTION_DEFAULTS}
    return RalmConfig(**{**config.to_dict(), **defaults, "rerank_candidates": k, **row.settings(config)})


def candidates_per_window(strategies: Sequence[str], config: RalmConfig) -> int:
    """``k``, the passages per window the pass scores for ``strategies``.

    Args:
        strategies: the strategies' names.
        config: the settings the comparison runs with.

    Returns:
        ``config.rerank_candidates`` when one of them reranks (chooses among several), else 1.
    """
    chooses = (row_config(name, config, config.rerank_candidates) for name in strategies)
    return config.rerank_candidates if any(row is not None and reranks(row.rerank) for row in chooses) else 1


def strategy_choices(strategies: Sequence[str], scores: Sequence[CandidateScores], config: RalmConfig, *,
                     retriever: Retriever | None = None, queries: Sequence[str | None] | None = None
                     ) -> dict[str, list[int]]:
    """The option each strategy chooses in each window of a scored pass, as the selection policy chooses it
    (``hf_ralm.selection.candidates.choose_from_scores`` under the strategy's ``row_config``).

    Args:
        strategies: the strategies' names.
        scores: the scored pass, per window (over ``candidates_per_window`` passages).
        config: the settings the comparison runs with.
        retriever: the retriever, for a gate that normalises scores.
        queries: the windows' queries, for a gate that normalises scores.

    Returns:
        Per strategy, per window, the option it chooses: the index of a candidate, or ``no_passage``.
    """
    k = candidates_per_window(strategies, config)
    choices = {}
    for name in strategies:
        row = row_config(name, config, k)
        choices[name] = ([s.no_passage for s in scores] if row is None else
                         choose_from_scores(scores, row, retriever=retriever, queries=queries))
    return choices


DEFAULT_STRATEGIES = ("none", "top1", "lm-gate")


@dataclass
class StrategyFigures:
    """One row of a comparison: the strategy's figures over the text, as ``eval-lm`` reports them.

    Attributes:
        strategy: the strategy's name.
        token_ppl: its token perplexity.
        word_ppl: its word perplexity.
        nll_sum: the summed NLL of the scored tokens.
        retrieved_fraction: the share of the windows that retrieve (those after the first) with a passage in
            context (``None``: no window retrieves).
        num_windows_with_passage: the windows with a passage in context.
        inputs_per_window: the reader inputs a separate run of the strategy takes per window.
    """

    strategy: str
    token_ppl: float
    word_ppl: float
    nll_sum: float
    retrieved_fraction: float | None
    num_windows_with_passage: int
    inputs_per_window: int


@dataclass
class Comparison:
    """What ``compare_strategies`` measured: a row per strategy, the text's counts, ``k`` and the seconds of the
    reader pass that served every row.

    Attributes:
        rows: a row per strategy (none in an incomplete comparison).
        num_tokens: the text's tokens.
        num_scored: its scored tokens.
        num_words: its words.
        num_windows: its windows.
        k: the passages per window the pass scored.
        seconds: the seconds of the reader pass.
        num_resumed_windows: the windows of the pass read back.
        num_done_windows: the windows scored so far, in a comparison that is not complete (``None``: complete).
        shard: the worker, in a sharded pass.
        warnings: the warnings of the comparison.
        times: how many of ``seconds`` went to retrieval and how many to the reader.
    """

    rows: list[StrategyFigures]
    num_tokens: int
    num_scored: int
    num_words: int
    num_windows: int
    k: int
    seconds: float
    num_resumed_windows: int
    num_done_windows: int | None = None
    shard: str | None = None
    warnings: list[str] = field(default_factory=list)
    times: StageTimes = field(default_factory=StageTimes)

    @property
    def complete(self) -> bool:
        """Whether every window's options are scored, so that the rows are there (a worker of a sharded pass may
        finish before the others)."""
        return self.num_done_windows is None

    def row(self, strategy: str) -> StrategyFigures:
        return next(r for r in self.rows if r.strategy == strategy)

    def to_dict(self) -> dict:
        optional = ("num_done_windows", "shard", "warnings")  # only an incomplete or suspect comparison has them
        return {**{k: v for k, v in asdict(self).items() if k != "rows" and not (k in optional and not v)},
                "rows": [asdict(r) for r in self.rows]}

    def to_csv(self) -> str:
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(asdict(self.rows[0])), lineterminator="\n")
        writer.writeheader()
        writer.writerows(asdict(r) for r in self.rows)
        return out.getvalue()

    def to_markdown(self) -> str:
        """The table ``hf-ralm eval-lm --compare`` prints."""
        if not self.complete:
            return (f"Worker {self.shard} has scored its chunks: {self.num_done_windows} of {self.num_windows} "
                    "windows are saved. The table comes once every worker's chunks are in: the last worker to "
                    "finish prints it, or run any worker's command again then.")
        lines = ["| strategy | token ppl | word ppl | windows with a passage | reader inputs per window |",
                 "|---|---:|---:|---:|---:|"]
        for r in self.rows:
            share = "—" if r.retrieved_fraction is None else f"{100 * r.retrieved_fraction:.1f}%"
            lines.append(f"| {r.strategy} | {r.token_ppl:.3f} | {r.word_ppl:.3f} | {share} | {r.inputs_per_window} |")
        resumed = f", {self.num_resumed_windows} read back" if self.num_resumed_windows else ""
        lines += [f"\nWarning: {warning}" for warning in self.warnings]
        lines.append(f"\n{self.num_windows} windows ({self.num_tokens} tokens, {self.num_words} words), one reader "
                     f"pass over {self.k} passage(s) and no passage per window: {self.seconds:.1f} s "
                     f"({self.times}){resumed}.")
        return "\n".join(lines)

    def save(self, output_dir: str | os.PathLike) -> None:
        """``compare.json`` and ``compare.csv`` in ``output_dir`` (atomically)."""
        write_json_atomic(os.path.join(output_dir, COMPARE_FILE), self.to_dict())
        write_text_atomic(os.path.join(output_dir, COMPARE_CSV), self.to_csv(), suffix=".csv")


def _leakage_warnings(retriever: Retriever, queries: Sequence[str | None],
                      scores: Sequence[CandidateScores]) -> list[str]:
    """Warn (and return the warnings) when retrieval's top passages hold the evaluated text itself in most windows
    (``hf_ralm.evaluation.pipeline.text_in_passage``); not checked with a retriever that cannot look passages up by
    id."""
    top = {s.window: s.passage_ids[0] for s in scores if s.passage_ids}
    try:
        found = dict(zip(top, retriever.passages_by_id(list(top.values()))))
    except ValueError:
        return []
    _, warning = text_in_passage(queries, [found.get(s.window) for s in scores])
    if warning is None:
        return []
    python_warnings.warn(warning, stacklevel=3)
    return [str(warning)]


def check_strategies(strategies: Sequence[str]) -> list[str]:
    """The strategies' names, checked.

    Args:
        strategies: the names.

    Returns:
        The names, each once, in their order.

    Raises:
        SettingError: one is unknown or none is given (the message lists the known ones).
    """
    names = list(strategies)
    unknown = [name for name in names if name not in STRATEGIES]
    if unknown or not names:
        raise SettingError(f"{setting('compare')} takes a comma-separated list of strategies among "
                           f"{', '.join(STRATEGIES)}; got {', '.join(unknown) or 'none'}.")
    return list(dict.fromkeys(names))


def compare_strategies(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever,
    config: RalmConfig,
    *,
    strategies: Sequence[str] = DEFAULT_STRATEGIES,
    max_eval_tokens: int | None = None,
    run: RunOptions = RunOptions(),
) -> Comparison:
    """Each of ``strategies`` over the same windows of ``text_or_ids``, from one reader pass (see the module
    docstring). Each chunk's passages are retrieved as it starts, so a resumed pass retrieves only what it computes.

    ``run.num_shards`` workers (``run.shard_id``, or a launcher's environment: ``hf_ralm.runs.shards.Shard``) share
    the pass through ``run.output_dir``, each computing every ``num_shards``-th chunk; a worker that finds the others'
    chunks missing returns an incomplete ``Comparison`` (``complete`` false, no rows), and the last one to finish, or
    any worker run again afterwards, gives the table.

    Args:
        model: the reader.
        tokenizer: its tokenizer.
        text_or_ids: the text, or its token ids.
        retriever: what retrieves the candidates.
        config: the RALM settings, ``rerank_candidates`` (``k``, for the strategies that rank), ``rerank_tokens``, the
            lm gate's margin (``gate_threshold`` when ``retrieval_gate`` is ``"lm"``, else the lm gate's default),
            ``rerank_no_passage_margin`` and ``rerank_seed``.
        strategies: names of ``STRATEGIES``.
        max_eval_tokens: evaluate only the first this many tokens.
        run: the reader's ``batch_size`` and how the pass is kept (a [`RunOptions`][hf_ralm.RunOptions]): with
            ``run.output_dir`` the pass's records are kept there (``candidates-k<k>/``, in chunks of
            ``run.chunk_size`` windows, ``hf_ralm.selection.candidates.CHUNK_SIZE`` (32) when ``None``: a rerun
            resumes them, ``run.overwrite`` starts afresh, ``run.repair`` computes damaged chunks again) and
            ``compare.json`` / ``compare.csv`` written; a folder holding anything else is refused.

    Returns:
        The ``Comparison``.

    Raises:
        SettingError: an unknown strategy, or no retriever.

    Examples:
        ```python
        comparison = compare_strategies(model, tokenizer, text, retriever, config,
                                        strategies=["none", "top1", "lm-gate"],
                                        run=RunOptions(output_dir="runs/compare", batch_size=16))
        comparison.row("lm-gate").token_ppl
        ```
    """
    names = check_strategies(strategies)
    output_dir, overwrite = run.output_dir, run.overwrite
    run.check_output_dir((CANDIDATES_DIR.format(k="*"), COMPARE_FILE, COMPARE_CSV), "strategy comparison")
    if retriever is None:
        raise SettingError(f"Comparing strategies needs a retriever ({setting('retriever')}): each strategy chooses "
                           "among the passages it retrieves.")
    shard = run.shard
    k = candidates_per_window(names, config)
    scoring = RalmConfig(**{**config.to_dict(), "rerank": "lm", "rerank_candidates": k, "reranker_model": None,
                            "retrieval_gate": "always", "gate_threshold": None})
    plan = prepare(text_or_ids, tokenizer, scoring, retriever, model=model, max_eval_tokens=max_eval_tokens)
    found_warnings = []
    if not any(w.has_retrieval for w in plan.windows):  # said before the pass, and in the table after it
        found_warnings.append(no_retrieval_warning(len(plan.ids), plan.max_length, config.retrieval_stride))
        python_warnings.warn(found_warnings[-1], stacklevel=2)
    size = BatchSize(run.batch_size, model_device(model)).size
    records = None if output_dir is None else os.path.join(output_dir, CANDIDATES_DIR.format(k=k))
    resumed = RecordStore.num_saved(records) if records and not overwrite else 0
    start, times = time.perf_counter(), StageTimes()
    scores = score_candidates(model, tokenizer, plan.ids, plan.windows,
                              lambda chunk: plan.candidates(chunk, k, run.show_progress),
                              config=scoring, run=dataclasses.replace(run, output_dir=records, batch_size=size),
                              settings=retriever_identity(retriever), shard=shard,
                              max_length=plan.max_length, times=times)
    seconds = time.perf_counter() - start
    if len(scores) < len(plan.windows):  # a worker of a sharded pass, before the others are done
        return Comparison([], len(plan.ids), 0, plan.num_words, len(plan.windows), k, seconds, resumed,
                          num_done_windows=len(scores), shard=shard.description, times=times)
    num_scored = sum(w.num_scored for w in plan.windows)
    num_later = sum(1 for w in plan.windows if w.has_retrieval)  # window 0 never retrieves
    rows = []
    choices = strategy_choices(names, scores, config, retriever=retriever, queries=plan.queries)
    for name in names:
        chosen = choices[name]
        row = row_config(name, config, k)
        nll = sum(s.target_nlls[c] for s, c in zip(scores, chosen))
        figures = perplexity_figures(nll, len(plan.ids), num_scored, plan.num_words)
        with_passage = sum(1 for s, c in zip(scores, chosen) if c != s.no_passage)
        rows.append(StrategyFigures(name, figures["token_ppl"], figures["word_ppl"], figures["nll_sum"],
                                    with_passage / num_later if num_later else None, with_passage,
                                    1 if row is None else reader_inputs_per_window(row)))
    comparison = Comparison(rows, len(plan.ids), num_scored, plan.num_words, len(plan.windows), k, seconds,
                            num_resumed_windows=resumed, times=times,
                            warnings=[*map(str, found_warnings), *_leakage_warnings(retriever, plan.queries, scores)])
    if output_dir is not None:
        comparison.save(output_dir)
    return comparison
