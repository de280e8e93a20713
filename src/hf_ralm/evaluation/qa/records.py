"""A QA run's records: one ``QARecord`` per answered question (``qa_record``: scored by exact match and
``has_answer``) and the run's figures over them (``qa_figures``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from .exact_match import exact_match, has_answer
from .prompts import first_line, format_passages


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
    """The record of a question: its ``answer`` (from ``Answerer``), scored against its gold answers (``em``)
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
