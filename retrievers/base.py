"""The retriever interface: index a corpus (through the shared cache), answer queries with a Run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import numpy as np

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus
from ragtrack.core.runs import Run


@dataclass
class IndexStats:
    """What building (or loading) the index cost; logged beside quality."""

    build_seconds: float = 0.0
    size_bytes: int = 0
    from_cache: bool = False
    extra: dict = field(default_factory=dict)


class Retriever(ABC):
    """A system: ``index(corpus, cache)`` once, then ``search(queries, depth)``.

    ``approximate`` is true where search may miss documents an exhaustive search would return
    (e.g. an HNSW index); such a retriever reports how much it misses in ``search_checks``."""

    approximate: bool = False

    def __init__(self, name: str):
        self.name = name
        self.stats = IndexStats()

    @abstractmethod
    def index_settings(self) -> dict:
        """Everything that changes the index (part of its cache key)."""

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
        keep = np.concatenate([above, by_id[:k - len(above)]])
        doc_ids, scores = doc_ids[keep], scores[keep]
    return dict(zip(doc_ids.tolist(), scores.astype(float).tolist()))
