"""The evaluator plugin API and aggregation (mean, standard deviation, bootstrap 95% CI).

An evaluator declares the metric names it provides (``provides()``: name -> one-line description;
``@k`` marks a cutoff), says whether it applies to the data (``applies_to``) and scores one run per
query (``evaluate`` -> DataFrame indexed by query id, one column per metric). ``counted`` says which
queries enter the mean. Built-ins are registered in the ``ragtrack.evaluators`` entry-point group
exactly like third-party evaluators. The qrels type, cutoffs, the bootstrap and :func:`summarize` are
in ``common.py`` (no pydantic: ``ragtrack eval`` imports only them) and are exported here too.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Annotated

from pydantic import Field

from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError, did_you_mean
from ragtrack.core.runs import Run
from ragtrack.core.settings import ComponentSettings, MetricName
from ragtrack.evaluators.common import BOOTSTRAP_BLOCK_CELLS, Qrels, bootstrap_means, divide, parse_cutoff, summarize  # noqa: F401  (the plugin API)

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack eval` scores without pandas


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


class MetricSource(ABC):
    """What every plugin of the ``evaluators`` group is: named metrics it provides (:meth:`provides`),
    ``metrics`` the ones the config asks for. Two kinds: an :class:`Evaluator` scores each system's
    queries as the system is made; a :class:`SystemComparer` (pairwise judging) runs once every system
    has answered and scores pairs of systems."""

    settings_schema = EvaluatorSettings

    def __init__(self, metrics: Sequence[str] | None = None):
        self.metrics = list(metrics) if metrics else self.default_metrics()

    def _require_known_metrics(self, label: str) -> None:
        """Fail in one line when a requested metric is not one this evaluator provides."""
        unknown = [m for m in self.metrics if m not in self.provides()]
        if unknown:
            raise RagtrackError(
                f"{label}: unknown metrics {unknown}; known: {', '.join(self.provides())}{did_you_mean(unknown[0], self.provides())}"
            )

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


class SystemComparer(MetricSource):
    """Scores pairs of systems from all their answers, after every system has answered.
    ``human_labels``: people's verdicts on the same pairs, for the agreement figures (none by default)."""

    human_labels = None

    @abstractmethod
    def judge(
        self, answers: Mapping[str, Mapping[str, str]], queries: Mapping[str, str], golds: Mapping[str, list[str]]
    ) -> tuple[dict[str, dict], list[dict]]:
        """Figures by pair (``"a vs b"``) from ``answers`` (system -> query id -> answer), and one
        record per pair and query (``pair``, ``qid``, ``outcome``: win / tie / loss of the first)."""


class Evaluator(MetricSource):
    """Scores one system's queries (:meth:`evaluate`), where its inputs allow (:meth:`applies_to`)."""

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


def aggregate(
    per_query: pd.DataFrame, counted: pd.Series | None = None, resamples: int = 1000, seed: int = 0
) -> pd.DataFrame:
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
