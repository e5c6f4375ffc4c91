"""The retriever interface: index a corpus (through the shared cache), answer queries with a Run.

A retriever is the first stage of a system (``ragtrack.core.stages``): it reads no other system. Its
run is cached by the chain key (corpus, index settings, queries, depth); a hit touches no index."""

from __future__ import annotations

import logging
import resource
from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus
from ragtrack.core.progress import step
from ragtrack.core.runs import Run
from ragtrack.core.settings import SystemSettings
from ragtrack.core.stages import Stage, StageContext, StageOutput, cached_run, chain_key, timed_search

log = logging.getLogger(__name__)


@dataclass
class IndexStats:
    """What building (or loading) the index cost, logged beside quality, and ``labels``: what built it
    (e.g. the device that encoded it), logged as the system's params."""

    build_seconds: float = 0.0
    size_bytes: int = 0
    from_cache: bool = False
    labels: dict[str, str] = field(default_factory=dict)


class RetrieverSettings(SystemSettings):
    """A retriever plugin's common keys."""


class Retriever(Stage):
    """A system: ``index(corpus, cache)`` once, then ``search(queries, depth)``.

    ``approximate`` is true where search may miss documents an exhaustive search would return
    (e.g. an HNSW index); such a retriever reports how much it misses in ``search_checks``."""

    settings_schema = RetrieverSettings

    kind = "retriever"
    searches_texts = True  # searches any query text (a rewriter's input must); a run file only replays its rankings

    def __init__(self, name: str):
        super().__init__(name)
        self.stats = IndexStats()
        self._indexed: str | None = None  # the corpus hash the index holds

    @abstractmethod
    def index_settings(self) -> dict:
        """Everything that changes the index (part of its cache key)."""

    def identity(self) -> dict:
        return self.index_settings()

    def ready(self, corpus: Corpus, cache: Cache) -> None:
        """The index of ``corpus`` loaded (from the cache, or built there), once per corpus."""
        if self._indexed != corpus.hash:
            self.index(corpus, cache)
            self._indexed = corpus.hash

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        """Index, then search every query in one call (``search_seconds``, ``queries_per_second``:
        the batch); the latency of one query alone comes from a separate measurement
        (:func:`~ragtrack.core.stages.timed_search`); each query's ``latency_ms`` is the batch's time per query. Peak memory is
        the process's peak resident set size so far (getrusage); then ``search_checks`` (e.g.
        ``approximate_recall``), outside the timing, and the index's ``labels``. The whole is cached
        by the chain key: a hit touches no index."""
        key = chain_key(self, inputs, context)
        queries = context.dataset.queries

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            with step(f"{self.name}: index", log):
                self.ready(context.dataset.corpus, context.cache)
            run, figures, seconds = timed_search(
                self.name, queries, lambda asked: self.search(asked, context.search_depth)
            )
            efficiency = {
                **self.search_checks(queries, run, context.search_depth),
                **figures,
                "index_seconds": self.stats.build_seconds,
                "index_bytes": self.stats.size_bytes,
                "index_from_cache": float(self.stats.from_cache),
                **self.stats.labels,
                "peak_memory_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
            }
            return run, efficiency, dict.fromkeys(queries, seconds / max(len(queries), 1))

        passage_run, efficiency, latency_ms = cached_run(context, key, self.name, compute)
        return StageOutput(
            context.judged(passage_run), passage_run, key, self, efficiency, latency_ms, self.approximate
        )

    @abstractmethod
    def index(self, corpus: Corpus, cache: Cache) -> None:
        """Load the index of ``corpus`` from the cache or build it there."""

    @abstractmethod
    def search(self, queries: dict[str, str], depth: int) -> Run:
        """Top ``depth`` documents per query, scores higher-is-better."""

    def search_checks(self, queries: dict[str, str], run: Run, depth: int) -> dict[str, float]:
        """Metrics about ``run`` (this retriever's answer to ``queries``) beyond its latency, e.g. the
        recall of an approximate search against an exact one; none by default."""
        return {}


def top_documents(doc_ids: np.ndarray, scores: np.ndarray, k: int) -> dict[str, float]:
    """The ``k`` best of ``scores`` (one per entry of ``doc_ids``, an object array of ids) as
    ``{doc_id: score}``. Best means trec_eval order (ragtrack.core.runs): score descending, equal
    scores by document id descending, so ties at the cut are decided by that rule too and the result
    never depends on the order documents are given in."""
    if k <= 0:
        return {}
    if len(scores) > k:
        kth = np.partition(scores, len(scores) - k)[len(scores) - k]
        above = np.flatnonzero(scores > kth)
        tied = np.flatnonzero(scores == kth)
        by_id = tied[np.argsort(doc_ids[tied])[::-1]]  # ids are unique strings: no ties left
        keep = np.concatenate([above, by_id[: k - len(above)]])
        doc_ids, scores = doc_ids[keep], scores[keep]
    return dict(zip(doc_ids.tolist(), scores.astype(float).tolist()))
