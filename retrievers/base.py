"""The retriever interface: index a corpus (through the shared cache), answer queries with a Run."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

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
    """A system: ``index(corpus, cache)`` once, then ``search(queries, depth)``."""

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
