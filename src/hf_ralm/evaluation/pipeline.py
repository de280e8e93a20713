"""In-Context RALM perplexity: text → tokens → windows → queries → passages → window inputs → scores
([`evaluate`][hf_ralm.evaluate], whose example runs on the parts of a RALM)."""

from __future__ import annotations

import os
import time
import warnings
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch

from ..core.batching import BatchSize
from ..config.configuration_ralm import RalmConfig
from ..core.ensemble import ensemble_member_nlls, mix_window_nlls
from ..errors import RalmWarning, SettingError, setting
from ..core.model_inputs import context_indices, window_prefixes
from ..core.modeling_utils import model_device, model_identity
from ..core.passage_cache import PassageKVCache
from ..core.passages import Passage, quotes_query
from ..core.perplexity import perplexity_figures
from ..core.plan import WindowPlan, prepare, window_futures
from .defaults import CHUNK_SIZE
from .window_records import EVAL_FILE, RECORDS_DIR, WindowRecord, WindowRecordWriter, run_settings
from ..runs.harness import ChunkRun, RunOptions
from ..retrieval.base import Retriever
from ..retrieval.dataset import (
    RetrievalDataset,
    RetrievalFingerprint,
    is_retrieval_dataset,
    retrieval_settings,
    save_retrieval_dataset,
)
from ..retrieval.files import Retrievals, load_retrieval_file, retrieval_records
from ..core.scoring import score_windows
from ..selection.gates import retrieved_fraction
from ..selection.policy import PassagePolicy
from ..selection.rerank import WindowRanker
from ..selection.strategies import future_looking, reader_ranks
from ..config.strategy_settings import gates, reranks
from ..utils.atomic import write_json_atomic
from ..utils.outputs import check_output_file, check_replaceable, json_object_with, json_records_with
from ..utils.stage_times import StageTimes
from ..core.windows import Window


EVAL_REPORT = json_object_with("settings_digest")
"""An ``eval.json`` hf-ralm wrote: its JSON, with the digest of the settings of the records beside it."""
RETRIEVAL_FILE = json_records_with("begin_location", "end_location", "retrieved_docs")
"""A retrieval file hf-ralm wrote (``RalmEvalResult.save_retrieval_file``): its JSON list of windows."""


