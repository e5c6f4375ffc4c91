"""What the evaluators share below the plugin API (``base.py``, whose settings models need pydantic):
the qrels type, the cutoff of a metric name, the rank metrics' division, and the summary of per-query
values (mean, standard deviation, bootstrap 95% CI). Light to import: ``ragtrack eval`` scores and
summarizes with these and numpy only."""

from __future__ import annotations

import unicodedata

import numpy as np

from ragtrack.core.errors import RagtrackError, did_you_mean

Qrels = dict[str, dict[str, int]]


def divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Element-wise ratio that is 0 where the denominator is 0 (the rank metrics' convention)."""
    denominator = np.asarray(denominator, dtype=float)
    return np.divide(
        numerator, denominator, out=np.zeros(np.broadcast(numerator, denominator).shape), where=denominator > 0
    )


def parse_cutoff(metric: str) -> int:
    """The cutoff k of a metric name ``name@k``: a positive integer in ASCII digits. Anything else
    (``ndcg@0``, ``ndcg@x``, a superscript ``ndcg@¹⁰``, a full-width ``ndcg@１０``) fails in one line,
    suggesting the ASCII spelling when the cutoff is made of other digits."""
    base, _, cutoff = metric.partition("@")
    if cutoff.isascii() and cutoff.isdigit() and int(cutoff) >= 1:
        return int(cutoff)
    digits = [unicodedata.digit(ch, None) for ch in cutoff]
    ascii_cutoff = "".join(map(str, digits)) if cutoff and None not in digits else ""
    hint = did_you_mean(f"{base}@{ascii_cutoff}", [f"{base}@k"]) if ascii_cutoff.strip("0") else f", e.g. {base}@10"
    raise RagtrackError(f"metric {metric!r}: the cutoff must be a positive integer in ASCII digits{hint}")


BOOTSTRAP_BLOCK_CELLS = 1 << 21  # resample × query draws held at once: ~16 MiB of draws, as much again of counts


def bootstrap_means(
    values: np.ndarray, resamples: int = 1000, seed: int = 0, block_cells: int = BOOTSTRAP_BLOCK_CELLS
) -> np.ndarray:
    """(resamples, metrics): column means of ``resamples`` seeded samples of the n rows of ``values``,
    drawn with replacement; mean_r = c_r · values / n with c_r[i] = how often row i is drawn in
    resample r. Drawn in blocks of ⌊block_cells / n⌋ resamples (at least 1), so memory is
    O(block_cells), not O(resamples × n); the generator yields the same draws in blocks as in one
    (resamples, n) call, so the means do not depend on the block size."""
    n = values.shape[0]
    rng = np.random.default_rng(seed)
    block = max(1, block_cells // n)
    means = np.empty((resamples, values.shape[1]))
    for start in range(0, resamples, block):
        rows = min(block, resamples - start)
        cells = np.arange(rows)[:, None] * n + rng.integers(0, n, size=(rows, n))
        counts = np.bincount(cells.ravel(), minlength=rows * n).reshape(rows, n).astype(float)
        means[start : start + rows] = counts @ values / n
    return means


def summarize(values: np.ndarray, resamples: int = 1000, seed: int = 0) -> dict[str, np.ndarray | int]:
    """:func:`aggregate` on a (queries, metrics) array: ``mean std ci_low ci_high`` per column and ``n``.
    Sums run over column-major data (as pandas hands a frame over), so every caller gets the same bits."""
    values = np.asfortranarray(values, dtype=float)
    n = values.shape[0]
    if n == 0:
        nan = np.full(values.shape[1], np.nan)
        return {"mean": nan, "std": nan, "ci_low": nan, "ci_high": nan, "n": 0}
    means = values.mean(axis=0)
    std = values.std(axis=0, ddof=1) if n > 1 else np.zeros(values.shape[1])
    boot = bootstrap_means(values, resamples, seed)
    low, high = np.percentile(boot, [2.5, 97.5], axis=0)
    return {"mean": means, "std": std, "ci_low": low, "ci_high": high, "n": n}
