"""In-Context RALM perplexity: text → tokens → windows → queries → passages → window inputs → scores.

Example:
    >>> from hf_ralm import RetrievalAugmentedModel
    >>> model = RetrievalAugmentedModel.from_pretrained("HuggingFaceTB/SmolLM2-135M", retriever="bm25",
    ...                                                 index_dir="index/", corpus="wiki.jsonl.gz")  # doctest: +SKIP
    >>> result = evaluate_perplexity(model.base_model, model.tokenizer, text, model.retriever,
    ...                              model.config)                                                   # doctest: +SKIP
    >>> result.figures["token_ppl"]                                                                  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from tqdm.auto import tqdm

from .configuration_ralm import RalmConfig
from .ensemble import ensemble_window_nlls
from .retrieval.base import Retriever
from .passages import Passage
from .selection.gates import choose_passages, retrieved_fraction
from .selection.rerank import RerankOutcome
from .resume import CHUNK_SIZE, EVAL_FILE, RECORDS_DIR, WindowRecordWriter, record_passages, run_settings, window_record
from .retrieval.files import Retrievals, load_retrieval_file, retrieval_records
from .utils.atomic import write_json_atomic
from .model_inputs import context_indices, window_length, window_prefixes
from .scoring import score_windows
from .windows import Window, plan_windows, query_span
from .utils.checks import check_count
from .perplexity import count_words, perplexity_figures


@dataclass
class RalmEvalResult:
    """What one evaluation produced. ``token_nlls[t]`` is the NLL of token ``t`` (NaN for token 0) and
    ``token_windows[t]`` the window that scored it. ``passages[w]`` are window ``w``'s retrieved passages (the
    reranker's candidates, in retrieval order) and ``chosen[w]`` the index of the most relevant one in context (-1:
    none), so :meth:`in_context` ``[token_windows[t]]`` was in context for token ``t`` (``context_size`` passages of
    it: ``num_passages``, or the ensemble's). ``ranking_nlls[w]`` are the ranking NLLs of the candidates when an LM
    ranked them (the window without a passage last, when it was a candidate); ``gate_scores[w]`` what a retrieval gate
    decided on (:mod:`hf_ralm.selection.gates`)."""

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

    def in_context(self) -> list[list[Passage]]:
        """Per window, the passages put in context, most relevant first (``[]`` for none)."""
        return [[found[i] for i in context_indices(choice, len(found), self.context_size)]
                for found, choice in zip(self.passages, self.chosen)]

    def retrieval_records(self, tokenizer) -> list[dict]:
        """The evaluation's retrievals in the paper's retrieval-file format (with the choices when reranked or
        gated)."""
        futures = [tokenizer.decode(self.ids[w.prev_end : w.end]) for w in self.windows]
        rerank = self.figures.get("rerank", "none")
        gated = self.figures.get("retrieval_gate", "always") != "always"
        gate = {k: v for k, v in self.figures.items() if k in ("retrieval_gate", "gate_threshold")} if gated else None
        # a plain run writes the paper's layout, without choices
        return retrieval_records(self.windows, self.queries, futures, self.passages,
                                 self.chosen if rerank != "none" or gated else None, self.ranking_nlls, rerank, gate,
                                 self.gate_scores)


def window_queries(tokenizer, ids: Sequence[int], windows: Sequence[Window], query_length: int) -> list[str | None]:
    """The decoded query of every window (``None`` for window 0, which gets no retrieval)."""
    spans = [query_span(w, query_length) for w in windows]
    return [None if span is None else tokenizer.decode(ids[span[0] : span[1]]) for span in spans]


def retrieve_for_windows(
    retriever: Retriever | None, queries: Sequence[str | None], k: int, batch_size: int = 512, show_progress=True
) -> list[list[Passage]]:
    """Batched retrieval of ``k`` passages for every window that has a query."""
    passages: list[list[Passage]] = [[] for _ in queries]
    if retriever is None:
        return passages
    todo = [i for i, q in enumerate(queries) if q is not None]
    for start in tqdm(range(0, len(todo), batch_size), desc="Retrieving", unit="batch", disable=not show_progress):
        chunk = todo[start : start + batch_size]
        for i, found in zip(chunk, retriever.retrieve([queries[i] for i in chunk], k=k)):
            passages[i] = list(found)
    return passages


def tokenize_text(tokenizer, text: str, max_eval_tokens: int | None = None) -> list[int]:
    """Token ids of the whole text, without special tokens (as the reference), optionally cut to the first
    ``max_eval_tokens``."""
    if not text:
        raise ValueError("The dataset is empty: there is no text to evaluate.")
    return first_tokens(tokenizer(text, add_special_tokens=False)["input_ids"], max_eval_tokens)


def first_tokens(ids: Sequence[int], max_eval_tokens: int | None = None) -> list[int]:
    """The first ``max_eval_tokens`` ids (all of them when ``None``).

    Example:
        >>> first_tokens([5, 6, 7], 2)
        [5, 6]
    """
    if max_eval_tokens is None:
        return list(ids)
    check_count("max_eval_tokens", max_eval_tokens)
    return list(ids[:max_eval_tokens])


def evaluate_retrieval(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever | None,
    config: RalmConfig,
    retrieval_file: str | None = None,
    max_eval_tokens: int | None = None,
    show_progress: bool = True,
    reranker=None,
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    output_dir: str | None = None,
    overwrite: bool = False,
    chunk_size: int = CHUNK_SIZE,
) -> RalmEvalResult:
    """Tokens, windows, queries, passages and the passage each window puts in context (``hf-ralm retrieve``).

    ``config.rerank`` chooses among ``config.rerank_candidates`` retrieved passages (:mod:`hf_ralm.reranking`, with
    ``reranker`` for another LM or a trained cross-encoder) and ``config.retrieval_gate`` whether a window retrieves
    at all (:mod:`hf_ralm.selection.gates`; the score gate asks ``retriever`` for each query's maximum score); when the
    reader ranked, the result already holds the target NLLs (``token_nlls``). A retrieval file that records choices
    (written with reranking or a gate) fixes them instead.

    Passages come from ``retrieval_file`` when given (the reference's JSON format), else from ``retriever`` (the
    top ``config.num_retrieved`` passages of every window's query: the reranker's candidates, or the ones put in
    context or mixed), else none. The figures count the windows (``num_windows``), the retrievals made or read from
    the file (``num_retrievals``: every window but window 0, or none without retrieval), those that found a passage
    (``num_windows_with_passage``) and those that found nothing (``num_empty_retrievals``), and give the share of
    the windows after the first that had a passage in context (``retrieved_fraction``).

    The windows run in chunks of ``chunk_size``; with ``output_dir`` each chunk's records are saved there and a rerun
    with the same settings resumes after them (``num_resumed_windows``; :mod:`hf_ralm.resume`, ``overwrite``: start
    afresh).
    """
    return _evaluate(model, tokenizer, text_or_ids, retriever, config, retrieval_file, max_eval_tokens, batch_size,
                     reuse_prefix_kv, show_progress, reranker, output_dir, overwrite, chunk_size, scored=False)


def gate_settings(config: RalmConfig) -> dict:
    """The retrieval gate's figures: ``retrieval_gate`` and, when it has one, ``gate_threshold``.

    Example:
        >>> gate_settings(RalmConfig(retrieval_gate="score", gate_threshold=0.3))
        {'retrieval_gate': 'score', 'gate_threshold': 0.3}
    """
    settings = {"retrieval_gate": config.retrieval_gate}
    if config.gate_threshold is not None:
        settings["gate_threshold"] = config.gate_threshold
    return settings


def check_file_choices(retrievals: Retrievals, config: RalmConfig, path: str) -> None:
    """Raise a ``ValueError`` when a retrieval file's recorded choices clash with ``config``: a file that records
    choices (reranked or gated) is evaluated as it is, and an ensemble mixes retrieval's top passages, not a
    reranker's choice."""
    if retrievals.chosen is None:
        return
    reranked = retrievals.rerank not in (None, "none")
    made = retrievals.rerank if reranked else f"retrieval_gate={(retrievals.gate or {}).get('retrieval_gate')}"
    if config.rerank != "none" or config.retrieval_gate != "always":
        raise ValueError(f"{path} already records {'reranked' if reranked else 'gated'} choices ({made}): evaluate "
                         "them with rerank='none' and retrieval_gate='always', or rerank or gate a retrieval file "
                         "without choices.")
    if config.ensemble_size > 1 and reranked:
        raise ValueError(f"{path} records the choices of rerank={retrievals.rerank!r}, while ensemble_size="
                         f"{config.ensemble_size} mixes retrieval's top passages: use a file without reranking.")


def evaluate_perplexity(
    model,
    tokenizer,
    text_or_ids: str | Sequence[int],
    retriever: Retriever | None,
    config: RalmConfig,
    retrieval_file: str | None = None,
    max_eval_tokens: int | None = None,
    batch_size: int = 8,
    reuse_prefix_kv: bool = True,
    show_progress: bool = True,
    reranker=None,
    output_dir: str | None = None,
    overwrite: bool = False,
    chunk_size: int = CHUNK_SIZE,
) -> RalmEvalResult:
    """In-Context RALM perplexity of a text (or of token ids) under the paper's conventions.

    Passages come from ``retrieval_file`` when given, else from ``retriever``, else none; each window puts
    ``config.num_passages`` of them in context (:func:`~hf_ralm.model_inputs.context_prefix`), or with
    ``config.ensemble_size > 1`` mixes its top passages' probabilities (:mod:`hf_ralm.ensemble`). Word-level
    perplexity counts the spaces of the text (of the decoded tokens when ids are given or ``max_eval_tokens`` cuts
    the text).

    The windows run in chunks of ``chunk_size`` windows, each end to end (retrieve, choose, score). With
    ``output_dir``, each chunk's per-window records (passages, choices, NLLs) are saved there as soon as it is done,
    and ``eval.json`` at the end: an interrupted run loses at most one chunk, and a rerun with the same settings
    resumes after the saved chunks with exactly the figures of an uninterrupted run (``num_resumed_windows`` counts
    the windows it did not compute again). Other settings, model, data or retrieval are refused, naming what differs
    (an :class:`~hf_ralm.errors.OutputFolderError`), unless ``overwrite`` (start afresh). See :mod:`hf_ralm.resume`.

    Example:
        >>> evaluate_perplexity(model, tokenizer, text, retriever, config,
        ...                     output_dir="runs/bm25").figures["num_resumed_windows"]    # doctest: +SKIP
        0
    """
    return _evaluate(model, tokenizer, text_or_ids, retriever, config, retrieval_file, max_eval_tokens, batch_size,
                     reuse_prefix_kv, show_progress, reranker, output_dir, overwrite, chunk_size, scored=True)


def evaluation_tokens(tokenizer, text_or_ids: str | Sequence[int],
                      max_eval_tokens: int | None) -> tuple[list[int], str]:
    """The token ids evaluated and the text their words are counted in (the decoded ids when ids are given or
    ``max_eval_tokens`` cuts the text)."""
    if max_eval_tokens is not None:
        check_count("max_eval_tokens", max_eval_tokens, minimum=2)  # token 0 is never scored
    if not isinstance(text_or_ids, str):
        ids = first_tokens(text_or_ids, max_eval_tokens)
        return ids, tokenizer.decode(ids)
    ids = tokenize_text(tokenizer, text_or_ids, max_eval_tokens)
    return ids, tokenizer.decode(ids) if max_eval_tokens and len(ids) == max_eval_tokens else text_or_ids


def _evaluate(model, tokenizer, text_or_ids, retriever, config, retrieval_file, max_eval_tokens, batch_size,
              reuse_prefix_kv, show_progress, reranker, output_dir, overwrite, chunk_size, scored) -> RalmEvalResult:
    """:func:`evaluate_retrieval` (``scored=False``) and :func:`evaluate_perplexity`: the windows in chunks, each
    chunk's records saved in ``output_dir`` and the saved ones resumed."""
    check_count("chunk_size", chunk_size)
    t0 = time.perf_counter()
    ids, text = evaluation_tokens(tokenizer, text_or_ids, max_eval_tokens)
    max_length = window_length(model, config)
    windows = plan_windows(len(ids), max_length, config.retrieval_stride)
    queries = window_queries(tokenizer, ids, windows, config.query_length_for(retriever))
    timings = {"tokenize_s": time.perf_counter() - t0, "retrieval_s": 0.0, "rerank_s": 0.0, "scoring_s": 0.0}
    t0 = time.perf_counter()
    retrievals = None
    if retrieval_file is not None:
        retrievals = load_retrieval_file(retrieval_file, windows)
        check_file_choices(retrievals, config, retrieval_file)
    timings["retrieval_s"] += time.perf_counter() - t0

    state = _WindowState(windows, len(ids))
    writer = None
    if output_dir is not None:
        settings = run_settings(model, tokenizer, ids, retriever, config, retrieval_file, max_length, batch_size,
                                reuse_prefix_kv, scored, chunk_size)
        if overwrite:
            Path(output_dir, EVAL_FILE).unlink(missing_ok=True)
        writer = WindowRecordWriter(Path(output_dir, RECORDS_DIR), settings, chunk_size=chunk_size,
                                    overwrite=overwrite)
    resumed = writer.saved_records() if writer else []
    for record in resumed:
        state.apply(record)
    with writer or nullcontext(), tqdm(total=len(windows), initial=len(resumed), unit="win",
                                       disable=not show_progress, desc="Evaluating" if scored else "Retrieving") as bar:
        for start in range(len(resumed), len(windows), chunk_size):
            chunk = windows[start : start + chunk_size]
            # the stages' own bars show each window of the chunk under this one, and vanish with the chunk
            records = _chunk_records(model, tokenizer, ids, chunk, queries, state, retrievals, retriever, config,
                                     reranker, batch_size, reuse_prefix_kv, scored, timings, show_progress)
            for record in records:
                state.apply(record)
            if writer:
                writer.add(records)
            bar.update(len(chunk))

    retrieving = retrieval_file is not None or retriever is not None
    num_retrievals = sum(1 for w in windows if w.has_retrieval) if retrieving else 0
    with_passage = sum(1 for w in windows if w.has_retrieval and state.passages[w.index])
    rerank = (retrievals and retrievals.rerank) or config.rerank
    gate = (retrievals and retrievals.gate) or gate_settings(config)
    figures = {
        "num_tokens": len(ids),
        "num_words": count_words(text),
        "num_windows": len(windows),
        "num_resumed_windows": len(resumed),
        "num_retrievals": num_retrievals,
        "num_windows_with_passage": with_passage,
        "num_empty_retrievals": num_retrievals - with_passage,
        "max_length": max_length,
        "rerank": rerank,
        "num_windows_without_passage_chosen": sum(
            1 for w in windows if state.passages[w.index] and state.chosen[w.index] < 0),
        **gate,
        "retrieved_fraction": retrieved_fraction(windows, state.passages, state.chosen),
        "num_passages": config.num_passages,
        "ensemble_size": config.ensemble_size,
    }
    if config.ensemble_size > 1:
        figures["ensemble_temperature"] = config.ensemble_temperature
    if "oracle" in rerank:
        figures["oracle_looks_at_future"] = True  # an upper bound, not a method
    if rerank != "none" and (retrievals is None or retrievals.chosen is None):
        figures["rerank_candidates"] = config.rerank_candidates
    scored_all = state.all_scored()
    if scored:
        computed = sum(w.num_scored for w in windows[len(resumed):])
        seconds = timings["scoring_s"] + timings["rerank_s"]  # reranking may have scored the windows already
        figures = {**perplexity_figures(float(state.nlls[1:].sum()), len(ids), sum(w.num_scored for w in windows),
                                        figures["num_words"]),
                   **figures, "scored_tokens_per_s": computed / seconds if seconds else None}
    gated = gate.get("retrieval_gate", "always") != "always"
    result = RalmEvalResult(figures, ids, state.nlls if scored_all else None,
                            state.token_windows if scored_all else None, windows, queries, state.passages,
                            state.chosen, state.ranking_nlls, timings, state.gate_scores if gated else None,
                            max(config.num_passages, config.ensemble_size))
    if output_dir is not None:
        write_json_atomic(os.path.join(output_dir, EVAL_FILE), {**figures, "timings": timings})
    return result


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

    def apply(self, record: dict) -> None:
        w = self.windows[record["window"]]
        self.passages[w.index] = record_passages(record)
        self.chosen[w.index] = record["chosen"]
        self.ranking_nlls[w.index] = record["ranking_nlls"]
        self.gate_scores[w.index] = record["gate_score"]
        if record["nlls"] is not None:
            self.nlls[w.score_begin : w.end] = torch.tensor(record["nlls"], dtype=torch.float64)
            self.token_windows[w.score_begin : w.end] = w.index

    def all_scored(self) -> bool:
        return bool((self.token_windows[1:] >= 0).all())


def _chunk_records(model, tokenizer, ids, chunk: Sequence[Window], queries, state: _WindowState,
                   retrievals: Retrievals | None, retriever, config: RalmConfig, reranker, batch_size: int,
                   reuse_prefix_kv: bool, scored: bool, timings: dict, show_progress: bool) -> list[dict]:
    """One chunk of windows end to end: its passages (retrieved, or from the retrieval file), each window's choice
    (gate, rerank) and, when ``scored``, its NLLs; as :func:`~hf_ralm.resume.window_record` records. ``state``'s
    passages and choices of the chunk are filled in on the way (the scorers index them by window)."""
    first, stop = chunk[0].index, chunk[-1].index + 1
    t0 = time.perf_counter()
    if retrievals is not None:
        state.passages[first:stop] = retrievals.passages[first:stop]
    else:
        state.passages[first:stop] = retrieve_for_windows(retriever, queries[first:stop], config.num_retrieved,
                                                          show_progress=False)
    timings["retrieval_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    if retrievals is not None and retrievals.chosen is not None:
        file_scores = retrievals.gate_scores[first:stop] if retrievals.gate_scores else [None] * len(chunk)
        outcome = RerankOutcome(retrievals.chosen[first:stop], [None] * len(chunk), gate_scores=file_scores)
    else:
        outcome = choose_passages(model, tokenizer, ids, chunk, queries, state.passages, config, retriever, reranker,
                                  batch_size, reuse_prefix_kv, show_progress)
    state.chosen[first:stop] = outcome.chosen
    timings["rerank_s"] += time.perf_counter() - t0
    t0 = time.perf_counter()
    nlls = outcome.token_nlls
    if nlls is None and scored and config.ensemble_size > 1:
        nlls = ensemble_window_nlls(model, tokenizer, ids, chunk, state.passages, config, state.chosen, batch_size,
                                    reuse_prefix_kv, show_progress)
    elif nlls is None and scored:  # not already scored while the reader ranked the candidates
        prefixes = [[]] * first + window_prefixes(tokenizer, chunk, state.passages, config, state.chosen)
        nlls = score_windows(model, ids, chunk, prefixes, batch_size, reuse_prefix_kv, show_progress)
    timings["scoring_s"] += time.perf_counter() - t0
    gate_scores = outcome.gate_scores or [None] * len(chunk)
    return [window_record(w.index, state.passages[w.index], choice, ranking, gate_score,
                          None if nlls is None else nlls[w.score_begin : w.end].tolist())
            for w, choice, ranking, gate_score in zip(chunk, outcome.chosen, outcome.ranking_nlls, gate_scores)]
