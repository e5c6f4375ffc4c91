"""Lucene's BM25 (retrievers/bm25_lucene.py) and English analysis (ragtrack/core/lucene.py, porter.py):
the pieces against straightforward transcriptions of Lucene's and Anserini's Java on random inputs;
the whole against Pyserini's own runs and analyzer output on SciFact (tests/data/pyserini, made once
with the commands in its SOURCE.md)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core import lucene
from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.porter import PorterStemmer, stem
from ragtrack.core.text import Tokenizer
from ragtrack.pipeline.configuration.config import datasets_dir
from ragtrack.retrievers import bm25_lucene
from ragtrack.retrievers.bm25 import BM25Retriever

F32 = np.float32
PYSERINI = Path(__file__).parents[1] / "data" / "pyserini"


# ----------------------------------------------------------------------------- SmallFloat, ties
def java_int_to_byte4(i: int) -> int:
    """SmallFloat.intToByte4, line for line (longToInt4 inlined)."""
    max_int4 = 231  # longToInt4(Integer.MAX_VALUE)
    free = 255 - max_int4
    if i < free:
        return i
    value = i - free
    num_bits = value.bit_length()
    if num_bits < 4:
        encoded = value
    else:
        shift = num_bits - 4
        encoded = ((value >> shift) & 0x07) | ((shift + 1) << 3)
    return free + encoded


def test_lengths_are_stored_as_lucene_stores_them() -> None:
    rng = np.random.default_rng(0)
    lengths = np.concatenate([np.arange(5000), rng.integers(0, 2**31 - 1, 5000), [2**31 - 1]])
    assert bm25_lucene.int_to_byte4(lengths).tolist() == [java_int_to_byte4(int(i)) for i in lengths]
    table = bm25_lucene.LENGTH_TABLE
    assert table[:24].tolist() == list(range(24)) and np.all(np.diff(table) > 0)
    codes = bm25_lucene.int_to_byte4(np.arange(100_000))
    assert np.all(table[codes] <= np.arange(100_000))  # decoding rounds down to the stored length


def java_adjust_ties(scores: list[float]) -> list[F32]:
    """ScoreTiesAdjusterReranker.rerank, line for line (Anserini 1.7.1: rounded in double, the rest in
    float32): ``scores[i] = (float) (Math.round(scores[i] * 1e4d) / 1e4d)``."""
    s, dup = [F32(x) for x in scores], 0
    for i in range(len(s)):
        s[i] = F32(round_half_up(float(s[i]) * 1e4) / 1e4)
        if i == 0 or s[i - 1] - s[i] > F32(1e-4):
            dup = 0
        else:
            dup += 1
            s[i] = s[i] - F32(1e-6) * F32(dup)
    return s


def round_half_up(x: float) -> int:
    """Java's Math.round(double): the closest integer, ties up."""
    from decimal import ROUND_HALF_UP, Decimal

    return int(Decimal(x).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def test_tie_adjustment_equals_anserinis() -> None:
    rng = np.random.default_rng(1)
    for _ in range(2000):
        n = int(rng.integers(1, 80))
        base = rng.choice(
            [5.0, 5.00004, 5.0001, 5.00015, 5.0002, 4.9999, 3.2, 3.20004, 7.1, 12.34567, 3.52245, 3.52255], n
        )
        scores = np.sort((base + rng.choice([0, 0, 0, 1e-5, 3e-5], n)).astype(F32))[::-1]
        assert bm25_lucene.adjust_ties(scores.copy()).tolist() == java_adjust_ties(scores.tolist())


def test_rankings_row_by_row_are_adjusted_each_alone() -> None:
    rng = np.random.default_rng(1)
    rankings = [
        np.sort(rng.choice([5.0, 5.00004, 5.0001, 4.9999, 3.2], int(n)).astype(F32))[::-1]
        for n in rng.integers(0, 8, 300)
    ]
    padded = np.zeros((len(rankings), 8), dtype=F32)
    for row, ranking in enumerate(rankings):
        padded[row, : len(ranking)] = ranking
    together = bm25_lucene.adjust_ties(padded)
    assert [together[row, : len(ranking)].tolist() for row, ranking in enumerate(rankings)] == [
        java_adjust_ties(r.tolist()) for r in rankings
    ]
    assert bm25_lucene.adjust_ties(np.empty(0, dtype=F32)).tolist() == []


# ----------------------------------------------------------------------------- analysis
def random_text(rng: random.Random, length: int) -> str:
    alphabet = (
        "abcXYZ019_ .,;:'\"-’＇\u00ad\u200d\u0301\u20e3\ufe0f#*©®™ αβΣσς İıßﬁ²½ 日本語 ひらがな カタカナ ภาษา 한국 "
        "\u05d0\u05d1 ١٢ ０１ Ａ \U0001f600\U0001f3fd\U0001f1fa\U0001f1f8\U000e0067\U000e007f\U0001f3f4"
    )
    return "".join(rng.choice(alphabet) for _ in range(length))


def test_the_tokens_are_the_longest_matches() -> None:
    """JFlex takes the longest match at each position; text without a ZWJ is matched greedily (faster).
    On random texts over every character class the grammar uses (and emoji sequences, keycaps and
    joiners in particular), the tokens are the leftmost-longest matches."""
    rng = random.Random(0)
    emoji = "👨👩👧🔬🏽‍‍️⃣1#aℹⓂ "
    texts = [random_text(rng, rng.randint(0, 80)) for _ in range(4000)]
    texts += ["".join(rng.choice(emoji) for _ in range(rng.randint(0, 30))) for _ in range(3000)]
    texts += [text for text in load_beir(datasets_dir() / "scifact").corpus.full_texts() if not text.isascii()][:300]
    for text in texts:
        assert lucene.standard_tokens(text) == lucene.LONGEST_TOKEN.findall(text), text


def test_ascii_text_takes_the_fast_pattern_to_the_same_tokens() -> None:
    rng = random.Random(2)
    alphabet = "aB9_ .,;:'\"-x0"
    for _ in range(5000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60)))
        assert lucene.ASCII_TOKEN.findall(text) == lucene.TOKEN.findall(text), text


