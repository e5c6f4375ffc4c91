"""Seeded k-fold partitions of query ids: one cut shared by every protocol that holds queries out
(``ragtrack compare --folds``, learned fusions cross-fitted with ``train.folds``), so the same ``K`` and
seed give the same folds everywhere."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def query_folds(queries: Sequence[str], folds: int, seed: int) -> list[list[str]]:
    """``queries`` shuffled with ``seed`` (from their sorted order: the folds never depend on the order
    they came in) and cut into ``folds`` near-equal parts (``numpy.array_split``); the caller checks
    2 ≤ ``folds`` ≤ len(queries)."""
    shuffled = np.random.default_rng(seed).permutation(np.array(sorted(queries), dtype=object))
    return [part.tolist() for part in np.array_split(shuffled, folds)]
