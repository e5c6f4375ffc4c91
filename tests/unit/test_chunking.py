"""Chunkers keep their overlap, max-passage mapping keeps documents unique and metrics in bounds."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from ragtrack.core.data import Corpus
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.ranking import score_ranking
from ragtrack.pipeline.execution.executor import build_chunker as build_configured
from ragtrack.retrievers.chunking import (
    CharChunker,
    ChunkPlan,
    SentenceChunker,
    TokenChunker,
    judgment_level,
    max_passage,
    resolve_overlap,
    sentence_spans,
    windows,
)

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "x",
    "de",
    "Fig.",
    "3.5",
    "résumé",
    "(n",
    "=",
    "17)",
    "microm2/ms",
    "p-value",
    "supercalifragilisticexpialidocious",
    "DNA",
    "e.g.",
    "well-known",
    "a",
]
BOUNDED = [
    "ndcg@1",
    "ndcg@5",
    "ndcg@10",
    "ndcg",
    "recall@5",
    "recall@100",
    "p@1",
    "p@10",
    "hit@10",
    "mrr",
    "map",
    "r-precision",
    "f1@10",
    "err@10",
]


def random_text(rng: random.Random) -> str:
    """Words, sentence ends, runs of spaces and blank lines; sometimes empty or all whitespace."""
    if rng.random() < 0.05:
        return rng.choice(["", "   ", "\n\n"])
    pieces = []
    for _ in range(rng.randint(1, 120)):
        word = rng.choice(WORDS)
        pieces.append(word.capitalize() if rng.random() < 0.2 else word)
        pieces.append(rng.choice([" ", " ", " ", "  ", ". ", "! ", "? ", ".\n\n", "\n", "\t", '? "']))
    return "".join(pieces)


def units_inside(units: list[tuple[int, int]], span: tuple[int, int]) -> set[int]:
    return {i for i, (start, end) in enumerate(units) if span[0] <= start and end <= span[1]}


@pytest.fixture(scope="module")
def minilm_chunker_factory():
    return lambda size, overlap: TokenChunker(size=size, overlap=overlap, model="all-MiniLM-L6-v2")


@pytest.mark.parametrize("seed", range(200))
def test_windows_share_exactly_the_overlap(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 20)
    overlap, count = rng.randint(0, size - 1), rng.randint(0, 100)
    found = windows(count, size, overlap)
    assert (found[-1][1] == count) if count else found == []
    covered = set()
    for (a, b), (c, d) in zip(found, found[1:]):
        assert b - a == size and b - c == overlap and c > a
    for a, b in found:
        assert 0 < b - a <= size
        covered |= set(range(a, b))
    assert covered == set(range(count))


@pytest.mark.parametrize("kind", ["minilm", "words", "sentences"])
@pytest.mark.parametrize("seed", range(25))
def test_unit_chunkers_share_exactly_the_overlap_and_cover_every_unit(
    kind: str, seed: int, minilm_chunker_factory
) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 12 if kind == "sentences" else 40)
    overlap = rng.randint(0, size - 1)
    chunker = {"minilm": minilm_chunker_factory, "words": TokenChunker, "sentences": SentenceChunker}[kind](
        size=size, overlap=overlap
    )
    texts = [random_text(rng) for _ in range(5)]
    for text, units, spans in zip(texts, chunker.units(texts), chunker.spans(texts)):
        inside = [units_inside(units, span) for span in spans]
        assert set().union(*inside) == set(range(len(units)))
        for chunk in inside:
            assert 0 < len(chunk) <= size
        for first, second in zip(inside, inside[1:]):
            assert len(first & second) == overlap and min(second) > min(first)
        for start, end in spans:
            assert text[start:end] == text[start:end].strip() != ""


@pytest.mark.parametrize("seed", range(100))
def test_char_chunks_fit_the_size_share_at_most_the_overlap_and_cover_the_text(seed: int) -> None:
    rng = random.Random(seed)
    size = rng.randint(1, 300)
    overlap = rng.randint(0, size - 1)
    text = random_text(rng)
    spans = CharChunker(size=size, overlap=overlap).char_spans(text)
    covered = set()
    for start, end in spans:
        assert 0 < end - start <= size and text[start:end] == text[start:end].strip()
        covered |= set(range(start, end))
    assert {i for i, ch in enumerate(text) if not ch.isspace()} <= covered
    for (a, b), (c, d) in zip(spans, spans[1:]):
        assert a < c and max(0, b - c) <= overlap


def test_char_chunks_break_at_whitespace() -> None:
    assert [
        ("one two three four five")[s:e]
        for s, e in CharChunker(size=10, overlap=0).char_spans("one two three four five")
    ] == ["one two", "three four", "five"]
    assert CharChunker(size=4, overlap=0).char_spans("abcdefghij") == [
        (0, 4),
        (4, 8),
        (8, 10),
    ]  # no whitespace: hard cuts


def test_sentence_splitter() -> None:
    text = 'It works. "Quoted!" he said? 3 cases (n = 17).\n\nnew paragraph. lower case stays e.g. here'
    assert [text[s:e] for s, e in sentence_spans(text)] == [
        "It works.",
        '"Quoted!" he said?',
        "3 cases (n = 17).",
        "new paragraph. lower case stays e.g. here",
    ]


def test_overlap_may_be_a_fraction_and_must_stay_below_the_size() -> None:
    assert resolve_overlap(64, 0.25) == 16 and resolve_overlap(64, 10) == 10
    for size, overlap in [(10, 10), (0, 0), (5, -1)]:
        with pytest.raises(RagtrackError):
            resolve_overlap(size, overlap)


def make_corpus() -> Corpus:
    return Corpus(
        ids=["a", "b#0", "c"],
        titles=["Title A", "", "Only title"],
        texts=["one two three four five six seven", "eight nine", ""],
        hash="h",
    )


def build_chunker(settings: dict):
    """The chunker a ``chunking`` config names, as the experiment's chunking stage builds it."""
    return build_configured(settings)[0]


