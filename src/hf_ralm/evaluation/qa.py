"""Open-domain question answering with In-Context RALM (the paper's §7): passages in the prompt, greedy answers,
exact match.

The prompts are those of the paper's appendix C (and of its ``eval_qa.py``)::

    closed book (no passage):  Answer these questions:\\nQ: {question}\\nA:
    one passage:               {title}\\n\\n{text}\\n\\nBased on this text, answer these questions:\\nQ: {question}\\nA:
    several passages:          {title}\\n\\n{text}\\n\\n{title}\\n\\n{text}\\n\\nBased on these texts, answer these ...

where ``{question}`` is normalized by :func:`normalize_question` (a trailing ``?``, a lower-case first letter). The
answer is the first line of at most 10 greedily generated tokens. It is right when, after SQuAD normalization
(:func:`normalize_answer`), it equals one of the gold answers; ``has_answer`` says whether a normalized gold answer
occurs, as a run of whole words, in the normalized passages of the prompt.

Example:
    >>> build_qa_prompt("Who wrote Hamlet", [{"title": "Hamlet", "text": "A play by Shakespeare."}])
    'Hamlet\\n\\nA play by Shakespeare.\\n\\nBased on this text, answer these questions:\\nQ: who wrote Hamlet?\\nA:'
    >>> exact_match("The Shakespeare.", ["shakespeare"])
    True
"""

from __future__ import annotations

import json
import os
import re
import string
import time
from dataclasses import asdict, dataclass, replace
from typing import Any, Iterable, Mapping, Sequence

from ..errors import InputError, SettingError, setting
from ..runs.store import RecordStore, check_output_folder
from ..runs.harness import ChunkRun, RunOptions
from ..retrieval.corpus import WORDS_PER_PASSAGE
from ..utils.atomic import write_json_atomic, write_text_atomic
from ..utils.checks import check_json_text, check_texts, is_input_file, reading, refuse_type, shown
from ..utils.datasets_io import load_hf_dataset
from ..utils.paths import missing_local_path

__all__ = [
    "QARecord",
    "CLOSED_BOOK_PROMPT",
    "build_qa_prompt",
    "evaluate_qa",
    "exact_match",
    "exact_match_score",
    "find_passages",
    "first_line",
    "format_passages",
    "has_answer",
    "load_questions",
    "normalize_answer",
    "normalize_question",
    "qa_record",
]

CLOSED_BOOK_PROMPT = "Answer these questions:\nQ: {question}\nA:"
OPEN_BOOK_PROMPT = "{passages}\n\nBased on {these} answer these questions:\nQ: {question}\nA:"
MAX_NEW_TOKENS = 10
"""Tokens generated per answer by default (answers are short: :func:`first_line` keeps the first line)."""
PREDICTIONS_FILE = "predictions.jsonl"
PREDICTIONS_DIR = "predictions"
EVAL_FILE = "eval.json"


# ------------------------------------------------------------------------------------------------------------------
# Prompts and normalization (pure functions)
# ------------------------------------------------------------------------------------------------------------------


def normalize_question(question: str) -> str:
    """The question as the paper puts it in the prompt: a trailing ``?`` (added when missing) and a lower-case first
    letter. Surrounding white space is dropped.

    Example:
        >>> normalize_question("Who got the first Nobel prize in physics")
        'who got the first Nobel prize in physics?'
    """
    question = question.strip()
    if not question.endswith("?"):
        question += "?"
    return question[0].lower() + question[1:]


def _field(passage: Any, name: str) -> str:
    value = passage.get(name) if isinstance(passage, Mapping) else getattr(passage, name, None)
    return "" if value is None else str(value)


def format_passages(passages: Sequence[Any]) -> str:
    """``{title}\\n\\n{text}`` per passage (the text alone when a passage has no title), joined by blank lines.
    A passage is a mapping with ``title``/``text`` (DPR's ``ctxs``) or a :class:`~hf_ralm.retrieval.base.Passage`."""
    parts = []
    for passage in passages:
        title, text = _field(passage, "title"), _field(passage, "text")
        parts.append(f"{title}\n\n{text}" if title else text)
    return "\n\n".join(parts)


