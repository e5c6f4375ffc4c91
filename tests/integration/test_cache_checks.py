"""The cache does not trust what it finds: weights changed in place re-encode, a cut run file or
embeddings file is rebuilt with one warning line, a symlinked entry is refused and left alone."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.cache import Cache
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
    first = _produce(DenseRetriever(SentenceTransformerEncoder(str(model))), toy, cache)
    save_tiny_cross_encoder(model, seed=1)  # a fine-tune saved to the same folder: the same file sizes
    second = _produce(DenseRetriever(SentenceTransformerEncoder(str(model))), toy, cache)
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
