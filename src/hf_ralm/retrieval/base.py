"""The retriever protocol every backend implements, and the passage record they return."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Passage:
    """One retrieved passage. ``id`` is the backend's id for it (stable across runs of the same index)."""

    id: str
    title: str
    text: str
    score: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


@runtime_checkable
class Retriever(Protocol):
    """Anything with a batched ``retrieve``. A query may get fewer than ``k`` passages (or none)."""

    def retrieve(self, queries: Sequence[str], k: int = 1) -> list[list[Passage]]: ...


PASSAGE_TEMPLATE = "{title}\n{text}"


class SavableRetriever:
    """Gives a backend ``save_pretrained(dir)``: its ``config()`` written as ``retriever_config.json``, which
    :func:`hf_ralm.retrieval.factory.load_retriever_from_pretrained` reads back."""

    def save_pretrained(self, save_directory: str) -> None:
        from .factory import save_retriever_config

        save_retriever_config(self, save_directory)


def passage_text(title: str | None, text: str, template: str = PASSAGE_TEMPLATE) -> str:
    """How a passage becomes the text put in context: ``title + "\\n" + text`` (just ``text`` without a title)."""
    return template.format(title=title, text=text) if title else text


def read_forbidden_titles(path: str | None) -> frozenset[str]:
    """Titles, one per line, whose passages retrieval must never return (e.g. the evaluation set's own articles)."""
    if path is None:
        return frozenset()
    with open(path, encoding="utf-8") as f:
        return frozenset(line.strip() for line in f if line.strip())
