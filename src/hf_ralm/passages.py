"""A retrieved passage, what it puts in context as text, and how a choice says "no passage": the values every layer
above retrieval passes around.

Example:
    >>> passage = Passage("7", "Rome", "rome was the city", 6.5)
    >>> passage_text(passage.title, passage.text)
    'Rome\\nrome was the city'
    >>> passage.to_dict()["score"], NO_PASSAGE
    (6.5, -1)
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

PASSAGE_TEMPLATE = "{title}\n{text}"

NO_PASSAGE = -1
"""What a choice among a window's (or a stride's) passages holds when none is put in context: nothing retrieved, no
passage chosen, or the gate closed."""


@dataclass(frozen=True)
class Passage:
    """One retrieved passage. ``id`` is the backend's id for it (stable across runs of the same index)."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def passage_text(title: str | None, text: str, template: str = PASSAGE_TEMPLATE) -> str:
    """How a passage becomes the text put in context: ``title + "\\n" + text`` (just ``text`` without a title)."""
    return template.format(title=title, text=text) if title else text
