"""Query rewriters: a stage that searches its ``input`` retriever's index with rewritten queries.

A rewriter makes the system ``system`` from the retriever ``input``: it rewrites every query (RM3
pseudo-relevance feedback, HyDE passages, ...), then searches the input retriever's index with the
rewritten queries. The input's own run is at hand (feedback documents come from it). Built-ins (entry
points ``ragtrack.rewriters``): ``rm3`` (:class:`RM3Rewriter`, BM25 inputs) and ``llm`` (:class:`LLMRewriter`,
HyDE, any input).
"""

from __future__ import annotations

import logging
import re
import time
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any, Literal

from ragtrack.core.errors import RagtrackError
from ragtrack.core.llm import ChatClient, chat_clients, check_template
from ragtrack.core.runs import Run
from ragtrack.core.secrets import without_credentials
from ragtrack.core.settings import ChatSettings, Count, Fraction, StageSettings, Text
from ragtrack.core.stages import SingleInputStage, Stage, StageContext, StageOutput, cached_run, chain_key, timed_search
from ragtrack.retrievers.base import Retriever
from ragtrack.retrievers.bm25 import BM25Retriever

log = logging.getLogger(__name__)


class Rewriter(SingleInputStage):
    """Rewrites the queries, then searches the retriever ``input`` with them. Built from its validated
    settings (``settings_schema``, a :class:`~ragtrack.core.settings.StageSettings`). Subclasses implement
    :meth:`rewrite` and :meth:`rewrite_identity`; :meth:`search` searches the rewritten queries in one
    call (by default their texts, with the retriever's ``search``); the latency of one query alone is
    measured apart, on a sample (:func:`~ragtrack.core.stages.timed_search`), plus its share of the rewriting."""

    kind = "rewriter"

    @abstractmethod
    def rewrite_identity(self) -> dict:
        """What changes the rewritten queries."""

    @abstractmethod
    def rewrite(
        self, retriever: Retriever, first: StageOutput, context: StageContext
    ) -> tuple[dict[str, Any], dict[str, float]]:
        """The rewritten query of every query of ``context.dataset`` (by query id) and efficiency
        figures; ``retriever`` is the input, indexed, and ``first`` its output."""

    def search(self, retriever: Retriever, queries: dict[str, Any], depth: int) -> Run:
        """The rewritten queries' top ``depth`` documents, all in one call (by default: a query is text)."""
        return retriever.search(queries, depth)

    def identity(self) -> dict:
        return self.rewrite_identity()

    @classmethod
    def input_problem(cls, given: type[Stage]) -> str | None:
        return (
            None
            if issubclass(given, Retriever) and given.searches_texts
            else "a retriever that searches query texts (a rewriter searches its input with the rewritten queries)"
        )

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        first = inputs[self.input]
        retriever = first.stage
        if problem := self.input_problem(type(retriever)):
            raise RagtrackError(
                f"rewriter {self.name}: input {self.input!r} is a {type(retriever).__name__}, not {problem}"
            )
        key = chain_key(self, inputs, context)

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            retriever.ready(context.dataset.corpus, context.cache)
            started = time.perf_counter()
            rewritten, efficiency = self.rewrite(retriever, first, context)
            rewrite_share = (time.perf_counter() - started) / max(len(rewritten), 1)
            run, figures, seconds = timed_search(
                self.name, rewritten, lambda asked: self.search(retriever, asked, context.search_depth)
            )
            alone = {
                key: value + rewrite_share
                for key, value in figures.items()
                if key.startswith("latency_") and key.endswith("_seconds")
            }
            return (
                run,
                {**efficiency, **figures, **alone, "rewrite_seconds": rewrite_share * len(rewritten)},
                dict.fromkeys(rewritten, seconds / max(len(rewritten), 1) + rewrite_share),
            )

        passage_run, efficiency, latency_ms = cached_run(context, key, self.name, compute, chat_clients(self))
        return StageOutput(
            context.judged(passage_run), passage_run, key, self, efficiency, latency_ms, first.approximate
        )


# ----------------------------------------------------------------------------- RM3
RM3_FORMAT = 1  # bump when the rewritten queries change for the same settings
FEEDBACK_TERM = re.compile(r"[a-z0-9]{2,20}")  # Anserini's filter of feedback terms (whole term)
MAX_FEEDBACK_DF = 0.1  # Anserini: a term in more than 10% of the documents is no feedback term


class RM3Settings(StageSettings, extra="forbid"):
    """RM3 with Pyserini/Anserini's parameters and defaults (``SimpleSearcher.set_rm3``)."""

    fb_docs: Count = 10
    fb_terms: Count = 10
    original_query_weight: Fraction = 0.5


def l1_normalized(weights: Mapping[str, float]) -> dict[str, float]:
    """w(t) / Σ_u |w(u)|; empty when every weight is 0."""
    total = sum(abs(weight) for weight in weights.values())
    return {term: weight / total for term, weight in weights.items()} if total else {}


