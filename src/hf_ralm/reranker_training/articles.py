"""Which articles the predictive reranker's training data comes from, and which titles it keeps away: what
``hf-ralm rerank-data`` records of its articles (``articles_source``) and the titles it never trains on nor
retrieves (``TrainingTitles``)."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ..runs.fingerprints import titles_fingerprint
from ..retrieval.base import read_forbidden_titles
from .data import file_fingerprint


@dataclass(frozen=True)
class TrainingTitles:
    """The titles of a rerank-data collection.

    Attributes:
        excluded: the titles never trained on (the evaluation articles, WikiText-103's titles) and never retrieved
            either.
        forbidden: every title retrieval must not return (``excluded`` and the retriever's own forbidden titles),
            sorted.

    Examples:
        ```python
        titles = TrainingTitles.from_files(["eval_titles.txt"], forbidden_titles="wikitext-103")
        articles = training_articles("wiki.jsonl.gz", exclude_titles=titles.excluded)
        model = RetrievalAugmentedModel.from_pretrained(..., retriever_options={"forbidden_titles": titles.forbidden})
        ```
    """

    excluded: frozenset[str]
    forbidden: list[str]

    @classmethod
    def from_files(cls, exclude_titles: Sequence[str | os.PathLike] = (),
                   forbidden_titles: str | None = None) -> TrainingTitles:
        """The titles of the ``exclude_titles`` files and of the ``forbidden_titles`` file or packaged list.

        Args:
            exclude_titles: files of titles never trained on, one per line (a missing or empty file is refused,
                naming it).
            forbidden_titles: the retriever's forbidden titles: a file or a packaged list's name
                (``hf_ralm.retrieval.read_forbidden_titles``).

        Returns:
            The ``TrainingTitles``.
        """
        excluded = frozenset().union(*(read_forbidden_titles(path, "exclude_titles") for path in exclude_titles))
        return cls(excluded, sorted(excluded | read_forbidden_titles(forbidden_titles)))


def articles_source(path: str | os.PathLike, num_articles: int | None = None,
                    exclude_titles: Iterable[str] = ()) -> dict:
    """What a collection records of its training articles (its ``metadata``, compared on resume).

    Args:
        path: the articles' file.
        num_articles: how many articles it takes (``None``: all).
        exclude_titles: the titles it leaves out.

    Returns:
        The file's fingerprint, ``num_articles`` and the fingerprint of the titles left out.

    Examples:
        ```python
        collect_rerank_data(..., metadata=articles_source("wiki.jsonl.gz", 500, titles.excluded))
        ```
    """
    return {"articles_fingerprint": file_fingerprint(path), "num_articles": num_articles,
            "exclude_titles": titles_fingerprint(exclude_titles)}
