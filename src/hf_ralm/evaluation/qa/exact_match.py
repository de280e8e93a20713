"""Exact match, SQuAD's way: an answer is right when, after SQuAD normalization (``normalize_answer``), it equals
one of the gold answers; ``has_answer`` says whether a normalized gold answer occurs, as a run of whole words, in the
normalized passages of a prompt. ``exact_match_score`` is what the ``ralm_exact_match`` metric returns.

Examples:
    >>> exact_match("The Shakespeare.", ["shakespeare"])
    True
"""

from __future__ import annotations

import re
import string
from typing import Any, Iterable, Sequence

from ...errors import SettingError, setting
from ...utils.checks import check_texts, refuse_type


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lower case, no punctuation, no articles (a, an, the), single spaces.

    Examples:
        >>> normalize_answer("The  Eiffel-Tower!")
        'eiffeltower'
    """
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _as_answers(answers: str | Iterable[str]) -> list[str]:
    return [answers] if isinstance(answers, str) else [str(a) for a in answers]


def exact_match(prediction: str, answers: str | Iterable[str]) -> bool:
    """Whether ``prediction`` equals one of the gold ``answers`` after ``normalize_answer``."""
    normalized = normalize_answer(prediction)
    return any(normalized == normalize_answer(answer) for answer in _as_answers(answers))


def has_answer(answers: str | Iterable[str], text: str) -> bool:
    """Whether a gold answer occurs in ``text``: after ``normalize_answer``, as a run of whole words (so "rome"
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
    (``check_texts``): what the ``ralm_exact_match`` metric checks first.

    Examples:
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
    another form are refused first (``check_exact_match_inputs``)."""
    predictions, references = check_exact_match_inputs(predictions, references)
    correct = sum(exact_match(p, r) for p, r in zip(predictions, references))
    return {"exact_match": 100.0 * correct / len(predictions), "num_correct": correct,
            "num_examples": len(predictions)}
