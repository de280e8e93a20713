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

import gzip
import json
import os
import re
import string
import time
from typing import Any, Iterable, Mapping, Sequence

__all__ = [
    "CLOSED_BOOK_PROMPT",
    "build_qa_prompt",
    "evaluate_qa",
    "exact_match",
    "exact_match_score",
    "first_line",
    "format_passages",
    "has_answer",
    "load_questions",
    "normalize_answer",
    "normalize_question",
]

CLOSED_BOOK_PROMPT = "Answer these questions:\nQ: {question}\nA:"
OPEN_BOOK_PROMPT = "{passages}\n\nBased on {these} answer these questions:\nQ: {question}\nA:"
MAX_NEW_TOKENS = 10
PREDICTIONS_FILE = "predictions.jsonl"
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


def exact_match_score(predictions: Sequence[str], references: Sequence[str | Sequence[str]]) -> dict:
    """What the ``ralm_exact_match`` metric returns: ``exact_match`` (in percent, as SQuAD's metric and the paper
    report it), ``num_correct`` and ``num_examples``. Each reference is a gold answer or a list of them."""
    if len(predictions) != len(references):
        raise ValueError(f"{len(predictions)} predictions but {len(references)} references.")
    if not predictions:
        raise ValueError("Exact match needs at least one prediction.")
    correct = sum(exact_match(p, r) for p, r in zip(predictions, references))
    return {"exact_match": 100.0 * correct / len(predictions), "num_correct": correct,
            "num_examples": len(predictions)}


# ------------------------------------------------------------------------------------------------------------------
# Questions
# ------------------------------------------------------------------------------------------------------------------


def _read_rows(path: str) -> list[dict]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"Questions file not found: {path!r}.")
    opener = gzip.open if path.endswith(".gz") else open
    name = path[:-3] if path.endswith(".gz") else path
    with opener(path, "rt", encoding="utf-8") as f:
        if name.endswith(".json"):  # the paper's and DPR's retriever results: one JSON list
            rows = json.load(f)
            if not isinstance(rows, list):
                raise ValueError(f"{path}: a .json questions file must hold a list of questions.")
            return rows
        rows = []
        for line_number, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{line_number}: not a JSON line ({error}).") from error
        return rows


def load_questions(path: str, max_questions: int | None = None) -> list[dict]:
    """Questions from a JSONL(.gz) file (or a JSON list, as DPR's retriever results): ``{"question", "answers",
    "ctxs"}`` each, ``answers`` a list (NQ-open's ``answer`` key and a single string are accepted), ``ctxs`` (DPR's
    retrieved passages, ``{"title", "text", ...}``) kept when present. ``max_questions`` keeps the first ones."""
    rows = _read_rows(path)
    if max_questions is not None:
        rows = rows[:max_questions]
    questions = []
    for number, row in enumerate(rows, 1):
        where = f"{path}: question {number}"
        if not isinstance(row, dict) or not str(row.get("question") or "").strip():
            raise ValueError(f"{where} has no 'question'.")
        answers = row.get("answers", row.get("answer"))
        if answers is None:
            raise ValueError(f"{where} has no 'answers' (or 'answer').")
        example = {"question": str(row["question"]), "answers": _as_answers(answers)}
        if "ctxs" in row:
            if not isinstance(row["ctxs"], list):
                raise ValueError(f"{where}: 'ctxs' must be a list of {{title, text}} passages.")
            example["ctxs"] = row["ctxs"]
        questions.append(example)
    return questions


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


def _read_predictions(path: str, examples: Sequence[dict]) -> list[dict]:
    """The records of a previous run, checked against the questions; a last line cut by a crash is dropped (and cut
    from the file)."""
    if not os.path.isfile(path):
        return []
    with open(path, "rb") as f:
        lines = f.readlines()
    records, good = [], 0
    for number, line in enumerate(lines, 1):
        try:
            if not line.endswith(b"\n"):
                raise ValueError("unterminated line")
            record = json.loads(line)
        except ValueError as error:
            if number == len(lines):  # the line being written when the run stopped
                break
            raise ValueError(f"{path}:{number} is not a JSON line ({error}); remove the file to start over.") from error
        records.append(record)
        good += len(line)
    if good < sum(len(line) for line in lines):
        with open(path, "r+b") as f:
            f.truncate(good)
    for i, (record, example) in enumerate(zip(records, examples)):
        if record.get("question") != example["question"]:
            raise ValueError(
                f"{path} line {i + 1} answers {record.get('question')!r}, but question {i + 1} is "
                f"{example['question']!r}: it comes from another questions file. Use another --output-dir."
            )
    return records


