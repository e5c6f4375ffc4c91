"""best_grade@k: the highest grade among the top k retrieved documents (0 when none of them is judged
or all are judged non-relevant); a demo of the plugin API, not a metric from the literature."""

from __future__ import annotations

import pandas as pd

from ragtrack.evaluators.base import EvalInput, Evaluator, parse_cutoff


class BestGradeEvaluator(Evaluator):
    @classmethod
    def provides(cls) -> dict[str, str]:
        return {"best_grade@k": "highest grade among the top k documents (0 if none is judged)"}

    def default_metrics(self) -> list[str]:
        return ["best_grade@10"]

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        columns = {}
        for metric in self.metrics:
            k = parse_cutoff(metric)
            columns[metric] = [
                max([judged.get(doc, 0) for doc, _ in data.run.ranking(qid)[:k]] + [0])
                for qid, judged in data.qrels.items()
            ]
        return pd.DataFrame(columns, index=pd.Index(list(data.qrels), name="qid"), dtype=float)