def build_qa_prompt(question: str, passages: Sequence[Any] = ()) -> str:
    """The paper's QA prompt for ``question`` with ``passages`` in front (none: the closed-book prompt).

    Example:
        >>> build_qa_prompt("what is the capital of France")
        'Answer these questions:\\nQ: what is the capital of France?\\nA:'
    """
    question = normalize_question(question)
    if not passages:
        return CLOSED_BOOK_PROMPT.format(question=question)
    these = "this text," if len(passages) == 1 else "these texts,"
    return OPEN_BOOK_PROMPT.format(passages=format_passages(passages), these=these, question=question)


def first_line(generation: str) -> str:
    """The answer in a generation: its first line, stripped."""
    return generation.split("\n", 1)[0].strip()


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, no articles (a, an, the), single spaces.

    Example:
        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _as_answers(answers: str | Iterable[str]) -> list[str]:
    return [answers] if isinstance(answers, str) else [str(a) for a in answers]


def exact_match(prediction: str, answers: str | Iterable[str]) -> bool:
    """Whether ``prediction`` equals one of the gold ``answers`` after :func:`normalize_answer`."""
    normalized = normalize_answer(prediction)
    return any(normalized == normalize_answer(answer) for answer in _as_answers(answers))


def has_answer(answers: str | Iterable[str], text: str) -> bool:
    """Whether a gold answer occurs in ``text``: after :func:`normalize_answer`, as a run of whole words (so "rome"
    is in "the city of rome" but not in "romeo"). Answers that normalize to nothing never match."""
    haystack = f" {normalize_answer(text)} "
    for answer in _as_answers(answers):
        needle = normalize_answer(answer)
        if needle and f" {needle} " in haystack:
            return True
    return False


def check_exact_match_inputs(predictions: Any, references: Any) -> tuple[list[str], list]:
    """``predictions`` (texts) and ``references`` (per prediction, a gold answer or a list of them) as lists of the
    same length, or a one-line refusal naming the argument (and the item) that is not
    (:func:`~hf_ralm.utils.checks.check_texts`): what the ``ralm_exact_match`` metric checks first.

    Example:
        >>> check_exact_match_inputs(["Paris"], [["Paris", "paris"]])
        (['Paris'], [['Paris', 'paris']])
    """
    predictions = check_texts("predictions", predictions)
    if isinstance(references, str) or not isinstance(references, (list, tuple)):
        refuse_type("references", references, "a list with, per prediction, its gold answer (a str) or answers "
                    "(a list of str)")
    for i, answers in enumerate(references):
        if not isinstance(answers, str) and not (isinstance(answers, (list, tuple))
                                                 and all(isinstance(answer, str) for answer in answers)):
            refuse_type("references", answers, "a gold answer (a str) or answers (a list of str)", item=i)
    if len(predictions) != len(references):
        raise SettingError(f"{len(predictions)} {setting('predictions')} but {len(references)} "
                           f"{setting('references')}: give one reference (its gold answers) per prediction.")
    return predictions, list(references)


def exact_match_score(predictions: Sequence[str], references: Sequence[str | Sequence[str]]) -> dict:
    """What the ``ralm_exact_match`` metric returns: ``exact_match`` (in percent, as SQuAD's metric and the paper
    report it), ``num_correct`` and ``num_examples``. Each reference is a gold answer or a list of them; inputs of
    another form are refused first (:func:`check_exact_match_inputs`)."""
    predictions, references = check_exact_match_inputs(predictions, references)
    correct = sum(exact_match(p, r) for p, r in zip(predictions, references))
    return {"exact_match": 100.0 * correct / len(predictions), "num_correct": correct,
            "num_examples": len(predictions)}


# ------------------------------------------------------------------------------------------------------------------
# Questions
# ------------------------------------------------------------------------------------------------------------------