def test_words_with_non_ascii_characters_scanned_apart_give_the_same_words(monkeypatch: pytest.MonkeyPatch) -> None:
    """english_words scans the space-delimited words holding non-ASCII characters apart from the
    ASCII text around them: the same words as one scan of the whole text."""
    monkeypatch.setattr(lucene, "SPARSE_NON_ASCII", 1)  # always apart
    rng = random.Random(4)
    for _ in range(4000):
        text = "".join(
            rng.choice((random_text(rng, 3), " ", "\n", "ab's", "x.y", "1,2", "\t")) for _ in range(rng.randint(0, 12))
        )
        for lowercase in (True, False):
            assert lucene.english_words(text, lowercase) == lucene._standard_words(text, lowercase), text


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("1,000 people", ["1,000", "people"]),
        ("X-Rays and U.S.A. e.g. John's JOHN’S", ["x", "rays", "and", "u.s.a", "e.g", "john", "john"]),
        ("a:b a.1 1.a 3.14 5mg __ a_b_ IL-6", ["a:b", "a", "1", "1", "a", "3.14", "5mg", "a_b_", "il", "6"]),
        ("ΣΑΣ İstanbul Straße", ["σασ", "istanbul", "straße"]),  # Java lower-casing: no final sigma, no folding
        ("Tamiflu® 東京 カタカナ", ["tamiflu", "®", "東", "京", "カタカナ"]),
    ],
)
def test_english_words(text: str, words: list[str]) -> None:
    assert lucene.english_words(text) == words


