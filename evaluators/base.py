"""The evaluator plugin API and aggregation (mean, standard deviation, bootstrap 95% CI).

An evaluator declares the metric names it provides (``provides()``: name -> one-line description;
``@k`` marks a cutoff), says whether it applies to the data (``applies_to``) and scores one run per
query (``evaluate`` -> DataFrame indexed by query id, one column per metric). ``counted`` says which
queries enter the mean. Built-ins are registered in the ``ragtrack.evaluators`` entry-point group
exactly like third-party evaluators.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
import unicodedata

from typing import Annotated, TYPE_CHECKING

import numpy as np

from pydantic import Field

from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.runs import Run
from ragtrack.core.settings import ComponentSettings, MetricName

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack eval` scores without pandas

Qrels = dict[str, dict[str, int]]


def divide(numerator: np.ndarray, denominator: np.ndarray) -> np.ndarray:
    """Element-wise ratio that is 0 where the denominator is 0 (the rank metrics' convention)."""
    denominator = np.asarray(denominator, dtype=float)
    return np.divide(numerator, denominator, out=np.zeros(np.broadcast(numerator, denominator).shape), where=denominator > 0)


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


@dataclass
class EvalInput:
    """Everything an evaluator may look at for one system."""

    qrels: Qrels
    run: Run
    queries: dict[str, str] = field(default_factory=dict)
    answers: dict[str, list[str]] = field(default_factory=dict)
    generated: dict[str, str] = field(default_factory=dict)
    corpus: Corpus | None = None  # passage texts, for metrics that read what was retrieved
    context_run: Run | None = None  # the passages (ids in ``corpus``) a generator reads; chunks of a chunked corpus

    @property
    def context(self) -> Run:
        """The ranking of the passages a generator reads: ``context_run``, else ``run`` (unchunked)."""
        return self.context_run or self.run


class EvaluatorSettings(ComponentSettings):
    """An evaluator plugin's common keys; each metric must be one the evaluator provides (checked by the
    job's validation, which knows the evaluator)."""

    metrics: Annotated[list[MetricName], Field(min_length=1)] | None = None


class Evaluator(ABC):
    """Base class of every evaluator; ``metrics`` are the names requested in the config."""
    settings_schema = EvaluatorSettings

    def __init__(self, metrics: Sequence[str] | None = None):
        self.metrics = list(metrics) if metrics else self.default_metrics()

    def _require_known_metrics(self, label: str) -> None:
        """Fail in one line when a requested metric is not one this evaluator provides."""
        unknown = [m for m in self.metrics if m not in self.provides()]
        if unknown:
            raise RagtrackError(f"{label}: unknown metrics {unknown}; known: {', '.join(self.provides())}{did_you_mean(unknown[0], self.provides())}")

    @classmethod
    @abstractmethod
    def provides(cls) -> dict[str, str]:
        """Metric names (``ndcg@k`` style for cutoffs) with a one-line description."""

    @classmethod
    def handles(cls, metric: str) -> bool:
        base, _, cutoff = metric.partition("@")
        return metric in cls.provides() or (bool(cutoff) and f"{base}@k" in cls.provides())

    def default_metrics(self) -> list[str]:
        return [name for name in self.provides() if "@k" not in name]

    def applies_to(self, data: EvalInput) -> bool:
        return True

    @abstractmethod
    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        """Per-query scores: index = query id, one column per requested metric."""

    def unsent_followups(self) -> int:
        """After an :meth:`evaluate` whose chat client was offline (a dry run): the most requests it
        would still have sent for that system had the replies it could not get arrived (later rounds
        built from earlier replies); 0 for an evaluator that asks everything up front."""
        return 0

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        """Which queries enter the aggregate (default: all)."""
        import pandas as pd

        return pd.Series(True, index=per_query.index)


BOOTSTRAP_BLOCK_CELLS = 1 << 21  # resample × query draws held at once: ~16 MiB of draws, as much again of counts


def bootstrap_means(values: np.ndarray, resamples: int = 1000, seed: int = 0, block_cells: int = BOOTSTRAP_BLOCK_CELLS) -> np.ndarray:
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
        means[start:start + rows] = counts @ values / n
    return means


def aggregate(per_query: pd.DataFrame, counted: pd.Series | None = None, resamples: int = 1000, seed: int = 0) -> pd.DataFrame:
    """Mean, standard deviation (ddof=1) and percentile-bootstrap 95% CI of each column.

    The bootstrap draws ``resamples`` query samples with replacement (seeded, same draws for every
    column, so CIs of different metrics are comparable) and takes the 2.5/97.5 percentiles of the means;
    it streams over blocks of resamples (:func:`bootstrap_means`), so memory stays bounded at any n.
    Returns a frame indexed by metric with columns ``mean std ci_low ci_high n``. A NaN among the counted
    queries is a query that metric does not apply to: that column is aggregated over its other queries.
    """
    import pandas as pd

    frame = per_query if counted is None else per_query[counted.reindex(per_query.index, fill_value=False)]
    if frame.isna().to_numpy().any():
        return pd.concat([aggregate(frame[[column]].dropna(), None, resamples, seed) for column in frame.columns])
    return pd.DataFrame(summarize(frame.to_numpy(dtype=float), resamples, seed), index=frame.columns)


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