def _read_rows(path: str, name: str | None = None, split: str = "validation") -> list[tuple[str, Any]]:
    """The rows of a questions file or dataset, each with where it is, for a message: ``FILE:LINE: question N`` in a
    JSONL file, ``FILE: question N`` in a JSON list or a dataset."""
    if not is_input_file(path, "questions file"):  # a folder is a dataset's; a FIFO is refused before it is opened
        if missing_local_path(path):
            raise FileNotFoundError(f"Questions file not found: {path!r}.")
        rows = load_hf_dataset(path, name, split)  # a Hub id (e.g. nq_open) or a dataset folder
        return [(f"{path}: question {number}", row) for number, row in enumerate(rows, 1)]
    stem = path[:-3] if path.endswith(".gz") else path
    with reading(path, InputError, "questions file") as f:
        if stem.endswith(".json"):  # the paper's and DPR's retriever results: one JSON list
            try:
                rows = json.load(f)
            except json.JSONDecodeError as error:
                raise InputError(f"{path} is not JSON ({error.msg}: line {error.lineno} column {error.colno}); a "
                                 ".json questions file holds one list of questions (DPR's retriever results).") \
                    from None
            if not isinstance(rows, list):
                raise InputError(f"{path}: a .json questions file must hold a list of questions.")
            return [(f"{path}: question {number}", row) for number, row in enumerate(rows, 1)]
        found = []
        for line_number, line in enumerate(f, 1):
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as error:
                    raise InputError(f"{path}:{line_number}: not a JSON line ({error}): fix or remove that line.") \
                        from None
                check_json_text(row, line, f"{path}:{line_number}")
                found.append((f"{path}:{line_number}: question {len(found) + 1}", row))
        return found


def _ctxs_problem(ctxs: Any) -> str | None:
    """What is wrong with a question's ``ctxs`` (DPR's passages: a list of objects with a ``text`` string and a
    ``title`` string, or none), or ``None``."""
    if not isinstance(ctxs, list):
        return f"'ctxs' is {shown(ctxs)}, not a list of {{title, text}} passages"
    for j, ctx in enumerate(ctxs):
        if not isinstance(ctx, dict):
            return f"ctxs[{j}] is {shown(ctx)}, not a {{title, text}} passage"
        if not isinstance(ctx.get("text"), str):
            return f"ctxs[{j}] has 'text' {shown(ctx.get('text'))}, not a string"
        if ctx.get("title") is not None and not isinstance(ctx["title"], str):
            return f"ctxs[{j}] has 'title' {shown(ctx['title'])}, not a string"
    return None


def _question(where: str, row: Any) -> dict:
    """One question row (``where`` it is: :func:`_read_rows`), checked before anything uses it: ``question`` a
    string, ``answers`` (or NQ-open's ``answer``) a list of strings or one string, ``ctxs`` (when there) passages
    (:func:`_ctxs_problem`); as :func:`load_questions` returns it."""
    fix = "fix or remove that question"
    if not isinstance(row, dict) or row.get("question") in (None, ""):
        raise InputError(f"{where} has no 'question' ({shown(row)}): {fix}.")
    if not isinstance(row["question"], str) or not row["question"].strip():
        raise InputError(f"{where}: 'question' is {shown(row['question'])}, not the question's text: {fix}.")
    key = "answers" if "answers" in row else "answer"
    answers = row.get(key)
    if answers is None:
        raise InputError(f"{where} has no 'answers' (or 'answer'): {fix}.")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list) or not all(isinstance(answer, str) for answer in answers):
        raise InputError(f"{where}: {key!r} is {shown(row[key])}, not a list of strings (the gold answers): {fix}.")
    example = {"question": row["question"], "answers": answers}
    if "ctxs" in row:
        problem = _ctxs_problem(row["ctxs"])
        if problem:
            raise InputError(f"{where}: {problem} (DPR's retriever-results format): {fix}.")
        example["ctxs"] = row["ctxs"]
    return example