def test_a_token_longer_than_255_code_units_is_cut() -> None:
    long = "a" * 600
    assert lucene.english_words(f"x {long} y") == ["x", "a" * 255, "a" * 255, "a" * 90, "y"]
    astral = "\U0001d41a" * 200  # mathematical bold a: a letter of two UTF-16 code units
    assert [len(word) for word in lucene.standard_tokens(astral)] == [127, 73]


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ("caresses", "caress"),
        ("ponies", "poni"),
        ("ties", "ti"),
        ("cats", "cat"),
        ("feed", "feed"),
        ("agreed", "agre"),
        ("disabled", "disabl"),
        ("matting", "mat"),
        ("mating", "mate"),
        ("meeting", "meet"),
        ("milling", "mill"),
        ("messing", "mess"),
        ("meetings", "meet"),
        ("happy", "happi"),
        ("relational", "relat"),
        ("conditional", "condit"),
        ("generalization", "gener"),
        ("oscillators", "oscil"),
        ("hopefulness", "hope"),
        ("electricity", "electr"),
        ("probate", "probat"),
        ("rate", "rate"),
        ("cease", "ceas"),
        ("controlling", "control"),
        ("rolling", "roll"),
        ("as", "as"),
        ("is", "is"),
        ("ion", "ion"),
        ("aed", "a"),
        ("syllogism", "syllog"),
        ("sensibility", "sensibl"),
    ],
)
def test_porter_stems_as_lucene(word: str, expected: str) -> None:
    """Examples of Porter (1980) and of Lucene's PorterStemmer comments (Bug 1: aed, Bug 2: ion)."""
    assert stem(word) == expected


# ----------------------------------------------------------------------------- BM25 against Lucene's formula
def test_snowball_porter_is_taken_only_where_it_equals_lucenes() -> None:
    """PorterStemmer hands Snowball's porter the words where it cannot depart from Lucene's (ragtrack.core.porter):
    random words built from the suffixes of every step give the stems of the transcription."""
    rng = random.Random(5)
    suffixes = (
        "ational tional enci anci izer bli alli entli eli ousli ization ation ator alism iveness fulness ousness aliti iviti "
        "biliti logi icate ative alize iciti ical ful ness al ance ence er ic able ible ant ement ment ent ion sion ou ism ate "
        "iti ous ive ize e ll y ies sses s eed ed ing ly at bl iz edly ably ibly logy"
    ).split()
    words = set()
    for _ in range(40_000):
        word = "".join(
            rng.choice("aeiouybcdhjklmnrstvwxzYéß" if rng.random() < 0.3 else "aeiouybcdlmnrst")
            for _ in range(rng.randint(1, 7))
        )
        words.add(word + "".join(rng.choice(suffixes) for _ in range(rng.randint(0, 3))))
    words = sorted(words)
    assert PorterStemmer().stemWords(words) == [stem(word) for word in words]


def lucene_scores(documents: list[list[str]], query: list[str], k1: float, b: float) -> dict[int, F32]:
    """BM25Similarity and Anserini's bag-of-words query, written out per document in float32."""
    lengths = [len(d) for d in documents]
    n = sum(1 for length in lengths if length)
    avgdl = F32(sum(lengths) / n)
    k1, b = F32(k1), F32(b)
    scores = {}
    for i, document in enumerate(documents):
        total = 0.0
        dl = F32(bm25_lucene.LENGTH_TABLE[java_int_to_byte4(len(document))])
        inverse = F32(1) / (k1 * ((F32(1) - b) + b * dl / avgdl))
        for term in sorted(set(query)):
            tf = document.count(term)
            if not tf:
                continue
            df = sum(1 for d in documents if term in d)
            weight = F32(query.count(term)) * bm25_lucene.idf(df, n)
            total += float(weight - weight / (F32(1) + F32(tf) * inverse))
        if any(term in document for term in query):
            scores[i] = F32(total)
    return scores


def test_scores_equal_lucenes_formula_bit_for_bit(tmp_path: Path) -> None:
    rng = random.Random(3)
    words = [f"w{i}" for i in range(40)]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(0, 120))) for _ in range(300)]
    corpus = Corpus(
        ids=[f"d{i:03d}" for i in range(len(texts))], titles=[""] * len(texts), texts=texts, hash="random-lengths"
    )
    retriever = BM25Retriever(score_ties="raw", tokenizer={"stemmer": None, "stopwords": None})
    retriever.index(corpus, Cache(tmp_path))
    documents = [text.split() for text in texts]
    for q in range(40):
        query = [rng.choice(words) for _ in range(rng.randint(1, 6))]
        expected = lucene_scores(documents, query, retriever.k1, retriever.b)
        got = retriever.search({"q": " ".join(query)}, depth=len(texts)).scores["q"]
        assert {f"d{i:03d}": float(s) for i, s in expected.items()} == got
        ranked = sorted(expected.items(), key=lambda item: (-item[1], f"d{item[0]:03d}"))[:10]
        top = retriever.search({"q": " ".join(query)}, depth=10).scores["q"]
        assert list(top) == [f"d{i:03d}" for i, _ in ranked]  # ties by id ascending, as Anserini


