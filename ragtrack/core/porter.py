"""Lucene's Porter stemmer (``org.apache.lucene.analysis.en.PorterStemmer``), step for step.

Porter, "An algorithm for suffix stripping", Program 14(3), 1980, as Martin Porter's reference C
implementation (release 3) and Lucene's Java port of it run it: words of at most two characters are
left alone; ``-bli`` becomes ``-ble`` and ``-logi`` becomes ``-log`` (the departures of the reference
implementation from the paper). It is not Snowball's ``porter`` nor its ``english`` algorithm, which
differ on about 100 words per BEIR corpus. Lucene stems UTF-16 code units; a word with characters
beyond the BMP is stemmed as its UTF-16 code units too (:func:`stem`), so lengths and positions agree.
:class:`PorterStemmer` runs Snowball's ``porter`` (PyStemmer, in C) on the words where the two cannot
differ and this module's Python transcription on the others: the same stems, about four times faster.
"""

from __future__ import annotations

import re
from functools import lru_cache

import Stemmer

_DEPARTURE = re.compile(r"bl|log|Y|([^aeioubdfgmnprtlsz])\1|[\U00010000-\U0010ffff]")  # departs_from_snowball's signs

STEP3 = {  # second-to-last letter -> (suffix, replacement), tried in order; the first suffix found decides
    "a": (("ational", "ate"), ("tional", "tion")),
    "c": (("enci", "ence"), ("anci", "ance")),
    "e": (("izer", "ize"),),
    "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
    "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
    "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
    "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
    "g": (("logi", "log"),),
}
STEP4 = {  # last letter -> (suffix, replacement)
    "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
    "i": (("iciti", "ic"),),
    "l": (("ical", "ic"), ("ful", "")),
    "s": (("ness", ""),),
}
STEP5 = {  # second-to-last letter -> suffixes removed when m() > 1 ("ion" only after s or t)
    "a": ("al",),
    "c": ("ance", "ence"),
    "e": ("er",),
    "i": ("ic",),
    "l": ("able", "ible"),
    "n": ("ant", "ement", "ment", "ent"),
    "o": ("ion", "ou"),
    "s": ("ism",),
    "t": ("ate", "iti"),
    "u": ("ous",),
    "v": ("ive",),
    "z": ("ize",),
}


def _consonants(word: str) -> str:
    """Per character ``c`` (consonant) or ``v`` (vowel): a, e, i, o, u are vowels; ``y`` is a
    consonant at the start and after a vowel, a vowel after a consonant (Lucene's ``cons``)."""
    marks = []
    for i, ch in enumerate(word):
        marks.append("v" if ch in "aeiou" or (ch == "y" and i > 0 and marks[i - 1] == "c") else "c")
    return "".join(marks)


