"""Tokenization for lexical retrieval: regex word split, lower-casing, stopwords, Snowball stemming."""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

import Stemmer

from ragtrack.core.errors import RagtrackError

STOPWORD_LISTS = {"en": "STOPWORDS_EN"}  # name -> list in bm25s.stopwords (imported on first use: bm25s loads numba)


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
        split, stopwords = self._split, self.stopwords
        documents = [[w for w in split(t.lower() if self.lowercase else t) if w not in stopwords] for t in texts]
        if self.stemmer is None:
            return documents
        vocabulary = list({word for words in documents for word in words})
        stems = dict(zip(vocabulary, self.stemmer.stemWords(vocabulary)))
        return [[stems[word] for word in words] for words in documents]
