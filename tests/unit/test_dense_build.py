"""The dense build streams the embeddings to their file a block of texts at a time: the bytes
``np.save`` wrote for the whole array, with one block of vectors held at once."""

from __future__ import annotations

import io
import tracemalloc

import numpy as np
import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.retrievers import dense
from ragtrack.retrievers.dense import EMBEDDINGS, DenseRetriever, save_rows
from ragtrack.retrievers.encoders import HashingEncoder
from tests.support import TOY


def saved(array: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


@pytest.mark.parametrize(
    "rows, columns, block", [(10, 5, 3), (10, 5, 10), (10, 5, 64), (0, 5, 4), (70_000, 384, 65_536)]
)
def test_rows_written_in_blocks_are_the_bytes_of_np_save(tmp_path, rows, columns, block) -> None:
    array = np.random.default_rng(0).standard_normal((rows, columns), dtype=np.float32)
    save_rows(tmp_path / "e.npy", rows, iter([array[start : start + block] for start in range(0, max(rows, 1), block)]))
    assert (tmp_path / "e.npy").read_bytes() == saved(array)


def test_a_short_or_long_stream_is_refused(tmp_path) -> None:
    block = np.zeros((3, 2), dtype=np.float32)
    with pytest.raises(RagtrackError, match="4 rows expected, 3 written"):
        save_rows(tmp_path / "e.npy", 4, iter([block]))
    with pytest.raises(RagtrackError, match="2 rows expected, 3 written"):
        save_rows(tmp_path / "e.npy", 2, iter([block]))


class Counting(HashingEncoder):
    """The hashing encoder, recording how many texts each call encodes."""

    def __init__(self, **options):
        super().__init__(**options)
        self.sizes: list[int] = []

    def encode(self, texts, kind="document", progress=False):
        self.sizes.append(len(texts))
        return super().encode(texts, kind, progress)


def test_the_build_encodes_a_block_at_a_time_and_writes_what_one_call_gives(tmp_path, monkeypatch) -> None:
    corpus = load_beir(TOY).corpus
    monkeypatch.setattr(dense, "ENCODE_BLOCK", 2)
    encoder = Counting()
    retriever = DenseRetriever(encoder)
    retriever.index(corpus, Cache(tmp_path))
    assert encoder.sizes == [2] * (len(corpus) // 2) + [len(corpus) % 2] * (len(corpus) % 2)
    written = next(tmp_path.rglob(EMBEDDINGS)).read_bytes()
    assert written == saved(HashingEncoder().encode(corpus.full_texts()))


def test_the_build_holds_one_block_not_the_corpus(tmp_path, monkeypatch) -> None:
    """Peak traced memory of writing 40 blocks is that of writing one (the blocks are not kept)."""
    block = np.ones((4096, 256), dtype=np.float32)  # 4 MB

    def peak(blocks: int) -> int:
        tracemalloc.start()
        save_rows(tmp_path / f"{blocks}.npy", blocks * len(block), (block.copy() for _ in range(blocks)))
        _, top = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return top

    assert peak(40) < 2.5 * block.nbytes and peak(40) < peak(1) + block.nbytes