def test_the_query_id_is_removed_and_settings_key_the_caches(tmp_path: Path) -> None:
    texts = ["apple pie", "apple tart", "pear"]
    corpus = Corpus(ids=["q1", "d2", "d3"], titles=["", "", ""], texts=texts, hash="ids")
    cache = Cache(tmp_path)
    kept = BM25Retriever(remove_query=False)
    kept.index(corpus, cache)
    removed = BM25Retriever()
    removed.index(corpus, cache)
    assert list(kept.search({"q1": "apple"}, 10).scores["q1"]) == [
        "d2",
        "q1",
    ]  # tied: id ascending, the second lowered by 1e-6
    assert list(removed.search({"q1": "apple"}, 10).scores["q1"]) == ["d2"]
    assert len(cache.builds) == 1 and kept.identity() != removed.identity()  # one index, two runs
    BM25Retriever(fields={"title": 1.0, "text": 1.0}).index(corpus, cache)
    BM25Retriever(tokenizer={"analyzer": "regex"}).index(corpus, cache)
    assert len(cache.builds) == 3


def test_multifield_sums_its_fields(tmp_path: Path) -> None:
    """Each field has its own N and avgdl (a document with an empty title is not counted in the
    title's N); a document's score is the sum of its fields' scores."""
    corpus = Corpus(
        ids=["a", "b", "c"],
        titles=["apple", "", "pear apple"],
        texts=["pie crust", "apple apple", "tart"],
        hash="fields",
    )
    both = BM25Retriever(fields={"title": 1.0, "text": 1.0}, score_ties="raw")
    both.index(corpus, Cache(tmp_path / "both"))
    parts = {}
    for field in ("title", "text"):
        one = BM25Retriever(fields={field: 1.0}, score_ties="raw")
        one.index(corpus, Cache(tmp_path / field))
        parts[field] = one.search({"q": "apple"}, 10).scores["q"]
    summed = {
        doc: float(F32(parts["title"].get(doc, 0.0) + parts["text"].get(doc, 0.0)))
        for doc in "abc"
        if doc in parts["title"] or doc in parts["text"]
    }
    assert both.search({"q": "apple"}, 10).scores["q"] == summed


# ----------------------------------------------------------------------------- against Pyserini itself
def test_the_analyzer_gives_lucenes_tokens() -> None:
    """Anserini's DefaultEnglishAnalyzer output (tests/data/pyserini/SOURCE.md): every SciFact test
    query, with and without stemming and stopwords; ~300 hand-picked hard strings (numbers, possessives,
    hyphens, Unicode scripts, emoji sequences, combining marks, a 300-character token); and the Porter
    stem of every distinct word of the SciFact corpus."""
    full = Tokenizer(analyzer="lucene", normalize="none", stopwords="lucene", stemmer="lucene")
    plain = Tokenizer(analyzer="lucene", normalize="none", stopwords=None, stemmer=None)
    with gzip.open(PYSERINI / "analyzed_queries.jsonl.gz", "rt", encoding="utf-8") as lines:
        queries = [json.loads(line) for line in lines]
    tricky = [json.loads(line) for line in (PYSERINI / "tricky.jsonl").read_text(encoding="utf-8").splitlines()]
    for expected_full, expected_plain, texts in (
        ([q["tokens"] for q in queries], [q["nostem"] for q in queries], [q["text"] for q in queries]),
        ([t["default"] for t in tricky], [t["nostem"] for t in tricky], [t["text"] for t in tricky]),
    ):
        assert full(texts) == expected_full
        assert plain(texts) == expected_plain
    with gzip.open(PYSERINI / "porter_words.tsv.gz", "rt", encoding="utf-8") as lines:
        pairs = [line.rstrip("\n").split("\t") for line in lines]
    expected = [stem for _, stem in pairs]
    assert len(pairs) > 38_000 and [stem(word) for word, _ in pairs] == expected
    assert PorterStemmer().stemWords([word for word, _ in pairs]) == expected


