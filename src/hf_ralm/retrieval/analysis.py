"""Lucene's English analysis in Python: how the bm25 backend turns text into terms, as the Lucene backend does.

Anserini's ``DefaultEnglishAnalyzer`` (the analyzer of ``retriever="lucene"`` indexes and queries) chains Lucene's
``StandardTokenizer`` (Unicode word boundaries, UAX #29), ``EnglishPossessiveFilter``, ``LowerCaseFilter``, a
``StopFilter`` with the 33 English stop words and ``PorterStemFilter``. This module does the same steps:

* ``words``: the tokens ``StandardTokenizer`` cuts (its JFlex grammar, written as a regular expression over
  Unicode Word_Break properties). Numbers keep their separators (``20,000``, ``3.14``, ``2,621.3``), letters joined
  by ``.``, ``:`` or an apostrophe stay one token (``A.H.H``, ``U.S``, ``don't``, ``O'Neill's``), and
  hyphens, slashes and ``@`` split (``e-mail`` → ``e``, ``mail``; an e-mail address or URL becomes its dotted
  parts). A final ``.`` never belongs to a token. Han and Hiragana characters are one token each, Thai-like
  scripts one token per run, emoji one token per sequence; tokens longer than 255 characters are cut as Lucene cuts
  them. Text without combining marks, emoji or the scripts that need special rules (nearly every passage) takes
  a faster equivalent expression.
* ``word_term``: one token's term: a final ``'s`` (``'``, ``’`` or ``＇``) removed, lowercased as Java does,
  ``""`` for a stop word, else ``hf_ralm.retrieval.porter.porter_stem`` (Lucene's Porter variant).

Character classes come from the ``regex`` module's Unicode data, put back into Lucene's (Unicode 9) classes where
the two differ (``_LUCENE_CLASSES``). The tests compare ``analyze`` with Lucene's own analyzer, run through
the JVM, on tricky strings, on Wikipedia passages and on every code point that Unicode 14 assigns. Known gaps:
characters assigned after Unicode 14 are not checked, and emoji sequences are matched as written in Lucene's grammar
but without its longest-match search, so unusual sequences (a joiner in odd places) can cut differently.

Examples:
    >>> analyze("Darwin's 20,000 U.S. e-mails don't possibly")
    ['darwin', '20,000', 'u.', 'e', 'mail', "don't", 'possibl']
"""

from __future__ import annotations

import functools
import itertools
import logging
import re
from typing import Callable, Iterable, Iterator

import regex

from ..utils.worker_processes import WorkerDied, WorkerPool, WorkersUnavailable
from .porter import porter_stem

logger = logging.getLogger(__name__)

ANALYSIS = {
    "tokenizer": "lucene-standard",  # StandardTokenizer's UAX #29 word breaks, max token length 255
    "filters": "english-possessive,lowercase",
    "stopwords": "lucene-english",  # EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
    "stemmer": "lucene-porter",
}
"""What an index records about its analysis; an index built with other values is refused (see
[`BM25Retriever`][hf_ralm.retrieval.BM25Retriever])."""
# Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET (also bm25s' "en" list)
STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split()
)
MAX_TOKEN_LENGTH = 255  # StandardTokenizer.DEFAULT_MAX_TOKEN_LENGTH
POSSESSIVE_APOSTROPHES = ("'", "\u2019", "\uff07")  # what EnglishPossessiveFilter strips before a final s
_JAVA_LOWER = {0x130: "i", 0x3A3: "σ"}  # where Python's str.lower differs from Java's per-character toLowerCase


