"""Compact text columns (ragtrack.core.strings) read exactly like lists of strings, and a loaded
corpus is held in them."""

from __future__ import annotations

import random

import numpy as np
import pytest

from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.strings import JoinedTexts, Strings
from tests.support import TOY

TEXTS = ["", "plain", "naïve café", "日本語のテキスト", "emoji 🙂 and\ttab", " padded ", "x" * 1000]


def test_strings_read_like_the_list_they_hold() -> None:
    strings = Strings(TEXTS)
    assert len(strings) == len(TEXTS) and list(strings) == TEXTS
    assert strings == TEXTS and TEXTS == strings and strings == Strings(TEXTS) and strings == tuple(TEXTS)
    assert strings != TEXTS[:-1] and strings != [*TEXTS[:-1], "y"] and strings != "plain"
    for index in [*range(-len(TEXTS), len(TEXTS)), np.int64(3)]:
        assert strings[index] == TEXTS[index]
    for bounds in [(None, None, None), (1, 4, None), (None, None, -1), (5, 1, None), (-3, None, 2), (2, 2, None)]:
        assert strings[slice(*bounds)] == TEXTS[slice(*bounds)]
        assert isinstance(strings[slice(*bounds)], list)
    for bad in (len(TEXTS), -len(TEXTS) - 1):
        with pytest.raises(IndexError):
            strings[bad]
    assert "naïve café" in strings and "absent" not in strings and strings.index("plain") == 1
    assert dict(zip(strings, range(len(TEXTS)))) == dict(zip(TEXTS, range(len(TEXTS))))


def test_strings_hold_utf8_bytes_and_one_offset_per_text() -> None:
    rng = random.Random(0)
    texts = ["".join(rng.choice("ab cdé日🙂") for _ in range(rng.randint(0, 40))) for _ in range(200_000)]
    strings = Strings(texts)
    assert strings.nbytes == sum(len(t.encode()) for t in texts) + 8 * (len(texts) + 1)
    assert strings == texts  # iteration crosses the decoding blocks


def test_joined_texts_are_title_space_text_stripped() -> None:
    titles, texts = ["T", "", " A ", ""], ["body", "only text ", "", "  "]
    joined = JoinedTexts(Strings(titles), Strings(texts))
    expected = [f"{t} {x}".strip() for t, x in zip(titles, texts)]
    assert joined == expected and list(joined) == expected and joined[1:3] == expected[1:3] and joined[-1] == ""


def test_corpus_is_held_compactly_and_reads_as_before() -> None:
    corpus = load_beir(TOY).corpus
    assert all(isinstance(column, Strings) for column in (corpus.ids, corpus.titles, corpus.texts))
    rebuilt = Corpus(ids=list(corpus.ids), titles=list(corpus.titles), texts=list(corpus.texts), hash=corpus.hash)
    assert rebuilt == corpus and rebuilt.full_texts() == [
        f"{t} {x}".strip() for t, x in zip(corpus.titles, corpus.texts)
    ]
    assert corpus.id_array().dtype == object and corpus.id_array().tolist() == list(corpus.ids)
    with pytest.raises(ValueError, match="differ in length"):
        Corpus(ids=["a", "b"], titles=[""], texts=["x", "y"], hash="h")
