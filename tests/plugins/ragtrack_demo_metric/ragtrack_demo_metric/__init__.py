"""judged@k: the share of the top k retrieved documents that have a judgment (Sakai 2007, "Alternatives
to bpref"); it says how far the other metrics can be trusted for a run outside the judged pool."""

from __future__ import annotations

import pandas as pd

from ragtrack.evaluators.base import EvalInput, Evaluator


class JudgedEvaluator(Evaluator):
    @classmethod
    def provides(cls) -> dict[str, str]:
        return {"judged@k": "share of the top k documents that are judged (any grade)"}

    def default_metrics(self) -> list[str]:
        return ["judged@10"]

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        columns = {}
        for metric in self.metrics:
            k = int(metric.partition("@")[2])
            columns[metric] = [sum(doc in judged for doc, _ in data.run.ranking(qid)[:k]) / k for qid, judged in data.qrels.items()]
        return pd.DataFrame(columns, index=pd.Index(list(data.qrels), name="qid"))
