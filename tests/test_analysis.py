"""The bm25 backend's text analysis (hf_ralm.retrieval.analysis, porter): Lucene's StandardTokenizer, possessive
filter, lowercasing, stop words and Porter stemmer, as Anserini's DefaultEnglishAnalyzer chains them.

Every expected value below is what Lucene gives; the tests at the end check that against the real analyzer through
the JVM (they need the ``[lucene]`` extra: skipped without it unless ``HF_RALM_REQUIRE_LUCENE`` is on), on these
strings and on passages of the real Wikipedia sample.
"""

from __future__ import annotations

import gzip
import itertools
import json
import random

import pytest

from conftest import SHARED_DATA, require_shared_file
from hf_ralm.retrieval.analysis import MAX_TOKEN_LENGTH, STOP_WORDS, _patterns, analyze, analyze_texts, words
from hf_ralm.retrieval.porter import porter_stem

# text -> Lucene's terms (Anserini DefaultEnglishAnalyzer.newDefaultInstance())
LUCENE_TERMS = {
    # numbers keep their separators; a final "." never belongs to a token
    "20,000 people": ["20,000", "peopl"],
    "3.14 pi 2,621.3 1;2": ["3.14", "pi", "2,621.3", "1;2"],
    "12:30 10:30am .5 5. 0.5": ["12", "30", "10", "30am", "5", "5", "0.5"],
    "1990–1995 $100 50% 10km 5th 1950s": ["1990", "1995", "100", "50", "10km", "5th", "1950"],
    "v1.2 a.1 1.a a:b": ["v1.2", "1", "1", "a:b"],
    # acronyms: letters joined by "." stay one token (and Porter strips the s of "u.s")
    "A.H.H. and U.S. army": ["a.h.h", "u.", "armi"],
    "U.S.A.'s e.g. i.e. etc. Ph.D.": ["u.s.a", "s", "e.g", "i.", "etc", "ph.d"],
    # possessives ('s, ’s, ＇s; either case) go, other apostrophes stay inside the token
    "Darwin's theory": ["darwin", "theori"],
    "Darwin’s DARWIN'S": ["darwin", "darwin"],
    "don't isn't it's": ["don't", "isn't"],
    "O'Neill's rock'n'roll can't've": ["o'neil", "rock'n'rol", "can't'v"],
    # hyphens, "@", "/" and symbols split; "_" joins
    "state-of-the-art e-mail": ["state", "art", "e", "mail"],
    "john.doe@example.com": ["john.do", "example.com"],
    "http://www.example.com/path?q=1": ["http", "www.example.com", "path", "q", "1"],
    "C++ C# .NET #hashtag @user": ["c", "c", "net", "hashtag", "user"],
    "foo_bar __init__ ___": ["foo_bar", "__init__"],
    # Unicode letters, Java's lowercasing (İ -> i, Σ -> σ even at a word's end), full-width forms
    "café naïve Ærø": ["café", "naïv", "ærø"],
    "Москва σοφία ΣΟΦΙΑΣ": ["москва", "σοφία", "σοφιασ"],
    "İstanbul": ["istanbul"],
    "ｆｕｌｌ１２３ ＡＢＣ＇s": ["ｆｕｌｌ１２３", "ａｂｃ"],
    # combining marks, soft hyphens and joiners belong to the character before them
    "a\u0301b x\u200dy word\u200d co\u00adoperate": ["a\u0301b", "x\u200dy", "word\u200d", "co\u00adoper"],
    # Han and Hiragana: one token per character; Katakana and Thai: one per run; Hebrew quotes
    "東京タワー ひらがな": ["東", "京", "タワー", "ひ", "ら", "が", "な"],
    "ภาษาไทย": ["ภาษาไทย"],
    "א\"ב שלום'": ["א\"ב", "שלום'"],
    # emoji and pictographs are tokens
    "© 2015 ® ™ ☉": ["©", "2015", "®", "™", "☉"],
    "😀 👨\u200d👩\u200d👧 🇺🇸 1\u20e3 #\ufe0f\u20e3 👍🏽": ["😀", "👨\u200d👩\u200d👧", "🇺🇸", "1\u20e3", "#\ufe0f\u20e3", "👍🏽"],
    # Lucene's Porter: possibly/ecology as Porter's reference code, 1-2 letter words unstemmed
    "possibly ecology us s": ["possibl", "ecolog", "us", "s"],
}

