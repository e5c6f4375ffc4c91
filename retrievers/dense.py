"""Dense retrieval: an encoder embeds title + text, Chroma stores the vectors and answers queries.

Embeddings are cached as ``.npy`` (key: corpus hash + encoder fingerprint), the Chroma collection
as a PersistentClient folder (key: embeddings key + HNSW settings); both are built in a temporary
folder and renamed into place. Chroma's own embedding function is never used: vectors are always
supplied. Space is cosine; scores are similarities 1 − cosine distance (higher is better).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from pipeline.cache import Cache, cache_key, folder_size
from pipeline.data import Corpus
from pipeline.errors import RagtrackError
from pipeline.runs import Run
from retrievers.base import Retriever
from retrievers.encoders import Encoder

log = logging.getLogger(__name__)

COLLECTION = "corpus"
EMBEDDINGS = "embeddings.npy"


def _chroma_settings():
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


class DenseRetriever(Retriever):
    def __init__(self, encoder: Encoder, name: str = "dense", chroma: dict | None = None):
        super().__init__(name)
        if not isinstance(encoder, Encoder):
            raise RagtrackError(f"dense retriever {name!r}: 'encoder' must construct a retrievers.encoders.Encoder")
        self.encoder = encoder
        self.chroma = {"mode": "persistent", "hnsw": {}, **(chroma or {})}
        if self.chroma["mode"] != "persistent":
            raise RagtrackError(f"chroma mode {self.chroma['mode']!r} is not supported; use 'persistent'")
        self._collection = None
        self._client = None

    def index_settings(self) -> dict:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "encoder": self.encoder.fingerprint(),
                "hnsw": dict(self.chroma["hnsw"])}

    def _embeddings(self, corpus: Corpus, cache: Cache) -> tuple[Path, dict]:
        parts = {"corpus": corpus.hash, "encoder": self.encoder.fingerprint(), "text": "title + ' ' + text"}

        def build(folder: Path) -> None:
            log.info("%s: encoding %d documents", self.name, len(corpus))
            vectors = self.encoder.encode(corpus.full_texts(), kind="document", progress=True)
            np.save(folder / EMBEDDINGS, vectors, allow_pickle=False)

        return cache.entry("embeddings", parts, build, label=f"{self.name} embeddings"), parts

    def index(self, corpus: Corpus, cache: Cache) -> None:
        import chromadb

        started = time.perf_counter()
        builds_before = len(cache.builds)
        self.encoder.prepare(cache)
        embeddings_folder, embedding_parts = self._embeddings(corpus, cache)

        def build(folder: Path) -> None:
            vectors = np.load(embeddings_folder / EMBEDDINGS, allow_pickle=False)
            client = chromadb.PersistentClient(path=str(folder), settings=_chroma_settings())
            try:
                collection = client.create_collection(
                    COLLECTION, embedding_function=None,
                    configuration={"hnsw": {"space": "cosine", **self.chroma["hnsw"]}},
                )
                batch = client.get_max_batch_size()
                for start in tqdm(range(0, len(corpus), batch), desc=f"{self.name}: chroma add", unit="batch", leave=False):
                    collection.add(ids=corpus.ids[start:start + batch], embeddings=vectors[start:start + batch])
            finally:
                client.close()

        parts = {"embeddings": cache_key("embeddings", embedding_parts), **self.index_settings()}
        folder = cache.entry("chroma", parts, build, label=f"{self.name} chroma")
        self._client = chromadb.PersistentClient(path=str(folder), settings=_chroma_settings())
        self._collection = self._client.get_collection(COLLECTION, embedding_function=None)
        self.stats.from_cache = len(cache.builds) == builds_before
        self.stats.build_seconds = time.perf_counter() - started
        self.stats.size_bytes = folder_size(folder) + folder_size(embeddings_folder)
        self._count = len(corpus)

    def search(self, queries: dict[str, str], depth: int) -> Run:
        if self._collection is None:
            raise RuntimeError("index() must be called before search()")
        qids = list(queries)
        vectors = self.encoder.encode([queries[q] for q in qids], kind="query")
        n_results = min(depth, self._count)
        scores: dict[str, dict[str, float]] = {}
        batch = 256
        for start in range(0, len(qids), batch):
            result = self._collection.query(query_embeddings=vectors[start:start + batch], n_results=n_results, include=["distances"])
            for qid, ids, distances in zip(qids[start:start + batch], result["ids"], result["distances"]):
                scores[qid] = {doc_id: 1.0 - float(d) for doc_id, d in zip(ids, distances)}
        return Run(self.name, scores)

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = self._collection = None