def test_chunk_corpus_keeps_parent_position_title_and_trec_safe_ids() -> None:
    chunked = build_chunker({"type": "tokens", "size": 3, "overlap": 1}).chunk(make_corpus())
    assert chunked.corpus.ids == ["a#0", "a#1", "a#2", "b#0#0", "c#0"]
    assert chunked.parents == ["a", "a", "a", "b#0", "c"] and chunked.positions == [0, 1, 2, 0, 0]
    assert chunked.corpus.texts[:3] == ["one two three", "three four five", "five six seven"]
    assert chunked.corpus.titles == ["Title A"] * 3 + ["", "Only title"]
    assert not any(ch.isspace() for chunk_id in chunked.corpus.ids for ch in chunk_id)
    untitled = build_chunker({"type": "tokens", "size": 3, "overlap": 0, "repeat_title": False}).chunk(make_corpus())
    assert untitled.corpus.texts[0] == "Title A one two" and set(untitled.corpus.titles) == {""}


def test_the_chunker_settings_change_the_corpus_hash() -> None:
    hashes = {
        build_chunker(cfg).chunk(make_corpus()).corpus.hash
        for cfg in (
            {"type": "tokens", "size": 3},
            {"type": "tokens", "size": 4},
            {"type": "tokens", "size": 4, "overlap": 1},
            {"type": "chars", "size": 4, "overlap": 0},
            {"type": "sentences", "size": 4},
        )
    }
    assert len(hashes) == 5 and "h" not in hashes


def test_unknown_chunking_method_and_setting_fail_clearly() -> None:
    assert build_chunker({"type": "none"}) is None
    with pytest.raises(RagtrackError, match="unknown chunker type 'pages'; installed: chars, sentences, tokens"):
        build_chunker({"type": "pages"})
    with pytest.raises(RagtrackError, match="CharChunker.*stride"):
        build_chunker({"type": "chars", "size": 10, "overlap": 0, "stride": 3})