def _check_settings(output_dir: str, settings: dict) -> dict:
    """The ``eval.json`` of a previous run in ``output_dir`` (``{}`` if none), checked to have the same settings."""
    path = os.path.join(output_dir, EVAL_FILE)
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        report = json.load(f)
    previous = report.get("settings") or {}
    changed = sorted(k for k in set(previous) | set(settings) if previous.get(k) != settings.get(k))
    if changed:
        details = ", ".join(f"{k}: {previous.get(k)!r} → {settings.get(k)!r}" for k in changed)
        raise ValueError(f"{output_dir} holds predictions made with other settings ({details}); use another "
                         f"--output-dir, or remove {PREDICTIONS_FILE} and {EVAL_FILE} to start over.")
    return report


def qa_figures(records: Sequence[dict]) -> dict:
    """EM and has_answer (in percent) and the counts over per-question records."""
    n = len(records)
    correct = sum(bool(r["em"]) for r in records)
    found = sum(bool(r["has_answer"]) for r in records)
    return {
        "em": 100.0 * correct / n if n else float("nan"),
        "has_answer": 100.0 * found / n if n else float("nan"),
        "num_questions": n,
        "num_correct": correct,
        "num_has_answer": found,
        "num_truncated": sum(bool(r.get("truncated")) for r in records),
        "num_fewer_passages": sum(r.get("num_passages", 0) < r.get("num_docs", 0) for r in records),
    }


def _encode_batch(tokenizer, prompts: Sequence[str], budget: int, pad_id: int):
    """Left-padded token ids (the tokenizer's default special tokens) of prompts cut from the left to ``budget``
    tokens (keeping a leading BOS), their attention mask, and which prompts were cut."""
    import torch

    encoded, truncated = [], []
    bos = tokenizer.bos_token_id
    for prompt in prompts:
        ids = list(tokenizer(prompt)["input_ids"])
        cut = len(ids) > budget
        if cut:
            ids = [ids[0]] + ids[len(ids) - budget + 1 :] if bos is not None and ids[0] == bos else ids[-budget:]
        encoded.append(ids)
        truncated.append(cut)
    width = max(len(ids) for ids in encoded)
    input_ids = torch.tensor([[pad_id] * (width - len(ids)) + ids for ids in encoded])
    mask = torch.tensor([[0] * (width - len(ids)) + [1] * len(ids) for ids in encoded])
    return input_ids, mask, truncated, [len(ids) for ids in encoded]


