"""Lucene's English analysis in Python: how the bm25 backend turns text into terms, as the Lucene backend does.

Anserini's ``DefaultEnglishAnalyzer`` (the analyzer of ``retriever="lucene"`` indexes and queries) chains Lucene's
``StandardTokenizer`` (Unicode word boundaries, UAX #29), ``EnglishPossessiveFilter``, ``LowerCaseFilter``, a
``StopFilter`` with the 33 English stop words and ``PorterStemFilter``. This module does the same steps:

* :func:`words`: the tokens ``StandardTokenizer`` cuts (its JFlex grammar, written as a regular expression over
  Unicode Word_Break properties). Numbers keep their separators (``20,000``, ``3.14``, ``2,621.3``), letters joined
  by ``.``, ``:`` or an apostrophe stay one token (``A.H.H``, ``U.S``, ``don't``, ``O'Neill's``), and
  hyphens, slashes and ``@`` split (``e-mail`` → ``e``, ``mail``; an e-mail address or URL becomes its dotted
  parts). A final ``.`` never belongs to a token. Han and Hiragana characters are one token each, Thai-like
  scripts one token per run, emoji one token per sequence; tokens longer than 255 characters are cut as Lucene cuts
  them. Text without combining marks, emoji or the scripts that need special rules (nearly every passage) takes
  a faster equivalent expression.
* :func:`word_term`: one token's term: a final ``'s`` (``'``, ``’`` or ``＇``) removed, lowercased as Java does,
  ``""`` for a stop word, else :func:`~hf_ralm.retrieval.porter.porter_stem` (Lucene's Porter variant).

The tests compare :func:`analyze` with Lucene's own analyzer, run through the JVM, on tricky strings and on
Wikipedia passages. Known gaps (none seen in the Wikipedia sample): character properties come from the ``regex``
module's Unicode version (Lucene's grammar uses Unicode 9), and emoji sequences are matched as written in Lucene's
grammar but without its longest-match search, so unusual sequences (a joiner in odd places) can cut differently.

Example:
    >>> analyze("Darwin's 20,000 U.S. e-mails don't possibly")
    ['darwin', '20,000', 'u.', 'e', 'mail', "don't", 'possibl']
"""

from __future__ import annotations

import functools
import itertools
import re
from typing import Iterable

import regex

from .porter import porter_stem

# What an index records about its analysis; an index built with other values is refused (see bm25.BM25Retriever).
ANALYSIS = {
    "tokenizer": "lucene-standard",  # StandardTokenizer's UAX #29 word breaks, max token length 255
    "filters": "english-possessive,lowercase",
    "stopwords": "lucene-english",  # EnglishAnalyzer.ENGLISH_STOP_WORDS_SET
    "stemmer": "lucene-porter",
}
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


