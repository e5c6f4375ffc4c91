"""ragtrack's exact metrics as MLflow GenAI scorers (public as ``ragtrack.mlflow``; docs/mlflow-scorers.md).

``scorers(["ndcg@10", "recall@100", "mrr", "answer_f1"])`` returns one :class:`mlflow.genai.scorers.Scorer`
per metric for ``mlflow.genai.evaluate``. Each scorer returns a :class:`mlflow.entities.Feedback` named
by the MLflow-legal metric key (``ndcg@10`` -> ``ndcg_at_10``, :func:`ragtrack.pipeline.records.layout.metric_key`)
whose value is ``ragtrack.evaluate`` (ranking metrics) or ``ragtrack.evaluate_answers`` (answer
metrics) computed on the row's lists, so the two agree by construction.

What a ranking scorer reads:

- the retrieved documents, in rank order: by default from the trace's RETRIEVER span (the last
  top-level one to start; ``span_name`` picks spans by name), else from ``outputs`` (a list of ids or
  documents, or a dict with such a list under ``"retrieved"`` or ``"doc_ids"``). A document's id is
  the first of ``id_fields`` it has: ``Document.id``, then ``metadata["doc_uri"]``, then
  ``metadata["chunk_id"]``. The list becomes the scores n, n-1, ..., 1, so ragtrack ranks it exactly
  in the given order; a repeated id counts once, at its first rank;
- the judgments, from the row's ``expectations``: ``relevant_docs`` (``{doc_id: grade}``, or a list of
  ids, grade 1), else MLflow's ``expected_retrieved_context`` (a list of ``{"doc_uri": ...}`` dicts,
  optionally with an integer ``"grade"``, or of ids).

An answer scorer compares the answer in ``outputs`` (a string, or a dict's ``"answer"`` / ``"response"``)
with ``expectations["expected_response"]`` (a string or a list of gold answers; the best counts).

Whatever cannot be scored (no retrieved documents, a document without an id, no judgments, no
answer) gives a Feedback with an ``error`` (codes in :class:`ScorerInputError`) and no value, so MLflow
leaves the row out of the mean. Judgments without a relevant document are scored, as trec_eval and
``ragtrack.evaluate`` count such a query (0 on the binary metrics); with ``without_relevant="exclude"``
they give the error ``NO_RELEVANT_DOCUMENT`` instead, so the row is left out, as ``ragtrack.evaluate``
then leaves the query out.
"""

from __future__ import annotations

import contextlib
import json
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from mlflow.entities import AssessmentError, AssessmentSource, AssessmentSourceType, Feedback, SpanType
from mlflow.genai.scorers import Scorer

from ragtrack.core.errors import RagtrackError
from ragtrack.evaluators.ranking import (
    COUNT_WITHOUT_RELEVANT,
    RELEVANCE_THRESHOLD,
    WithoutRelevant,
    checked_threshold,
    checked_without_relevant,
)
from ragtrack.pipeline.records.layout import metric_key

RELEVANT_DOCS = "relevant_docs"  # ragtrack's expectation: {doc_id: grade} or [doc_id, ...]
EXPECTED_RETRIEVED_CONTEXT = "expected_retrieved_context"  # MLflow's: [{"doc_uri": ..., "content": ...}, ...]
EXPECTED_RESPONSE = "expected_response"  # MLflow's: the gold answer (or a list of them)
OUTPUT_DOCUMENT_KEYS = ("retrieved", "doc_ids")  # where a dict ``outputs`` may hold the ranked documents
OUTPUT_ANSWER_KEYS = ("answer", "response")  # where a dict ``outputs`` may hold the answer text
DEFAULT_ID_FIELDS = ("id", "doc_uri", "chunk_id")  # "id": Document.id; the others: keys of Document.metadata
ANSWER_EVALUATORS = ("answer", "bertscore")  # evaluators whose metrics compare an answer with gold answers
SOURCES = ("auto", "trace", "outputs")
LISTED = 20  # documents named per list in a rationale
_QID = "q"  # the one query of each per-row evaluation