def evaluate_qa(
    model,
    tokenizer,
    examples: Sequence[dict],
    retriever=None,
    num_docs: int = 0,
    use_ctxs: bool = False,
    batch_size: int = 8,
    max_new_tokens: int = MAX_NEW_TOKENS,
    max_length: int | None = None,
    output_dir: str | None = None,
    settings: dict | None = None,
    show_progress: bool = True,
) -> dict:
    """Answer ``examples`` (from :func:`load_questions`) with a plain causal LM and score them.

    Each question gets ``num_docs`` passages in its prompt (0: closed book): from its own ``ctxs`` with
    ``use_ctxs``, else retrieved by ``retriever`` with the question as the query. Prompts are cut from the left to
    ``max_length - max_new_tokens`` tokens (``max_length``: the model's maximum by default), batched with left
    padding, and answered greedily (``max_new_tokens`` tokens, the first line).

    With ``output_dir``, every answered question is appended to ``predictions.jsonl`` as it is done, and
    ``eval.json`` (EM, has_answer, counts, ``settings``, timings; ``complete`` once every question is answered) is
    rewritten atomically after every batch. A run on a folder that already holds predictions continues after them
    (the questions and ``settings`` must be the same). Returns what ``eval.json`` holds.
    """
    import torch
    from tqdm.auto import tqdm
    from transformers import GenerationConfig

    from .evaluation import resolve_max_length
    from .retrieval.files import write_json_atomic
    from .modeling_utils import model_device

    if num_docs < 0:
        raise ValueError(f"num_docs must be at least 0, got {num_docs}.")
    if num_docs and not use_ctxs and retriever is None:
        raise ValueError("Open-book QA (num_docs > 0) needs a retriever or the questions' own passages (use_ctxs).")
    if use_ctxs and num_docs and any("ctxs" not in ex for ex in examples):
        missing = next(i for i, ex in enumerate(examples, 1) if "ctxs" not in ex)
        raise ValueError(f"use_ctxs: question {missing} has no 'ctxs' (DPR retriever-results format).")
    if batch_size < 1 or max_new_tokens < 1:
        raise ValueError("batch_size and max_new_tokens must be at least 1.")
    if not examples:
        raise ValueError("There are no questions to answer.")
    max_length = resolve_max_length(model, max_length)
    budget = max_length - max_new_tokens
    if budget < 1:
        raise ValueError(f"max_length ({max_length}) leaves no room for a prompt and {max_new_tokens} new tokens.")
    settings = dict(settings or {})
    settings.update(num_docs=num_docs, use_ctxs=use_ctxs, max_new_tokens=max_new_tokens, max_length=max_length)

    records: list[dict] = []
    predictions_path = None
    sample_prompt = None
    if output_dir is not None:
        os.makedirs(output_dir, exist_ok=True)
        predictions_path = os.path.join(output_dir, PREDICTIONS_FILE)
        records = _read_predictions(predictions_path, examples)
        if records:
            sample_prompt = _check_settings(output_dir, settings).get("sample_prompt")
    resumed = min(len(records), len(examples))
    records = records[: len(examples)]
    todo = list(range(resumed, len(examples)))

    pad_id = next((t for t in (tokenizer.pad_token_id, tokenizer.eos_token_id) if t is not None), 0)
    eos = model.generation_config.eos_token_id if model.generation_config.eos_token_id is not None \
        else tokenizer.eos_token_id
    generation_config = GenerationConfig(max_new_tokens=max_new_tokens, do_sample=False, num_beams=1,
                                         pad_token_id=pad_id, eos_token_id=eos)
    device = model_device(model)
    timings = {"retrieval_s": 0.0, "generation_s": 0.0}
    start_time = time.perf_counter()

    def report(complete: bool) -> dict:
        elapsed = time.perf_counter() - start_time
        answered = len(records) - resumed
        return {**qa_figures(records), "complete": complete, "num_resumed": resumed, "num_answered": answered,
                "settings": settings, "sample_prompt": sample_prompt,
                "timings": {**timings, "total_s": elapsed,
                            "questions_per_s": answered / elapsed if elapsed > 0 else None}}

    out = open(predictions_path, "a", encoding="utf-8") if predictions_path else None
    try:
        progress = tqdm(total=len(examples), initial=resumed, desc="eval-qa", unit="question",
                        disable=not show_progress)
        for begin in range(0, len(todo), batch_size):
            batch = [examples[i] for i in todo[begin : begin + batch_size]]
            t0 = time.perf_counter()
            if num_docs == 0:
                passages: list[list] = [[] for _ in batch]
            elif use_ctxs:
                passages = [list(ex["ctxs"][:num_docs]) for ex in batch]
            else:
                passages = retriever.retrieve([ex["question"] for ex in batch], k=num_docs)
            passages = [[_passage_dict(p) for p in found] for found in passages]
            timings["retrieval_s"] += time.perf_counter() - t0

            prompts = [build_qa_prompt(ex["question"], found) for ex, found in zip(batch, passages)]
            t0 = time.perf_counter()
            input_ids, mask, truncated, lengths = _encode_batch(tokenizer, prompts, budget, pad_id)
            with torch.no_grad():
                generated = model.generate(input_ids=input_ids.to(device), attention_mask=mask.to(device),
                                           generation_config=generation_config)
            generated = generated[:, input_ids.shape[1] :].tolist()
            timings["generation_s"] += time.perf_counter() - t0

            rows = zip(batch, passages, prompts, generated, truncated, lengths)
            for ex, found, prompt, new_ids, cut, length in rows:
                generation = tokenizer.decode(new_ids, skip_special_tokens=True)
                prediction = first_line(generation)
                record = {
                    "question": ex["question"],
                    "answers": ex["answers"],
                    "prediction": prediction,
                    "em": exact_match(prediction, ex["answers"]),
                    "has_answer": has_answer(ex["answers"], format_passages(found)) if found else False,
                    "titles": [p["title"] for p in found],
                    "passage_ids": [p.get("id") for p in found],
                    "num_docs": num_docs,
                    "num_passages": len(found),
                    "prompt_tokens": length,
                    "truncated": cut,
                    "generation": generation,
                }
                if sample_prompt is None:
                    sample_prompt = prompt
                records.append(record)
                if out is not None:
                    out.write(json.dumps(record, ensure_ascii=False) + "\n")
                    out.flush()
            progress.update(len(batch))
            progress.set_postfix(EM=f"{qa_figures(records)['em']:.1f}%")
            if output_dir is not None:
                write_json_atomic(os.path.join(output_dir, EVAL_FILE), report(complete=False))
        progress.close()
    finally:
        if out is not None:
            out.close()
    result = report(complete=True)
    if output_dir is not None:
        write_json_atomic(os.path.join(output_dir, EVAL_FILE), result)
    return result
