"""A retrieved passage, how a choice says "no passage", and whether a passage quotes its query: the values retrieval
and every step after it pass around (the text a passage puts in context is the ``passage_template`` setting's,
[`passage_text`][hf_ralm.passage_text]).

Examples:
    >>> from hf_ralm.config.passage_template import passage_text
    >>> passage = Passage("7", "Rome", "rome was the city", 6.5)
    >>> passage_text(passage.title, passage.text)
    'Rome\\nrome was the city'
    >>> passage.to_dict()["score"], NO_PASSAGE
    (6.5, -1)
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass

NO_PASSAGE = -1
"""What a choice among a window's (or a stride's) passages holds when none is put in context: nothing retrieved, no
passage chosen, or the gate closed."""


@dataclass(frozen=True)
class Passage:
    """One retrieved passage.

    Attributes:
        id: the backend's id for it (stable across runs of the same index).
        title: its article's title (empty when the corpus has none).
        text: its text.
        score: the retriever's score for the query it was retrieved for (higher is better; 0 when not scored).

    Examples:
        >>> Passage(id="12", title="Rome", text="Rome is the capital of Italy.", score=14.2).to_dict()["title"]
        'Rome'
    """

    id: str
    title: str
    text: str
    score: float = 0.0

    def to_dict(self) -> dict:
        """The passage's fields, as a retrieval file records them."""
        return asdict(self)


QUOTE_WORDS = 12
"""How many of a query's last words [`quotes_query`][hf_ralm.core.passages.quotes_query] looks for in a passage."""

_WORD = re.compile(r"\w+")
_UNKNOWN = "unk"  # what an unknown-word token (WikiText's <unk>) leaves of a word: it matches nothing, so skipped


def _four_grams(words: list[str]) -> set[tuple[str, ...]]:
    return {gram for gram in zip(words, words[1:], words[2:], words[3:]) if _UNKNOWN not in gram}


def quotes_query(passage: Passage, query: str | None) -> bool:
    """Whether ``passage`` holds the text of ``query`` (the words just before a window's target) itself: at least half
    of the word 4-grams of its last [`QUOTE_WORDS`][hf_ralm.core.passages.QUOTE_WORDS] words (at least two of them)
    stand in the passage. Runs of words shared that densely are a copy of the evaluated text, not a passage on its
    topic, so retrieval reads ahead (leakage). Words are compared lower-cased, punctuation and spacing aside, so
    WikiText's tokenized text (``well @-@ known``) matches Wikipedia's (``well-known``); 4-grams with an unknown word
    (``<unk>``) are left out.

    Examples:
        >>> rome = Passage("7", "Rome", "Rome was the capital city of the Roman Empire, and its emperor ruled it.")
        >>> quotes_query(rome, "the capital city of the Roman Empire , and its emperor"), quotes_query(rome, "a b c")
        (True, False)
    """
    grams = _four_grams(_WORD.findall((query or "").lower())[-QUOTE_WORDS:])
    if len(grams) < 2:
        return False
    return 2 * len(grams & _four_grams(_WORD.findall(passage.text.lower()))) >= len(grams)