class ScorerInputError(Exception):
    """A row the scorer cannot score; becomes the Feedback's ``error`` (``code``: ``error_code``).

    Codes: ``NO_RETRIEVER_SPAN`` (no span, or none named ``span_name``), ``NO_RETRIEVED_DOCUMENTS``
    (nothing in the trace or the outputs), ``DOCUMENT_WITHOUT_ID``, ``BAD_RETRIEVED_DOCUMENTS``,
    ``NO_JUDGMENTS``, ``BAD_JUDGMENTS``, ``NO_RELEVANT_DOCUMENT``, ``NO_ANSWER``, ``NO_GOLD_ANSWER``."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code


# --------------------------------------------------------------------------- retrieved documents


@dataclass(frozen=True)
class Retrieved:
    """Document ids in rank order and where they came from (for the rationale)."""

    ids: list[str]
    origin: str  # "RETRIEVER span 'retrieve'" or "outputs['doc_ids']"
    span_id: str | None = None


def document_id(document: Any, id_fields: Sequence[str] = DEFAULT_ID_FIELDS) -> str | None:
    """The id of one retrieved document: a string is its own id; a :class:`mlflow.entities.Document`
    or its dict form gives the first of ``id_fields`` it has ("id": the document's own id, any other
    name: a key of its metadata, e.g. ``doc_uri``, ``chunk_id``). ``None`` when it has none."""
    if isinstance(document, str):
        return document or None
    if isinstance(document, Mapping):
        own, metadata = document.get("id"), document.get("metadata")
    else:
        own, metadata = getattr(document, "id", None), getattr(document, "metadata", None)
    metadata = metadata if isinstance(metadata, Mapping) else {}
    for field in id_fields:
        value = own if field == "id" else metadata.get(field)
        if value is not None and value != "":
            return str(value)
    return None


def _ids(documents: Any, origin: str, id_fields: Sequence[str]) -> list[str]:
    if isinstance(documents, (str, bytes, Mapping)) or not isinstance(documents, Sequence):
        raise ScorerInputError(
            "BAD_RETRIEVED_DOCUMENTS", f"{origin}: expected a list of documents or ids, got {type(documents).__name__}"
        )
    ids = []
    for rank, document in enumerate(documents, start=1):
        doc_id = document_id(document, id_fields)
        if doc_id is None:
            looked = ", ".join("Document.id" if f == "id" else f"metadata['{f}']" for f in id_fields)
            raise ScorerInputError(
                "DOCUMENT_WITHOUT_ID", f"{origin}: the document at rank {rank} has no id (looked for {looked})"
            )
        ids.append(doc_id)
    return ids


def retriever_span(trace: Any, span_name: str | None = None) -> Any:
    """The RETRIEVER span a ranking scorer reads: without ``span_name``, the last to start of the
    top-level RETRIEVER spans (those not inside another RETRIEVER span: a retriever that calls other
    retrievers is scored as a whole, as MLflow's own retrieval judges read it); with ``span_name``, the
    last to start of the RETRIEVER spans of that name, nested or not. Raises :class:`ScorerInputError`."""
    spans = (
        list(trace.search_spans(span_type=SpanType.RETRIEVER)) if trace is not None and trace.data is not None else []
    )
    if span_name is not None:
        chosen = [s for s in spans if s.name == span_name]
        if not chosen:
            present = ", ".join(sorted({repr(s.name) for s in spans})) or "none"
            raise ScorerInputError(
                "NO_RETRIEVER_SPAN", f"the trace has no RETRIEVER span named {span_name!r} (RETRIEVER spans: {present})"
            )
    else:
        by_id = {s.span_id: s for s in trace.data.spans} if spans else {}

        def nested(span) -> bool:
            parent = by_id.get(span.parent_id)
            while parent is not None:
                if parent.span_type == SpanType.RETRIEVER:
                    return True
                parent = by_id.get(parent.parent_id)
            return False

        chosen = [s for s in spans if not nested(s)]
        if not chosen:
            raise ScorerInputError(
                "NO_RETRIEVER_SPAN",
                "the trace has no RETRIEVER span: decorate the retrieval function with "
                "@mlflow.trace(span_type='RETRIEVER'), or return the ids in the outputs",
            )
    return max(chosen, key=lambda s: (s.start_time_ns or 0, s.end_time_ns or 0))


def _from_span(span: Any, id_fields: Sequence[str]) -> Retrieved:
    origin = f"RETRIEVER span {span.name!r}"
    outputs = span.outputs
    if isinstance(outputs, str):  # a span whose outputs were logged as a JSON string (other text stays text)
        with contextlib.suppress(ValueError):
            outputs = json.loads(outputs)
    if outputs is None:
        raise ScorerInputError("NO_RETRIEVED_DOCUMENTS", f"{origin} has no outputs (did the retrieval fail?)")
    return Retrieved(_ids(outputs, origin, id_fields), origin, span.span_id)


def _from_outputs(outputs: Any, id_fields: Sequence[str]) -> Retrieved | None:
    """The ranked ids the app returned: a list of ids or documents, or a dict holding one under
    ``OUTPUT_DOCUMENT_KEYS``; ``None`` when ``outputs`` has no such list."""
    if isinstance(outputs, Mapping):
        key = next((k for k in OUTPUT_DOCUMENT_KEYS if k in outputs), None)
        return (
            None if key is None else Retrieved(_ids(outputs[key], f"outputs[{key!r}]", id_fields), f"outputs[{key!r}]")
        )
    if isinstance(outputs, Sequence) and not isinstance(outputs, (str, bytes)):
        return Retrieved(_ids(outputs, "outputs", id_fields), "outputs")
    return None


def retrieved_documents(
    trace: Any = None,
    outputs: Any = None,
    source: str = "auto",
    span_name: str | None = None,
    id_fields: Sequence[str] = DEFAULT_ID_FIELDS,
) -> Retrieved:
    """The ranked document ids of one row (see the module docstring). ``source``: ``"trace"`` reads the
    RETRIEVER span only, ``"outputs"`` the outputs only, ``"auto"`` the span when the trace has a
    RETRIEVER span (or ``span_name`` is given), else the outputs. Raises :class:`ScorerInputError`."""
    if source not in SOURCES:
        raise RagtrackError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    has_span = trace is not None and trace.data is not None and bool(trace.search_spans(span_type=SpanType.RETRIEVER))
    if source == "trace" or (source == "auto" and (has_span or span_name is not None)):
        return _from_span(retriever_span(trace, span_name), id_fields)
    found = _from_outputs(outputs, id_fields)
    if found is None:
        where = "outputs" if source == "outputs" else "the trace has no RETRIEVER span and outputs"
        raise ScorerInputError(
            "NO_RETRIEVED_DOCUMENTS",
            f"no retrieved documents: {where} hold no list of document ids "
            f"(a list, or a dict with {' or '.join(map(repr, OUTPUT_DOCUMENT_KEYS))})",
        )
    return found


# --------------------------------------------------------------------------- expectations


def _grade(value: Any, where: str) -> int:
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise ScorerInputError("BAD_JUDGMENTS", f"{where}: grade {value!r} is not an integer")
    return int(value)


def judgments(
    expectations: Mapping[str, Any] | None, id_fields: Sequence[str] = DEFAULT_ID_FIELDS
) -> tuple[dict[str, int], str]:
    """``({doc_id: grade}, key)`` from ``expectations[RELEVANT_DOCS]`` (a mapping to integer grades, or
    a list of ids with grade 1), else ``expectations[EXPECTED_RETRIEVED_CONTEXT]`` (entries: an id, or a
    dict whose id is the first of ``id_fields`` among its keys — ``doc_uri`` in MLflow's schema — with
    an optional integer ``grade``, default 1; a repeated id keeps its highest grade)."""
    expectations = expectations or {}
    if not isinstance(expectations, Mapping):
        raise ScorerInputError(
            "NO_JUDGMENTS",
            f"expectations must be a dict with {RELEVANT_DOCS!r} or {EXPECTED_RETRIEVED_CONTEXT!r}, "
            f"got {type(expectations).__name__}",
        )
    if RELEVANT_DOCS in expectations:
        key, given = RELEVANT_DOCS, expectations[RELEVANT_DOCS]
        if isinstance(given, Mapping):
            return {str(doc): _grade(grade, f"expectations[{key!r}][{doc!r}]") for doc, grade in given.items()}, key
        entries = given
    elif EXPECTED_RETRIEVED_CONTEXT in expectations:
        key, entries = EXPECTED_RETRIEVED_CONTEXT, expectations[EXPECTED_RETRIEVED_CONTEXT]
    else:
        raise ScorerInputError(
            "NO_JUDGMENTS",
            f"expectations have neither {RELEVANT_DOCS!r} ({{doc_id: grade}}) nor "
            f"{EXPECTED_RETRIEVED_CONTEXT!r} ([{{'doc_uri': ...}}]); found: {sorted(expectations) or 'none'}",
        )
    if isinstance(entries, (str, bytes, Mapping)) or not isinstance(entries, Sequence):
        raise ScorerInputError("BAD_JUDGMENTS", f"expectations[{key!r}] must be a list, got {type(entries).__name__}")
    graded: dict[str, int] = {}
    for position, entry in enumerate(entries):
        where = f"expectations[{key!r}][{position}]"
        if isinstance(entry, Mapping):
            doc = next((entry[f] for f in id_fields if entry.get(f) not in (None, "")), None)
            grade = _grade(entry.get("grade", 1), where)
        else:
            doc, grade = entry, 1
        if not isinstance(doc, (str, numbers.Integral)) or isinstance(doc, bool) or doc == "":
            raise ScorerInputError("BAD_JUDGMENTS", f"{where}: no document id (looked for {', '.join(id_fields)})")
        graded[str(doc)] = max(grade, graded.get(str(doc), grade))
    return graded, key


def gold_answers(expectations: Mapping[str, Any] | None) -> list[str]:
    """The gold answers in ``expectations[EXPECTED_RESPONSE]``: one string or a list of strings (a
    string ``expectations`` is the gold answer itself)."""
    if isinstance(expectations, str):
        given = expectations
    elif isinstance(expectations, Mapping):
        given = expectations.get(EXPECTED_RESPONSE)
    else:
        raise ScorerInputError(
            "NO_GOLD_ANSWER", f"expectations have no {EXPECTED_RESPONSE!r} (got {type(expectations).__name__})"
        )
    if given is None:
        raise ScorerInputError(
            "NO_GOLD_ANSWER", f"expectations have no {EXPECTED_RESPONSE!r}; keys: {sorted(map(str, expectations))}"
        )
    golds = [given] if isinstance(given, str) else given
    if not isinstance(golds, Sequence) or not all(isinstance(g, str) for g in golds):
        raise ScorerInputError(
            "NO_GOLD_ANSWER",
            f"expectations[{EXPECTED_RESPONSE!r}] must be a string or a list of strings, got {given!r}",
        )
    if not golds:  # as in evaluate_answers: a question without gold answers is not counted
        raise ScorerInputError(
            "NO_GOLD_ANSWER", f"expectations[{EXPECTED_RESPONSE!r}] is an empty list: the question is not counted"
        )
    return list(golds)


def answer_text(outputs: Any) -> str:
    """The answer in ``outputs``: the string itself, or a dict's ``"answer"`` (else ``"response"``)."""
    if isinstance(outputs, str):
        return outputs
    if isinstance(outputs, Mapping):
        key = next((k for k in OUTPUT_ANSWER_KEYS if isinstance(outputs.get(k), str)), None)
        if key is not None:
            return outputs[key]
        raise ScorerInputError(
            "NO_ANSWER",
            f"outputs hold no answer text under {' or '.join(map(repr, OUTPUT_ANSWER_KEYS))}; "
            f"keys: {sorted(map(str, outputs))}",
        )
    raise ScorerInputError(
        "NO_ANSWER", f"outputs must be the answer text or a dict with 'answer', got {type(outputs).__name__}"
    )


# --------------------------------------------------------------------------- scorers


def _listed(items: list[str]) -> str:
    shown = ", ".join(items[:LISTED])
    return shown + (f" and {len(items) - LISTED} more" if len(items) > LISTED else "") if items else "none"


def _error(name: str, problem: ScorerInputError) -> Feedback:
    return Feedback(
        name=name,
        error=AssessmentError(error_code=problem.code, error_message=str(problem)),
        source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=name),
    )