def read_pyserini(path: Path, columns: tuple[int, int, int]) -> dict[str, list[tuple[str, str]]]:
    """qid -> [(docid, score as written)] in rank order, from a TREC run or a scores TSV."""
    ranked: dict[str, list] = {}
    with gzip.open(path, "rt") as lines:
        for line in lines:
            parts = line.split()
            ranked.setdefault(parts[0], []).append((parts[columns[0]], parts[columns[2]]))
    return ranked


@pytest.mark.parametrize(("system", "fields"), [("flat", None), ("multifield", {"title": 1.0, "text": 1.0})])
def test_pyserini_runs_are_reproduced(system: str, fields: dict | None, tmp_path: Path) -> None:
    """Each SciFact test query's top 100 as Pyserini writes it (ids in order, scores to its 6 decimals,
    ties adjusted), and Lucene's float32 scores before the adjustment, bit for bit."""
    dataset = load_beir(datasets_dir() / "scifact")
    written = read_pyserini(PYSERINI / f"run.{system}.top100.trec.gz", (2, 3, 4))
    raw = read_pyserini(PYSERINI / f"scores.{system}.top100.tsv.gz", (1, 2, 3))
    assert len(written) == len(raw) == 300
    queries = {qid: dataset.queries[qid] for qid in written}
    cache = Cache(tmp_path)
    for ties, reference, shown in (("anserini", written, lambda s: f"{s:.6f}"), ("raw", raw, repr)):
        retriever = BM25Retriever(fields=fields, score_ties=ties)
        retriever.index(dataset.corpus, cache)
        run = retriever.search(queries, depth=1000)
        for qid, expected in reference.items():
            top = (
                run.ranking(qid)[:100]
                if ties == "anserini"
                else sorted(run.scores[qid].items(), key=lambda item: (-item[1], item[0]))[:100]
            )
            assert [(doc, shown(score)) for doc, score in top] == expected, qid


