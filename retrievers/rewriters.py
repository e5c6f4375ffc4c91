"""Query rewriters: a stage that searches its ``input`` retriever's index with rewritten queries.

A rewriter makes the system ``system`` from the retriever ``input``: it rewrites every query (RM3
pseudo-relevance feedback, HyDE passages, ...), then searches the input retriever's index with the
rewritten queries. The input's own run is at hand (feedback documents come from it).
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.core.settings import StageSettings
from ragtrack.core.stages import Stage, StageContext, StageOutput, cached_run, chain_key, latency_figures, timed_per_query
from ragtrack.retrievers.base import Retriever


class Rewriter(Stage):
    """Rewrites the queries, then searches the retriever ``input`` with them. Built from its validated
    settings (``settings_schema``, a :class:`~ragtrack.core.settings.StageSettings`). Subclasses implement
    :meth:`rewrite` and :meth:`rewrite_identity`; :meth:`search` searches one rewritten query (by
    default its text, with the retriever's ``search``)."""

    kind = "rewriter"
    settings_schema: type[StageSettings] = StageSettings

    def __init__(self, name: str | None = None, **values):
        settings = self.settings_schema.model_validate(values)
        super().__init__(settings.system or name or f"{settings.input}+{self.kind}", [settings.input])
        self.settings = settings
        self.input = settings.input

    @abstractmethod
    def rewrite_identity(self) -> dict:
        """What changes the rewritten queries."""

    @abstractmethod
    def rewrite(self, retriever: Retriever, first: StageOutput, context: StageContext) -> tuple[dict[str, Any], dict[str, float]]:
        """The rewritten query of every query of ``context.dataset`` (by query id) and efficiency
        figures; ``retriever`` is the input, indexed, and ``first`` its output."""

    def search(self, retriever: Retriever, qid: str, query: Any, depth: int) -> dict[str, float]:
        """One rewritten query's top ``depth`` documents (by default: ``query`` is text)."""
        return retriever.search({qid: query}, depth).scores.get(qid, {})

    def identity(self) -> dict:
        return self.rewrite_identity()

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        first = inputs[self.input]
        retriever = first.stage
        if not isinstance(retriever, Retriever):
            raise RagtrackError(f"rewriter {self.name}: input {self.input!r} is a {retriever.kind}, not a retriever")
        key = chain_key(self, inputs, context)

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            retriever.ready(context.dataset.corpus, context.cache)
            started = time.perf_counter()
            rewritten, efficiency = self.rewrite(retriever, first, context)
            rewrite_share = (time.perf_counter() - started) / max(len(rewritten), 1)
            scores, seconds = timed_per_query(rewritten, lambda qid, query: self.search(retriever, qid, query, context.search_depth),
                                              f"{self.name}: search")
            seconds = {qid: s + rewrite_share for qid, s in seconds.items()}
            run = Run(self.name, {qid: ranked for qid, ranked in scores.items() if ranked})
            return run, {**efficiency, **latency_figures(seconds), "rewrite_seconds": rewrite_share * len(rewritten)}, seconds

        passage_run, efficiency, latency_ms = cached_run(context, key, self.name, compute)
        return StageOutput(context.judged(passage_run), passage_run, key, self, efficiency, latency_ms, first.approximate)