@dataclass
class RalmEvalResult:
    """What one evaluation produced: [`in_context`][hf_ralm.RalmEvalResult.in_context] ``[token_windows[t]]`` was in
    context for token ``t``.

    Attributes:
        figures: the figures ([`evaluate`][hf_ralm.evaluate] lists them).
        ids: the evaluated token ids.
        token_nlls: ``token_nlls[t]``, the NLL of token ``t`` (NaN for token 0).
        token_windows: ``token_windows[t]``, the window that scored token ``t``.
        windows: the windows.
        queries: their queries (``None`` for window 0).
        passages: ``passages[w]``, window ``w``'s retrieved passages (the reranker's candidates, in retrieval order).
        chosen: ``chosen[w]``, the index of the most relevant one in context (-1: none).
        ranking_nlls: per window, its candidates' ranking NLLs when an LM ranked them (no passage last, when one).
        timings: the seconds of each stage.
        gate_scores: ``gate_scores[w]``, what a retrieval gate decided on (``hf_ralm.selection.gates``).
        context_size: the passages in context per window: ``num_passages``, or the ensemble's.
        retrieval_settings: what the passages depend on besides the text and tokenizer
            (``hf_ralm.retrieval.dataset.retrieval_settings``), when a retriever found them here, not in a file.
    """

    figures: dict
    ids: list[int]
    token_nlls: torch.Tensor | None
    token_windows: torch.Tensor | None
    windows: list[Window]
    queries: list[str | None]
    passages: list[list[Passage]]
    chosen: list[int]
    ranking_nlls: list[list[float] | None]
    timings: dict = field(default_factory=dict)
    gate_scores: list[float | None] | None = None
    context_size: int = 1
    retrieval_settings: dict | None = None

    @property
    def stage_times(self) -> StageTimes:
        """The seconds spent here in retrieval and in the reader (``timings``' ``retrieval_s`` and ``reader_s``)."""
        return StageTimes(retrieval_s=self.timings.get("retrieval_s", 0.0), reader_s=self.timings.get("reader_s", 0.0))

    def in_context(self) -> list[list[Passage]]:
        """Per window, the passages put in context, most relevant first (``[]`` for none)."""
        return [[found[i] for i in context_indices(choice, len(found), self.context_size)]
                for found, choice in zip(self.passages, self.chosen)]

    def save_retrieval_file(self, path: str, tokenizer) -> None:
        """Write [`retrieval_records`][hf_ralm.RalmEvalResult.retrieval_records] to ``path`` (atomically): a file
        ``eval-lm --retrieval-file`` reads ([`evaluate_retrieval`][hf_ralm.evaluate_retrieval]'s example). A file
        there is replaced only when it is a retrieval file hf-ralm wrote (else an
        [`OutputFolderError`][hf_ralm.errors.OutputFolderError]).
        """
        check_replaceable(path, RETRIEVAL_FILE, "retrieval file", "give another path, or move the file away")
        write_json_atomic(path, self.retrieval_records(tokenizer))

    def save_retrieval_dataset(self, path: str, tokenizer, *, passage_texts: bool = True, repo_id: str | None = None,
                               argv: Sequence[str] | None = None) -> None:
        """Write [`retrieval_records`][hf_ralm.RalmEvalResult.retrieval_records] as a retrieval dataset folder
        (Parquet rows, the fingerprint of what they depend on, a dataset card:
        ``hf_ralm.retrieval.dataset.save_retrieval_dataset``), which ``eval-lm --retrieval-file DIR`` reads and
        ``hf_ralm.retrieval.dataset.push_retrieval_dataset`` shares; refused (a ``ValueError``) for an evaluation not
        complete or whose passages were not retrieved here.

        Args:
            passage_texts: ``False`` leaves the passages' texts out (fetched back by id from the index).
            repo_id: the Hub repository the card's examples name.
            argv: the command the card shows (by default this process's).

        Examples:
            ```python
            evaluate_retrieval(model, tokenizer, text, retriever, config).save_retrieval_dataset("r", tokenizer)
            ```
        """
        if self.retrieval_settings is None or not self.figures.get("complete", True):
            why = ("it is not complete (other workers' windows are missing)" if self.retrieval_settings else
                   "its passages were not retrieved here (no retriever, or read from a retrieval file), so what they "
                   "depend on is unknown")
            raise ValueError(f"This evaluation cannot be saved as a retrieval dataset: {why}. Write one with "
                             "hf-ralm retrieve --save-retrieval-dataset (or evaluate_retrieval with a retriever).")
        fingerprint = RetrievalFingerprint.of(tokenizer, self.ids, self.retrieval_settings)
        save_retrieval_dataset(path, self.retrieval_records(tokenizer), fingerprint, passage_texts=passage_texts,
                               repo_id=repo_id, argv=argv)

    def retrieval_records(self, tokenizer) -> list[dict]:
        """The evaluation's retrievals in the paper's retrieval-file format (with the choices when reranked or
        gated), each window's text decoded with ``tokenizer``."""
        futures = window_futures(tokenizer, self.ids, self.windows)
        rerank = self.figures.get("rerank", "none")
        gated = gates(self.figures.get("retrieval_gate"))
        gate = {k: v for k, v in self.figures.items() if k in ("retrieval_gate", "gate_threshold")} if gated else None
        # a plain run writes the paper's layout, without choices
        return retrieval_records(self.windows, self.queries, futures, self.passages,
                                 self.chosen if reranks(rerank) or gated else None, ranking_nlls=self.ranking_nlls,
                                 rerank=rerank, gate=gate, gate_scores=self.gate_scores)


def no_retrieval_warning(num_tokens: int, max_length: int, stride: int) -> RalmWarning:
    """Why a run with a retriever retrieves nothing: its text fits in the first window, which has no earlier tokens
    to query with (the perplexity is then the model's alone); the flags that change it.

    Examples:
        >>> print(no_retrieval_warning(256, 256, 4))   # doctest: +ELLIPSIS
        no retrieval happened: the text (256 tokens) fits in one window of max_length 256, ... (below 256).
    """
    shorter = f" or lower {setting('max_length')} (below {num_tokens})" if num_tokens - 1 > stride else ""
    return RalmWarning(f"no retrieval happened: the text ({num_tokens} tokens) fits in one window of "
                       f"{setting('max_length')} {max_length}, and the first window has no earlier tokens to query "
                       "with, so the figures are the model's without retrieval. Give a longer text (or more of it: "
                       f"{setting('max_eval_tokens')}){shorter}.")


