"""Dense retrieval: an encoder embeds title + text; exact search over the cached vectors, or Chroma's HNSW.

Embeddings are cached as ``.npy`` (key: corpus hash + encoder fingerprint), beside ``encoded_by.json``:
the device, backend and precision that encoded them (:meth:`Encoder.document_runtime`), which the
retriever reports as ``encoded_by.<key>`` labels (the system's MLflow params). The Chroma collection
(key: embeddings key + HNSW settings) lives, by ``chroma.mode``:

- ``persistent``: a PersistentClient folder in the cache, built in a temporary folder and renamed
  into place (one writer per folder: Chroma loses vectors when processes add to one folder at once).
  Its files are checksummed like any cache entry's. A client rewrites them when it opens the folder,
  so approximate search opens it under the entry's lock and the checksums are taken again then
  (``Cache.opened``); exact search never opens it.
- ``http``: a Chroma server (``chroma run``), shared by every job that reaches it, so the collection
  is named ``ragtrack-<key>``. It is built as ``<name>-tmp-<id>`` (tagged with the builder's
  process), marked complete in its metadata and then renamed; the rename is atomic on the server, so
  concurrent builders never mix vectors and a killed build is only a temporary collection, which the
  next build on that host drops. An auth token is read from the environment variable named by
  ``chroma.token_env`` and sent in ``chroma.token_header``; it never appears in the config.

Chroma's own embedding function is never used: vectors are always supplied. Space is cosine.

When the dense index is built (its run is not cached yet), the collection is built if it is used
(``chroma.build: when_used``, the default): if ``search=approximate`` queries it, or if
``chroma.mode=http`` shares it with other jobs. Exact search in the embedded store never reads it, so
it is not built then, unless ``chroma.build: always`` asks for it: at a million documents its HNSW
build is most of the job and grows faster than the corpus (docs/scale.md).

``search`` picks how queries are answered:

- ``exact`` (default; what BEIR and MTEB report): every document is scored, score = cosine
  similarity, the float32 dot product of the L2-normalized vectors summed in a fixed order, so a run
  is the same bits whatever the BLAS library, its thread count or the batching of queries
  (``ExactIndex``). The vectors are the embeddings cache entry, the same array Chroma holds.
- ``approximate``: Chroma's HNSW index answers; scores are 1 − Chroma's cosine distance. HNSW graphs
  differ from build to build, so runs may too; ``search_checks`` reports ``approximate_recall``, the
  share of the exact top ``depth`` that the approximate top ``depth`` holds, averaged over queries.
"""

from __future__ import annotations

import json
import logging
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np
from filelock import FileLock
from pydantic import Field

from ragtrack.core.cache import Cache, cache_key, folder_size, inside
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.processes import process_alive, process_tag
from ragtrack.core.progress import Progress
from ragtrack.core.runs import Run
from ragtrack.core.settings import Count, EnvName, Flag, Port, Section, Text, validated
from ragtrack.core.words import counted
from ragtrack.retrievers.base import Retriever, RetrieverSettings, top_documents
from ragtrack.retrievers.encoders import Encoder

log = logging.getLogger(__name__)

COLLECTION = "corpus"
EMBEDDINGS = "embeddings.npy"
ENCODED_BY = "encoded_by.json"
COMPLETE = "ragtrack.complete"
BUILDER = "ragtrack.process"
UNIT_ROUNDOFF = 2.0**-24  # float32
ROWS_PER_BLOCK = 65_536  # vectors read, normalized and scored per numpy call, at most
SCORES_PER_BLOCK = 2**24  # BLAS scores held at once (64 MB): rows per block = this / queries per pass
QUERIES_PER_PASS = 4_096  # queries scored in one pass over the vectors
ENCODE_BLOCK = 65_536  # texts encoded per call while the embeddings file is written (100 MB of 384-d rows)
POOL_FACTOR = 4  # a query's candidates are cut back to the margin of its k-th best past this many times k


def _chroma_settings():
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def norms(vectors: np.ndarray) -> np.ndarray:
    """The L2 norm of each row (float32, one column), summed as numpy sums a row."""
    return np.sqrt((vectors * vectors).sum(axis=1, keepdims=True))