# Extended_Pictographic (Unicode 14 emoji-data.txt, what Lucene's grammar uses): the ``regex`` module's property of that
# name holds only the emoji among them, which leaves out symbols Lucene keeps as tokens (☉, ♭, ☫...)
_EXTENDED_PICTOGRAPHIC = (
    "[\u00a9\u00ae\u203c\u2049\u2122\u2139\u2194-\u2199\u21a9\u21aa\u231a\u231b\u2328\u2388\u23cf\u23e9-\u23f3"
    "\u23f8-\u23fa\u24c2\u25aa\u25ab\u25b6\u25c0\u25fb-\u25fe\u2600-\u2605\u2607-\u2612\u2614-\u2685\u2690-\u2705"
    "\u2708-\u2712\u2714\u2716\u271d\u2721\u2728\u2733\u2734\u2744\u2747\u274c\u274e\u2753-\u2755\u2757"
    "\u2763-\u2767\u2795-\u2797\u27a1\u27b0\u27bf\u2934\u2935\u2b05-\u2b07\u2b1b\u2b1c\u2b50\u2b55\u3030\u303d"
    "\u3297\u3299\U0001f000-\U0001f0ff\U0001f10d-\U0001f10f\U0001f12f\U0001f16c-\U0001f171\U0001f17e\U0001f17f"
    "\U0001f18e\U0001f191-\U0001f19a\U0001f1ad-\U0001f1e5\U0001f201-\U0001f20f\U0001f21a\U0001f22f"
    "\U0001f232-\U0001f23a\U0001f23c-\U0001f23f\U0001f249-\U0001f3fa\U0001f400-\U0001f53d\U0001f546-\U0001f64f"
    "\U0001f680-\U0001f6ff\U0001f774-\U0001f77f\U0001f7d5-\U0001f7ff\U0001f80c-\U0001f80f\U0001f848-\U0001f84f"
    "\U0001f85a-\U0001f85f\U0001f888-\U0001f88f\U0001f8ae-\U0001f8ff\U0001f90c-\U0001f93a\U0001f93c-\U0001f945"
    "\U0001f947-\U0001faff\U0001fc00-\U0001fffd]"
)

# Where Lucene's grammar (Unicode 9 tables) classes a character otherwise than the ``regex`` module's newer data: found
# by running Lucene's StandardTokenizer on every code point that Unicode 14 assigns, alone, between letters and between
# digits (tests/test_analysis.py repeats it). Nearly all are letters added after Unicode 9, which Lucene skips; the
# rest: tone letters (˥˦˧˨˩), the cedilla ¸ and Armenian ՚ ՟ ֊ are no letters for Lucene, Arabic number signs are
# Format characters, ︐ ︔ join digits, ᧚ is Southeast Asian and the legacy-computing symbols are tokens by themselves.
_LUCENE_CLASSES = {
    "other": (
        "\u00b8\u02e5-\u02eb\u055a\u055f\u058a\u0870-\u0887\u0889-\u088e\u0890\u0891\u0898-\u089f\u08b5"
        "\u08be-\u08d2\u0b55\u0c3c\u0c5d\u0cdd\u0d04\u0d81\u170d\u1715\u171f\u180f\u1abf-\u1ace\u1b4c\u1dfa\u2c2f"
        "\u2c5f\u31bb-\u31bf\u4db6-\u4dbf\u9ff0-\u9fff\ua708-\ua716\ua7c0\ua7c1\ua7c7-\ua7ca\ua7d0\ua7d1\ua7d3"
        "\ua7d5-\ua7d9\ua7f2-\ua7f6\ua82c\uab68\uab69\U00010570-\U0001057a\U0001057c-\U0001058a"
        "\U0001058c-\U00010592\U00010594\U00010595\U00010597-\U000105a1\U000105a3-\U000105b1\U000105b3-\U000105b9"
        "\U000105bb\U000105bc\U00010780-\U00010785\U00010787-\U000107b0\U000107b2-\U000107ba\U00010e80-\U00010ea9"
        "\U00010eab\U00010eac\U00010eb0\U00010eb1\U00010f70-\U00010f85\U00010fb0-\U00010fc4\U00011070-\U00011075"
        "\U000110c2\U00011147\U000111ce\U000111cf\U00011460\U00011461\U00011740-\U00011746\U00011900-\U00011906"
        "\U00011909\U0001190c-\U00011913\U00011915\U00011916\U00011918-\U00011935\U00011937\U00011938"
        "\U0001193b-\U00011943\U00011950-\U00011959\U00011ab0-\U00011abf\U00011fb0\U00012f90-\U00012ff0"
        "\U00016a70-\U00016abe\U00016ac0-\U00016ac9\U00016fe2\U00016fe4\U00016ff0\U00016ff1\U0001aff0-\U0001aff3"
        "\U0001aff5-\U0001affb\U0001affd\U0001affe\U0001b11f-\U0001b122\U0001cf00-\U0001cf2d\U0001cf30-\U0001cf46"
        "\U0001df00-\U0001df1e\U0001e290-\U0001e2ae\U0001e7e0-\U0001e7e6\U0001e7e8-\U0001e7eb\U0001e7ed\U0001e7ee"
        "\U0001e7f0-\U0001e7fe\U0002a6d7-\U0002a6df\U0002b735-\U0002b738\U00030000-\U0003134a"
    ),
    "format": "\u0600-\u0605\u06dd\u070f\u08e2\U000110bd\U000110cd",
    "mid_num": "\ufe10\ufe14",
    "southeast_asian": "\u19da",
    "single": "\U0001fb00-\U0001fb92\U0001fb94-\U0001fbca\U0001fbf0-\U0001fbf9",
}