LEAKAGE_SHARE = 0.5
"""The share of the windows with a passage above which passages that quote the evaluated text are reported as
leakage (``text_in_passage``)."""


def text_in_passage(queries: Sequence[str | None], passages: Sequence[Passage | None]) -> tuple[float | None,
                                                                                                RalmWarning | None]:
    """The share of the windows with a passage in context (``passages[w]``, ``None``: none) whose passage holds the
    evaluated text itself (``quotes_query`` of the window's query), and, when that is most of them (above
    ``LEAKAGE_SHARE``), a warning: the corpus holds the text, so the passage shows the model what comes next (the
    README's example on an article of the corpus: the article itself in 22 of 22 windows, a 31% "gain").
    ``(None, None)`` without passages."""
    pairs = [(query, passage) for query, passage in zip(queries, passages) if passage is not None]
    if not pairs:
        return None, None
    quoting = [passage for query, passage in pairs if quotes_query(passage, query)]
    share = len(quoting) / len(pairs)
    if share <= LEAKAGE_SHARE:
        return share, None
    title = Counter(passage.title for passage in quoting).most_common(1)[0][0]
    return share, RalmWarning(
        f"in {len(quoting)} of {len(pairs)} windows with a passage, the passage holds the evaluated text itself (the "
        f"words just before the window, in a row; most often from {title!r}): the corpus holds this text, so "
        "retrieval reads ahead and the figures measure leakage, not retrieval. Exclude the text's own article "
        f"from retrieval ({setting('forbidden_titles')}).")


