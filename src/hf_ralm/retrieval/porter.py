"""Lucene's Porter stemmer (``org.apache.lucene.analysis.en.PorterStemmer``) in Python, for the bm25 backend.

Lucene's stemmer is Martin Porter's own reference code, which departs from the published algorithm (and from Snowball's
``porter``, what PyStemmer implements) in three ways: step 2 maps ``bli`` to ``ble`` (the paper: ``abli`` to ``able``),
it adds ``logi`` to ``log``, and words shorter than 3 characters are left alone. So ``possibly`` stems to ``possibl``
(Snowball: ``possibli``), ``ecology`` to ``ecolog`` (``ecologi``), and ``s`` stays ``s`` (Snowball: the empty string).
This module follows Lucene's code step by step (its step numbering, its ``j``/``k`` cursors), so that the bm25 backend's
terms are the Lucene index's terms; the tests compare both stemmers through the JVM.

Examples:
    >>> porter_stem("possibly"), porter_stem("ecology"), porter_stem("caresses"), porter_stem("s")
    ('possibl', 'ecolog', 'caress', 's')
"""

from __future__ import annotations

from functools import lru_cache

# step 3 and step 4: suffix -> replacement, looked up by one character of the word (Lucene's ``switch``), tried in
# order; the first suffix the word ends with decides (replaced only when the stem's measure is > 0)
_STEP3 = {
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
_STEP4 = {
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
# step 5: suffixes removed when the stem's measure is > 1 (``ion`` only after ``s`` or ``t``, checked apart)
_STEP5 = {
    "a": ("al",), "c": ("ance", "ence"), "e": ("er",), "i": ("ic",), "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"), "o": ("ou",), "s": ("ism",), "t": ("ate", "iti"), "u": ("ous",),
    "v": ("ive",), "z": ("ize",),
}


class _Word:
    """One word being stemmed: Lucene's buffer ``b`` (a list of characters), the word's last index ``k`` and the stem's
    last index ``j`` that ``ends`` sets."""

    def __init__(self, word: str):
        self.b = list(word)
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        """Whether ``b[i]`` is a consonant: not a, e, i, o, u, nor a ``y`` that follows a consonant."""
        ch = self.b[i]
        if ch in "aeiou":
            return False
        if ch != "y" or i == 0:
            return True
        return not self.cons(i - 1)

    def m(self) -> int:
        """The number of vowel-consonant sequences in ``b[0..j]`` (Porter's measure of ``[C](VC)^m[V]``): how often a
        vowel is followed by a consonant."""
        consonant = [self.cons(i) for i in range(self.j + 1)]
        return sum(1 for before, after in zip(consonant, consonant[1:]) if not before and after)

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def double_consonant(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        """Consonant-vowel-consonant ending at ``i``, the last consonant not w, x or y (``hop``, not ``snow``)."""
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, suffix: str) -> bool:
        start = self.k - len(suffix) + 1
        if start < 0 or "".join(self.b[start : self.k + 1]) != suffix:
            return False
        self.j = self.k - len(suffix)
        return True

    def set_to(self, suffix: str) -> None:
        self.b[self.j + 1 : self.j + 1 + len(suffix)] = suffix
        self.k = self.j + len(suffix)

    def replace(self, suffix: str) -> None:
        if self.m() > 0:
            self.set_to(suffix)

    def step1(self) -> None:
        """Plurals, -ed and -ing: caresses -> caress, ponies -> poni, agreed -> agree, hopping -> hop."""
        b = self.b
        if b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.set_to("i")
            elif b[self.k - 1] != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            if self.ends("at"):
                self.set_to("ate")
            elif self.ends("bl"):
                self.set_to("ble")
            elif self.ends("iz"):
                self.set_to("ize")
            elif self.double_consonant(self.k):
                if b[self.k] not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):
                self.set_to("e")

    def step2(self) -> None:
        """A final y becomes i when the stem has a vowel."""
        if self.ends("y") and self.vowel_in_stem():
            self.b[self.k] = "i"

    def replace_suffix(self, table: dict, ch: str) -> None:
        for suffix, replacement in table.get(ch, ()):
            if self.ends(suffix):
                self.replace(replacement)
                return

    def step5(self) -> None:
        """-ant, -ence, -ion... removed when the stem's measure is > 1."""
        if self.k == 0:
            return
        ch = self.b[self.k - 1]
        if ch == "o" and self.ends("ion") and self.j >= 0 and self.b[self.j] in "st":
            found = True
        else:
            found = any(self.ends(suffix) for suffix in _STEP5.get(ch, ()))
        if found and self.m() > 1:
            self.k = self.j

    def step6(self) -> None:
        """A final e goes when the measure allows; a final ll becomes l when the measure is > 1."""
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or a == 1 and not self.cvc(self.k - 1):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_consonant(self.k) and self.m() > 1:
            self.k -= 1

    def stem(self) -> str:
        self.step1()
        self.step2()
        if self.k > 0:
            self.replace_suffix(_STEP3, self.b[self.k - 1])
        self.replace_suffix(_STEP4, self.b[self.k])
        self.step5()
        self.step6()
        return "".join(self.b[: self.k + 1])


@lru_cache(maxsize=1 << 18)
def porter_stem(word: str) -> str:
    """Stem a lowercase word as Lucene's ``PorterStemFilter`` does (words under 3 UTF-16 code units unchanged)."""
    length = len(word) if word.isascii() else len(word.encode("utf-16-le")) // 2
    if length < 3:
        return word
    return _Word(word).stem()