# word -> Lucene's PorterStemmer: each step's rules and the reference code's departures from the paper
LUCENE_STEMS = {
    "caresses": "caress", "ponies": "poni", "ties": "ti", "cats": "cat", "feed": "feed", "agreed": "agre",
    "disabled": "disabl", "matting": "mat", "mating": "mate", "meeting": "meet", "milling": "mill", "messing": "mess",
    "meetings": "meet", "happy": "happi", "sky": "sky", "says": "sai", "relational": "relat", "conditional": "condit",
    "valenci": "valenc", "hesitanci": "hesit", "digitizer": "digit", "conformabli": "conform", "radicalli": "radic",
    "differentli": "differ", "vileli": "vile", "analogousli": "analog", "vietnamization": "vietnam",
    "predication": "predic", "operator": "oper", "feudalism": "feudal", "decisiveness": "decis",
    "hopefulness": "hope", "callousness": "callous", "formaliti": "formal", "sensitiviti": "sensit",
    "sensibiliti": "sensibl", "triplicate": "triplic", "formative": "form", "formalize": "formal",
    "electriciti": "electr", "electrical": "electr", "hopeful": "hope", "goodness": "good", "revival": "reviv",
    "allowance": "allow", "inference": "infer", "airliner": "airlin", "gyroscopic": "gyroscop",
    "adjustable": "adjust", "defensible": "defens", "irritant": "irrit", "replacement": "replac",
    "adjustment": "adjust", "dependent": "depend", "adoption": "adopt", "homologou": "homolog", "communism": "commun",
    "activate": "activ", "angulariti": "angular", "homologous": "homolog", "effective": "effect",
    "bowdlerize": "bowdler", "probate": "probat", "rate": "rate", "cease": "ceas", "controll": "control",
    "roll": "roll", "generalization": "gener", "possibly": "possibl", "ecology": "ecolog", "ies": "i", "sses": "ss",
    "eed": "eed", "ion": "ion", "ying": "ying", "yyyy": "yyyi", "s": "s", "us": "us",
}


# text -> StandardTokenizer's tokens, where one is longer than its 255-character limit
LONG_TOKENS = {
    "a" * 300: ["a" * MAX_TOKEN_LENGTH, "a" * 45],
    "b" * 254 + ".cc" + "d" * 10 + " end": ["b" * 254, "cc" + "d" * 10, "end"],
    "é" * 256 + " 1,000": ["é" * 255, "é", "1,000"],
}


@pytest.mark.parametrize("text", list(LUCENE_TERMS))
def test_analyze_gives_lucenes_terms(text):
    assert analyze(text) == LUCENE_TERMS[text]


def test_porter_stem_is_lucenes():
    assert {word: porter_stem(word) for word in LUCENE_STEMS} == LUCENE_STEMS


def test_stop_words_are_lucenes_english_set():
    assert len(STOP_WORDS) == 33
    assert analyze(" ".join(sorted(STOP_WORDS)).upper()) == []
    assert analyze("The Emperor of Rome") == ["emperor", "rome"]


def test_words_keep_their_case_and_long_tokens_are_cut_as_lucene_cuts_them():
    assert words("In 1990–1995, 20,000 e-mails (3.14%) went to the U.S.") == [
        "In", "1990", "1995", "20,000", "e", "mails", "3.14", "went", "to", "the", "U.S"]
    # Lucene's scanner holds 255 characters: a longer token ends at the longest match that fits, scanning resumes after
    assert [words(text) for text in LONG_TOKENS] == list(LONG_TOKENS.values())
    assert words("") == [] and analyze("-- ... !") == []


def test_analyze_texts_equals_analyze_one_by_one():
    texts = ["Darwin's finches", "", "the of and", "20,000 U.S. troops", "Darwin's finches"]
    assert analyze_texts(texts) == [analyze(text) for text in texts]
    assert analyze_texts(iter(texts)) == analyze_texts(texts)  # any iterable (a generator of passages)


def test_plain_expression_cuts_as_the_grammar():
    """The fast ``re`` expression is used for text without special characters: there it must cut exactly as the
    whole grammar does. Random strings of letters (ASCII, accented, Greek), digits, the characters that join them and
    separators."""
    plain, special, grammar = _patterns()
    alphabet = "aZ9é0Ωß_.,;:'’\"- –/()@%\u00a0"
    rng = random.Random(0)
    for _ in range(3000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 25)))
        assert special.search(text) is None
        assert plain.findall(text) == grammar.findall(text), text