def load_questions(path: str, max_questions: int | None = None, name: str | None = None,
                   split: str = "validation") -> list[dict]:
    """Questions from a JSONL(.gz) file (or a JSON list, as DPR's retriever results), or a Hugging Face dataset
    (``path`` a Hub id such as ``nq_open``, or a dataset folder; ``name`` its config, ``split`` its split):
    ``{"question", "answers", "ctxs"}`` each, ``answers`` a list of strings (NQ-open's ``answer`` key and a single
    string are accepted), ``ctxs`` (DPR's retrieved passages, ``{"title", "text", ...}``) kept when present.
    ``max_questions`` keeps the first ones.

    Raises:
        FileNotFoundError: no such file or dataset.
        InputError: a row that is no JSON, or whose fields are not of those types (checked here, before any is
            used); bytes that are not UTF-8; a damaged gzip file, a FIFO or a device
            (:func:`~hf_ralm.utils.checks.reading`). The message names the file, the line (JSONL) and the field.
    """
    rows = _read_rows(path, name, split)
    if max_questions is not None:
        rows = rows[:max_questions]
    return [_question(where, row) for where, row in rows]


GOLD_CORPUS_FILE = "gold-passages.jsonl"  # eval-qa --add-gold-to-corpus writes it into --output-dir


def check_qa_output_dir(output_dir: str | os.PathLike) -> None:
    """Refuse (an :class:`~hf_ralm.errors.OutputFolderError`) an output folder that holds anything but what QA writes
    there (:func:`~hf_ralm.runs.store.check_output_folder`): its predictions, ``eval.json``, the gold passages."""
    check_output_folder(output_dir, (PREDICTIONS_DIR, PREDICTIONS_FILE, EVAL_FILE, GOLD_CORPUS_FILE),
                        "QA predictions")


def write_gold_corpus(examples: Sequence[Mapping], path: str) -> dict:
    """The questions' gold passages (their ``ctxs``) as a corpus JSONL at ``path`` (``id`` ``nq-gold-<row>-<j>``,
    ``title``, ``text``), identical title and text written once, for a retrieval corpus to which they are added (open
    QA over a sample of Wikipedia finds the answers only there): written atomically, and left untouched when it
    already holds the same bytes (so an index built from it is reused). Returns counts of what it wrote.

    Example::

        write_gold_corpus(load_questions("nq-open-gold-2000.jsonl.gz"), "runs/nq/gold-passages.jsonl")
        # {'num_rows': 2000, 'num_passages': 1968, 'num_over_100_words': 80}
    """
    seen, lines, long_ones = set(), [], 0
    for row_number, row in enumerate(examples):
        for j, ctx in enumerate(row.get("ctxs") or []):
            title, text = str(ctx.get("title") or ""), str(ctx.get("text") or "")
            if not text.strip() or (title, text) in seen:
                continue
            seen.add((title, text))
            long_ones += len(text.split()) > WORDS_PER_PASSAGE
            lines.append(json.dumps({"id": f"nq-gold-{row_number}-{j}", "title": title, "text": text},
                                    ensure_ascii=False) + "\n")
    content = "".join(lines)
    stats = {"num_rows": len(examples), "num_passages": len(lines), "num_over_100_words": long_ones}
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            if f.read() == content:
                return stats
    write_text_atomic(path, content, suffix=".jsonl")
    return stats


# ------------------------------------------------------------------------------------------------------------------
# Evaluation
# ------------------------------------------------------------------------------------------------------------------


def _passage_dict(passage: Any) -> dict:
    out = {"title": _field(passage, "title"), "text": _field(passage, "text")}
    for name in ("id", "score"):
        value = passage.get(name) if isinstance(passage, Mapping) else getattr(passage, name, None)
        if value is not None:
            out[name] = value
    return out