def evaluate(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever | None,
    config: RalmConfig,
    *,
    run: RunOptions = RunOptions(),
    retrieval_file: str | None = None,
    max_eval_tokens: int | None = None,
    reranker=None,
    reuse_prefix_kv: bool = True,
    score: bool = True,
) -> RalmEvalResult:
    """In-Context RALM perplexity of a text (or of token ids) under the paper's conventions (``hf-ralm eval-lm``),
    or with ``score=False`` its tokens, windows, queries, passages and the passage each window puts in context alone
    (``hf-ralm retrieve``). Word-level perplexity counts the spaces of the text (of the decoded tokens when ids are
    given or ``max_eval_tokens`` cuts the text).

    The windows run in chunks of ``run.chunk_size`` (256 by default), each end to end (retrieve, choose, score). With
    ``run.output_dir`` each chunk's records (passages, choices, NLLs: ``hf_ralm.evaluation.window_records``) are saved
    once done, and ``eval.json`` at the end, with ``run.report_extra`` (its ``timings`` join the evaluation's) and the
    settings' digest every chunk has too (``settings_digest``; an ``eval.json`` without it is a user's, never written
    over): an interrupted run loses at most one chunk, and a rerun resumes with exactly an uninterrupted run's figures.
    Other settings, model, data or retrieval, a damaged chunk, an older version's chunks and files hf-ralm did not
    write are refused, naming what is wrong ([`OutputFolderError`][hf_ralm.errors.OutputFolderError]), unless
    ``run.overwrite``, ``run.repair`` or ``run.accept_unverified`` (``eval.json``'s ``accepted_unverified_chunks``)
    allow them. A worker of a sharded run that finds the others' windows missing returns ``complete: False``.

    Args:
        retriever: the passages without ``retrieval_file`` (each window's top ``config.num_retrieved``: the
            reranker's candidates, or those put in context or mixed; ``None``: none), else the texts the file leaves
            out, by id; the score gate asks it for each query's maximum score.
        config: ``rerank`` chooses among ``rerank_candidates`` retrieved passages (a strategy of the registry;
            ``reranker`` for another LM or a trained cross-encoder), ``retrieval_gate`` whether a window retrieves
            (``hf_ralm.selection.gates``); a window puts ``num_passages`` passages in context
            ([`context_prefix`][hf_ralm.core.model_inputs.context_prefix]) or, with ``ensemble_size > 1``, mixes its
            top passages' probabilities (``hf_ralm.core.ensemble``).
        run: how the run is kept and shared ([`RunOptions`][hf_ralm.RunOptions]).
        retrieval_file: the passages: the reference's JSON format, or a retrieval dataset (its folder or
            ``hf:REPO_ID``, refused unless made for this text, tokenizer and settings: ``hf_ralm.retrieval.dataset``);
            one that records choices (written with reranking or a gate) fixes them.
        max_eval_tokens: evaluate only the first this many tokens.
        reuse_prefix_kv: compute each passage's keys/values once ([`score_windows`][hf_ralm.score_windows]).
        score: ``False`` retrieves and chooses only (a reader that ranked scored the windows all the same).

    Returns:
        The [`RalmEvalResult`][hf_ralm.RalmEvalResult]. Its figures count the windows (``num_windows``), those read back
            (``num_resumed_windows``), the retrievals made or read from the file (``num_retrievals``: every window but
            window 0, or none without retrieval), those that found nothing (``num_empty_retrievals``), those where a
            passage was found but none chosen (a reranker's no-passage choice or a closed gate:
            ``num_windows_without_passage_chosen``) and those with a passage in context (``num_windows_with_passage``:
            the rest, so the three add up to ``num_retrievals``); ``retrieved_fraction``, ``num_windows_with_passage /
            num_retrievals``, is the share of the windows after the first that had a passage in context.

    Examples:
        ```python
        result = evaluate(ralm.base_model, ralm.tokenizer, text, ralm.retriever, ralm.config,   # ralm: a RALM
                          run=RunOptions(output_dir="runs/bm25"))
        result.figures["token_ppl"], result.figures["num_resumed_windows"]   # (..., 0)
        ```
    """
    run.check_output_dir((RECORDS_DIR, EVAL_FILE), "evaluation results")  # before any work
    if run.output_dir is not None:  # a user's own eval.json is never written over (nor deleted by an overwrite)
        check_output_file(Path(run.output_dir, EVAL_FILE), setting("output_dir"), EVAL_REPORT, "evaluation report")
    evaluation = _plan(model, tokenizer, text_or_ids, retriever, config, retrieval_file=retrieval_file,
                       max_eval_tokens=max_eval_tokens, reranker=reranker, reuse_prefix_kv=reuse_prefix_kv,
                       scored=score, run=run)
    plan = evaluation.plan
    state, chunks = _loop(evaluation, run)
    evaluation.timings["reader_s"] = evaluation.stage_times().reader_s
    if not state.complete():
        return RalmEvalResult(
            figures={"complete": False, "num_windows": len(plan.windows), "num_done_windows": state.num_done(),
                     "shard": chunks.shard.description, "num_computed_windows": chunks.num_computed},
            ids=plan.ids, token_nlls=None, token_windows=None, windows=plan.windows, queries=plan.queries,
            passages=state.passages, chosen=state.chosen, ranking_nlls=state.ranking_nlls,
            timings=evaluation.timings)
    figures, found_warnings = _figures(evaluation, state, chunks)
    for warning in found_warnings:
        warnings.warn(warning, stacklevel=2)
    scored_all = state.all_scored()
    result = RalmEvalResult(
        figures=figures, ids=plan.ids, token_nlls=state.nlls if scored_all else None,
        token_windows=state.token_windows if scored_all else None, windows=plan.windows, queries=plan.queries,
        passages=state.passages, chosen=state.chosen, ranking_nlls=state.ranking_nlls, timings=evaluation.timings,
        gate_scores=state.gate_scores if gates(figures.get("retrieval_gate")) else None,
        context_size=max(config.num_passages, config.ensemble_size),
        retrieval_settings=None if retriever is None or retrieval_file is not None else retrieval_settings(
            config, retriever, window_length=plan.max_length,
            reader=model_identity(model) if reader_ranks(config) else None))
    if run.output_dir is not None:
        extra = dict(run.report_extra or {})
        extra_timings = extra.pop("timings", {})
        report = {**figures, **extra, "timings": {**extra_timings, **evaluation.timings},
                  "settings_digest": chunks.store.settings_digest,
                  **({"accepted_unverified_chunks": chunks.store.num_unverified} if run.accept_unverified else {})}
        chunks.finish(lambda: write_json_atomic(os.path.join(run.output_dir, EVAL_FILE), report))
    return result


