"""BM25: batched sparse search returns bm25s's scores; ragtrack's tokenizer and index build equal the
reference tokenizer and bm25s's build; nothing depends on document order; texts match whatever their
Unicode form or case, on both backends."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path

import bm25s
import numpy as np
import pytest

from ragtrack.core import text
from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.runs import trec_text
from ragtrack.core.text import Tokenizer
from ragtrack.pipeline.configuration.config import datasets_dir
from ragtrack.retrievers import postings
from ragtrack.retrievers.bm25 import BM25Retriever


@pytest.mark.parametrize(
    "method", ["lucene", "robertson", "atire", "bm25l"]
)  # bm25l adds scores to every document: bm25s' own path
def test_run_equals_bm25s_scores(toy_path: Path, tmp_path: Path, method: str) -> None:
    """The top 5 of bm25s's own scores of every document, equal scores by document id descending."""
    dataset = load_beir(toy_path)
    retriever = BM25Retriever(backend="bm25s", method=method)
    retriever.index(dataset.corpus, Cache(tmp_path))
    run = retriever.search(dataset.queries, depth=5)
    reference = bm25s.BM25(k1=retriever.k1, b=retriever.b, method=method)
    reference.index(retriever.tokenizer(dataset.corpus.full_texts()), show_progress=False)
    for qid, tokens in zip(dataset.queries, retriever.tokenizer(dataset.queries.values())):
        scores = reference.get_scores([t for t in tokens if t in reference.vocab_dict])
        ranked = sorted(
            ((float(s), d) for d, s in zip(dataset.corpus.ids, scores) if method == "bm25l" or s > 0), reverse=True
        )[:5]
        assert [d for _, d in ranked] == [d for d, _ in run.ranking(qid)]
        assert np.allclose([s for s, _ in ranked], [s for _, s in run.ranking(qid)], rtol=1e-6)


def test_queries_without_known_terms_get_no_documents(toy_path: Path, tmp_path: Path) -> None:
    dataset = load_beir(toy_path)
    retriever = BM25Retriever()
    retriever.index(dataset.corpus, Cache(tmp_path))
    run = retriever.search({"unknown": "zzzqqq xxyyzz", "stopwords": "the and of"}, depth=10)
    assert run.scores == {"unknown": {}, "stopwords": {}}


def reference_tokens(texts: list[str]) -> list[list[str]]:
    """The tokenizer as it was written before ``Tokenizer.encode``: per text a regex split of the
    NFKC-normalized, case-folded text (İ as i), English stopwords dropped, then Snowball stems of the
    distinct words."""
    import re

    import Stemmer
    from bm25s.stopwords import STOPWORDS_EN

    split, stopwords = re.compile(r"(?u)\b\w\w+\b").findall, frozenset(STOPWORDS_EN)
    folded = (
        unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", t).replace("İ", "i").casefold()) for t in texts
    )
    documents = [[w for w in split(t) if w not in stopwords] for t in folded]
    vocabulary = sorted({w for words in documents for w in words})
    stems = dict(zip(vocabulary, Stemmer.Stemmer("english").stemWords(vocabulary)))
    return [[stems[w] for w in words] for words in documents]


def random_texts(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdeé ÄßΣσς日本 \t\n.,;-_'0123456789 The AND of running İ\u0301\u0307ﬁ²ＡǰΐẞK"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 200))) for _ in range(count)] + [
        "",
        "the and",
        "x",
        "ab",
    ]


@pytest.mark.parametrize("source", ["scifact", "random"])
def test_tokenizer_gives_the_reference_tokens(source: str) -> None:
    texts = load_beir(datasets_dir() / "scifact").corpus.full_texts() if source == "scifact" else random_texts(3000)
    encoded = Tokenizer().encode(texts)
    assert encoded.tokens() == reference_tokens(texts)
    assert encoded.terms == sorted(set(encoded.terms))
    assert Tokenizer()(texts[:50]) == reference_tokens(texts[:50])


