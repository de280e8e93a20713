"""A QA run (``evaluate_qa``): questions answered in batches through the run harness, each batch's records saved in
the predictions' store, ``eval.json`` and ``predictions.jsonl``; the run's identity (``qa_run_settings``) and its
output folder's check.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, replace
from typing import Any, Mapping, Sequence

from ...errors import SettingError, setting
from ...runs.harness import ChunkRun, RunOptions
from ...runs.output_folder import check_output_folder
from ...runs.store import RecordStore
from ...utils.atomic import write_json_atomic, write_text_atomic
from ...utils.checks import refuse_type
from .answerer import MAX_NEW_TOKENS, Answerer
from .gold_corpus import GOLD_CORPUS_FILE
from .prompts import build_qa_prompt, find_passages
from .questions import check_question
from .records import QARecord, qa_figures, qa_record


PREDICTIONS_FILE = "predictions.jsonl"
PREDICTIONS_DIR = "predictions"
EVAL_FILE = "eval.json"


def check_qa_output_dir(output_dir: str | os.PathLike) -> None:
    """Refuse (an ``OutputFolderError``) an output folder that holds anything but what QA writes
    there (``check_output_folder``): its predictions, ``eval.json``, the gold passages."""
    check_output_folder(output_dir, (PREDICTIONS_DIR, PREDICTIONS_FILE, EVAL_FILE, GOLD_CORPUS_FILE),
                        "QA predictions")


class QARecordStore(RecordStore):
    """The answered questions of a run, one record (``qa_record``) per question, in a
    ``RecordStore`` folder (``OUTPUT_DIR/predictions/``): a chunk per batch, resumed after the
    saved ones with the same settings."""

    what = "predictions"
    record_type = QARecord


def _resumed_records(store: QARecordStore, examples: Sequence[dict]) -> dict[int, QARecord]:
    """The records a store holds for ``examples``, by question number, checked to answer them (a run may go on
    with more of the same questions, never with others)."""
    records = {}
    for (start, stop), rows in store.items():
        for i, record in enumerate(rows, start):
            if i >= len(examples):
                break
            if record.question != examples[i]["question"]:
                raise ValueError(
                    f"{store.folder} holds the answer of {record.question!r} as question {i + 1}, but question "
                    f"{i + 1} is {examples[i]['question']!r}: it comes from another questions file. Use another "
                    "--output-dir.")
            records[i] = record
    return records


class _QaRun:
    """The records of a run, by question number, and where they go. With ``output_dir``: the predictions' store
    (``QARecordStore``) gets each batch's records as a chunk at its questions' position, ``eval.json`` is
    rewritten atomically after every batch, and ``predictions.jsonl`` (every record, a line each) is written once
    every question is answered; the predictions already in the folder are resumed (same questions and
    ``settings``, else a ``ValueError``), also those other workers save (``gather``). Without it the records
    stay in memory. The batches run through the run harness (``chunks``, ``ChunkRun``: a
    chunk per block of ``run.chunk_size`` questions)."""

    def __init__(self, run: RunOptions, examples: Sequence[dict], settings: dict):
        self.output_dir, self.settings, self.examples = run.output_dir, settings, examples
        self.extra = dict(run.report_extra or {})
        self.accept_unverified = run.accept_unverified
        self.records: dict[int, QARecord] = {}
        self.sample_prompt = None
        self.store = None
        self.chunks = ChunkRun(run)
        if run.output_dir is not None:
            check_qa_output_dir(run.output_dir)
            # an overwrite deletes the final files too: a fresh run must not show the old run's figures meanwhile
            final = [os.path.join(run.output_dir, name) for name in (EVAL_FILE, PREDICTIONS_FILE)]
            self.store = self.chunks.open(QARecordStore, os.path.join(run.output_dir, PREDICTIONS_DIR), settings,
                                          final=final)
            self.records = _resumed_records(self.store, examples)
            previous = os.path.join(run.output_dir, EVAL_FILE)
            if self.records and os.path.isfile(previous):
                with open(previous, encoding="utf-8") as f:
                    self.sample_prompt = json.load(f).get("sample_prompt")
        self.num_resumed = len(self.records)
        self.timings = {"retrieval_s": 0.0, "generation_s": 0.0}
        self.start_time = time.perf_counter()

    def add(self, start: int, records: Sequence[QARecord]) -> None:
        """Keep the records of the batch of questions from ``start`` (saved by the harness), and report them."""
        self.records.update(enumerate(records, start))
        if self.store is not None:
            self._write(self.report(complete=False))

    def gather(self) -> None:
        """Read the batches other workers saved, once they are done."""
        if self.chunks.shard.count > 1:
            self.chunks.gather()
            self.records = _resumed_records(self.store, self.examples)

    def complete(self) -> bool:
        return len(self.records) == len(self.examples)

    def ordered(self) -> list[QARecord]:
        return [self.records[i] for i in sorted(self.records)]

    def report(self, complete: bool) -> dict:
        """What ``eval.json`` holds: the figures, ``complete``, the counts, ``settings`` (and, saved, their
        digest), a sample prompt, timings."""
        elapsed = time.perf_counter() - self.start_time
        answered = len(self.records) - self.num_resumed
        extra = {key: value for key, value in self.extra.items() if key != "timings"}
        saved = {"settings_digest": self.store.settings_digest} if self.store is not None else {}
        if self.store is not None and self.accept_unverified:
            saved["accepted_unverified_chunks"] = self.store.num_unverified
        return {**qa_figures(self.ordered()), "complete": complete, "num_resumed": self.num_resumed,
                "num_answered": answered, "settings": self.settings, **saved, "sample_prompt": self.sample_prompt,
                **extra,
                "timings": {**self.extra.get("timings", {}), **self.timings, "total_s": elapsed,
                            "questions_per_s": answered / elapsed if elapsed > 0 else None}}

    def finish(self) -> dict:
        """The final report (``complete``), written to ``eval.json``, and every record to ``predictions.jsonl``."""
        result = self.report(complete=True)

        def write() -> None:
            write_text_atomic(os.path.join(self.output_dir, PREDICTIONS_FILE),
                              "".join(json.dumps(asdict(record), ensure_ascii=False) + "\n"
                                      for record in self.ordered()))
            write_json_atomic(os.path.join(self.output_dir, EVAL_FILE), result)

        self.chunks.finish(write)
        return result

    def _write(self, report: dict) -> None:
        """``eval.json``, by the writing worker, never from predictions another run replaced meanwhile."""
        self.chunks.write(lambda: write_json_atomic(os.path.join(self.output_dir, EVAL_FILE), report))


def _check_arguments(examples: Sequence[dict], retriever, num_docs: int, use_ctxs: bool, batch_size: int,
                     max_new_tokens: int) -> None:
    """Raise a ``ValueError`` naming the argument that ``evaluate_qa`` cannot work with: ``examples`` that are no
    list of questions as ``load_questions`` gives them (each checked as a row of a questions file is), a count
    out of range, passages asked for with nowhere to take them from."""
    from ...utils.checks import check_count

    if isinstance(examples, (str, os.PathLike)):
        refuse_type("examples", examples, "a list of questions", "read a questions file with load_questions(path)")
    if not isinstance(examples, (list, tuple)):
        refuse_type("examples", examples, "a list of questions ({'question', 'answers'} dicts, load_questions)")
    for i, example in enumerate(examples):
        check_question(f"examples[{i}]", example)
    check_count("num_docs", num_docs, minimum=0)
    if num_docs and not use_ctxs and retriever is None:
        raise SettingError(f"Open-book QA ({setting('num_docs')} > 0) needs a retriever or the questions' own "
                           "passages (use_ctxs).")
    if use_ctxs and num_docs and any("ctxs" not in ex for ex in examples):
        missing = next(i for i, ex in enumerate(examples, 1) if "ctxs" not in ex)
        raise ValueError(f"use_ctxs: question {missing} has no 'ctxs' (DPR retriever-results format).")
    check_count("batch_size", batch_size)
    check_count("max_new_tokens", max_new_tokens)
    if not examples:
        raise ValueError("There are no questions to answer.")


def evaluate_qa(
    model,
    tokenizer,
    examples: Sequence[dict],
    retriever=None,
    num_docs: int = 0,
    *,
    use_ctxs: bool = False,
    max_new_tokens: int = MAX_NEW_TOKENS,
    max_length: int | None = None,
    settings: dict | None = None,
    run: RunOptions = RunOptions(),
) -> dict:
    """Answer ``examples`` with a plain causal LM and score them.

    Each question gets ``num_docs`` passages in its prompt (0: closed book). Prompts are cut from the left to
    ``max_length - max_new_tokens`` tokens, batched with left padding and answered greedily (``max_new_tokens``
    tokens, the first line).

    ``run`` says how the run is kept and shared. With ``run.output_dir``, every batch of answered questions is saved
    as it is done (``OUTPUT_DIR/predictions/``, a [`RecordStore`][hf_ralm.RecordStore]), ``eval.json`` (EM,
    has_answer, counts, ``settings``, timings; ``complete`` once every question is answered) is rewritten atomically
    after every batch, and ``predictions.jsonl`` (a line per question) is written at the end. A run on a folder that
    already holds predictions continues after them (the same questions, maybe more of them, and the same
    ``settings``; other settings are refused, naming them; a damaged chunk of predictions too, naming it, unless
    ``run.repair``: it is moved aside and its questions answered again; a folder holding files hf-ralm did not write
    as well). ``eval.json`` also holds ``run.report_extra`` (what else the caller records, e.g. the command line's
    arguments; its ``timings`` join the run's).

    Many workers share a run through ``run.output_dir`` (``run.num_shards``/``run.shard_id``, or the environment of
    torchrun, accelerate or a Slurm array): worker I answers the batches I, I+N, ...; the one that saves the last
    batch writes ``predictions.jsonl`` and the final ``eval.json`` (the others return what is done, with
    ``complete`` false), and the same call without shards merges.

    Args:
        model: A causal LM (transformers, or an engine reader with ``generate``).
        tokenizer: Its tokenizer.
        examples: The questions, as [`load_questions`][hf_ralm.load_questions] gives them.
        retriever: What retrieves a question's passages (the question is the query), unless ``use_ctxs``.
        num_docs: Passages per prompt (0: closed book).
        use_ctxs: Take a question's passages from its own ``ctxs`` (DPR's retriever results).
        max_new_tokens: Tokens generated per answer.
        max_length: The prompt and answer's token budget (``None``: the model's maximum).
        settings: The run's identity (``qa_run_settings``): a run is resumed only with the same.
        run: How the run is kept and shared ([`RunOptions`][hf_ralm.RunOptions]): ``run.batch_size`` questions per
            batch, or ``"auto"`` ([`BatchSize`][hf_ralm.BatchSize], whose first size makes the saved batches unless
            ``run.chunk_size`` is given).

    Returns:
        What ``eval.json`` holds (with ``shard`` on a worker whose run is not complete yet).

    Raises:
        SettingError: ``examples`` not a list, a count out of range, or passages asked for with nowhere to take them
            from.
        InputError: A question that is not of the form ``load_questions`` gives.
        OutputFolderError: The output folder holds files hf-ralm did not write.
        ValueError: No questions, or an output folder that holds another questions file's answers or a run with
            other settings.

    Examples:
        ```python
        examples = load_questions("nq-open-test.jsonl", max_questions=100)
        report = evaluate_qa(model, tokenizer, examples, retriever, num_docs=2,
                             run=RunOptions(output_dir="runs/nq-bm25", batch_size=16))
        report["em"]
        ```
    """
    from ...core.batching import BatchSize
    from ...core.modeling_utils import model_device

    batches = BatchSize(run.batch_size, model_device(model))  # the blocks of questions keep its first size
    _check_arguments(examples, retriever, num_docs, use_ctxs, batches.size, max_new_tokens)
    answerer = Answerer(model, tokenizer, max_new_tokens, max_length)
    settings = {**(settings or {}), "num_docs": num_docs, "use_ctxs": use_ctxs, "max_new_tokens": max_new_tokens,
                "max_length": answerer.max_length}
    run = _QaRun(replace(run, chunk_size=run.chunk_size or batches.size), examples, settings)

    def answer(start: int, stop: int) -> list[QARecord]:
        batch = examples[start:stop]
        t0 = time.perf_counter()
        passages = find_passages(batch, retriever, num_docs, use_ctxs)
        run.timings["retrieval_s"] += time.perf_counter() - t0
        prompts = [build_qa_prompt(ex["question"], found) for ex, found in zip(batch, passages)]
        if run.sample_prompt is None and start == 0:
            run.sample_prompt = prompts[0]
        t0 = time.perf_counter()
        answers = batches.map(prompts, answerer.answer)  # in smaller batches after an out-of-memory error
        run.timings["generation_s"] += time.perf_counter() - t0
        return [qa_record(ex, found, reply, num_docs) for ex, found, reply in zip(batch, passages, answers)]

    def answered(start: int, records: Sequence[QARecord]) -> None:
        run.add(start, records)
        run.chunks.bar.set_postfix(EM=f"{100 * qa_figures(run.ordered())['em']:.1f}%")

    run.chunks.run(len(examples), answer, desc="eval-qa", unit="question", initial=run.num_resumed, after=answered)
    run.gather()
    if not run.complete():
        return {**run.report(complete=False), "shard": run.chunks.shard.description}
    return run.finish()


def qa_run_settings(*, model: str, dtype, num_docs: int, retriever: str = "none", tokenizer: str | None = None,
                    gguf_file: str | None = None, corpus: Sequence[str] | None = None, index_dir: str | None = None,
                    forbidden_titles: str | None = None, reader_identity: Mapping[str, Any] | None = None) -> dict:
    """The identity of a QA run's model and retrieval, which ``evaluate_qa``'s ``settings`` takes: a run is only
    resumed with the same ones.

    Args:
        model: the model, as it was named.
        dtype: the precision the model was loaded in (a ``torch.dtype``: what ``dtype="auto"`` chose).
        num_docs: the passages per prompt: closed book (0) retrieves nothing, whatever ``retriever`` was given.
        retriever: the retriever's name.
        tokenizer: the tokenizer, as it was named.
        gguf_file: the GGUF file, as it was named.
        corpus: the retriever's corpus files.
        index_dir: its index folder.
        forbidden_titles: the forbidden titles' file.
        reader_identity: the reader's ``model_identity``, whose ``engine`` and ``engine_options`` (an engine
            reader's: the answers depend on them) are recorded; a transformers model's names no engine, and adds
            nothing, so its runs' settings stay as they were.

    Returns:
        The settings.

    Examples:
        >>> import torch
        >>> qa_run_settings(model="gpt2", dtype=torch.float32, num_docs=0, retriever="bm25")
        {'model': 'gpt2', 'tokenizer': None, 'gguf_file': None, 'retriever': 'none', 'corpus': None, \
'index_dir': None, 'forbidden_titles': None, 'dtype': 'float32'}
        >>> engine = {"reader": "gpt2", "engine": "my-engine", "engine_options": {"url": "http://localhost:8000"}}
        >>> settings = qa_run_settings(model="gpt2", dtype=torch.float32, num_docs=0, reader_identity=engine)
        >>> settings["engine"], settings["engine_options"], "reader" in settings
        ('my-engine', {'url': 'http://localhost:8000'}, False)
    """
    settings = {"model": model, "tokenizer": tokenizer, "gguf_file": gguf_file, "retriever": retriever,
                "corpus": corpus, "index_dir": index_dir, "forbidden_titles": forbidden_titles,
                "dtype": str(dtype).removeprefix("torch.")}
    if not num_docs:
        settings["retriever"] = "none"
    settings.update({key: value for key, value in (reader_identity or {}).items()
                     if key in ("engine", "engine_options")})
    return settings