def evaluate_perplexity(model, tokenizer, text_or_ids: str | Sequence[int], retriever: Retriever | None,
                        config: RalmConfig, **options: Any) -> RalmEvalResult:
    """[`evaluate`][hf_ralm.evaluate] with its run options given as keywords of their own (the fields of
    [`RunOptions`][hf_ralm.RunOptions]: ``output_dir=``, ``batch_size=``, ...), as ``model.evaluate_perplexity``.

    Examples:
        ```python
        evaluate_perplexity(model, tokenizer, text, retriever, config,
                            output_dir="runs/bm25").figures["num_resumed_windows"]   # 0
        ```
    """
    run, rest = RunOptions.split(options)
    return evaluate(model, tokenizer, text_or_ids, retriever, config, run=run, **rest)


def evaluate_retrieval(model, tokenizer, text_or_ids: str | Sequence[int], retriever: Retriever | None,
                       config: RalmConfig, **options: Any) -> RalmEvalResult:
    """[`evaluate`][hf_ralm.evaluate] without scoring (``score=False``, ``hf-ralm retrieve``), its run options given
    as keywords of their own (see [`evaluate_perplexity`][hf_ralm.evaluate_perplexity]).

    Examples:
        ```python
        evaluate_retrieval(model, tokenizer, text, retriever, config).save_retrieval_file("r.json", tokenizer)
        ```
    """
    return evaluate_perplexity(model, tokenizer, text_or_ids, retriever, config, **options, score=False)


def gate_settings(config: RalmConfig) -> dict:
    """The retrieval gate's figures: ``retrieval_gate`` and, when it has one, ``gate_threshold``.

    Examples:
        >>> gate_settings(RalmConfig(retrieval_gate="score", gate_threshold=0.3))
        {'retrieval_gate': 'score', 'gate_threshold': 0.3}
    """
    settings = {"retrieval_gate": config.retrieval_gate}
    if config.gate_threshold is not None:
        settings["gate_threshold"] = config.gate_threshold
    return settings


def check_retrieval_dataset(model, tokenizer, text_or_ids: str | Sequence[int], retriever: Retriever | None,
                            config: RalmConfig, *, retrieval_file: str, max_eval_tokens: int | None = None) -> None:
    """Refuse, before anything is measured or scored, a run that the retrieval dataset ``retrieval_file`` was not
    made for (``RetrievalDataset.check_run``): what ``evaluate`` checks when it opens the dataset, for a front end
    that first times a window (``hf-ralm eval-lm``'s estimate).

    Examples:
        ```python
        check_retrieval_dataset(model, tokenizer, text, bm25, config, retrieval_file="retrievals")
        # RetrievalFileError: retrievals was made with passages cut to 8 tokens and this run has passages cut to 256 ...
        ```
    """
    plan = prepare(text_or_ids, tokenizer, config, retriever, model=model, max_eval_tokens=max_eval_tokens)
    RetrievalDataset.open(retrieval_file).check_run(RetrievalFingerprint.of(tokenizer, plan.ids, retrieval_settings(
        config, retriever, window_length=plan.max_length)))


def check_file_choices(retrievals: Retrievals, config: RalmConfig, path: str) -> None:
    """Refuse (a ``SettingError``) retrieval-file choices that clash with ``config``: a file that records choices
    (reranked or gated) is evaluated as it is, and an ensemble mixes retrieval's top passages, not a reranker's."""
    if retrievals.chosen is None:
        return
    reranked = reranks(retrievals.rerank)
    made = retrievals.rerank if reranked else f"retrieval_gate={(retrievals.gate or {}).get('retrieval_gate')}"
    if reranks(config.rerank) or gates(config.retrieval_gate):
        raise SettingError(f"{path} already records {'reranked' if reranked else 'gated'} choices ({made}): evaluate "
                           f"them with {setting('rerank')}='none' and {setting('retrieval_gate')}='always', or rerank "
                           "or gate a retrieval file without choices.")
    if config.ensemble_size > 1 and reranked:
        raise SettingError(f"{path} records the choices of {setting('rerank')}={retrievals.rerank!r}, while "
                           f"{setting('ensemble_size')}={config.ensemble_size} mixes retrieval's top passages: use a "
                           "file without reranking.")


