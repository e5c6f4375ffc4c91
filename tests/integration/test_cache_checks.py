"""The cache does not trust what it finds: weights changed in place re-encode, a cut run file,
embeddings file or Chroma index is rebuilt with one warning line, a symlinked entry is refused and left
alone."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.cache import MANIFEST, Cache
from ragtrack.core.data import Dataset, load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.stages import StageContext, StageOutput, read_cached_run
from ragtrack.evaluators.ranking import ndcg, rank_grades
from ragtrack.retrievers.base import Retriever
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.retrievers.dense import DenseRetriever
from ragtrack.retrievers.encoders import HashingEncoder, SentenceTransformerEncoder
from tests.support import TOY, save_tiny_cross_encoder


@pytest.fixture(scope="module")
def toy() -> Dataset:
    return load_beir(TOY)


def _produce(retriever: Retriever, toy: Dataset, cache: Cache) -> StageOutput:
    read_cached_run.cache_clear()  # as a new process would: the run is read from its file
    return retriever.produce({}, StageContext(toy, toy.corpus, cache, 10, 10))


def _ndcg10(output: StageOutput, toy: Dataset) -> float:
    return float(ndcg(rank_grades(output.run.scores, toy.qrels), 10).mean())


def _one_warning(caplog: pytest.LogCaptureFixture, entry: Path) -> None:
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1 and str(entry) in warnings[0] and "rebuilding" in warnings[0], warnings


def test_a_run_file_cut_to_a_third_is_rebuilt(toy: Dataset, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = Cache(tmp_path)
    first = _produce(BM25Retriever(), toy, cache)
    (entry,) = [p for p in (tmp_path / "run").iterdir() if p.is_dir()]
    run_file = entry / "run.trec"
    run_file.write_bytes(run_file.read_bytes()[: run_file.stat().st_size // 3])
    with caplog.at_level(logging.INFO):
        again = _produce(BM25Retriever(), toy, cache)
    _one_warning(caplog, entry)
    assert again.efficiency["run_from_cache"] == 0.0 and again.run.scores == first.run.scores
    assert _ndcg10(again, toy) == _ndcg10(first, toy) > 0


def test_cut_embeddings_are_rebuilt(toy: Dataset, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cache = Cache(tmp_path)
    retriever = DenseRetriever(HashingEncoder())
    retriever.index(toy.corpus, cache)
    (entry,) = [p for p in (tmp_path / "embeddings").iterdir() if p.is_dir()]
    vectors = np.load(entry / "embeddings.npy")
    with open(entry / "embeddings.npy", "r+b") as file:
        file.truncate(file.seek(0, 2) - 100)
    with caplog.at_level(logging.INFO):
        DenseRetriever(HashingEncoder()).index(toy.corpus, cache)
    _one_warning(caplog, entry)
    assert [b.split("/")[0] for b in cache.builds] == ["embeddings", "embeddings"]
    assert np.array_equal(np.load(entry / "embeddings.npy"), vectors)


def test_weights_changed_in_place_are_encoded_again(toy: Dataset, tmp_path: Path) -> None:
    model, cache = save_tiny_cross_encoder(tmp_path / "model", seed=0), Cache(tmp_path / "cache")
    first = _produce(DenseRetriever(SentenceTransformerEncoder(model=str(model))), toy, cache)
    save_tiny_cross_encoder(model, seed=1)  # a fine-tune saved to the same folder: the same file sizes
    second = _produce(DenseRetriever(SentenceTransformerEncoder(model=str(model))), toy, cache)
    assert [b.split("/")[0] for b in cache.builds] == ["embeddings", "run"] * 2
    assert second.run.scores != first.run.scores


def test_a_symlinked_run_entry_is_one_line_and_its_target_is_untouched(toy: Dataset, tmp_path: Path) -> None:
    cache = Cache(tmp_path / "cache")
    _produce(BM25Retriever(), toy, cache)
    (entry,) = [p for p in (tmp_path / "cache" / "run").iterdir() if p.is_dir()]
    target = tmp_path / "elsewhere"
    entry.rename(target)
    entry.symlink_to(target, target_is_directory=True)
    before = {p.name: p.read_bytes() for p in target.iterdir()}
    with pytest.raises(RagtrackError, match="a symbolic link in the cache") as raised:
        _produce(BM25Retriever(), toy, cache)
    assert "\n" not in str(raised.value) and str(entry) in str(raised.value)
    assert entry.is_symlink() and {p.name: p.read_bytes() for p in target.iterdir()} == before


def _approximate(toy: Dataset, cache: Cache) -> DenseRetriever:
    retriever = DenseRetriever(HashingEncoder(), search="approximate")
    retriever.index(toy.corpus, cache)
    return retriever


def _chroma_entry(root: Path) -> Path:
    (entry,) = [p for p in (root / "chroma").iterdir() if p.is_dir() and not p.name.startswith(".")]
    return entry


def test_a_chroma_entry_records_checksums_and_stays_intact_after_chroma_rewrites_it(
    toy: Dataset, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Opening the folder rewrites Chroma's files; the checksums are taken again then, so the next job
    finds the entry intact (no warning, no rebuild) and gets the same run."""
    cache = Cache(tmp_path)
    first = _approximate(toy, cache)
    entry = _chroma_entry(tmp_path)
    files = json.loads((entry / MANIFEST).read_text())["files"]
    assert "chroma.sqlite3" in files and any(name.endswith("data_level0.bin") for name in files)
    with caplog.at_level(logging.INFO):
        for _ in range(2):
            again = _approximate(toy, cache)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING] and [
        b.split("/")[0] for b in cache.builds
    ] == ["embeddings", "chroma"]
    assert again.search(toy.queries, 5).scores == first.search(toy.queries, 5).scores


