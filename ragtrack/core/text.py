"""Tokenization for lexical retrieval: Unicode normalization, case folding, a word split (a regex, or
Lucene's English analysis: ragtrack.core.lucene), stopwords, stemming (Snowball through PyStemmer, or
Lucene's Porter stemmer: ragtrack.core.porter).

Before a text is split it is brought to one Unicode form (``normalize``: NFKC by default, so ``ﬁ``,
``x²`` and full-width letters match ``fi``, ``x2`` and ASCII; NFC; or none) and case-folded
(``lowercase``: ``str.casefold``, so ``ß`` matches ``ss``), then normalized again, because folding can
decompose a letter (``ǰ`` folds to ``j`` + U+030C, which the word pattern would split). ``İ`` folds to
``i`` as in Lucene's lower-casing (Unicode's simple mapping): ``casefold`` gives ``i`` + U+0307, which
would split ``İstanbul`` into ``stanbul``. The ``lucene`` analyzer lower-cases as Java does, after its
possessive filter; with ``normalize`` ``nfkc`` the text is NFKC-normalized and case-folded first as
above, with ``nfc`` only NFC-normalized, with ``none`` (its setting for reproducing Anserini) left as it is.

``Tokenizer.encode`` turns many texts into token ids at once: each text is split by one regex call
and its words are numbered through a dict (C-level lookups; a word seen first gets the next number),
then every distinct word is filtered and stemmed once, and a lookup table maps word numbers to term
ids. Terms are numbered in sorted order, so ids never depend on hash seeds or on the order of texts.
"""

from __future__ import annotations

import re
import unicodedata
from array import array
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import Stemmer

from ragtrack.core import lucene
from ragtrack.core.porter import PorterStemmer
from ragtrack.core.settings import TokenizerSettings, validated

BLOCK_TOKENS = (
    1 << 24
)  # word numbers per block in Tokenizer.encode (64 MB: above glibc's largest mmap threshold, so a freed block goes back to the system)
STOPWORD_LISTS = {
    "en": "STOPWORDS_EN"
}  # name -> list in bm25s.stopwords (imported on first use: bm25s loads numba); "lucene": ragtrack.core.lucene
UNICODE_FORMS = {"nfkc": "NFKC", "nfc": "NFC", "none": None}  # the normalize setting -> unicodedata's form


@dataclass(frozen=True)
class EncodedTexts:
    """Token ids of many texts: text ``i`` has the tokens ``terms[j]`` for ``j`` in
    ``ids[offsets[i]:offsets[i + 1]]``, in text order; ``terms`` are sorted. The ids are held in
    blocks of whole texts: block ``b`` holds those of texts ``firsts[b]`` to ``firsts[b + 1] - 1``
    (the last block: to the last text), so a consumer can free them block by block (:meth:`release`)."""

    blocks: list  # int32 arrays, the texts' tokens back to back
    firsts: list[int]  # the first text of each block
    offsets: np.ndarray  # int64, len(texts) + 1
    terms: list[str]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def ids(self) -> np.ndarray:
        """All texts' token ids as one int32 array."""
        return self.blocks[0] if len(self.blocks) == 1 else np.concatenate(self.blocks)

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def release(self) -> Iterator[tuple[int, int, np.ndarray]]:
        """Each block as (first text, last text + 1, ids), dropped from ``self`` as it is handed out:
        afterwards the ids are gone, and memory holds a block only while the consumer does."""
        stops = self.firsts[1:] + [len(self)]
        for number, (first, stop) in enumerate(zip(self.firsts, stops)):
            taken = [self.blocks[number]]  # no name in this frame keeps the block once it is yielded
            self.blocks[number] = None
            yield first, stop, taken.pop()

    def tokens(self) -> list[list[str]]:
        terms, ids = np.asarray(self.terms, dtype=object), self.ids
        return [
            terms[ids[start:end]].tolist() for start, end in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())
        ]


class _Numbering(dict):
    """word -> number, numbering a word on first lookup (``dict.__missing__``)."""

    def __missing__(self, word: str) -> int:
        number = self[word] = len(self)
        return number