def _class(properties: str, lucene_class: str = "") -> str:
    """A ``regex`` character class: the characters of ``properties`` (class items), without those of
    ``_LUCENE_CLASSES``, and with those that Lucene puts in ``lucene_class``."""
    corrected = "".join(_LUCENE_CLASSES.values())
    return f"[[{properties}--[{corrected}]]{_LUCENE_CLASSES.get(lucene_class, '')}]"


def _word_break_classes() -> dict[str, str]:
    """The character classes of Lucene's grammar (its JFlex macros), as ``regex`` classes."""
    not_emoji_chars = r"\p{WB=Regional_Indicator}0-9#*\u00a9\u00ae\u2122\u3030\u303d\p{Emoji_Modifier}"
    emoji = rf"[{_EXTENDED_PICTOGRAPHIC}[\p{{Emoji}}--[{not_emoji_chars}]]]"
    return {
        "letter": _class(r"\p{WB=ALetter}"),
        "hebrew": _class(r"\p{WB=Hebrew_Letter}"),
        "digit": _class(r"\p{WB=Numeric}[\p{Block=Halfwidth_And_Fullwidth_Forms}&&\p{Nd}]"),
        "katakana": _class(r"\p{WB=Katakana}"),
        "mid_letter": _class(r"\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=Single_Quote}"),
        "mid_digit": _class(r"\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}", "mid_num"),
        "joiner": _class(r"\p{WB=ExtendNumLet}"),  # ExtendNumLet: "_" and the like
        "single_quote": _class(r"\p{WB=Single_Quote}"),
        "double_quote": _class(r"\p{WB=Double_Quote}"),
        "extend": _class(r"\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}", "format"),  # WB4: part of the character before
        "emoji_extend": _class(r"[\p{WB=Format}\p{WB=Extend}]--[\uFE0E\uFE0F]", "format"),
        "emoji": _class(emoji),
        "regional_indicator": _class(r"\p{WB=Regional_Indicator}"),
        "southeast_asian": _class(r"\p{Line_Break=Complex_Context}", "southeast_asian"),
        "one_char": _class(r"\p{Script=Han}\p{Script=Hiragana}", "single"),  # a token by itself
    }