@pytest.mark.parametrize("damage", ["cut", "same size", "no checksums"])
def test_a_damaged_chroma_entry_is_rebuilt_with_one_warning(
    toy: Dataset, tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache = Cache(tmp_path)
    opened = _approximate(toy, cache)
    first = opened.search(toy.queries, 5).scores
    opened.close()  # an open client of the folder would keep serving the old index from Chroma's in-process state
    entry = _chroma_entry(tmp_path)
    (index_file,), database = entry.glob("*/data_level0.bin"), entry / "chroma.sqlite3"
    if damage == "cut":  # the HNSW graph
        index_file.write_bytes(index_file.read_bytes()[: index_file.stat().st_size // 3])
    elif damage == "same size":  # bytes of the database (a toy collection's vectors live there) changed in place
        data = bytearray(database.read_bytes())
        data[len(data) // 2 : len(data) // 2 + 64] = bytes(255 - b for b in data[len(data) // 2 : len(data) // 2 + 64])
        database.write_bytes(bytes(data))
    else:  # an entry of an older ragtrack: Chroma folders recorded no checksums
        manifest = json.loads((entry / MANIFEST).read_text())
        (entry / MANIFEST).write_text(json.dumps({**manifest, "files": {}}))
    with caplog.at_level(logging.INFO):
        again = _approximate(toy, cache)
    _one_warning(caplog, entry)
    assert [b.split("/")[0] for b in cache.builds] == ["embeddings", "chroma", "chroma"]
    matched = lambda scores: {q: {d: s for d, s in ranked.items() if s > 0} for q, ranked in scores.items()}  # noqa: E731
    assert matched(again.search(toy.queries, 5).scores) == matched(
        first
    )  # documents of similarity 0 tie: HNSW orders them as it was built


@pytest.mark.parametrize("where", ["entry", "file"])
def test_a_symlinked_chroma_entry_or_file_is_one_line_and_left_alone(toy: Dataset, tmp_path: Path, where: str) -> None:
    cache = Cache(tmp_path / "cache")
    _approximate(toy, cache)
    entry = _chroma_entry(tmp_path / "cache")
    link = entry if where == "entry" else entry / "chroma.sqlite3"
    target = tmp_path / "elsewhere"
    link.rename(target)
    link.symlink_to(target, target_is_directory=where == "entry")
    before = (
        target.read_bytes() if target.is_file() else {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    )
    with pytest.raises(RagtrackError, match="a symbolic link in the cache") as raised:
        _approximate(toy, cache)
    assert "\n" not in str(raised.value) and str(link) in str(raised.value) and link.is_symlink()
    assert before == (
        target.read_bytes() if target.is_file() else {p.name: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    )
