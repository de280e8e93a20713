"""QA questions: read from a JSONL(.gz) file, a JSON list (DPR's retriever results) or a Hugging Face dataset, each
row checked before any is used (``check_question``), as ``{"question", "answers", "ctxs"}``.
"""

from __future__ import annotations

import json
from typing import Any

from ...errors import InputError
from ...utils.checks import check_json_text, is_input_file, reading, shown
from ...utils.datasets_io import load_hf_dataset
from ...utils.paths import missing_local_path


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


def check_question(where: str, row: Any) -> dict:
    """One question row (``where`` it is: ``_read_rows``), checked before anything uses it: ``question`` a
    string, ``answers`` (or NQ-open's ``answer``) a list of strings or one string, ``ctxs`` (when there) passages
    (``_ctxs_problem``); as ``load_questions`` returns it."""
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
    """Questions from a JSONL(.gz) file (or a JSON list, as DPR's retriever results), or a Hugging Face dataset.

    Each is ``{"question", "answers", "ctxs"}``, ``answers`` a list of strings (NQ-open's ``answer`` key and a single
    string are accepted), ``ctxs`` (DPR's retrieved passages, ``{"title", "text", ...}``) kept when present. Every
    row is checked before any is used.

    Args:
        path: A questions file, a Hub dataset id (such as ``nq_open``) or a dataset folder.
        max_questions: Keep the first this many (all when ``None``).
        name: A dataset's config.
        split: A dataset's split.

    Returns:
        The questions, in file order.

    Raises:
        FileNotFoundError: No such file or dataset.
        InputError: A row that is no JSON, or whose fields are not of those types; bytes that are not UTF-8; a
            damaged gzip file, a FIFO or a device. The message names the file, the line (JSONL) and the field.

    Examples:
        ```python
        examples = load_questions("nq-open-test.jsonl", max_questions=100)
        examples[0]["question"], examples[0]["answers"]
        ```
    """
    rows = _read_rows(path, name, split)
    if max_questions is not None:
        rows = rows[:max_questions]
    return [check_question(where, row) for where, row in rows]
