"""ragtrack's exact metrics as MLflow GenAI scorers (docs/mlflow-scorers.md).

>>> import mlflow, ragtrack.mlflow
>>> mlflow.genai.evaluate(data=rows, predict_fn=app,  # doctest: +SKIP
...                       scorers=ragtrack.mlflow.scorers(["ndcg@10", "recall@100", "mrr", "answer_f1"]))

Ranking scorers read the retrieved documents from the trace's RETRIEVER span (or from the app's
outputs) and the judgments from the row's expectations (``relevant_docs``: ``{doc_id: grade}``, or
MLflow's ``expected_retrieved_context``); answer scorers compare the answer in the outputs with
``expected_response``. Each Feedback's value is ``ragtrack.evaluate`` / ``ragtrack.evaluate_answers``
on the same lists, and its rationale names the relevant documents found (with rank) and missed. A row
that cannot be scored gets a Feedback with an error, never an exception. The implementation is
:mod:`ragtrack.pipeline.commands.scorers`.
"""

from ragtrack.pipeline.commands.scorers import (
    DEFAULT_ID_FIELDS,
    EXPECTED_RESPONSE,
    EXPECTED_RETRIEVED_CONTEXT,
    RELEVANT_DOCS,
    AnswerScorer,
    RankingScorer,
    Retrieved,
    ScorerInputError,
    answer_text,
    document_id,
    gold_answers,
    judgments,
    retrieved_documents,
    retriever_span,
    scorers,
)

__all__ = [
    "scorers",
    "RankingScorer",
    "AnswerScorer",
    "ScorerInputError",
    "Retrieved",
    "retrieved_documents",
    "retriever_span",
    "document_id",
    "judgments",
    "gold_answers",
    "answer_text",
    "RELEVANT_DOCS",
    "EXPECTED_RETRIEVED_CONTEXT",
    "EXPECTED_RESPONSE",
    "DEFAULT_ID_FIELDS",
]
