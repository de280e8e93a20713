"""The QA prompt: the passages a question gets (``find_passages``) and the paper's prompts (appendix C, and its
``eval_qa.py``):

```text
closed book (no passage):  Answer these questions:\\nQ: {question}\\nA:
one passage:               {title}\\n\\n{text}\\n\\nBased on this text, answer these questions:\\nQ: {question}\\nA:
several passages:          {title}\\n\\n{text}\\n\\n{title}\\n\\n{text}\\n\\nBased on these texts, answer these ...
```

where ``{question}`` is normalized by ``normalize_question`` (a trailing ``?``, a lower-case first letter); the
answer is the first line of the generation (``first_line``).

Examples:
    >>> build_qa_prompt("Who wrote Hamlet", [{"title": "Hamlet", "text": "A play by Shakespeare."}])
    'Hamlet\\n\\nA play by Shakespeare.\\n\\nBased on this text, answer these questions:\\nQ: who wrote Hamlet?\\nA:'
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence


CLOSED_BOOK_PROMPT = "Answer these questions:\nQ: {question}\nA:"
OPEN_BOOK_PROMPT = "{passages}\n\nBased on {these} answer these questions:\nQ: {question}\nA:"


def normalize_question(question: str) -> str:
    """The question as the paper puts it in the prompt: a trailing ``?`` (added when missing) and a lower-case first
    letter. Surrounding white space is dropped.

    Examples:
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
    A passage is a mapping with ``title``/``text`` (DPR's ``ctxs``) or a ``Passage``."""
    parts = []
    for passage in passages:
        title, text = _field(passage, "title"), _field(passage, "text")
        parts.append(f"{title}\n\n{text}" if title else text)
    return "\n\n".join(parts)


def build_qa_prompt(question: str, passages: Sequence[Any] = ()) -> str:
    """The paper's QA prompt for ``question`` with ``passages`` in front (none: the closed-book prompt).

    Examples:
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


def default_num_docs(num_docs: int | None, use_ctxs: bool, retrieving: bool) -> int:
    """Passages per prompt: ``num_docs`` when given, else 1 with passages to give (``use_ctxs`` or a retriever) and 0
    (closed book) without.

    Examples:
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

    Examples:
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


def _passage_dict(passage: Any) -> dict:
    out = {"title": _field(passage, "title"), "text": _field(passage, "text")}
    for name in ("id", "score"):
        value = passage.get(name) if isinstance(passage, Mapping) else getattr(passage, name, None)
        if value is not None:
            out[name] = value
    return out