def test_clause_scores_written_in_steps_equal_one_pass(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The boost-1 clause scores are written a few term rows at a time (bounded memory): the same as in one pass."""
    rng = np.random.default_rng(3)
    df = rng.integers(0, 12, 50)
    indptr = np.concatenate([[0], np.cumsum(df)]).astype(np.int32)
    data = (1 + rng.uniform(0, 3, indptr[-1])).astype(F32)
    weights = rng.uniform(0.1, 5, 50).astype(F32)
    expected = np.repeat(weights, df) - np.repeat(weights, df) / data
    for step in (1, 7, 1 << 24):
        monkeypatch.setattr(bm25_lucene, "UNIT_STEP", step)
        bm25_lucene.save_unit_scores(tmp_path / f"{step}.npy", data, indptr, weights)
        assert np.load(tmp_path / f"{step}.npy").tobytes() == expected.astype(F32).tobytes()


@pytest.mark.parametrize("fields", [None, {"title": 1.0, "text": 1.0}, {"title": 2.0, "text": 0.5}])
def test_batches_and_threads_change_no_figure(
    fields: dict | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A search of many queries, in batches of any size on any number of threads, gives each query the
    ranking and the written scores of that query searched alone (SciFact, repeated query terms and
    field boosts included)."""
    dataset = load_beir(datasets_dir() / "scifact")
    queries = dict(list(dataset.queries.items())[:60]) | {"twice": "cell cell membrane", "unknown": "zzzqqq"}
    cache = Cache(tmp_path)
    alone = BM25Retriever(fields=fields, threads=1)
    alone.index(dataset.corpus, cache)
    expected = {qid: alone.search({qid: text}, depth=100).scores[qid] for qid, text in queries.items()}
    for per_thread, threads in ((20, 1), (20, 3), (1, 2)):
        monkeypatch.setattr(bm25_lucene, "BATCHES_PER_THREAD", per_thread)
        retriever = BM25Retriever(fields=fields, threads=threads)
        retriever.index(dataset.corpus, cache)
        weights = [bm25_lucene.query_weights(t) for t in retriever.tokenizer(queries.values())]
        batches = bm25_lucene.query_batches(bm25_lucene.clause_arrays(retriever._fields, weights).postings(), threads)
        assert len(batches) > threads * per_thread // 2 and batches[0][0] == 0 and batches[-1][1] == len(queries)
        found = retriever.search(queries, depth=100).scores
        assert {qid: list(scores.items()) for qid, scores in found.items()} == {
            qid: list(scores.items()) for qid, scores in expected.items()
        }


def test_threads_is_a_lucene_backend_setting() -> None:
    with pytest.raises(RagtrackError, match="threads needs backend lucene"):
        BM25Retriever(backend="bm25s", threads=2)
    assert (
        BM25Retriever(threads=None).identity() == BM25Retriever(threads=3).identity()
    )  # the same run, one cache entry


@pytest.mark.parametrize("fields", [None, {"title": 1.0, "text": 1.0}, {"title": 2.0, "text": 0.5}])
def test_blocks_walked_or_scanned_give_the_same_run(
    fields: dict | None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A block of documents is ranked from the postings read (few matched) or by scanning its sums, and
    the documents come in blocks of any size: the same ids, order and float32 scores at any depth,
    with ties, boosts, repeated and weighted terms, on one thread or two."""
    dataset = load_beir(datasets_dir() / "scifact")
    queries = dict(list(dataset.queries.items())[:80]) | {
        "twice": "cell cell membrane",
        "unknown": "zzzqqq",
        "common": "the of and",
    }
    retriever = BM25Retriever(fields=fields, score_ties="raw", threads=1)
    retriever.index(dataset.corpus, Cache(tmp_path))
    weighted = {"w": {"cell": 0.7, "membran": 1.3, "protein": 2.0}}
    runs = []
    for walk, block, threads in ((0.0, 1 << 17, 1), (float("inf"), 1 << 17, 1), (0.0, 61, 2), (1.0, 1000, 1)):
        monkeypatch.setattr(bm25_lucene, "WALK_SHARE", walk)
        monkeypatch.setattr(bm25_lucene, "BLOCK", block)
        retriever.threads = threads
        found = [
            {qid: list(scores.items()) for qid, scores in retriever.search(queries, depth).scores.items()}
            for depth in (1, 7, 100, 6000)
        ]
        runs.append(found + ([retriever.search_weighted(weighted, 50).scores] if fields is None else []))
    assert runs[0] == runs[1] == runs[2] == runs[3] and runs[0]


def clause_order(field, query: dict[str, float]) -> list[tuple[int, int, float | None]]:
    """A query's clauses in one field as written out: (begin, end, w) of each, w = boost · idf in
    float32, or None for boost 1 (its ``unit`` scores); boost 1 first by term row, then the others in
    query order."""
    found = [
        (row, F32(weight) * F32(field.boost) if field.boost != 1.0 else F32(weight))
        for term, weight in query.items()
        if (row := field.vocabulary.get(term)) is not None
    ]
    spans = [(field.indptr[row], field.indptr[row + 1], None) for row in sorted(r for r, b in found if b == 1)]
    return spans + [(field.indptr[row], field.indptr[row + 1], b * field.idf[row]) for row, b in found if b != 1]


def plain_top(fields: list, query: dict[str, float], ties: np.ndarray, k: int) -> tuple[list[int], bytes]:
    """The top ``k`` as written out: per field a float64 array of every document's sum, clause after
    clause in :func:`clause_order`; fields added (each rounded to float32 first where a boost is not 1);
    the float32 scores sorted by score, then tie key, both descending."""
    nested = any(field.boost != 1.0 for field in fields)
    total = np.zeros(fields[0].n_docs)
    for field in fields:
        summed = np.zeros(field.n_docs)
        for begin, end, weight in clause_order(field, query):
            values = field.unit[begin:end] if weight is None else weight - weight / field.data[begin:end]
            summed[field.indices[begin:end]] += values.astype(np.float64)  # a term's documents are distinct
        total += summed.astype(F32).astype(np.float64) if nested else summed
    scores = total.astype(F32)
    order = sorted(np.flatnonzero(scores > 0).tolist(), key=lambda d: (-scores[d], -int(ties[d])))[:k]
    return [bm25_lucene.LOW_HALF - int(ties[d]) for d in order], scores[order].tobytes()


def random_field(rng: np.random.Generator, n_docs: int, n_terms: int, boost: float) -> bm25_lucene.FieldIndex:
    """Postings of ``n_terms`` terms over ``n_docs`` documents: a term in every document, a common one
    scoring 1.0, one scoring below a float32 step of 1.0 (sums that tie only in float32), the rest random."""
    rows = [np.arange(n_docs), np.arange(n_docs), np.arange(n_docs)] + [
        np.sort(rng.choice(n_docs, rng.integers(1, n_docs), replace=False)) for _ in range(n_terms - 3)
    ]
    unit = [np.ones(n_docs), rng.uniform(0, 2.0**-23, n_docs)] + [rng.uniform(0, 3, len(r)) for r in rows[2:]]
    indptr = np.cumsum([0] + [len(r) for r in rows])
    return bm25_lucene.FieldIndex(
        boost,
        {f"t{i}": i for i in range(n_terms)},
        rng.uniform(0.1, 4, n_terms).astype(F32),
        rng.uniform(1.01, 3, indptr[-1]).astype(F32),
        np.concatenate(unit).astype(F32),
        np.concatenate(rows).astype(np.int32),
        indptr,
        n_docs,
    )


def test_clauses_count_each_querys_postings_and_slice_by_query() -> None:
    """:meth:`Clauses.postings` is the sum of each query's terms' document frequencies over the fields
    that know them; :meth:`Clauses.of_queries` equals the clauses built from those queries alone."""
    rng = np.random.default_rng(5)
    fields = [random_field(rng, 50, 8, 1.0), random_field(rng, 50, 8, 2.0)]
    del fields[1].vocabulary["t7"]
    queries = [{"t0": 1.0, "t7": 2.0}, {}, {"nope": 1.0}, {"t3": 1.0, "t5": 0.5, "t6": 1.0}, {"t7": 1.0}]
    clauses = bm25_lucene.clause_arrays(fields, queries)
    frequencies = [
        sum(
            int(f.indptr[f.vocabulary[t] + 1] - f.indptr[f.vocabulary[t]])
            for f in fields
            for t in q
            if t in f.vocabulary
        )
        for q in queries
    ]
    assert clauses.postings().tolist() == frequencies and frequencies[0] > 0 and frequencies[1:3] == [0, 0]
    for first, last in ((0, 5), (1, 4), (3, 5), (2, 2)):
        part, alone = clauses.of_queries(first, last), bm25_lucene.clause_arrays(fields, queries[first:last])
        for name in ("field", "begin", "end", "weight", "is_unit", "starts"):
            assert getattr(part, name).tolist() == getattr(alone, name).tolist(), (first, last, name)


@pytest.mark.parametrize("boosts", [(1.0,), (1.0, 1.0), (2.0, 0.5)])
def test_the_compiled_top_equals_a_plain_sum_and_sort(boosts: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    """:func:`ranked` against :func:`plain_top` on random postings: clauses of boost 1 and others,
    terms in one field only, float32 ties between different float64 sums, any depth, any block."""
    rng = np.random.default_rng(11)
    n_docs = 700
    fields = [random_field(rng, n_docs, 12, boost) for boost in boosts]
    del fields[-1].vocabulary["t11"]  # a term of the first field only, where there are two
    ties = bm25_lucene.tie_keys(rng.permutation(n_docs))
    queries = [{"t0": 1.0, "t1": 1.0}, {"t5": 2.0, "t11": 1.0, "t3": 0.5}, {"t9": 1.0}, {"nope": 1.0}, {}]
    queries += [{f"t{t}": float(rng.choice([1, 1, 2, 0.7])) for t in rng.choice(12, 4)} for _ in range(30)]
    for block, walk in ((1 << 17, 0.25), (64, 0.0), (97, float("inf"))):
        monkeypatch.setattr(bm25_lucene, "BLOCK", block)
        monkeypatch.setattr(bm25_lucene, "WALK_SHARE", walk)
        for k in (0, 1, 2, 17, 100, n_docs):
            ranks, values, lengths = bm25_lucene.ranked(fields, bm25_lucene.clause_arrays(fields, queries), ties, k)
            ends = np.cumsum(lengths)
            for query, end, length in zip(queries, ends.tolist(), lengths.tolist()):
                expected_ranks, expected_scores = plain_top(fields, query, ties, k)
                assert ranks[end - length : end].tolist() == expected_ranks, (block, walk, k, query)
                assert values[end - length : end].tobytes() == expected_scores, (block, walk, k, query)