class RankingScorer(Scorer):
    """A ranking metric of ragtrack (``ndcg@10``, ``recall@100``, ``mrr`` ...) on the row's retrieved
    documents against the judgments in its expectations; the value is ``ragtrack.evaluate``'s."""

    metric: str
    relevance_threshold: int = RELEVANCE_THRESHOLD
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT
    span_name: str | None = None
    source: Literal["auto", "trace", "outputs"] = "auto"
    id_fields: tuple[str, ...] = DEFAULT_ID_FIELDS

    def __call__(
        self, *, outputs: Any = None, expectations: dict[str, Any] | None = None, trace: Any = None
    ) -> Feedback:
        from ragtrack.pipeline.commands.api import evaluate

        try:
            graded, key = judgments(expectations, self.id_fields)
            relevant = {doc: grade for doc, grade in graded.items() if grade >= self.relevance_threshold}
            if not relevant and self.without_relevant == "exclude":
                raise ScorerInputError(
                    "NO_RELEVANT_DOCUMENT",
                    f"expectations[{key!r}] judge no document relevant (grade >= "
                    f"{self.relevance_threshold}): not counted with without_relevant='exclude'",
                )
            retrieved = retrieved_documents(trace, outputs, self.source, self.span_name, self.id_fields)
        except ScorerInputError as problem:
            return _error(self.name, problem)
        ranks: dict[str, int] = {}
        for rank, doc in enumerate(retrieved.ids, start=1):
            ranks.setdefault(doc, rank)  # a repeated id counts once, at its first rank
        n = len(ranks)
        run = {_QID: {doc: float(n - rank + 1) for doc, rank in ranks.items()}}  # scores n, n-1, ...: the given order
        value = float(
            evaluate({_QID: graded}, run, [self.metric], self.relevance_threshold).per_query.loc[_QID, self.metric]
        )
        found = sorted((rank, doc) for doc, rank in ranks.items() if doc in relevant)
        missed = [doc for doc in sorted(relevant, key=lambda d: (-relevant[d], d)) if doc not in ranks]
        rationale = (
            f"{self.metric} = {value:.4f} over {n} documents from {retrieved.origin}; relevant (grade >= "
            f"{self.relevance_threshold}): {len(relevant)}. Found: "
            f"{_listed([f'{doc} (rank {rank}, grade {relevant[doc]})' for rank, doc in found])}. "
            f"Missed: {_listed([f'{doc} (grade {relevant[doc]})' for doc in missed])}."
        )
        metadata = {
            "retrieved_from": retrieved.origin,
            "retrieved": str(n),
            "relevant": str(len(relevant)),
            "judgments": key,
        }
        if retrieved.span_id:
            metadata["span_id"] = retrieved.span_id
        return Feedback(
            name=self.name,
            value=value,
            rationale=rationale,
            metadata=metadata,
            source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=self.name),
        )