def _plan(model, tokenizer, text_or_ids, retriever, config: RalmConfig, *, retrieval_file, max_eval_tokens, reranker,
          reuse_prefix_kv, scored, run: RunOptions) -> _Evaluation:
    """The evaluation's fixed parts: the window plan, the retrieval file's passages (and choices) when given, the
    policy that chooses otherwise, the batching."""
    t0 = time.perf_counter()
    retrieving = retrieval_file is not None or retriever is not None
    # the window must hold a passage only where one is put in context (retrieving alone scores nothing)
    plan = prepare(text_or_ids, tokenizer, config, retriever, model=model, max_eval_tokens=max_eval_tokens,
                   retrieving=retrieving and scored)
    timings = {"tokenize_s": time.perf_counter() - t0, "retrieval_s": 0.0, "rerank_s": 0.0, "scoring_s": 0.0}
    t0 = time.perf_counter()
    retrievals, source = None, retrieval_file
    if retrieval_file is not None and is_retrieval_dataset(retrieval_file):
        dataset = RetrievalDataset.open(retrieval_file)
        source = dataset.folder  # a Hub dataset's downloaded snapshot
        run_fingerprint = RetrievalFingerprint.of(tokenizer, plan.ids, retrieval_settings(
            config, retriever, window_length=plan.max_length))
        retrievals = dataset.retrievals(plan.windows, run_fingerprint, retriever)
    elif retrieval_file is not None:
        retrievals = load_retrieval_file(retrieval_file, plan.windows, window_futures(tokenizer, plan.ids,
                                                                                      plan.windows))
    if retrievals is not None:
        check_file_choices(retrievals, config, retrieval_file)
    timings["retrieval_s"] += time.perf_counter() - t0
    chooses = retrievals is None or retrievals.chosen is None
    return _Evaluation(model, tokenizer, plan, config, PassagePolicy(config, retriever, reranker) if chooses else None,
                       retrievals, reuse_prefix_kv, scored, run.show_progress, timings, retriever=retriever,
                       retrieving=retrieving, source=source,
                       batches=BatchSize(run.batch_size, model_device(model)))


def _loop(evaluation: _Evaluation, run: RunOptions) -> tuple[_WindowState, ChunkRun]:
    """The windows, chunk by chunk, through the run harness (``ChunkRun``): the saved records read back, this worker's
    chunks computed (each saved with ``run.output_dir``), the other workers' read once they are in."""
    plan, batches = evaluation.plan, evaluation.batches
    chunks = ChunkRun(run, chunk_size=run.chunk_size or CHUNK_SIZE)
    if run.output_dir is not None:
        settings = run_settings(model=evaluation.model, tokenizer=evaluation.tokenizer, ids=plan.ids,
                                retriever=evaluation.retriever, config=evaluation.config,
                                retrieval_file=evaluation.source, max_length=plan.max_length,
                                batch_size=batches.setting, reuse_prefix_kv=evaluation.reuse_prefix_kv,
                                scored=evaluation.scored, chunk_size=chunks.chunk_size)
        chunks.open(WindowRecordWriter, Path(run.output_dir, RECORDS_DIR), settings,
                    final=[Path(run.output_dir, EVAL_FILE)], windows=plan.windows)
    state = _WindowState(plan.windows, len(plan.ids))
    state.apply_all(chunks.rows())

    def step(start: int, stop: int) -> list[WindowRecord]:
        # the stages' own bars show each window of the chunk under the run's, and vanish with the chunk
        records = batches.run(lambda size: evaluation.chunk_records(plan.windows[start:stop], state, size))
        state.apply_all(records)  # computed again, smaller, on out-of-memory errors: then applied
        return records

    chunks.run(len(plan.windows), step, desc="Evaluating" if evaluation.scored else "Retrieving", unit="win",
               info=lambda: {"batch_size": batches.size}, status=lambda: str(evaluation.stage_times()))
    if chunks.shard.count > 1:  # the other workers' chunks: all of them once the last is in
        chunks.gather()
        state.apply_all(chunks.rows())
    return state, chunks