class Tokenizer:
    """Built from :class:`~ragtrack.core.settings.TokenizerSettings` values (defaults there):
    ``analyzer`` ``regex`` splits by ``pattern`` (words of 2+ word characters, as bm25s and
    scikit-learn), ``lucene`` as Lucene's StandardTokenizer, possessive filter and lower-casing;
    ``stopwords`` is ``en``, ``lucene``, a list, or null; ``stemmer`` ``lucene``, a PyStemmer language
    or null; ``normalize`` and ``lowercase`` as in the module docstring."""

    def __init__(self, **values):
        settings = validated(TokenizerSettings, values, "tokenizer")
        self.analyzer, self.lowercase, self.normalize, self.pattern = (
            settings.analyzer,
            settings.lowercase,
            settings.normalize,
            settings.pattern,
        )
        self._form = UNICODE_FORMS[settings.normalize]
        stopwords = settings.stopwords
        self._stopwords = (
            (lucene.STOPWORDS if stopwords == "lucene" else None)
            if isinstance(stopwords, str)
            else frozenset(stopwords or ())
        )
        self.stopwords_name = stopwords if isinstance(stopwords, str) or stopwords is None else sorted(self._stopwords)
        self.stemmer = (
            (PorterStemmer() if settings.stemmer == "lucene" else Stemmer.Stemmer(settings.stemmer))
            if settings.stemmer
            else None
        )
        self.stemmer_name = settings.stemmer
        if settings.analyzer == "lucene":
            self._split = lambda text: lucene.english_words(text, self.lowercase)
        else:
            self._split = re.compile(settings.pattern).findall

    @property
    def stopwords(self) -> frozenset[str]:
        if self._stopwords is None:
            from bm25s import stopwords

            self._stopwords = frozenset(getattr(stopwords, STOPWORD_LISTS[self.stopwords_name]))
        return self._stopwords

    def settings(self) -> dict:
        settings = {
            "normalize": self.normalize,
            "lowercase": self.lowercase,
            "stopwords": self.stopwords_name,
            "stemmer": self.stemmer_name,
        }
        return settings | ({"analyzer": "lucene"} if self.analyzer == "lucene" else {"pattern": self.pattern})

    def fold(self, text: str) -> str:
        """``text`` normalized and case-folded as the settings say (module docstring), ready to split."""
        if self.analyzer == "lucene" and (
            self._form is None or text.isascii()
        ):  # lower-cased after its possessive filter
            return text
        if text.isascii():  # already normalized; casefold is lower
            return text.lower() if self.lowercase else text
        form = self._form
        if form:
            text = unicodedata.normalize(form, text)
        if self.lowercase:
            text = text.replace("İ", "i").casefold()
            if form:
                text = unicodedata.normalize(form, text)
        return text

    def __call__(self, texts: Iterable[str]) -> list[list[str]]:
        """The tokens of each text."""
        return self.encode(texts).tokens()

    def encode(self, texts: Iterable[str]) -> EncodedTexts:
        """The token ids of all ``texts`` (see module docstring). Word numbers are gathered in blocks
        of about :data:`BLOCK_TOKENS` (whole texts), and each block is replaced by its term ids, so
        memory peaks near 4 bytes per token and one block."""
        split, fold = self._split, self.fold
        numbering = _Numbering()
        number_of = numbering.__getitem__
        blocks, firsts, numbers, ends, done = [], [0], array("i"), array("q", [0]), 0
        for text in texts:
            numbers.extend(map(number_of, split(fold(text))))
            ends.append(done + len(numbers))
            if len(numbers) >= BLOCK_TOKENS:
                blocks.append(np.frombuffer(numbers, dtype=np.int32))
                firsts.append(len(ends) - 1)
                done, numbers = done + len(numbers), array("i")
        blocks.append(np.frombuffer(numbers, dtype=np.int32))
        stopwords = self.stopwords
        kept = [word for word in numbering if word not in stopwords]  # dicts keep insertion order: word numbers
        stems = self.stemmer.stemWords(kept) if self.stemmer is not None else kept
        terms = sorted(set(stems))
        term_id = {term: i for i, term in enumerate(terms)}
        table = np.full(len(numbering), -1, dtype=np.int32)
        table[np.fromiter(map(numbering.__getitem__, kept), dtype=np.int64, count=len(kept))] = np.fromiter(
            map(term_id.__getitem__, stems), dtype=np.int32, count=len(stems)
        )
        dropped, position = [np.empty(0, dtype=np.int64)], 0
        for number, block in enumerate(blocks):
            mapped = table[block]
            keep = mapped >= 0
            blocks[number] = mapped[keep]  # the word numbers are freed
            dropped.append(np.flatnonzero(~keep) + position)
            position += len(block)
        ends = np.frombuffer(ends, dtype=np.int64)
        return EncodedTexts(
            blocks=blocks, firsts=firsts, offsets=ends - np.searchsorted(np.concatenate(dropped), ends), terms=terms
        )
