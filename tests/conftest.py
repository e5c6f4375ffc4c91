"""Shared fixtures: the tiny hand-made dataset and random qrels/run generators."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

TESTS = Path(__file__).parent
TOY = TESTS / "data" / "toy"


def random_qrels_and_run(seed: int, queries: int = 30, docs: int = 60) -> tuple[dict, dict]:
    """Random graded qrels (0-3) and a run with ties, short and empty rankings, unjudged documents,
    queries without relevant judgments and queries absent from the run."""
    rng = random.Random(seed)
    doc_ids = [f"d{rng.randrange(10**6)}" for _ in range(docs)]
    qrels, run = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        judged = rng.sample(doc_ids, rng.randint(1, 15))
        qrels[qid] = {d: rng.choice([0, 0, 1, 1, 2, 3]) for d in judged}
        shape = rng.random()
        if shape < 0.1:
            continue  # absent from the run
        depth = 0 if shape < 0.15 else rng.randint(1, 40)
        retrieved = rng.sample(doc_ids, min(depth, len(doc_ids)))
        coarse = rng.random() < 0.5  # coarse scores give many ties
        run[qid] = {d: (rng.randint(0, 5) / 2 if coarse else rng.uniform(-5, 5)) for d in retrieved}
        if not run[qid]:
            run[qid] = {}
    return qrels, run


@pytest.fixture
def toy_path() -> Path:
    return TOY


def random_pairs(seeds: range) -> tuple[dict, dict]:
    """Many random qrels/run pairs as one (query ids ``s<seed>-q<n>``), evaluated in a single call."""
    qrels, run = {}, {}
    for seed in seeds:
        pair_qrels, pair_run = random_qrels_and_run(seed)
        qrels |= {f"s{seed}-{qid}": judged for qid, judged in pair_qrels.items()}
        run |= {f"s{seed}-{qid}": ranked for qid, ranked in pair_run.items()}
    return qrels, run


SWEEP_KS = (1, 10, 30, 60, 100)


@pytest.fixture(scope="session")
def toy_sweep(tmp_path_factory):
    """A real 5-job multirun (``ragtrack run -m experiment=rrf_k`` on the toy dataset, hashing encoder)
    into a temporary SQLite MLflow store; shared by the sweep, compare and UI tests. It runs in a
    subprocess: Chroma's native threads in this process would deadlock tests that fork."""
    import os
    import subprocess
    import sys
    from types import SimpleNamespace

    root = tmp_path_factory.mktemp("sweep")
    command = [sys.executable, "-m", "pipeline.cli", "run", "-m", "experiment=rrf_k", "dataset=toy", "encoder=hashing",
               f"fusion.rrf.k={','.join(map(str, SWEEP_KS))}"]
    done = subprocess.run(command, cwd=root, env={**os.environ, "RAGTRACK_ROOT": str(root)}, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return SimpleNamespace(root=root, uri=f"sqlite:///{root}/mlruns/mlflow.db", experiment="ragtrack-toy",
                           log=done.stdout + done.stderr, ks=SWEEP_KS)