def random_chunk_run(seed: int) -> tuple[dict, Run, dict]:
    """Documents with 1-6 chunks, graded document qrels and a chunk run with ties."""
    rng = random.Random(seed)
    parent_of = {f"d{d}#{n}": f"d{d}" for d in range(40) for n in range(rng.randint(1, 6))}
    chunk_ids = list(parent_of)
    qrels, scores = {}, {}
    for q in range(20):
        qrels[f"q{q}"] = {f"d{d}": rng.choice([0, 1, 1, 2, 3]) for d in rng.sample(range(40), rng.randint(1, 10))}
        retrieved = rng.sample(chunk_ids, rng.randint(0, len(chunk_ids)))
        scores[f"q{q}"] = {c: rng.randint(0, 8) / 2 if rng.random() < 0.5 else rng.uniform(-3, 3) for c in retrieved}
    return parent_of, Run("chunks", scores), qrels


@pytest.mark.parametrize("seed", range(40))
def test_max_passage_lists_each_document_once_with_its_best_chunk_and_metrics_stay_in_bounds(seed: int) -> None:
    parent_of, chunk_run, qrels = random_chunk_run(seed)
    depth = random.Random(seed).choice([5, 10, 100])
    documents = max_passage(chunk_run, parent_of, depth)
    for qid, ranked in documents.rankings():
        doc_ids = [doc_id for doc_id, _ in ranked]
        assert len(doc_ids) == len(set(doc_ids)) <= depth
        best = {}
        for chunk_id, score in chunk_run.ranking(qid):
            best.setdefault(parent_of[chunk_id], score)
        assert all(best[doc_id] == score for doc_id, score in ranked)
        assert doc_ids == [d for d in best][:depth]  # document order = order of first chunks
    table, _ = score_ranking(documents.scores, qrels, BOUNDED)
    assert ((table >= 0) & (table <= 1 + 1e-12)).all().all()


def test_judgment_level_is_detected_and_mixtures_are_refused(tmp_path: Path) -> None:
    chunked = build_chunker({"type": "tokens", "size": 3}).chunk(make_corpus())
    assert judgment_level({"q": {"a": 1, "c": 0}}, chunked, tmp_path) == "document"
    assert judgment_level({"q": {"a#1": 1, "b#0#0": 0}}, chunked, tmp_path) == "chunk"
    with pytest.raises(InputError, match="mix document ids"):
        judgment_level({"q": {"a": 1, "a#1": 1}}, chunked, tmp_path)


def test_plan_maps_deeper_chunk_runs_and_gives_generators_the_best_chunks() -> None:
    chunked = build_chunker({"type": "tokens", "size": 3}).chunk(make_corpus())
    plan = ChunkPlan(chunked, "document", oversample=4)
    assert plan.search_depth(10) == 40 and plan.corpus(make_corpus()) is chunked.corpus
    bm25 = Run("bm25", {"q": {"a#2": 3.0, "a#0": 2.0, "c#0": 1.0}})
    dense = Run("dense", {"q": {"c#0": 0.9, "a#1": 0.8}})
    assert plan.evaluated(bm25, 1).scores == {"q": {"a": 3.0}}
    fused = Run("hybrid", {"q": {"c": 0.5, "a": 0.4}})
    assert plan.passages(fused, {"bm25": bm25, "dense": dense}).scores == {"q": {"c#0": 0.5, "a#2": 0.4}}
    assert plan.params()["chunking.size"] == 3 and plan.stats(make_corpus()) == {"chunks": 5.0}
    unchunked = ChunkPlan()
    assert unchunked.evaluated(bm25, 1) is bm25 and unchunked.search_depth(10) == 10
    assert unchunked.params() == {"chunking.method": "none"} and unchunked.stats(make_corpus()) == {"chunks": 3.0}