def _grammar(c: dict[str, str]) -> str:
    """StandardTokenizerImpl.jflex (Lucene 9) as a ``regex`` pattern over the classes ``c``: its WORD/NUMERIC rule
    (Hangul and Katakana runs are special cases of it), Southeast Asian runs, one Han or Hiragana character, and emoji
    sequences."""
    ext = f"{c['extend']}*"  # WB4: these characters belong to the one before them
    ahletter = f"[{c['letter']}{c['hebrew']}]{ext}"
    hebrew, numeric, katakana = (f"{c[name]}{ext}" for name in ("hebrew", "digit", "katakana"))
    mid_letter, mid_num, extend_num_let = (f"{c[name]}{ext}" for name in ("mid_letter", "mid_digit", "joiner"))
    hebrew_quoted = f"{hebrew}(?:{c['single_quote']}{ext}|{c['double_quote']}{ext}{hebrew})"
    # a run of letters stops before a Hebrew letter that a quote follows, which the next part takes with its quote
    # (Lucene's longest match; a regex takes the first alternative that matches)
    next_letter = f"(?!{hebrew_quoted}){ahletter}"
    part = (
        rf"(?:{katakana}(?:(?:{extend_num_let})*{katakana})*"
        rf"|(?:{hebrew_quoted}"
        rf"|{numeric}(?:(?:(?:{extend_num_let})*|{mid_num}){numeric})*"
        rf"|{ahletter}(?:(?:(?:{extend_num_let})*|{mid_letter}){next_letter})*)+)"
    )
    word = rf"(?:{extend_num_let})*{part}(?:(?:{extend_num_let})+{part})*(?:{extend_num_let})*"
    # emoji (Lucene's EMOJI rule); ZWJ is left out of the characters that follow an emoji so that a joiner links the
    # next emoji, as Lucene's longest match does
    emoji_ext = f"{c['emoji_extend']}*"
    emoji_one = (rf"(?:\p{{WB=ZWJ}}*{c['emoji']}{emoji_ext}\uFE0F?"
                 rf"|(?:\p{{WB=ZWJ}}*\p{{Emoji_Modifier_Base}}{emoji_ext})?\p{{Emoji_Modifier}}{emoji_ext})")
    emoji = (rf"{emoji_one}(?:[\U000E0020-\U000E007E]+\U000E007F|(?:\p{{WB=ZWJ}}{emoji_one})*){ext}"
             rf"|[0-9#*]{emoji_ext}\uFE0F?\u20E3{ext}|(?:{c['regional_indicator']}{ext}){{2}}")
    return f"{word}|{emoji}|(?:{c['southeast_asian']}{ext})+|{c['one_char']}{ext}"


def _characters(character_class: str) -> str:
    """The Basic Multilingual Plane characters of a ``regex`` character class, as the body of a ``re`` class."""
    bmp = "".join(map(chr, itertools.chain(range(0xD800), range(0xE000, 0x10000))))
    ranges = []
    for run in regex.finditer(f"{character_class}+", bmp, flags=regex.V1):  # the BMP in order: a run is a range
        first, last = (re.escape(c) for c in (run.group()[0], run.group()[-1]))
        ranges.append(first if first == last else f"{first}-{last}")
    return "".join(ranges)


@functools.cache
def _patterns() -> tuple[re.Pattern, re.Pattern, regex.Pattern]:
    """(plain, special, full): the whole grammar (``regex``), and a ``re`` expression that cuts the same tokens
    several times faster in text free of the ``special`` characters (nearly every Wikipedia passage).

    Without Extend/Format characters (WB4), Hebrew, Katakana, Han, Hiragana, Southeast Asian scripts and emoji, the
    grammar is: letters, digits and ExtendNumLet (``_``) join; a MidLetter/MidNumLet/Single_Quote character (``:``,
    ``.``, ``'``, ``’``) joins two letters, a MidNum/MidNumLet/Single_Quote one (``,``, ``;``, ``.``, ``'``) two
    digits; a token needs a letter or a digit. Built on first use (about 0.1 s), not at import.
    """
    c = _word_break_classes()
    names = ("letter", "digit", "mid_letter", "mid_digit", "joiner")
    letter, digit, mid_letter, mid_digit, joiner = (_characters(c[name]) for name in names)
    plain = re.compile(
        rf"[{joiner}]*[{letter}{digit}](?:[{letter}{digit}{joiner}]"
        rf"|(?<=[{letter}])[{mid_letter}](?=[{letter}])|(?<=[{digit}])[{mid_digit}](?=[{digit}]))*"
    )
    special_names = ("extend", "hebrew", "katakana", "regional_indicator", "one_char", "southeast_asian", "emoji")
    special = "".join(_characters(c[name]) for name in special_names)
    return plain, re.compile(f"[{special}\U00010000-\U0010ffff]"), regex.compile(_grammar(c), regex.V1)