def _figures(evaluation: _Evaluation, state: _WindowState, chunks: ChunkRun) -> tuple[dict, list[RalmWarning]]:
    """A complete evaluation's figures (see ``evaluate``) and their warnings (no retrieval; passages quote the text)."""
    plan, config, retrievals = evaluation.plan, evaluation.config, evaluation.retrievals
    windows = plan.windows
    num_retrievals = sum(1 for w in windows if w.has_retrieval) if evaluation.retrieving else 0
    found = sum(1 for w in windows if w.has_retrieval and state.passages[w.index])
    in_context = sum(1 for w in windows if w.has_retrieval and state.passages[w.index] and state.chosen[w.index] >= 0)
    rerank = (retrievals and retrievals.rerank) or config.rerank
    gate = (retrievals and retrievals.gate) or gate_settings(config)
    figures = {
        "complete": True,
        "num_tokens": len(plan.ids),
        "num_words": plan.num_words,
        "num_windows": len(windows),
        "num_resumed_windows": len(windows) - chunks.num_computed,  # read back, not computed in this process
        "num_retrievals": num_retrievals,
        "num_windows_with_passage": in_context,
        "num_empty_retrievals": num_retrievals - found,
        "max_length": plan.max_length,
        "rerank": rerank,
        "num_windows_without_passage_chosen": sum(
            1 for w in windows if state.passages[w.index] and state.chosen[w.index] < 0),
        **gate,
        "retrieved_fraction": retrieved_fraction(windows, state.passages, state.chosen),
        "text_in_passage_fraction": None,
        "num_passages": config.num_passages,
        "ensemble_size": config.ensemble_size,
    }
    if config.ensemble_size > 1:
        figures["ensemble_temperature"] = config.ensemble_temperature
    if future_looking(rerank, gate.get("retrieval_gate")):
        figures["oracle_looks_at_future"] = True  # an upper bound, not a method
    if reranks(rerank) and evaluation.policy is not None:
        figures["rerank_candidates"] = config.rerank_candidates
    if evaluation.scored:
        scored_here = sum(w.num_scored for start, stop in chunks.computed for w in windows[start:stop])
        timings = evaluation.timings
        seconds = timings["scoring_s"] + timings["rerank_s"]  # reranking may have scored the windows already
        figures = {**perplexity_figures(float(state.nlls[1:].sum()), len(plan.ids),
                                        sum(w.num_scored for w in windows), plan.num_words),
                   **figures, "scored_tokens_per_s": scored_here / seconds if seconds else None}
    found_warnings = []
    if evaluation.retrieving and num_retrievals == 0:
        found_warnings.append(no_retrieval_warning(len(plan.ids), plan.max_length, config.retrieval_stride))
    first_in_context = [found[choice] if found and choice >= 0 else None
                        for found, choice in zip(state.passages, state.chosen)]
    figures["text_in_passage_fraction"], leakage = text_in_passage(plan.queries, first_in_context)
    found_warnings += [leakage] if leakage else []
    if found_warnings:
        figures["warnings"] = [str(warning) for warning in found_warnings]
    return figures, found_warnings


class _WindowState:
    """What the evaluation knows of each window, from its record (computed now or resumed): passages, choice,
    ranking NLLs, gate score, and the NLLs of the tokens it scores."""

    def __init__(self, windows: Sequence[Window], num_tokens: int):
        self.passages: list[list[Passage]] = [[] for _ in windows]
        self.chosen: list[int] = [-1] * len(windows)
        self.ranking_nlls: list[list[float] | None] = [None] * len(windows)
        self.gate_scores: list[float | None] = [None] * len(windows)
        self.nlls = torch.full((num_tokens,), float("nan"), dtype=torch.float64)
        self.token_windows = torch.full((num_tokens,), -1, dtype=torch.long)
        self.windows = windows
        self.done: set[int] = set()

    def apply(self, record: WindowRecord) -> None:
        w = self.windows[record.window]
        self.done.add(w.index)
        self.passages[w.index] = record.passages
        self.chosen[w.index] = record.chosen
        self.ranking_nlls[w.index] = record.ranking_nlls
        self.gate_scores[w.index] = record.gate_score
        if record.nlls is not None:
            self.nlls[w.score_begin : w.end] = torch.tensor(record.nlls, dtype=torch.float64)
            self.token_windows[w.score_begin : w.end] = w.index

    def apply_all(self, records: Sequence[WindowRecord]) -> int:
        """Apply ``records``; how many there were."""
        for record in records:
            self.apply(record)
        return len(records)

    def num_done(self) -> int:
        """The windows whose record is in."""
        return len(self.done)

    def complete(self) -> bool:
        """Whether every window's record is in."""
        return len(self.done) == len(self.windows)

    def all_scored(self) -> bool:
        return bool((self.token_windows[1:] >= 0).all())


