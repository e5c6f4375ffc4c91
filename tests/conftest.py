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