class AnswerScorer(Scorer):
    """An answer metric of ragtrack (``answer_f1``, ``exact_match``, ROUGE, BLEU, BERTScore) on the
    answer in ``outputs`` against ``expectations["expected_response"]``; the value is
    ``ragtrack.evaluate_answers``'s (the best over several gold answers)."""

    metric: str

    def __call__(self, *, outputs: Any = None, expectations: dict[str, Any] | None = None) -> Feedback:
        from ragtrack.pipeline.commands.api import evaluate_answers

        try:
            golds = gold_answers(expectations)
            answer = answer_text(outputs)
        except ScorerInputError as problem:
            return _error(self.name, problem)
        value = float(evaluate_answers({_QID: golds}, {_QID: answer}, [self.metric]).per_query.loc[_QID, self.metric])
        shown = answer if len(answer) <= 200 else answer[:200] + "..."
        rationale = f"{self.metric} = {value:.4f}: answer {shown!r} against the gold answers {_listed([repr(g) for g in golds])} (the best counts)."
        return Feedback(
            name=self.name,
            value=value,
            rationale=rationale,
            source=AssessmentSource(source_type=AssessmentSourceType.CODE, source_id=self.name),
        )


def _owner(metric: str, evaluators: Mapping[str, type]) -> str:
    owner = next((name for name, cls in evaluators.items() if cls.handles(metric)), None)
    if owner is None:
        known = sorted(
            m
            for name, cls in evaluators.items()
            if name == "ranking" or name in ANSWER_EVALUATORS
            for m in cls.provides()
        )
        raise RagtrackError(f"unknown metric {metric!r}; known: {', '.join(known)}")
    return owner