def qa_figures(records: Sequence[QARecord]) -> dict:
    """EM and has_answer as fractions of the questions (in [0, 1], as every share hf-ralm reports, e.g. eval-lm's
    ``retrieved_fraction``; a record's own ``em`` and ``has_answer`` are 0 or 1, so these are their means) and the
    counts over per-question records."""
    n = len(records)
    correct = sum(r.em for r in records)
    found = sum(r.has_answer for r in records)
    return {
        "em": correct / n if n else float("nan"),
        "has_answer": found / n if n else float("nan"),
        "num_questions": n,
        "num_correct": correct,
        "num_has_answer": found,
        "num_truncated": sum(r.truncated for r in records),
        "num_fewer_passages": sum(r.num_passages < r.num_docs for r in records),
    }


def _check_arguments(examples: Sequence[dict], retriever, num_docs: int, use_ctxs: bool, batch_size: int,
                     max_new_tokens: int) -> None:
    """Raise a ``ValueError`` naming the argument that :func:`evaluate_qa` cannot work with: ``examples`` that are no
    list of questions as :func:`load_questions` gives them (each checked as a row of a questions file is), a count
    out of range, passages asked for with nowhere to take them from."""
    from ..utils.checks import check_count

    if isinstance(examples, (str, os.PathLike)):
        refuse_type("examples", examples, "a list of questions", "read a questions file with load_questions(path)")
    if not isinstance(examples, (list, tuple)):
        refuse_type("examples", examples, "a list of questions ({'question', 'answers'} dicts, load_questions)")
    for i, example in enumerate(examples):
        _question(f"examples[{i}]", example)
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


def default_num_docs(num_docs: int | None, use_ctxs: bool, retrieving: bool) -> int:
    """Passages per prompt: ``num_docs`` when given, else 1 with passages to give (``use_ctxs`` or a retriever) and 0
    (closed book) without.

    Example:
        >>> default_num_docs(None, use_ctxs=False, retrieving=True), default_num_docs(None, False, False)
        (1, 0)
    """
    if num_docs is not None:
        return num_docs
    return 1 if use_ctxs or retrieving else 0


def find_passages(examples: Sequence[dict], retriever=None, num_docs: int = 0, use_ctxs: bool = False) -> list[list]:
    """The ``num_docs`` passages of each question's prompt, as ``{"title", "text"}`` dicts (with ``id`` and ``score``
    when known): none (closed book) when ``num_docs`` is 0, else the first of its own ``ctxs`` with ``use_ctxs``, else
    the ``retriever``'s for the question.

    Example:
        >>> find_passages([{"question": "q", "answers": [], "ctxs": [{"title": "T", "text": "x"}]}], num_docs=1,
        ...               use_ctxs=True)
        [[{'title': 'T', 'text': 'x'}]]
    """
    if num_docs == 0:
        found: Sequence[Sequence] = [[] for _ in examples]
    elif use_ctxs:
        found = [ex["ctxs"][:num_docs] for ex in examples]
    else:
        found = retriever.retrieve([ex["question"] for ex in examples], k=num_docs)
    return [[_passage_dict(p) for p in passages] for passages in found]


@dataclass
class QARecord:
    """One answered question, as ``predictions.jsonl`` holds it: the question, its gold answers, the prediction (the
    first line of the generation) and whether it is right (``em``), whether the prompt's passages hold a gold answer
    (``has_answer``), their titles and ids, the passages asked for and given, the prompt's length in tokens and
    whether it was cut (``truncated``), and the whole generation."""

    question: str
    answers: list[str]
    prediction: str
    em: bool
    has_answer: bool
    titles: list[str]
    passage_ids: list[str | None]
    num_docs: int
    num_passages: int
    prompt_tokens: int
    truncated: bool
    generation: str


def qa_record(example: dict, passages: Sequence[dict], answer: dict, num_docs: int) -> QARecord:
    """The record of a question: its ``answer`` (from :class:`_Answerer`), scored against its gold answers (``em``)
    and its prompt's ``passages`` (``has_answer``)."""
    prediction = first_line(answer["generation"])
    return QARecord(
        question=example["question"],
        answers=example["answers"],
        prediction=prediction,
        em=exact_match(prediction, example["answers"]),
        has_answer=has_answer(example["answers"], format_passages(passages)) if passages else False,
        titles=[p["title"] for p in passages],
        passage_ids=[p.get("id") for p in passages],
        num_docs=num_docs,
        num_passages=len(passages),
        prompt_tokens=answer["prompt_tokens"],
        truncated=answer["truncated"],
        generation=answer["generation"],
    )