def _grammar() -> str:
    """StandardTokenizerImpl.jflex (Lucene 9) as a ``regex`` pattern: its WORD/NUMERIC rule (Hangul and Katakana runs
    are special cases of it), Southeast Asian runs, one Han or Hiragana character, and emoji sequences."""
    ext = r"[\p{WB=Format}\p{WB=Extend}\p{WB=ZWJ}]*"  # WB4: these characters belong to the one before them
    ahletter = rf"[\p{{WB=ALetter}}\p{{WB=Hebrew_Letter}}]{ext}"
    hebrew = rf"\p{{WB=Hebrew_Letter}}{ext}"
    numeric = rf"[\p{{WB=Numeric}}[\p{{Block=Halfwidth_And_Fullwidth_Forms}}&&\p{{Nd}}]]{ext}"
    katakana = rf"\p{{WB=Katakana}}{ext}"
    mid_letter = rf"[\p{{WB=MidLetter}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{ext}"
    mid_num = rf"[\p{{WB=MidNum}}\p{{WB=MidNumLet}}\p{{WB=Single_Quote}}]{ext}"
    extend_num_let = rf"\p{{WB=ExtendNumLet}}{ext}"
    hebrew_quoted = rf"{hebrew}(?:\p{{WB=Single_Quote}}{ext}|\p{{WB=Double_Quote}}{ext}{hebrew})"
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
    emoji_ext = r"[[\p{WB=Format}\p{WB=Extend}]--[\uFE0E\uFE0F]]*"
    emoji_char = (rf"[{_EXTENDED_PICTOGRAPHIC}[\p{{Emoji}}--[\p{{WB=Regional_Indicator}}0-9#*\u00a9\u00ae"
                  r"\u2122\u3030\u303d\p{Emoji_Modifier}]]]")
    emoji_one = (rf"(?:\p{{WB=ZWJ}}*{emoji_char}{emoji_ext}\uFE0F?"
                 rf"|(?:\p{{WB=ZWJ}}*\p{{Emoji_Modifier_Base}}{emoji_ext})?\p{{Emoji_Modifier}}{emoji_ext})")
    emoji = (rf"{emoji_one}(?:[\U000E0020-\U000E007E]+\U000E007F|(?:\p{{WB=ZWJ}}{emoji_one})*){ext}"
             rf"|[0-9#*]{emoji_ext}\uFE0F?\u20E3{ext}|(?:\p{{WB=Regional_Indicator}}{ext}){{2}}")
    southeast_asian = rf"(?:\p{{Line_Break=Complex_Context}}{ext})+"
    one_char = rf"[\p{{Script=Han}}\p{{Script=Hiragana}}]{ext}"
    return f"{word}|{emoji}|{southeast_asian}|{one_char}"


def _characters(pattern: str) -> str:
    """The Basic Multilingual Plane characters that a ``regex`` character class matches, as a ``re`` class."""
    bmp = "".join(map(chr, itertools.chain(range(0xD800), range(0xE000, 0x10000))))
    ranges = []
    for run in regex.finditer(f"{pattern}+", bmp, flags=regex.V1):  # the BMP in order: a run is a range
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
    letter = _characters(r"\p{WB=ALetter}")
    digit = _characters(r"[\p{WB=Numeric}[\p{Block=Halfwidth_And_Fullwidth_Forms}&&\p{Nd}]]")
    mid_letter = _characters(r"[\p{WB=MidLetter}\p{WB=MidNumLet}\p{WB=Single_Quote}]")
    mid_digit = _characters(r"[\p{WB=MidNum}\p{WB=MidNumLet}\p{WB=Single_Quote}]")
    joiner = _characters(r"\p{WB=ExtendNumLet}")
    plain = re.compile(
        rf"[{joiner}]*[{letter}{digit}](?:[{letter}{digit}{joiner}]"
        rf"|(?<=[{letter}])[{mid_letter}](?=[{letter}])|(?<=[{digit}])[{mid_digit}](?=[{digit}]))*"
    )
    special = _characters(
        rf"[\p{{WB=Format}}\p{{WB=Extend}}\p{{WB=ZWJ}}\p{{WB=Hebrew_Letter}}\p{{WB=Katakana}}"
        rf"\p{{WB=Regional_Indicator}}\p{{Script=Han}}\p{{Script=Hiragana}}\p{{Line_Break=Complex_Context}}\p{{Emoji}}"
        rf"{_EXTENDED_PICTOGRAPHIC}--[0-9#*]]"
    )
    return plain, re.compile(f"[{special}\U00010000-\U0010ffff]"), regex.compile(_grammar(), regex.V1)


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

    Example:
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

    Example:
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
    """:func:`analyze` for many texts (a corpus or a batch of queries); each distinct token is analyzed once."""
    from tqdm.auto import tqdm

    terms = _Terms()  # shared by all the texts
    return [[term for term in map(terms.__getitem__, words(text)) if term]
            for text in tqdm(texts, desc="Analyze", unit=" texts", disable=not show_progress)]


class _Terms(dict):
    """token -> :func:`word_term` (``""`` for a stop word), computed the first time a token is looked up."""

    def __missing__(self, token: str) -> str:
        term = self[token] = word_term(token)
        return term