def _cut_long(text: str, grammar: regex.Pattern) -> list[str]:
    """Tokens as Lucene cuts them when some are longer than 255 characters: its scanner buffer holds 255, so a token
    ends at the longest match that fits, and scanning goes on right after it."""
    found, pos = [], 0
    while (m := grammar.search(text, pos)) is not None:
        if m.end() - m.start() > MAX_TOKEN_LENGTH:
            m = grammar.match(text, m.start(), m.start() + MAX_TOKEN_LENGTH)
        found.append(m.group())
        pos = m.end()
    return found


def words(text: str) -> list[str]:
    """The tokens of Lucene's ``StandardTokenizer``, as written in ``text`` (not lowercased).

    Examples:
        >>> words("In 1990–1995, 20,000 e-mails (3.14%) went to the U.S.")
        ['In', '1990', '1995', '20,000', 'e', 'mails', '3.14', 'went', 'to', 'the', 'U.S']
    """
    plain, special, grammar = _patterns()
    found = (grammar if special.search(text) else plain).findall(text)
    if found and max(map(len, found)) > MAX_TOKEN_LENGTH:
        return _cut_long(text, grammar)
    return found


def word_term(word: str) -> str:
    """A token's term: possessive ``'s`` removed, lowercased, ``""`` for a stop word, else its Porter stem.

    Examples:
        >>> word_term("Darwin’s"), word_term("The"), word_term("ECOLOGY")
        ('darwin', '', 'ecolog')
    """
    if len(word) >= 2 and word[-1] in "sS" and word[-2] in POSSESSIVE_APOSTROPHES:
        word = word[:-2]
    word = word.lower() if word.isascii() else word.translate(_JAVA_LOWER).lower()
    return "" if word in STOP_WORDS else porter_stem(word)


def analyze(text: str) -> list[str]:
    """The terms of ``text`` under Lucene's English analysis (Anserini's ``DefaultEnglishAnalyzer``)."""
    return analyze_texts([text])[0]


def analyze_texts(texts: Iterable[str], show_progress: bool = False) -> list[list[str]]:
    """``analyze`` for many texts (a corpus or a batch of queries); each distinct token is analyzed once.

    Args:
        texts: The texts.
        show_progress: Show a progress bar of the texts.

    Returns:
        Per text, its terms.
    """
    from ..utils.progress import tqdm

    return list(iter_analyzed(tqdm(texts, desc="Analyze", unit=" texts", disable=not show_progress)))


BATCH_TEXTS = 1000
"""Texts a worker process analyses per task (``iter_analyzed``): enough that sending them and their terms costs
little beside their analysis (some 0.1 s for 1000 Wikipedia passages), few enough to keep every worker busy."""
BATCHES_PER_PROCESS = 4
"""Batches per worker process sent ahead of the one being used (``iter_analyzed``): no worker waits for work, and
memory holds only these, whatever the corpus's size."""