class QARecordStore(RecordStore):
    """The answered questions of a run, one record (:func:`qa_record`) per question, in a
    :class:`~hf_ralm.runs.store.RecordStore` folder (``OUTPUT_DIR/predictions/``): a chunk per batch, resumed after the
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


class _Answerer:
    """Greedy answers of a causal LM to prompts: left-padded batches, each prompt cut from the left to
    ``max_length - max_new_tokens`` tokens (``max_length``: the model's maximum by default)."""

    def __init__(self, model, tokenizer, max_new_tokens: int, max_length: int | None):
        from transformers import GenerationConfig

        from ..core.modeling_utils import model_device, padding_id, resolve_max_length

        self.model, self.tokenizer = model, tokenizer
        self.max_length = resolve_max_length(model, max_length)
        self.budget = self.max_length - max_new_tokens
        if self.budget < 1:
            raise SettingError(f"{setting('max_length')} ({self.max_length}) leaves no room for a prompt and "
                               f"{max_new_tokens} new tokens.")
        self.pad_id = padding_id(tokenizer)
        eos = model.generation_config.eos_token_id
        self.generation_config = GenerationConfig(
            max_new_tokens=max_new_tokens, do_sample=False, num_beams=1, pad_token_id=self.pad_id,
            eos_token_id=eos if eos is not None else tokenizer.eos_token_id,
        )
        self.device = model_device(model)

    def answer(self, prompts: Sequence[str]) -> list[dict]:
        """Per prompt: the decoded ``generation``, the ``prompt_tokens`` it was given and whether it was
        ``truncated``."""
        import torch

        from ..core.modeling_utils import left_pad

        batch = left_pad(self.tokenizer, prompts, self.budget)
        with torch.no_grad():
            generated = self.model.generate(input_ids=batch.input_ids.to(self.device),
                                            attention_mask=batch.attention_mask.to(self.device),
                                            generation_config=self.generation_config)
        new_ids = generated[:, batch.width :].tolist()
        return [{"generation": self.tokenizer.decode(ids, skip_special_tokens=True), "prompt_tokens": length,
                 "truncated": cut} for ids, cut, length in zip(new_ids, batch.truncated, batch.lengths)]


class _QaRun:
    """The records of a run, by question number, and where they go. With ``output_dir``: the predictions' store
    (:class:`QARecordStore`) gets each batch's records as a chunk at its questions' position, ``eval.json`` is
    rewritten atomically after every batch, and ``predictions.jsonl`` (every record, a line each) is written once
    every question is answered; the predictions already in the folder are resumed (same questions and
    ``settings``, else a ``ValueError``), also those other workers save (:meth:`gather`). Without it the records
    stay in memory. The batches run through the run harness (``chunks``, :class:`~hf_ralm.runs.harness.ChunkRun`: a
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


def evaluate_qa(
    model,
    tokenizer,
    examples: Sequence[dict],
    retriever=None,
    num_docs: int = 0,
    use_ctxs: bool = False,
    max_new_tokens: int = MAX_NEW_TOKENS,
    max_length: int | None = None,
    settings: dict | None = None,
    *,
    run: RunOptions = RunOptions(),
) -> dict:
    """Answer ``examples`` (from :func:`load_questions`) with a plain causal LM and score them.

    Each question gets ``num_docs`` passages in its prompt (0: closed book): from its own ``ctxs`` with
    ``use_ctxs``, else retrieved by ``retriever`` with the question as the query (:func:`find_passages`). Prompts are
    cut from the left to ``max_length - max_new_tokens`` tokens (``max_length``: the model's maximum by default),
    batched with left padding (``run.batch_size`` questions, or ``"auto"``: :class:`~hf_ralm.core.batching.BatchSize`,
    whose first size makes the saved batches unless ``run.chunk_size`` is given), and answered greedily
    (``max_new_tokens`` tokens, the first line).

    ``run`` (:class:`~hf_ralm.runs.harness.RunOptions`) says how the run is kept and shared. With ``run.output_dir``,
    every batch of answered questions is saved as it is done (``OUTPUT_DIR/predictions/``, a
    :class:`~hf_ralm.runs.store.RecordStore`), ``eval.json`` (EM, has_answer, counts, ``settings``, timings;
    ``complete`` once every question is answered) is rewritten atomically after every batch, and
    ``predictions.jsonl`` (a line per question) is written at the end. A run on a folder that already holds
    predictions continues after them (the same questions, maybe more of them, and the same ``settings``; other
    settings are refused, naming them; a damaged chunk of predictions too, naming it, unless ``run.repair``: it is
    moved aside and its questions answered again; a folder holding files hf-ralm did not write as well).
    ``eval.json`` also holds ``run.report_extra`` (what else the caller records, e.g. the command line's arguments;
    its ``timings`` join the run's). Returns what ``eval.json`` holds.

    Many workers share a run through ``run.output_dir`` (``run.num_shards``/``run.shard_id``, or the environment of
    torchrun, accelerate or a Slurm array: :class:`~hf_ralm.runs.shards.Shard`): worker I answers the batches I,
    I+N, ...; the one that saves the last batch writes ``predictions.jsonl`` and the final ``eval.json`` (the others
    return what is done, with ``complete`` false), and the same call without shards merges.

    Example::

        examples = load_questions("nq-open-test.jsonl", max_questions=100)
        report = evaluate_qa(model, tokenizer, examples, retriever, num_docs=2,
                             run=RunOptions(output_dir="runs/nq-bm25", batch_size=16))
        report["em"]
    """
    from ..core.batching import BatchSize
    from ..core.modeling_utils import model_device

    batches = BatchSize(run.batch_size, model_device(model))  # the blocks of questions keep its first size
    _check_arguments(examples, retriever, num_docs, use_ctxs, batches.size, max_new_tokens)
    answerer = _Answerer(model, tokenizer, max_new_tokens, max_length)
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
    """The identity of a QA run's model and retrieval, which :func:`evaluate_qa`'s ``settings`` takes: a run is only
    resumed with the same ones. ``model``, ``tokenizer`` and ``gguf_file`` as the model was named; ``dtype``: the
    precision the model was loaded in (a ``torch.dtype``: what ``dtype="auto"`` chose); closed book (``num_docs`` 0)
    retrieves nothing, whatever ``retriever`` was given. ``reader_identity``: the reader's
    :func:`~hf_ralm.core.modeling_utils.model_identity`, whose ``engine`` and ``engine_options`` (an engine reader's:
    the answers depend on them) are recorded; a transformers model's names no engine, and adds nothing, so its runs'
    settings stay as they were.

    Example:
        >>> import torch
        >>> qa_run_settings(model="gpt2", dtype=torch.float32, num_docs=0, retriever="bm25")
        {'model': 'gpt2', 'tokenizer': None, 'gguf_file': None, 'retriever': 'none', 'corpus': None, \
'index_dir': None, 'forbidden_titles': None, 'dtype': 'float32'}
        >>> engine = {"reader": "gpt2", "engine": "vllm", "engine_options": {"tensor_parallel_size": 2}}
        >>> settings = qa_run_settings(model="gpt2", dtype=torch.float32, num_docs=0, reader_identity=engine)
        >>> settings["engine"], settings["engine_options"], "reader" in settings
        ('vllm', {'tensor_parallel_size': 2}, False)
    """
    settings = {"model": model, "tokenizer": tokenizer, "gguf_file": gguf_file, "retriever": retriever,
                "corpus": corpus, "index_dir": index_dir, "forbidden_titles": forbidden_titles,
                "dtype": str(dtype).removeprefix("torch.")}
    if not num_docs:
        settings["retriever"] = "none"
    settings.update({key: value for key, value in (reader_identity or {}).items()
                     if key in ("engine", "engine_options")})
    return settings
