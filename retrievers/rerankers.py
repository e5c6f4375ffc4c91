"""Rerankers: a stage that re-scores the top ``depth`` documents of one input system.

The reranked run keeps the input's depth: the input's top ``depth`` documents are ordered by the
reranker's scores (ties by document id, as every run), and the documents below them follow in their
input order with scores below every reranked one. A reranker reads each document's text as the dense
retriever sees it (title and text joined, ``Corpus.full_texts``) and the original query text.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Mapping

from ragtrack.core.runs import Run
from ragtrack.core.settings import Count, StageSettings
from ragtrack.core.stages import Stage, StageContext, StageOutput, cached_run, chain_key


def reranked(run: Run, new_scores: Mapping[str, Mapping[str, float]], depth: int) -> Run:
    """``run`` with each query's top ``depth`` documents ordered by ``new_scores[qid]`` (one score per
    such document) and the rest after them in input order: the k-th document below gets the lowest
    reranked score minus k, so the run keeps every document of the input and its depth."""
    rankings = {}
    for qid, ranked in run.rankings():
        head, tail = ranked[:depth], ranked[depth:]
        scores = {doc: float(new_scores[qid][doc]) for doc, _ in head}
        lowest = min(scores.values(), default=0.0)
        scores |= {doc: lowest - position for position, (doc, _) in enumerate(tail, start=1)}
        rankings[qid] = scores
    return Run(run.name, rankings)


class RerankerSettings(StageSettings):
    """A reranker's common keys: ``depth`` input documents re-scored per query, ``batch_size`` pairs
    (or prompts) per model call."""

    depth: Count = 100
    batch_size: Count = 32


class Reranker(Stage):
    """Re-scores the top ``depth`` documents of the system ``input`` for each query; makes the system
    ``system``. Built from its validated settings (``settings_schema``, a :class:`RerankerSettings`);
    subclasses implement :meth:`rerank_scores` and :meth:`scorer_identity`."""

    kind = "reranker"
    settings_schema: type[RerankerSettings] = RerankerSettings

    def __init__(self, name: str | None = None, **values):
        settings = self.settings_schema.model_validate(values)
        super().__init__(settings.system or name or f"{settings.input}+{self.kind}", [settings.input])
        self.settings = settings
        self.input, self.depth, self.batch_size = settings.input, settings.depth, settings.batch_size

    @abstractmethod
    def scorer_identity(self) -> dict:
        """What changes a (query, document) score: the model and its settings (not the depth)."""

    @abstractmethod
    def rerank_scores(self, heads: Mapping[str, list[str]], queries: Mapping[str, str], texts: Mapping[str, str],
                      context: StageContext) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """New scores for each query's ``heads[qid]`` (document ids, input order) given the query
        texts and the document texts by id; returns the scores by query and efficiency figures."""

    def identity(self) -> dict:
        return {"depth": self.depth, **self.scorer_identity()}

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        upstream = inputs[self.input]
        key = chain_key(self, inputs, context)

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            started = time.perf_counter()
            heads = {qid: [doc for doc, _ in ranked[:self.depth]] for qid, ranked in upstream.run.rankings()}
            wanted = {doc for docs in heads.values() for doc in docs}
            corpus = context.judged_corpus
            texts = {doc: text for doc, text in zip(corpus.ids, corpus.full_texts()) if doc in wanted}
            scores, efficiency = self.rerank_scores(heads, context.dataset.queries, texts, context)
            run = reranked(upstream.run, scores, self.depth)
            seconds = time.perf_counter() - started
            share = seconds / max(len(heads), 1)
            return Run(self.name, run.scores), {**efficiency, "rerank_seconds": seconds}, {qid: share for qid in heads}

        run, efficiency, latency_ms = cached_run(context, key, self.name, compute)
        latency_ms = {qid: upstream.latency_ms.get(qid, 0.0) + ms for qid, ms in latency_ms.items()}  # the chain's time per query
        return StageOutput(run, context.passages(run, {self.input: upstream.passage_run}), key, self, efficiency, latency_ms,
                           upstream.approximate)
