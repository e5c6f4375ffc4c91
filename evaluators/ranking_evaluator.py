"""The ranking evaluator (the metrics of ``ranking.py`` as an evaluator plugin) and its settings
model; apart from ``ranking.py`` because its pydantic models cost ``ragtrack eval`` a third of its
start-up. ``ragtrack.evaluators.ranking.RankingEvaluator`` and ``.RankingSettings`` name them too."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import ValidationError, field_validator

from ragtrack.core.errors import RagtrackError
from ragtrack.core.settings import Count, ItemError, NonNegativeInt
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings
from ragtrack.evaluators.ranking import (
    COUNT_WITHOUT_RELEVANT,
    DEFAULT_METRICS,
    METRICS,
    RELEVANCE_THRESHOLD,
    WithoutRelevant,
    checked_threshold,
    checked_without_relevant,
    counted_queries,
    describe_metrics,
    parse_metric,
    score_ranking,
)

if TYPE_CHECKING:
    import pandas as pd


class RankingSettings(EvaluatorSettings, extra="forbid"):
    """The rank metrics (metrics.md); ``without_relevant``: whether a judged query without a relevant
    document counts in the means (``count``, trec_eval's rule) or is left out (``exclude``)."""

    relevance_threshold: NonNegativeInt = RELEVANCE_THRESHOLD
    max_grade: Count | None = None
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT

    @field_validator("metrics")
    @classmethod
    def _parsed(cls, metrics: list[str] | None) -> list[str] | None:
        for index, metric in enumerate(metrics or ()):
            try:
                parse_metric(metric)
            except RagtrackError as exc:
                raise ItemError(index, str(exc)) from None
        return metrics


def checked_setting(key: str, value: object, name: str) -> object:
    """``value`` if the setting ``evaluator.ranking.<key>`` allows it (its type in :class:`RankingSettings`),
    else a one-line error naming ``name``."""
    try:
        return getattr(RankingSettings(**{key: value}), key)
    except ValidationError as exc:
        message = exc.errors()[0]["msg"]
        raise RagtrackError(f"{name}: {value!r} is not allowed: {message[:1].lower()}{message[1:]}") from None


class RankingEvaluator(Evaluator):
    """All ranking metrics (see module docstring); ``relevance_threshold`` is trec_eval's ``-l``;
    ``max_grade`` is ERR's g_max (default: the largest grade in the qrels); ``without_relevant``: which
    judged queries enter the means (:func:`counted_rows`)."""

    settings_schema = RankingSettings

    def __init__(
        self,
        metrics: Sequence[str] | None = None,
        relevance_threshold: int = RELEVANCE_THRESHOLD,
        max_grade: int | None = None,
        without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
    ):
        super().__init__(metrics)
        self.relevance_threshold = checked_threshold(relevance_threshold)
        self.max_grade = int(max_grade) if max_grade is not None else None
        self.without_relevant = checked_without_relevant(without_relevant)
        for name in self.metrics:
            parse_metric(name)

    @classmethod
    def provides(cls) -> dict[str, str]:
        return describe_metrics()

    @classmethod
    def handles(cls, metric: str) -> bool:
        return metric.partition("@")[0] in METRICS

    def default_metrics(self) -> list[str]:
        return list(DEFAULT_METRICS)

    def applies_to(self, data: EvalInput) -> bool:
        return bool(data.qrels)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        return score_ranking(data.run.scores, data.qrels, self.metrics, self.relevance_threshold, self.max_grade)[0]

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        """The judged queries :func:`counted_queries` counts (a query missing from the run scores 0)."""
        import pandas as pd

        counted = set(counted_queries(data.qrels, self.relevance_threshold, self.without_relevant))
        return pd.Series([qid in counted for qid in per_query.index], index=per_query.index)