@pytest.mark.parametrize("method", ["lucene", "robertson"])
def test_own_index_equals_bm25s_bit_for_bit(method: str, tmp_path: Path) -> None:
    """ragtrack's array build of S equals bm25s's build from the same token ids, float32 bits included."""
    texts = load_beir(datasets_dir() / "scifact").corpus.full_texts()
    retriever = BM25Retriever(backend="bm25s", method=method)
    encoded = retriever.tokenizer.encode(texts)
    reference = retriever._bm25s_build(encoded, len(texts)).scores
    data, indices, indptr = postings.term_rows(
        encoded, tmp_path / "pairs", retriever._bm25s_values
    )  # frees the token ids
    n_terms = len(encoded.terms)  # bm25s adds the empty token "" after the last term: no documents
    assert np.array_equal(indptr, reference["indptr"][: n_terms + 1])
    assert np.array_equal(indices, reference["indices"])
    assert data.dtype == reference["data"].dtype == np.float32
    assert np.array_equal(data.view(np.int32), reference["data"].view(np.int32))


def test_block_and_step_sizes_change_no_bit(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Token ids in many small blocks, counted and placed a few documents at a time, give the same S
    (bits included) as one block: the build's memory bounds never change the index."""
    texts = load_beir(datasets_dir() / "scifact").corpus.full_texts()
    retriever = BM25Retriever(backend="bm25s")
    whole = postings.term_rows(retriever.tokenizer.encode(texts), tmp_path / "whole", retriever._bm25s_values)
    monkeypatch.setattr(text, "BLOCK_TOKENS", 5_000)
    monkeypatch.setattr(postings, "CHUNK_DOCUMENTS", 7)
    encoded = retriever.tokenizer.encode(texts)
    assert len(encoded.blocks) > 100
    pieces = postings.term_rows(encoded, tmp_path / "pieces", retriever._bm25s_values)
    assert not (tmp_path / "pieces").exists()  # the pairs' scratch folder is removed
    assert all(a.dtype == b.dtype and np.array_equal(a, b) for a, b in zip(whole, pieces))
    assert np.array_equal(whole[0].view(np.int32), pieces[0].view(np.int32))


def test_rows_filled_in_their_files_are_the_bytes_np_save_writes(tmp_path: Path) -> None:
    """term_rows with a folder fills data and indices in place in their memory-mapped .npy files;
    save_rows then leaves them as they are: the same files, byte for byte, as the arrays built in
    memory and saved with np.save."""
    texts = load_beir(datasets_dir() / "scifact").corpus.full_texts()
    retriever = BM25Retriever(backend="bm25s")
    tokenizer = retriever.tokenizer
    in_memory = postings.term_rows(tokenizer.encode(texts), tmp_path / "pairs", retriever._bm25s_values)
    postings.save_rows(tmp_path / "saved", in_memory, ["t"])
    in_place = postings.term_rows(
        tokenizer.encode(texts), tmp_path / "filled" / "pairs", retriever._bm25s_values, tmp_path / "filled"
    )
    assert all(isinstance(array, np.memmap) for array in in_place[:2])
    postings.save_rows(tmp_path / "filled", in_place, ["t"])
    assert not (tmp_path / "filled" / "pairs").exists()
    for name in postings.ARRAYS:
        assert (tmp_path / "filled" / f"{name}.npy").read_bytes() == (tmp_path / "saved" / f"{name}.npy").read_bytes()


def test_scores_do_not_depend_on_document_order(toy_path: Path, tmp_path: Path) -> None:
    """Reversing the corpus changes no score bit and no ranking (sums go in term order, ties by id)."""
    dataset = load_beir(toy_path)
    corpus = dataset.corpus
    reversed_corpus = Corpus(
        ids=corpus.ids[::-1], titles=corpus.titles[::-1], texts=corpus.texts[::-1], hash=corpus.hash + "-reversed"
    )
    runs = []
    for documents, folder in ((corpus, tmp_path / "a"), (reversed_corpus, tmp_path / "b")):
        retriever = BM25Retriever()
        retriever.index(documents, Cache(folder))
        runs.append(retriever.search(dataset.queries, depth=3))
    assert trec_text(runs[0]) == trec_text(runs[1])


def _top_document(corpus_texts: list[str], query: str, tmp_path: Path, **settings) -> list[str]:
    texts = [*corpus_texts, "an unrelated document about proteins", "another one about cells"]
    corpus = Corpus(
        ids=[f"d{i}" for i in range(len(texts))], titles=[""] * len(texts), texts=texts, hash="|".join(texts)
    )
    retriever = BM25Retriever(**settings)
    retriever.index(corpus, Cache(tmp_path))
    return [doc for doc, _ in retriever.search({"q": query}, depth=1).ranking("q")]


UNICODE_CASES = {  # query, the one document that must match it
    "NFC query, NFD document": ("café", unicodedata.normalize("NFD", "un café noir")),
    "NFD query, NFC document": (unicodedata.normalize("NFD", "naïve"), "naïve bayes"),
    "Turkish dotted capital I": ("İstanbul", "flights to istanbul"),
    "sharp s": ("STRASSE", "die straße"),
    "ligature": ("fibrosis", "cystic ﬁbrosis"),
    "subscript digit": ("h2o", "H₂O vapour"),
    "full-width letters": ("ＤＮＡ", "dna repair"),
}


@pytest.mark.parametrize("analyzer", ["lucene", "regex"])
@pytest.mark.parametrize("backend", ["lucene", "bm25s", "rank_bm25"])
@pytest.mark.parametrize("case", UNICODE_CASES)
def test_unicode_forms_and_cases_match(case: str, backend: str, analyzer: str, tmp_path: Path) -> None:
    """With normalize nfkc (NFKC and case folding before analysis), on every backend and analyzer."""
    query, document = UNICODE_CASES[case]
    assert _top_document(
        [document], query, tmp_path, backend=backend, tokenizer={"analyzer": analyzer, "normalize": "nfkc"}
    ) == ["d0"]


def test_folded_words_stay_whole() -> None:
    """str.lower and casefold turn İ into i + U+0307 (the pattern would keep "stanbul"); casefold
    decomposes ǰ (U+01F0) into j + U+030C (the pattern would keep "apan")."""
    assert Tokenizer(stemmer=None)(["İSTANBUL İstanbul istanbul", "\u01f0apan J\u030cAPAN"]) == [
        ["istanbul"] * 3,
        ["\u01f0apan"] * 2,
    ]


def test_the_normal_form_is_a_setting(tmp_path: Path) -> None:
    """none keeps NFD and NFC apart (as before normalization), nfc joins them but keeps compatibility
    forms apart, nfkc joins both."""
    nfd, wide = UNICODE_CASES["NFC query, NFD document"], UNICODE_CASES["full-width letters"]
    assert _top_document([nfd[1]], nfd[0], tmp_path / "a", tokenizer={"normalize": "none"}) == []
    assert _top_document([nfd[1]], nfd[0], tmp_path / "b", tokenizer={"normalize": "nfc"}) == ["d0"]
    assert _top_document([wide[1]], wide[0], tmp_path / "c", tokenizer={"normalize": "nfc"}) == []
    assert _top_document([wide[1]], wide[0], tmp_path / "d", tokenizer={"normalize": "nfkc"}) == ["d0"]


def test_the_normal_form_is_part_of_the_index_key(toy_path: Path, tmp_path: Path) -> None:
    corpus, cache = load_beir(toy_path).corpus, Cache(tmp_path)
    for normalize in ("nfkc", "nfc", "nfkc"):
        BM25Retriever(tokenizer={"normalize": normalize}).index(corpus, cache)
    assert len(cache.builds) == 2 and len(list((tmp_path / "bm25").glob("*.lock"))) == 2