def test_special_characters_take_the_whole_grammar():
    _, special, _ = _patterns()
    for text in ["a\u0301", "x\u00ady", "東", "ひ", "タ", "ภ", "א", "😀", "©", "☉", "🇺", "\U0001d400"]:
        assert special.search(text) is not None, text
    for text in ["plain ASCII, 3.14", "café – “quoted” ’s ½ °C", "Москва σοφία"]:
        assert special.search(text) is None, text


# --------------------------------------------------------------------------------------------------------------
# Against the real Lucene analyzer (one shared JVM)
# --------------------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lucene(pyserini):
    """``lucene(text)``: the terms of Anserini's DefaultEnglishAnalyzer; ``lucene.stems(words)``: PorterStemFilter's
    stems of whitespace-separated words; ``lucene.standard(text)``: StandardTokenizer's tokens, lowercased."""
    from hf_ralm.retrieval.lucene_compat import java_class, start_jvm

    start_jvm()
    analyze_with = java_class("io.anserini.analysis.AnalyzerUtils").analyze
    english = java_class("io.anserini.analysis.DefaultEnglishAnalyzer").newDefaultInstance()
    no_options = java_class("java.util.HashMap")()
    porter = (java_class("org.apache.lucene.analysis.custom.CustomAnalyzer").builder()
              .withTokenizer("whitespace", no_options).addTokenFilter("porterStem", no_options).build())

    def terms(text: str) -> list[str]:
        return list(analyze_with(english, text))

    terms.stems = lambda words: list(analyze_with(porter, " ".join(words)))
    standard = java_class("org.apache.lucene.analysis.standard.StandardAnalyzer")(
        java_class("org.apache.lucene.analysis.CharArraySet").EMPTY_SET)  # StandardTokenizer and lowercase only
    terms.standard = lambda text: list(analyze_with(standard, text))
    stop_words = java_class("org.apache.lucene.analysis.en.EnglishAnalyzer").ENGLISH_STOP_WORDS_SET
    terms.stop_words = {"".join(word) for word in stop_words.toArray()}  # its items are char[]
    return terms


def test_expected_values_are_lucenes(lucene):
    assert {text: lucene(text) for text in LUCENE_TERMS} == LUCENE_TERMS
    for text in LONG_TOKENS:
        assert analyze(text) == lucene(text)
    assert dict(zip(LUCENE_STEMS, lucene.stems(LUCENE_STEMS))) == LUCENE_STEMS
    assert lucene.stop_words == STOP_WORDS


def test_wikipedia_passages_are_analyzed_as_lucene_does(lucene):
    """Token streams of real Wikipedia passages (every 40th of the sample's first 40,000: names, dates, numbers,
    foreign words) and the stems of all their distinct words."""
    from hf_ralm.config.passage_template import passage_text
    from hf_ralm.retrieval.corpus import passage_rows

    path = require_shared_file(SHARED_DATA / "wikipedia-2015-sample" / "articles.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows = itertools.islice(passage_rows(map(json.loads, f), 100), 0, 40_000, 40)
        texts = [passage_text(row["title"], row["text"]) for row in rows]
    assert len(texts) == 1000
    differ = [text for text, terms in zip(texts, analyze_texts(texts)) if terms != lucene(text)]
    assert differ == []
    vocabulary = sorted({word.lower() for text in texts for word in words(text) if word.isascii()})
    assert len(vocabulary) > 10_000
    assert [porter_stem(word) for word in vocabulary] == lucene.stems(vocabulary)


def test_every_character_is_classed_as_lucene_classes_it(lucene):
    """Every code point that Python's Unicode data assigns, alone, between two letters and between two digits: the
    same tokens as Lucene's StandardTokenizer (Lucene's classes are Unicode 9's, the ``regex`` module's newer)."""
    import unicodedata

    from hf_ralm.retrieval.analysis import _JAVA_LOWER

    mark = "qqzqq"  # a token between the items, to cut Lucene's one analysis of a chunk back into items
    skipped = ("Cn", "Co", "Cs", "Cc", "Zs", "Zl", "Zp")  # unassigned, private, surrogates, controls, spaces
    chars = [chr(code) for code in range(0x110000) if unicodedata.category(chr(code)) not in skipped]
    for context in ("x{}x", "1{}1", "{}"):
        for start in range(0, len(chars), 5000):
            items = [context.format(c) for c in chars[start : start + 5000]]
            theirs = " ".join(lucene.standard(f" {mark} ".join(items))).split(mark)
            ours = [" ".join(w.translate(_JAVA_LOWER).lower() for w in words(item)) for item in items]
            assert [t.strip() for t in theirs] == ours