def top_terms(weights: Mapping[str, float], k: int) -> dict[str, float]:
    """The ``k`` largest weights, equal weights by term ascending (Anserini's ``pruneToSize``)."""
    return dict(sorted(weights.items(), key=lambda item: (-item[1], item[0]))[:k])


def feedback_terms(df: Mapping[str, int], documents: int) -> frozenset[str]:
    """The terms Anserini lets into feedback: 2 to 20 characters of [a-z0-9], df(t) ≤ 0.1 · N."""
    return frozenset(
        term for term, count in df.items() if FEEDBACK_TERM.fullmatch(term) and count <= MAX_FEEDBACK_DF * documents
    )


def feedback_vector(counts: Mapping[str, int], allowed: frozenset[str], fb_terms: int) -> dict[str, float]:
    """P(t|d) of one feedback document: its term counts tf(t, d) restricted to the ``allowed`` terms,
    cut to its ``fb_terms`` most frequent, L1-normalised."""
    return l1_normalized(top_terms({term: count for term, count in counts.items() if term in allowed}, fb_terms))


def relevance_model(feedback: list[tuple[Mapping[str, float], float]], fb_terms: int) -> dict[str, float]:
    """RM1 from (P(t|d), score(d)) of the feedback documents: rm1(t) ∝ Σ_d P(t|d) · score(d), cut to
    the ``fb_terms`` largest, L1-normalised."""
    summed: dict[str, float] = {}
    for vector, score in feedback:
        for term, probability in vector.items():
            summed[term] = summed.get(term, 0.0) + probability * score
    return l1_normalized(top_terms(summed, fb_terms))


def interpolated(
    query: Mapping[str, float], rm1: Mapping[str, float], original_query_weight: float
) -> dict[str, float]:
    """RM3: w(t) = λ · q(t) + (1 − λ) · rm1(t) over the terms of both, λ = ``original_query_weight``;
    terms of weight 0 are left out."""
    weights = {
        term: original_query_weight * query.get(term, 0.0) + (1 - original_query_weight) * rm1.get(term, 0.0)
        for term in sorted(query.keys() | rm1.keys())
    }
    return {term: weight for term, weight in weights.items() if weight}