class _Word:
    """One word being stemmed: ``b`` its characters, ``k`` the index of its last kept character and
    ``j`` the end of the stem left by the last :meth:`ends` (Lucene's fields of the same names);
    ``marks`` is :func:`_consonants` of ``b``, kept with it."""

    def __init__(self, word: str):
        self.b, self.marks = word, _consonants(word)
        self.k = len(word) - 1
        self.j = 0

    def m(self) -> int:
        """The number of vowel-consonant sequences in b[0..j] (<c>(vc)^m<v>)."""
        return self.marks.count("vc", 0, self.j + 1)

    def vowel_in_stem(self) -> bool:
        return "v" in self.marks[: self.j + 1]

    def double_consonant(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.marks[j] == "c"

    def cvc(self, i: int) -> bool:
        """b[i-2..i] is consonant-vowel-consonant and b[i] is not w, x or y."""
        return i >= 2 and self.marks[i - 2 : i + 1] == "cvc" and self.b[i] not in "wxy"

    def ends(self, suffix: str) -> bool:
        if self.k + 1 < len(suffix) or not self.b.endswith(suffix, 0, self.k + 1):
            return False
        self.j = self.k - len(suffix)
        return True

    def set_to(self, replacement: str) -> None:
        self.b = self.b[: self.j + 1] + replacement  # Lucene leaves stale characters after k: none is read
        self.marks = _consonants(self.b)
        self.k = self.j + len(replacement)

    def replace_if_measured(self, replacement: str) -> None:
        if self.m() > 0:
            self.set_to(replacement)

    def step1(self) -> None:
        """Plurals and -ed/-ing."""
        if self.b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.set_to("i")
            elif self.b[self.k - 1] != "s":
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
                if self.b[self.k] not in "lsz":
                    self.k -= 1
            elif self.m() == 1 and self.cvc(self.k):  # j == k here: the ends() calls above failed
                self.set_to("e")

    def step2(self) -> None:
        """Terminal y to i when the stem has another vowel."""
        if self.ends("y") and self.vowel_in_stem():
            self.j = self.k - 1
            self.set_to("i")

    def replace_suffix(self, table: dict, key_at: int) -> None:
        for suffix, replacement in table.get(self.b[key_at], ()):
            if self.ends(suffix):
                self.replace_if_measured(replacement)
                return

    def step5(self) -> None:
        """-ant, -ence etc. in context <c>vcvc<v>."""
        if self.k == 0:
            return
        for suffix in STEP5.get(self.b[self.k - 1], ()):
            if self.ends(suffix):
                if suffix == "ion" and not (self.j >= 0 and self.b[self.j] in "st"):
                    continue
                if self.m() > 1:
                    self.k = self.j
                return

    def step6(self) -> None:
        """A final -e if m() > 1 (or m() == 1 and not cvc); -ll to -l if m() > 1."""
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.double_consonant(self.k) and self.m() > 1:
            self.k -= 1

    def stem(self) -> str:
        if self.k > 1:
            self.step1()
            self.step2()
            if self.k != 0:
                self.replace_suffix(STEP3, self.k - 1)
            self.replace_suffix(STEP4, self.k)
            self.step5()
            self.step6()
        return self.b[: self.k + 1]


def stem(word: str) -> str:
    """``word`` stemmed as Lucene's PorterStemFilter stems a lower-cased token."""
    if len(word) <= 2:
        return word
    if max(word) > "\uffff":  # Lucene stems UTF-16 code units
        units = word.encode("utf-16-le", "surrogatepass")
        chars = "".join(chr(int.from_bytes(units[i : i + 2], "little")) for i in range(0, len(units), 2))
        return _Word(chars).stem().encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    return _Word(word).stem()


def departs_from_snowball(word: str) -> bool:
    """Whether Snowball's ``porter`` (the paper's algorithm) may stem ``word`` otherwise than Lucene:
    a word of at most two characters, one where step 2 may meet ``-bli`` or ``-logi`` (only a word
    holding ``bl`` or ``log`` can), one with a doubled letter that Lucene's step 1b undoubles and
    Snowball's does not (Snowball undoubles only bb, dd, ff, gg, mm, nn, pp, rr, tt), one with an
    upper-case ``Y`` (Snowball's marker for a consonant y, lower-cased on the way out) or with
    characters beyond the BMP."""
    return len(word) <= 2 or _DEPARTURE.search(word) is not None


_SNOWBALL = Stemmer.Stemmer("porter", 0)  # uncached: lucene_stem caches


@lru_cache(maxsize=1 << 18)  # queries repeat words: each stemmed once per process (bounded memory)
def lucene_stem(word: str) -> str:
    """``word`` stemmed as Lucene's PorterStemFilter stems it: Snowball's ``porter`` in C where the two
    cannot differ (:func:`departs_from_snowball`), :func:`stem` elsewhere."""
    return stem(word) if departs_from_snowball(word) else _SNOWBALL.stemWord(word)


class PorterStemmer:
    """Lucene's Porter stemmer with PyStemmer's ``stemWords`` interface (ragtrack.core.text)."""

    def stemWords(self, words: list[str]) -> list[str]:  # noqa: N802 (PyStemmer's name)
        return list(map(lucene_stem, words))
