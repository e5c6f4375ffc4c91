"""Abstention on unanswerable questions: does the generator say "no answer" exactly when it should?

A query whose gold answer list is empty (``"answers": []`` in queries.jsonl) is *unanswerable*; a query
without an ``answers`` field is not annotated and left out. A generated answer equal to ``no_answer``
after normalization (:func:`ragtrack.core.llm.is_abstention`: lower-case, punctuation dropped) *abstains*.

- ``abstention_precision`` = |abstained ∩ unanswerable| / |abstained|: per query, 1 if an abstaining
  query is unanswerable, 0 if it was answerable; queries that answered are NaN (not counted).
- ``abstention_recall`` = |abstained ∩ unanswerable| / |unanswerable|: per query, 1 if an unanswerable
  query abstained, else 0; answerable queries are NaN.
- ``abstention_rate`` = |abstained| / |annotated queries|.

Each mean runs over its own queries (a NaN is a query the metric does not apply to), with the usual
bootstrap CI over them. The answer metrics (``answer_f1``, ...) count answerable queries only, so the
two read side by side: how well it answers what can be answered, and how well it abstains otherwise
(as SQuAD 2.0's HasAns/NoAns split does; Rajpurkar, Jia and Liang, ACL 2018).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ragtrack.core.llm import is_abstention
from ragtrack.core.settings import Text, validated
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack metrics` lists this without pandas


class AbstentionSettings(EvaluatorSettings, extra="forbid"):
    """Abstention metrics."""

    no_answer: Text = "unanswerable"


class AbstentionEvaluator(Evaluator):
    """Abstention precision, recall and rate (module docstring); needs generated answers and gold answer lists."""

    settings_schema = AbstentionSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "abstention_precision": "share of abstentions that are on unanswerable queries (empty gold answer list)",
            "abstention_recall": "share of unanswerable queries (empty gold answer list) where the generator abstained",
            "abstention_rate": "share of queries with a gold answer list where the generator abstained",
        }

    def __init__(self, **values):
        settings = validated(self.settings_schema, values, "abstention evaluator")
        super().__init__(settings.metrics)
        self._require_known_metrics("abstention evaluator")
        self.no_answer = settings.no_answer

    def applies_to(self, data: EvalInput) -> bool:
        return bool(data.answers) and bool(data.generated)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        import pandas as pd

        qids = [qid for qid in data.queries or data.answers if qid in data.answers]
        abstained = np.array([is_abstention(data.generated.get(qid, ""), self.no_answer) for qid in qids], dtype=bool)
        unanswerable = np.array([not data.answers[qid] for qid in qids], dtype=bool)
        columns = {
            "abstention_precision": np.where(abstained, unanswerable, np.nan),
            "abstention_recall": np.where(unanswerable, abstained, np.nan),
            "abstention_rate": abstained.astype(float),
        }
        table = pd.DataFrame({m: columns[m] for m in self.metrics}, index=pd.Index(qids, name="qid"), dtype=float)
        return table.reindex(pd.Index(list(data.queries or qids), name="qid"))

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        import pandas as pd

        return pd.Series([qid in data.answers for qid in per_query.index], index=per_query.index)