def normalized(vectors: np.ndarray) -> np.ndarray:
    """``vectors`` (float32, changed in place) divided by their L2 norms; zero vectors stay zero."""
    for start in range(0, len(vectors), ROWS_PER_BLOCK):
        block = vectors[start : start + ROWS_PER_BLOCK]
        lengths = norms(block)
        np.divide(block, lengths, out=block, where=lengths > 0)
    return vectors


def row_blocks(path: Path, rows: int) -> Iterator[np.ndarray]:
    """The rows of a 2-d ``.npy`` file, ``rows`` at a time, read from the memory-mapped file as they
    are needed (the whole array is never in memory)."""
    vectors = np.load(path, mmap_mode="r", allow_pickle=False)
    for start in range(0, len(vectors), rows):
        yield np.array(vectors[start : start + rows])


def save_rows(path: Path, rows: int, blocks: Iterator[np.ndarray]) -> None:
    """A ``.npy`` file of ``rows`` rows written block by block as ``blocks`` yields them (at least
    one, possibly empty): the bytes ``np.save`` writes for the whole array, never held whole."""
    block, written = next(blocks), 0
    dtype = block.dtype
    with open(path, "wb") as file:
        np.lib.format.write_array_header_1_0(
            file,
            {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": (rows, *block.shape[1:])},
        )
        while block is not None:
            file.write(np.ascontiguousarray(block, dtype=dtype).data)
            written, block = written + len(block), None  # let go before the next block is made
            block = next(blocks, None)
    if written != rows:
        raise RagtrackError(f"{path}: {rows} rows expected, {written} written")


class HnswSettings(Section):
    """The HNSW graph of the Chroma collection (queried by search=approximate)."""

    ef_construction: Count = 200
    ef_search: Count = 200
    max_neighbors: Count = 32


class ChromaSettings(Section):
    """Where the Chroma collection lives and when it is built (module docstring)."""

    mode: Literal["persistent", "http"] = "persistent"
    build: Literal["when_used", "always"] = "when_used"
    host: Text = "localhost"
    port: Port = 8000
    ssl: Flag = False
    headers: dict[str, str] = {}
    token_env: EnvName | None = None
    token_header: Text = "Authorization"
    hnsw: HnswSettings = HnswSettings()


class DenseSettings(RetrieverSettings, extra="forbid"):
    """Dense retrieval: the encoder (checked by its _target_), exact or approximate search, the Chroma collection."""

    encoder: Any = Field(description="an encoder: a mapping with its _target_ (checked by that encoder's settings)")
    search: Literal["exact", "approximate"] = "exact"
    chroma: ChromaSettings = ChromaSettings()


class ExactIndex:
    """Exhaustive cosine search whose scores are the same bits however it is run.

    The vectors are read in blocks of at most ``rows`` rows (a memory-mapped embeddings file is never
    held whole); their norms are computed once. A batch of queries is scored against each block by
    one BLAS product (:meth:`estimates`), which is fast but sums in an order that depends on matrix
    shapes and threads, so it only picks candidates. The reported score of a candidate is
    ``(x * q).sum()`` of the normalized vectors (numpy: exact products rounded to float32, then a
    pairwise sum whose order depends on the dimension only). Any float32 dot product of length d is
    within γ·Σ|x_j q_j| of the real one, γ = (d+1)u/(1 − (d+1)u), u = 2⁻²⁴, and Σ|x_j q_j| ≤
    ‖x‖‖q‖ ≈ 1; so BLAS and fixed-order scores differ by at most e = 2γ·1.01 and every document of
    the fixed-order top k has a BLAS score within 2e of the BLAS k-th best. Each query keeps, block
    after block, the documents within 2e of the k-th best seen so far (a superset of those within 2e
    of the final k-th best: :class:`Pool`); they are rescored, and ``top_documents`` picks the top k
    (ties by document id)."""

    def __init__(self, vectors: np.ndarray, doc_ids: np.ndarray, rows: int = ROWS_PER_BLOCK):
        self.vectors, self.doc_ids, self.rows = vectors, doc_ids, rows
        self.norms = np.concatenate(
            [norms(np.asarray(vectors[start : start + rows])) for start in range(0, len(vectors), rows)]
            or [np.zeros((0, 1), dtype=np.float32)]
        )
        dimension = vectors.shape[1] + 1
        self.margin = 2 * (2 * dimension * UNIT_ROUNDOFF / (1 - dimension * UNIT_ROUNDOFF) * 1.01)

    def search(self, queries: np.ndarray, k: int) -> list[dict[str, float]]:
        """The top ``k`` of every query (rows of ``queries``), one pass over the vectors per
        :data:`QUERIES_PER_PASS` queries."""
        queries = normalized(np.array(queries, dtype=np.float32))
        if k <= 0:
            return [{} for _ in queries]
        results = []
        for start in range(0, len(queries), QUERIES_PER_PASS):
            batch = queries[start : start + QUERIES_PER_PASS]
            for query, candidates in zip(batch, self._candidates(batch, k)):
                results.append(
                    top_documents(self.doc_ids[candidates], (self._unit_rows(candidates) * query).sum(axis=1), k)
                )
        return results

    def estimates(self, queries: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
        """``(first row, BLAS cosines of the queries and the block's rows)`` over the vectors, in
        blocks of :data:`SCORES_PER_BLOCK` scores (at most ``rows`` rows), each valid until the next
        (the buffers are reused): the product of the normalized queries and rows, or, for fewer
        queries than dimensions (cheaper), of the rows as stored divided by their norms afterwards
        (within the same margin: one rounding more)."""
        rows = max(1, min(self.rows, SCORES_PER_BLOCK // max(len(queries), 1), len(self.vectors)))
        normalize = len(queries) >= self.vectors.shape[1]
        scores = np.empty((len(queries), rows), dtype=np.float32)
        unit = np.empty((rows, self.vectors.shape[1]), dtype=np.float32) if normalize else None
        for first in range(0, len(self.vectors), rows):
            block, lengths = self.vectors[first : first + rows], self.norms[first : first + rows]
            estimates = scores[:, : len(block)]
            if normalize:  # the bits of _unit_rows
                np.copyto(unit[: len(block)], block)
                np.divide(unit[: len(block)], lengths, out=unit[: len(block)], where=lengths > 0)
                np.matmul(queries, unit[: len(block)].T, out=estimates)
            else:
                np.matmul(queries, np.asarray(block).T, out=estimates)
                np.divide(estimates, lengths[:, 0], out=estimates, where=lengths[:, 0] > 0)
            yield first, estimates

    def _candidates(self, queries: np.ndarray, k: int) -> list[np.ndarray]:
        """Per query, the ascending positions of the documents whose BLAS estimate is within the
        margin of the k-th best (all documents when there are at most k)."""
        pools = [Pool() for _ in queries]
        floors = np.full(len(queries), -np.inf, dtype=np.float32)  # per query: the k-th best so far less the margin
        for first, estimates in self.estimates(queries):
            unset, seen = np.flatnonzero(floors == -np.inf), min(estimates.shape[1], POOL_FACTOR * k)
            if len(unset) and 0 < k <= seen:  # the k-th best of any columns bounds the final one from below
                floors[unset] = np.partition(estimates[unset, :seen], seen - k, axis=1)[:, seen - k] - self.margin
            numbers, columns = np.divmod(np.flatnonzero(estimates >= floors[:, None]), estimates.shape[1])
            bounds = np.searchsorted(numbers, np.arange(len(queries) + 1))
            scores = estimates[numbers, columns]
            for number in np.flatnonzero(np.diff(bounds)):
                start, end = bounds[number], bounds[number + 1]
                floors[number] = pools[number].add(
                    scores[start:end], columns[start:end] + first, k, self.margin, floors[number]
                )
        return [pool.positions(k, self.margin) for pool in pools]

    def _unit_rows(self, positions: np.ndarray | slice) -> np.ndarray:
        """The normalized vectors at ``positions``: the same bits as :func:`normalized` gives them."""
        rows = np.array(self.vectors[positions], dtype=np.float32)
        lengths = self.norms[positions]
        return np.divide(rows, lengths, out=rows, where=lengths > 0)


class Pool:
    """One query's candidates: BLAS estimates and document positions, added block by block and cut
    back to those within the margin of the k-th best whenever they grow past ``POOL_FACTOR`` · k and
    twice what the last cut kept (scores tied near the k-th best may keep many: cuts stay rare)."""

    def __init__(self):
        self.parts: list[tuple[np.ndarray, np.ndarray]] = [(np.empty(0, np.float32), np.empty(0, np.int64))]
        self.size = self.kept = 0

    def add(self, scores: np.ndarray, positions: np.ndarray, k: int, margin: float, floor: np.float32) -> np.float32:
        """Add candidates; returns the query's floor (raised when the pool was cut back)."""
        self.parts.append((scores, positions))
        self.size += len(scores)
        return self.cut(k, margin, floor) if self.size > max(POOL_FACTOR * k, 2 * self.kept) else floor

    def cut(self, k: int, margin: float, floor: np.float32) -> np.float32:
        """Keep the candidates within ``margin`` of the k-th best estimate; returns the new floor."""
        scores, positions = (np.concatenate(part) for part in zip(*self.parts))
        if len(scores) > k > 0:
            floor = max(floor, np.partition(scores, len(scores) - k)[len(scores) - k] - margin)
            keep = scores >= floor
            scores, positions = scores[keep], positions[keep]
        self.parts, self.size = [(scores, positions)], len(scores)
        self.kept = self.size
        return floor

    def positions(self, k: int, margin: float) -> np.ndarray:
        """The final candidates, ascending."""
        self.cut(k, margin, np.float32(-np.inf))
        return np.sort(self.parts[0][1])


class DenseRetriever(Retriever):
    """Dense retrieval with ``encoder`` (an :class:`Encoder`); ``values`` are :class:`DenseSettings`
    (validated here, defaults there)."""

    settings_schema = DenseSettings

    def __init__(self, encoder: Encoder, name: str = "dense", **values):
        super().__init__(name)
        settings = validated(self.settings_schema, {"encoder": encoder, **values}, f"dense retriever {name!r}")
        if not isinstance(settings.encoder, Encoder):
            raise RagtrackError(
                f"dense retriever {name!r}: 'encoder' must construct a ragtrack.retrievers.encoders.Encoder"
            )
        self.encoder = settings.encoder
        self.search_mode = settings.search
        self.approximate = settings.search == "approximate"
        self._exact: ExactIndex | None = None
        self._embeddings_file: Path | None = None
        self.chroma = settings.chroma.model_dump()
        self.builds_collection = self.approximate or self.chroma["mode"] == "http" or self.chroma["build"] == "always"
        self._collection = None
        self._client = None
        self._count: int | None = None

    def problems(self) -> dict[str, str]:
        return {f"encoder.{setting}": problem for setting, problem in self.encoder.problems().items()}

    def index_settings(self) -> dict:
        return {**self._collection_settings(), "search": self.search_mode}

    def _collection_settings(self) -> dict:
        """What changes the Chroma collection (its cache key; exact and approximate search share it)."""
        return {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "encoder": self.encoder.fingerprint(),
            "hnsw": dict(self.chroma["hnsw"]),
        }

    def _embeddings(self, corpus: Corpus, cache: Cache) -> tuple[Path, dict]:
        parts = {"corpus": corpus.hash, "encoder": self.encoder.fingerprint(), "text": "title + ' ' + text"}

        def build(folder: Path) -> None:
            log.info("%s: encoding %s", self.name, counted(len(corpus), "document"))
            save_rows(folder / EMBEDDINGS, len(corpus), self._encoded_blocks(corpus.full_texts()))
            (folder / ENCODED_BY).write_text(json.dumps(self.encoder.document_runtime()))

        return cache.entry("embeddings", parts, build, label=f"{self.name} embeddings"), parts

    def _encoded_blocks(self, texts: Sequence[str]) -> Iterator[np.ndarray]:
        """The embeddings of ``texts``, :data:`ENCODE_BLOCK` texts per call (Ray's actors: every text
        in one call, so each loads the model once)."""
        size = max(len(texts), 1) if self.encoder.distributed == "ray" else ENCODE_BLOCK
        with Progress(f"{self.name}: encode", len(texts), "texts") as progress:
            for start in range(0, max(len(texts), 1), size):
                block = texts[start : start + size]
                yield self.encoder.encode(block, kind="document")
                progress.update(len(block))

    def index(self, corpus: Corpus, cache: Cache) -> None:
        started = time.perf_counter()
        builds_before = len(cache.builds)
        self.encoder.prepare(cache)
        embeddings_folder, embedding_parts = self._embeddings(corpus, cache)
        self._embeddings_file = embeddings_folder / EMBEDDINGS
        parts = {"embeddings": cache_key("embeddings", embedding_parts), **self._collection_settings()}

        def fill(collection, client) -> None:
            batch = client.get_max_batch_size()  # batch size hardly matters (docs/scale.md): the fewest calls
            with Progress(f"{self.name}: chroma add", len(corpus), "documents") as progress:
                for start, vectors in zip(range(0, len(corpus), batch), row_blocks(self._embeddings_file, batch)):
                    ids = corpus.ids[start : start + batch]
                    collection.add(ids=ids, embeddings=vectors)
                    progress.update(len(ids))

        self.stats.size_bytes = folder_size(embeddings_folder)
        encoded_by = embeddings_folder / ENCODED_BY  # absent from entries built before it was recorded
        self.stats.labels = {
            f"encoded_by.{key}": value
            for key, value in (json.loads(encoded_by.read_text()) if encoded_by.exists() else {}).items()
        }
        if self.builds_collection and self.chroma["mode"] == "http":
            self._client = self._http_client()
            name = f"ragtrack-{cache_key('chroma', parts)}"
            self._collection, built = self._server_collection(name, len(corpus), fill, cache.path("chroma-server"))
            if built:
                cache.builds.append(f"chroma-server/{name}")
        elif self.builds_collection:
            build, label = partial(self._build_folder, fill=fill), f"{self.name} chroma"
            if self.approximate:  # Chroma rewrites the folder's files when it opens it: under the entry's lock
                self._client, self._collection, size = cache.opened(
                    "chroma", parts, build, self._open_folder, label=label
                )
            else:  # exact search never opens it
                size = folder_size(cache.entry("chroma", parts, build, label=label))
            self.stats.size_bytes += size
        self._doc_ids = corpus.id_array()
        self._exact = None if self.approximate else self._exact_index()
        self.stats.from_cache = len(cache.builds) == builds_before
        self.stats.build_seconds = time.perf_counter() - started
        self._count = len(corpus)

    def _exact_index(self) -> ExactIndex:
        return ExactIndex(np.load(self._embeddings_file, mmap_mode="r", allow_pickle=False), self._doc_ids)

    def _configuration(self) -> dict:
        return {"hnsw": {"space": "cosine", **self.chroma["hnsw"]}}

    def _open_folder(self, folder: Path):
        """A client of the Chroma folder, its collection, loaded by one query (Chroma rewrites the
        folder's files here), and the folder's size."""
        import chromadb  # here, not at the top: a job whose runs are cached never loads chromadb

        client = chromadb.PersistentClient(path=str(folder), settings=_chroma_settings())
        collection = client.get_collection(COLLECTION, embedding_function=None)
        first = next(row_blocks(self._embeddings_file, 1), None)
        if first is not None:
            collection.query(query_embeddings=first, n_results=1, include=[])
        return client, collection, folder_size(folder)

    def _build_folder(self, folder: Path, fill) -> None:
        import chromadb

        client = chromadb.PersistentClient(path=str(folder), settings=_chroma_settings())
        try:
            fill(
                client.create_collection(COLLECTION, embedding_function=None, configuration=self._configuration()),
                client,
            )
        finally:
            client.close()

    def _http_client(self):
        """A client of the Chroma server named by ``chroma.host/port/ssl``, with the token from ``chroma.token_env``."""
        headers = dict(self.chroma["headers"] or {})
        variable = self.chroma["token_env"]
        if variable:
            token = os.environ.get(variable)
            if not token:
                raise RagtrackError(f"chroma.token_env names the environment variable {variable!r}, which is not set")
            header = self.chroma["token_header"]
            headers[header] = f"Bearer {token}" if header.lower() == "authorization" else token
        address = f"{'https' if self.chroma['ssl'] else 'http'}://{self.chroma['host']}:{self.chroma['port']}"
        import chromadb

        try:
            client = chromadb.HttpClient(
                host=self.chroma["host"],
                port=int(self.chroma["port"]),
                ssl=bool(self.chroma["ssl"]),
                headers=headers,
                settings=_chroma_settings(),
            )
            client.heartbeat()
        except Exception as exc:
            raise RagtrackError(
                f"cannot reach the Chroma server at {address}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
            ) from None
        return client

    def _complete_collection(self, name: str, count: int):
        """The server's collection ``name`` if it is marked complete and holds ``count`` vectors."""
        from chromadb.errors import NotFoundError

        try:
            collection = self._client.get_collection(name, embedding_function=None)
        except NotFoundError:
            return None
        if (collection.metadata or {}).get(COMPLETE) and collection.count() == count:
            return collection
        return None

    def _server_collection(self, name: str, count: int, fill, lock_folder: Path):
        """Reuse or build the server collection ``name``; returns it and whether this job built it."""
        from chromadb.errors import ChromaError

        found = self._complete_collection(name, count)
        if found is not None:
            log.info("chroma server: reusing collection %s", name)
            return found, False
        lock_folder.mkdir(parents=True, exist_ok=True)
        with FileLock(str(inside(lock_folder, f"{name}.lock"))):  # spares jobs sharing this cache a duplicate build
            found = self._complete_collection(name, count)
            if found is not None:
                return found, False
            self._drop_untrusted(name)
            tag = process_tag()
            scratch = self._client.create_collection(
                f"{name}-tmp-{uuid.uuid4().hex[:8]}",
                embedding_function=None,
                configuration=self._configuration(),
                metadata={BUILDER: tag},
            )
            try:
                fill(scratch, self._client)
                scratch.modify(metadata={BUILDER: tag, COMPLETE: True})
            except BaseException:
                self._client.delete_collection(scratch.name)
                raise
            try:
                scratch.modify(name=name)
            except ChromaError:  # a job on another host renamed its build into place first
                self._client.delete_collection(scratch.name)
        found = self._complete_collection(name, count)
        if found is None:
            raise RagtrackError(f"Chroma server collection {name!r} is incomplete after building it")
        log.info("chroma server: built collection %s", name)
        return found, True

    def _drop_untrusted(self, name: str) -> None:
        """Drop ``name`` if it is not marked complete, and temporary builds of it whose builder is gone."""
        for collection in self._client.list_collections():
            metadata = collection.metadata or {}
            unfinished = collection.name == name and not metadata.get(COMPLETE)
            orphan = collection.name.startswith(f"{name}-tmp-") and not process_alive(metadata.get(BUILDER, ""))
            if unfinished or orphan:
                log.warning("chroma server: dropping untrusted collection %s", collection.name)
                self._client.delete_collection(collection.name)

    def search(self, queries: dict[str, str], depth: int) -> Run:
        if self._count is None:
            raise RuntimeError("index() must be called before search()")
        qids = list(queries)
        vectors = self.encoder.encode([queries[q] for q in qids], kind="query")
        if not self.approximate:
            return Run(self.name, dict(zip(qids, self._exact.search(vectors, min(depth, self._count)))))
        n_results = min(depth, self._count)
        scores: dict[str, dict[str, float]] = {}
        batch = 256
        for start in range(0, len(qids), batch):
            result = self._collection.query(
                query_embeddings=vectors[start : start + batch], n_results=n_results, include=["distances"]
            )
            for qid, ids, distances in zip(qids[start : start + batch], result["ids"], result["distances"]):
                # distances are float32; a server sends them as JSON decimals, which np.float32 restores exactly
                scores[qid] = {doc_id: 1.0 - float(np.float32(d)) for doc_id, d in zip(ids, distances)}
        return Run(self.name, scores)

    def search_checks(self, queries: dict[str, str], run: Run, depth: int) -> dict[str, float]:
        """``approximate_recall``: per query |approximate top depth ∩ exact top depth| / |exact top
        depth|, averaged over the queries (approximate search only)."""
        if not self.approximate or not queries:
            return {}
        exact = self._exact_index()
        qids = list(queries)
        found = exact.search(self.encoder.encode([queries[q] for q in qids], kind="query"), min(depth, self._count))
        recalls = [
            len(run.scores.get(qid, {}).keys() & best.keys()) / len(best) for qid, best in zip(qids, found) if best
        ]
        return {"approximate_recall": float(np.mean(recalls)) if recalls else 1.0}

    def close(self) -> None:
        """Release the Chroma client; search() needs index() again afterwards."""
        self._count = None
        if self._client is not None:
            self._client.close()
            self._client = self._collection = None