def scorers(
    metrics: Sequence[str],
    relevance_threshold: int = RELEVANCE_THRESHOLD,
    span_name: str | None = None,
    source: Literal["auto", "trace", "outputs"] = "auto",
    id_fields: Sequence[str] = DEFAULT_ID_FIELDS,
    prefix: str = "",
    without_relevant: WithoutRelevant = COUNT_WITHOUT_RELEVANT,
) -> list[Scorer]:
    """One MLflow scorer per metric, for ``mlflow.genai.evaluate(..., scorers=...)``.

    Ranking metrics (``ragtrack metrics`` lists them) read the retrieved documents and the judgments
    (``relevance_threshold``: the lowest relevant grade; ``without_relevant``: whether a row whose
    judgments have no relevant document is scored (``count``, trec_eval's rule) or an error that MLflow
    leaves out of the mean (``exclude``); ``span_name``, ``source`` and ``id_fields``:
    where the documents and their ids come from, see :func:`retrieved_documents`); answer metrics read
    the answer and the gold answers. Each scorer and its Feedback are named ``prefix`` + the metric's
    MLflow key (``ndcg@10`` -> ``ndcg_at_10``); a prefix such as ``"bm25_"`` tells apart the scorers of
    several retriever spans (no ``/``: MLflow reads what precedes it as a namespace, and its UI shows
    ``bm25/ndcg_at_10`` as a second ``ndcg_at_10`` column). Unknown metrics and metrics of other
    evaluators (``context_recall``, ``llm_judge``, plugins) raise :class:`RagtrackError`.

    >>> [s.name for s in scorers(["ndcg@10", "mrr", "answer_f1"])]
    ['ndcg_at_10', 'mrr', 'answer_f1']
    """
    from ragtrack.pipeline import registry

    if isinstance(metrics, str):
        metrics = [metrics]
    if not metrics:
        raise RagtrackError("scorers needs at least one metric")
    if source not in SOURCES:
        raise RagtrackError(f"source must be one of {', '.join(SOURCES)}, got {source!r}")
    relevance_threshold, without_relevant = (
        checked_threshold(relevance_threshold),
        checked_without_relevant(without_relevant),
    )
    if "/" in prefix:
        raise RagtrackError(
            f"prefix {prefix!r} must not contain '/': MLflow treats what precedes it as a namespace "
            "and its UI would show the scorer under the bare metric name; use e.g. 'bm25_'"
        )
    if isinstance(id_fields, str) or not id_fields:
        raise RagtrackError(f"id_fields must be a non-empty list of field names, got {id_fields!r}")
    evaluators = registry.load_all("evaluators")
    built: list[Scorer] = []
    for metric in metrics:
        owner = _owner(metric, evaluators)
        description = next(
            (
                text
                for name, text in evaluators[owner].provides().items()
                if name in (metric, f"{metric.partition('@')[0]}@k", f"{metric.partition('@')[0]}[@k]")
            ),
            metric,
        )
        name = prefix + metric_key(metric)
        if owner == "ranking":
            evaluators[owner](metrics=[metric])  # a malformed cutoff fails here, not on every row
            built.append(
                RankingScorer(
                    name=name,
                    description=description,
                    metric=metric,
                    relevance_threshold=relevance_threshold,
                    without_relevant=without_relevant,
                    span_name=span_name,
                    source=source,
                    id_fields=tuple(id_fields),
                )
            )
        elif owner in ANSWER_EVALUATORS:
            built.append(AnswerScorer(name=name, description=description, metric=metric))
        else:
            raise RagtrackError(
                f"metric {metric!r} (evaluator {owner!r}) has no MLflow scorer: scorers cover ranking metrics "
                f"and answer metrics ({', '.join(ANSWER_EVALUATORS)} evaluators)"
            )
    names = [s.name for s in built]
    duplicated = sorted({n for n in names if names.count(n) > 1})
    if duplicated:
        raise RagtrackError(f"metrics named twice: {', '.join(duplicated)}")
    return built