@dataclass
class _Evaluation:
    """One evaluation's fixed parts, which every chunk of windows runs with."""

    model: object
    tokenizer: object
    plan: WindowPlan
    config: RalmConfig
    policy: PassagePolicy | None  # None: the retrieval file fixes the choices
    retrievals: Retrievals | None
    reuse_prefix_kv: bool
    scored: bool
    show_progress: bool
    timings: dict
    retriever: Retriever | None
    retrieving: bool  # passages come from a retriever or a retrieval file
    source: str | None  # the retrieval file, or the folder of a retrieval dataset
    batches: BatchSize

    def stage_times(self) -> StageTimes:
        """Retrieval's seconds so far and the reader's: its choosing (reranking, gating) and scoring together."""
        timings = self.timings
        return StageTimes(retrieval_s=timings["retrieval_s"], reader_s=timings["rerank_s"] + timings["scoring_s"])

    def chunk_records(self, chunk: Sequence[Window], state: _WindowState, batch_size: int) -> list[WindowRecord]:
        """One chunk of windows end to end: its passages (retrieved, or from the retrieval file), each window's
        choice (``PassagePolicy``: gate, rerank, gate) and, when ``scored``, its NLLs, in forward passes of
        ``batch_size``. ``state``'s passages and choices of the chunk are filled in on the
        way (the scorers index them by window), the same when the chunk runs again."""
        config, first, stop = self.config, chunk[0].index, chunk[-1].index + 1
        t0 = time.perf_counter()
        if self.retrievals is not None:
            state.passages[first:stop] = self.retrievals.passages[first:stop]
        else:
            state.passages[first:stop] = self.plan.candidates(chunk, config.num_retrieved, self.show_progress)
        self.timings["retrieval_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        nlls = None
        if self.policy is None:  # the file's choices
            chosen = self.retrievals.chosen[first:stop]
            ranking = [None] * len(chunk)
            gate_scores = self.retrievals.gate_scores[first:stop] if self.retrievals.gate_scores else None
        else:
            cache = PassageKVCache.for_model(self.model) if self.reuse_prefix_kv else None  # shared by both passes
            ranker = WindowRanker(self.model, self.tokenizer, self.plan.ids, chunk, batch_size, passage_cache=cache,
                                  reuse_prefix_kv=self.reuse_prefix_kv, show_progress=self.show_progress)
            selection = self.policy.select([self.plan.queries[w.index] for w in chunk],
                                           [state.passages[w.index] for w in chunk], ranker, [w.index for w in chunk])
            chosen, ranking, gate_scores = selection.chosen, selection.ranking_nlls, selection.gate_scores
            if config.num_passages == 1:  # the reader's passes scored the windows with their chosen passage
                rows = [ranker.window_nlls(w, state.passages[w.index][c] if c >= 0 else None)
                        for w, c in zip(chunk, chosen)]
                if all(row is not None for row in rows):
                    nlls = torch.full((len(self.plan.ids),), float("nan"), dtype=torch.float64)
                    for w, row in zip(chunk, rows):
                        nlls[w.score_begin : w.end] = row
        state.chosen[first:stop] = chosen
        self.timings["rerank_s"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        if nlls is None and self.scored and config.ensemble_size > 1:
            members, rows = ensemble_member_nlls(self.model, self.tokenizer, self.plan.ids, chunk, state.passages,
                                                 config=config, chosen=state.chosen, batch_size=batch_size,
                                                 reuse_prefix_kv=self.reuse_prefix_kv, show_progress=self.show_progress)
            nlls = mix_window_nlls(chunk, [[p.score for p in found] for found in members], rows,
                                   len(self.plan.ids), config.ensemble_temperature)
        elif nlls is None and self.scored:  # not already scored while the reader ranked the candidates
            prefixes = [[]] * first + window_prefixes(self.tokenizer, chunk, state.passages, config, state.chosen)
            nlls = score_windows(self.model, self.plan.ids, chunk, prefixes, batch_size,
                                 reuse_prefix_kv=self.reuse_prefix_kv, show_progress=self.show_progress)
        self.timings["scoring_s"] += time.perf_counter() - t0
        gate_scores = gate_scores or [None] * len(chunk)
        return [WindowRecord(window=w.index, passages=state.passages[w.index], chosen=choice, ranking_nlls=sums,
                             gate_score=score, nlls=None if not self.scored else nlls[w.score_begin : w.end].tolist())
                for w, choice, sums, score in zip(chunk, chosen, ranking, gate_scores)]
