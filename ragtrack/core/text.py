"""Tokenization for lexical retrieval: regex word split, lower-casing, stopwords, Snowball stemming.

``Tokenizer.encode`` turns many texts into token ids at once: each text is split by one regex call
and its words are numbered through a dict (C-level lookups; a word seen first gets the next number),
then every distinct word is filtered and stemmed once, and a lookup table maps word numbers to term
ids. Terms are numbered in sorted order, so ids never depend on hash seeds or on the order of texts.
"""

from __future__ import annotations

import re
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import Stemmer

from ragtrack.core.errors import RagtrackError

BLOCK_TOKENS = 1 << 22  # word numbers per numpy block in Tokenizer.encode (16 MB)
STOPWORD_LISTS = {"en": "STOPWORDS_EN"}  # name -> list in bm25s.stopwords (imported on first use: bm25s loads numba)


@dataclass(frozen=True)
class EncodedTexts:
    """Token ids of many texts: text ``i`` has the tokens ``terms[j]`` for ``j`` in
    ``ids[offsets[i]:offsets[i + 1]]``, in text order; ``terms`` are sorted."""

    ids: np.ndarray  # int32, all texts' tokens back to back
    offsets: np.ndarray  # int64, len(texts) + 1
    terms: list[str]

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def tokens(self) -> list[list[str]]:
        terms = np.asarray(self.terms, dtype=object)
        return [terms[self.ids[start:end]].tolist() for start, end in zip(self.offsets[:-1].tolist(), self.offsets[1:].tolist())]


class _Numbering(dict):
    """word -> number, numbering a word on first lookup (``dict.__missing__``)."""

    def __missing__(self, word: str) -> int:
        number = self[word] = len(self)
        return number


class Tokenizer:
    """``pattern`` picks tokens (default: words of 2+ word characters, as bm25s and scikit-learn);
    ``stopwords`` is ``en``, a list, or null; ``stemmer`` a PyStemmer language (``english``) or null."""

    def __init__(self, lowercase: bool = True, stopwords: str | Sequence[str] | None = "en",
                 stemmer: str | None = "english", pattern: str = r"(?u)\b\w\w+\b"):
        self.lowercase = lowercase
        if isinstance(stopwords, str):
            if stopwords not in STOPWORD_LISTS:
                raise RagtrackError(f"unknown stopword list {stopwords!r}; known: {', '.join(STOPWORD_LISTS)} (or a list of words)")
            self._stopwords = None
        else:
            self._stopwords = frozenset(stopwords or ())
        self.stopwords_name = stopwords if isinstance(stopwords, str) or stopwords is None else sorted(self._stopwords)
        try:
            self.stemmer = Stemmer.Stemmer(stemmer) if stemmer else None
        except KeyError:
            raise RagtrackError(f"unknown stemmer {stemmer!r}; known: {', '.join(Stemmer.algorithms())}") from None
        self.stemmer_name = stemmer
        self.pattern = pattern
        self._split = re.compile(pattern).findall

    @property
    def stopwords(self) -> frozenset[str]:
        if self._stopwords is None:
            from bm25s import stopwords

            self._stopwords = frozenset(getattr(stopwords, STOPWORD_LISTS[self.stopwords_name]))
        return self._stopwords

    def settings(self) -> dict:
        return {"lowercase": self.lowercase, "stopwords": self.stopwords_name, "stemmer": self.stemmer_name, "pattern": self.pattern}

    def __call__(self, texts: Iterable[str]) -> list[list[str]]:
        """The tokens of each text."""
        return self.encode(texts).tokens()

    def encode(self, texts: Iterable[str]) -> EncodedTexts:
        """The token ids of all ``texts`` (see module docstring). Word numbers are gathered in blocks
        of :data:`BLOCK_TOKENS`, then mapped to term ids block by block into one array, so memory
        peaks near 8 bytes per token."""
        split, lowercase = self._split, self.lowercase
        numbering = _Numbering()
        number_of = numbering.__getitem__
        blocks, numbers, ends, done = [], array("i"), array("q", [0]), 0
        for text in texts:
            numbers.extend(map(number_of, split(text.lower() if lowercase else text)))
            ends.append(done + len(numbers))
            if len(numbers) >= BLOCK_TOKENS:
                blocks.append(np.frombuffer(numbers, dtype=np.int32))
                done, numbers = done + len(numbers), array("i")
        blocks.append(np.frombuffer(numbers, dtype=np.int32))
        stopwords = self.stopwords
        kept = [word for word in numbering if word not in stopwords]  # dicts keep insertion order: word numbers
        stems = self.stemmer.stemWords(kept) if self.stemmer is not None else kept
        terms = sorted(set(stems))
        term_id = {term: i for i, term in enumerate(terms)}
        table = np.full(len(numbering), -1, dtype=np.int32)
        table[np.fromiter(map(numbering.__getitem__, kept), dtype=np.int64, count=len(kept))] = \
            np.fromiter(map(term_id.__getitem__, stems), dtype=np.int32, count=len(stems))
        ids = np.empty(sum(int(np.count_nonzero(table[block] >= 0)) for block in blocks), dtype=np.int32)
        dropped, filled, position = [np.empty(0, dtype=np.int64)], 0, 0
        for number, block in enumerate(blocks):
            blocks[number] = None  # freed as ids fill
            mapped = table[block]
            keep = mapped >= 0
            kept = int(np.count_nonzero(keep))
            ids[filled:filled + kept] = mapped[keep]
            dropped.append(np.flatnonzero(~keep) + position)
            filled, position = filled + kept, position + len(block)
        ends = np.frombuffer(ends, dtype=np.int64)
        return EncodedTexts(ids=ids, offsets=ends - np.searchsorted(np.concatenate(dropped), ends), terms=terms)
