"""``encoder.distributed=ray``: a local Ray cluster with 2 workers encodes the corpus into the same cache
entry a single-process encode makes, with equal embeddings, also when a worker is killed mid-run."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus
from ragtrack.retrievers.dense import EMBEDDINGS, DenseRetriever
from ragtrack.retrievers.encoders import HashingEncoder

ray = pytest.importorskip("ray", reason="encoder.distributed=ray needs the scale extra (make test-slow installs it)")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster():
    """A local Ray cluster of 2 worker CPUs, shut down after the module."""
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    yield
    ray.shutdown()


def synthetic_corpus(documents: int) -> Corpus:
    words = [f"w{i}" for i in range(5000)]
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(words, size=40)) for _ in range(documents)]
    return Corpus(
        ids=[f"d{i}" for i in range(documents)], titles=[""] * documents, texts=texts, hash=f"synthetic-{documents}"
    )


def embeddings_entry(encoder: HashingEncoder, corpus: Corpus, cache_dir: Path) -> Path:
    """The embeddings cache entry ``DenseRetriever.index`` publishes (its folder)."""
    cache = Cache(cache_dir)
    DenseRetriever(encoder).index(corpus, cache)
    (entry,) = [folder for folder in (cache_dir / "embeddings").iterdir() if (folder / EMBEDDINGS).is_file()]
    return entry


def encoding_actors() -> list[int]:
    """PIDs of the Ray actor processes running the encoder (their process title names the actor class)."""
    pids = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and b"_EncodeBlock" in (proc / "cmdline").read_bytes():
                pids.append(int(proc.name))
        except OSError:
            continue
    return pids


def test_a_ray_encode_lands_in_the_single_process_cache_entry_with_equal_embeddings(cluster, tmp_path: Path) -> None:
    corpus = synthetic_corpus(3000)
    single = embeddings_entry(HashingEncoder(), corpus, tmp_path / "single")
    distributed = embeddings_entry(HashingEncoder(distributed="ray", actors=2), corpus, tmp_path / "ray")
    assert distributed.name == single.name  # the same content-addressed key
    np.testing.assert_allclose(np.load(distributed / EMBEDDINGS), np.load(single / EMBEDDINGS), atol=1e-6, rtol=0)


def test_a_worker_killed_mid_run_is_retried_and_the_embeddings_still_equal(cluster, tmp_path: Path) -> None:
    corpus = synthetic_corpus(60_000)
    killed: list[int] = []

    def kill_one_actor() -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            actors = encoding_actors()
            if actors:
                time.sleep(1.0)  # let it take blocks first
                os.kill(actors[0], signal.SIGKILL)
                killed.append(actors[0])
            time.sleep(0.1)

    killer = threading.Thread(target=kill_one_actor, daemon=True)
    killer.start()
    distributed = embeddings_entry(HashingEncoder(distributed="ray", actors=2), corpus, tmp_path / "ray")
    killer.join()
    assert killed, "no encoding actor was found to kill"
    expected = HashingEncoder().encode(corpus.full_texts())
    np.testing.assert_allclose(np.load(distributed / EMBEDDINGS), expected, atol=1e-6, rtol=0)
