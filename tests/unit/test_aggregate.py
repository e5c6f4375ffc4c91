"""The bootstrap of ``aggregate`` streams over blocks of resamples: the same CIs whatever the block
size (equal to one (resamples, n) draw, as before), and bounded memory at 200k queries."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from ragtrack.evaluators.base import bootstrap_means, summarize


@pytest.mark.parametrize("n, block_cells", [(1, 1), (37, 100), (1000, 4096), (5000, 10**9)])
def test_blocks_give_the_means_of_one_draw(n: int, block_cells: int) -> None:
    """Against the draws of one (resamples, n) call, summed directly (the former implementation)."""
    values = np.random.default_rng(n).random((n, 3))
    draws = np.random.default_rng(7).integers(0, n, size=(500, n))
    np.testing.assert_allclose(
        bootstrap_means(values, 500, seed=7, block_cells=block_cells), values[draws].mean(axis=1), rtol=0, atol=1e-12
    )


def test_bootstrap_memory_is_bounded_at_200k_queries() -> None:
    """summarize of 200,000 queries × 18 metrics, 1,000 resamples: the peak of new allocations stays
    under 100 MiB (one (resamples, n) draw needed 1.6 GB for the draws alone)."""
    values = np.random.default_rng(0).random((200_000, 18))
    tracemalloc.start()
    try:
        stats = summarize(values, resamples=1000, seed=0)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * 2**20, f"peak {peak / 2**20:.0f} MiB"
    assert np.all(stats["ci_low"] < stats["mean"]) and np.all(stats["mean"] < stats["ci_high"])