def iter_analyzed(texts: Iterable[str], cache_size: int = 1_000_000, processes: int = 1,
                  batch_size: int = BATCH_TEXTS) -> Iterator[list[str]]:
    """``analyze`` of each text, in order, one at a time (a corpus streamed through, none of it kept); a token's
    term is computed once and remembered, for up to ``cache_size`` distinct tokens at a time (all processes together).

    With ``processes`` > 1, that many worker processes analyse the texts, ``batch_size`` at a time, while this one
    reads the next texts and uses the terms; at most ``BATCHES_PER_PROCESS`` batches per worker are sent ahead,
    so memory stays bounded. The terms, and their order, are the same as with one process.

    Args:
        texts: The texts, read as they are needed.
        cache_size: The distinct tokens whose terms are remembered at a time.
        processes: The worker processes (1: this process alone).
        batch_size: The texts a worker analyses per task.

    Yields:
        Each text's terms, in order.

    Raises:
        RuntimeError: a worker process died during the analysis.

    Examples:
        ```python
        iter_analyzed(passage_texts, processes=available_cpus())   # yields each passage's terms, in order
        ```
    """
    if processes <= 1:
        terms = TermCache(cache_size)
        for text in texts:
            yield terms.analyze(text)
    else:
        yield from _analyzed_in_pool(iter(texts), cache_size, processes, batch_size)


class TermCache(dict):
    """token -> ``word_term`` (``""`` for a stop word), computed the first time a token is looked up, for up to
    ``cache_size`` distinct tokens at a time; its ``analyze`` is the module's ``analyze`` through it. Kept across calls
    (the bm25 retriever keeps one for its queries), a text stream's repeated words are stemmed once.

    Examples:
        >>> terms = TermCache(cache_size=1000)
        >>> terms.analyze("Darwin's finches"), terms.analyze("the finches")
        (['darwin', 'finch'], ['finch'])
    """

    def __init__(self, cache_size: int):
        super().__init__()
        self.cache_size = cache_size

    def __missing__(self, token: str) -> str:
        term = self[token] = word_term(token)
        return term

    def analyze(self, text: str) -> list[str]:
        """The module's ``analyze`` of ``text``, through this cache."""
        if len(self) > self.cache_size:  # bounded: a 21M-passage corpus has tens of millions of distinct tokens
            self.clear()
        return [term for term in map(self.__getitem__, words(text)) if term]


def _analyzed_in_pool(texts: Iterator[str], cache_size: int, processes: int, batch_size: int) -> Iterator[list[str]]:
    """``iter_analyzed`` by ``processes`` worker processes (``hf_ralm.utils.worker_processes.WorkerPool``:
    fresh interpreters started from hf-ralm's own entry point, so any Python context can build), each with its share
    of the ``cache_size``: batches are sent as they are read, and their terms yielded in the order they were sent.
    Workers that cannot start leave the analysis to this process, with one log line saying so."""
    batch = list(itertools.islice(texts, batch_size))
    if len(batch) < batch_size:  # the texts fit in one batch: analysed here, sooner than workers would start
        yield from iter_analyzed(batch, cache_size)
        return
    try:
        pool = WorkerPool(f"{__name__}:_batch_analyzer", (cache_size // processes,), processes)
    except WorkersUnavailable as error:
        logger.warning("hf-ralm: analysing the texts in this process alone: %s", error)
        yield from iter_analyzed(itertools.chain(batch, texts), cache_size)
        return
    batches = itertools.chain([batch], iter(lambda: list(itertools.islice(texts, batch_size)), []))
    with pool:
        try:
            for terms in pool.imap(batches, BATCHES_PER_PROCESS):
                yield from terms
        except WorkerDied as error:
            raise RuntimeError(f"The text analysis stopped: {error}. To analyse in this process alone, build with "
                               "n_threads=1 (--threads 1).") from None


def _batch_analyzer(cache_size: int) -> Callable[[list[str]], list[list[str]]]:
    """A worker's work (``_analyzed_in_pool``): each batch's terms, through a term cache kept between batches."""
    terms = TermCache(cache_size)
    return lambda texts: [terms.analyze(text) for text in texts]