class RM3Rewriter(Rewriter):
    """RM3 pseudo-relevance feedback (Abdul-Jaleel et al. 2004; Lavrenko & Croft 2001) as Anserini's
    ``Rm3Reranker`` computes it, over the input BM25 index (backend bm25s).

    For each query, the feedback documents D are the input run's top ``fb_docs`` (fewer when it
    returned fewer) with their BM25 scores. Terms are the index's: its tokenizer on each document's
    title + " " + text, and on the query.

    - P(t|d) = tf'(t, d) / Σ_u tf'(u, d), where tf' keeps the terms of 2 to 20 characters of [a-z0-9]
      with df(t) ≤ 0.1 · N (N: indexed documents), then only d's ``fb_terms`` most frequent of them;
    - rm1(t) ∝ Σ_{d ∈ D} P(t|d) · score(d), cut to the ``fb_terms`` largest, L1-normalised;
    - q(t) = tf(t, q) / |q| over the query's terms (none filtered, as Anserini);
    - w(t) = λ · q(t) + (1 − λ) · rm1(t), λ = ``original_query_weight``;

    then score(d) = Σ_t w(t) · S[t, d] over the BM25 index (:meth:`BM25Retriever.search_weighted`).
    Cuts keep the larger weight, equal weights by term ascending (Anserini's ``FeatureVector``).

    Deviations from Anserini: float64 arithmetic in the feedback model instead of float32; terms of
    weight 0 are left out of the expanded query (Lucene would return documents matching only them
    with score 0); the expanded query is scored by the input's BM25 (its backend, analyzer, k1, b).
    """

    settings_schema = RM3Settings

    def __init__(self, name: str | None = None, **values):
        super().__init__(name, **values)
        settings = self.settings
        self.fb_docs, self.fb_terms = settings.fb_docs, settings.fb_terms
        self.original_query_weight = settings.original_query_weight

    def rewrite_identity(self) -> dict:
        return {
            "format": RM3_FORMAT,
            "fb_docs": self.fb_docs,
            "fb_terms": self.fb_terms,
            "original_query_weight": self.original_query_weight,
        }

    @classmethod
    def input_problem(cls, given: type[Stage]) -> str | None:
        return (
            None
            if issubclass(given, BM25Retriever)
            else "a BM25 retriever (RM3 expands queries with its index's terms)"
        )

    def rewrite(
        self, retriever: BM25Retriever, first: StageOutput, context: StageContext
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """The expanded query (term -> weight) of every query."""
        queries, corpus = context.dataset.queries, context.dataset.corpus
        feedback = {qid: first.passage_run.ranking(qid)[: self.fb_docs] for qid in queries}
        wanted = sorted({doc for ranked in feedback.values() for doc, _ in ranked})
        position = {doc: i for i, doc in enumerate(corpus.ids)}
        texts = corpus.full_texts()
        counts = dict(zip(wanted, retriever.term_counts(texts[position[doc]] for doc in wanted)))
        allowed = feedback_terms(
            retriever.document_frequencies(sorted({term for terms in counts.values() for term in terms})), len(corpus)
        )
        vectors = {doc: feedback_vector(terms, allowed, self.fb_terms) for doc, terms in counts.items()}
        expanded = {}
        for qid, query_counts in zip(queries, retriever.term_counts(queries.values())):
            rm1 = relevance_model([(vectors[doc], score) for doc, score in feedback[qid]], self.fb_terms)
            expanded[qid] = interpolated(l1_normalized(query_counts), rm1, self.original_query_weight)
        mean_terms = sum(map(len, expanded.values())) / len(expanded) if expanded else 0.0
        return expanded, {"expanded_query_terms_mean": mean_terms}

    def search(self, retriever: BM25Retriever, queries: dict[str, dict[str, float]], depth: int) -> Run:
        return retriever.search_weighted(queries, depth)


# ----------------------------------------------------------------------------- LLM (HyDE)
LLM_FORMAT = 1  # bump when the rewritten queries change for the same settings
HYDE_PROMPT = (
    "Please write a passage to answer the question.\nQuestion: {query}\nPassage:"  # Gao et al. 2022, web search
)


class LLMRewriterSettings(StageSettings, ChatSettings, extra="forbid"):
    """An OpenAI-compatible endpoint (:class:`~ragtrack.core.settings.ChatSettings`), the ``prompt``
    (``{query}`` is the query text) and ``mode``: ``replace`` searches the generated passage,
    ``append`` the query and the passage."""

    prompt: Text = HYDE_PROMPT
    mode: Literal["replace", "append"] = "replace"


class LLMRewriter(Rewriter):
    """HyDE (Gao et al. 2022, "Precise Zero-Shot Dense Retrieval without Relevance Labels"): a chat
    model writes a hypothetical passage p(q) = LLM(prompt(q)) per query, and the input retriever (any:
    BM25 or dense) searches it with its own ``search``: the text searched is p(q) (``replace``) or
    q + "\\n" + p(q) (``append``). Replies are cached by the :class:`ChatClient` (``cache_dir``): a
    rerun sends nothing. A query whose request fails, or whose reply is blank, keeps its own text;
    such queries are counted (``failed_queries``) and logged once.

    Deviation from the paper: one passage per query, searched as text, where HyDE averages the
    embeddings of several passages and the query (with ``append``, one text holds both)."""

    settings_schema = LLMRewriterSettings

    def __init__(self, name: str | None = None, **values):
        super().__init__(name, **values)
        settings = self.settings
        check_template(settings.prompt, {"query"}, f"rewriter {self.name}")
        self.prompt, self.mode = settings.prompt, settings.mode
        self.client = ChatClient(**settings.client_settings())

    def max_chat_calls(self, queries: int, depth: int) -> int:
        """A prompt per query."""
        return queries

    def rewrite_identity(self) -> dict:
        client = self.client
        return {
            "format": LLM_FORMAT,
            "model": client.model,
            "base_url": without_credentials(client.base_url),
            "parameters": client.parameters,
            "system_prompt": client.system_prompt,
            "prompt": self.prompt,
            "mode": self.mode,
        }

    def rewrite(
        self, retriever: Retriever, first: StageOutput, context: StageContext
    ) -> tuple[dict[str, str], dict[str, float]]:
        """The text searched for every query (see the class docstring)."""
        queries = context.dataset.queries
        sent_before = self.client.requests_sent
        replies, failures = self.client.complete_all(
            {qid: self.prompt.format(query=text) for qid, text in queries.items()}, label=f"{self.name}: rewrite"
        )
        passages = {qid: reply.strip() for qid, reply in replies.items() if reply.strip()}
        failures |= {qid: "blank reply" for qid in replies if qid not in passages}
        if failures:
            first_failed = next(qid for qid in queries if qid in failures)
            log.warning(
                "%s: %d of %d queries keep their own text (no passage generated); first: %s: %s",
                self.name,
                len(failures),
                len(queries),
                first_failed,
                failures[first_failed],
            )
        rewritten = {qid: self.searched_text(text, passages.get(qid)) for qid, text in queries.items()}
        return rewritten, {
            "failed_queries": float(len(failures)),
            "chat_requests": float(self.client.requests_sent - sent_before),
        }

    def searched_text(self, query: str, passage: str | None) -> str:
        """What is searched for ``query`` given its generated ``passage`` (``None``: none was generated)."""
        if passage is None:
            return query
        return passage if self.mode == "replace" else f"{query}\n{passage}"
