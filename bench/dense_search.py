"""Exact dense search (ragtrack's ExactIndex) against Chroma's HNSW on the same random vectors, in
the same run: build seconds, search milliseconds per query (one query per call, as a job searches),
and HNSW's recall@k of the exact top k.

    python bench/dense_search.py [--docs 5000 20000] [--queries 300] [--dim 384]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import chromadb
import numpy as np
from chromadb.config import Settings

from machine import cpu_model  # bench/ scripts share the machine line

from ragtrack.retrievers.dense import ExactIndex

K = 100
HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}  # conf/retriever/dense.yaml


def per_query_ms(search, queries: np.ndarray) -> tuple[float, list[set[str]]]:
    started = time.perf_counter()
    found = [search(query) for query in queries]
    return (time.perf_counter() - started) / len(queries) * 1000, found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, nargs="+", default=[5000, 20_000], help="corpus sizes (docs/determinism.md: 5000 100000)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dim", type=int, default=384)
    args = parser.parse_args()
    print(f"CPU: {cpu_model()}; {args.queries} queries, top {K}, dimension {args.dim}")
    rng = np.random.default_rng(0)
    for docs in args.docs:
        vectors = rng.standard_normal((docs, args.dim)).astype(np.float32)
        queries = rng.standard_normal((args.queries, args.dim)).astype(np.float32)
        ids = [f"d{i}" for i in range(docs)]
        started = time.perf_counter()
        exact = ExactIndex(vectors.copy(), np.asarray(ids, dtype=object))
        exact_build = time.perf_counter() - started
        exact_ms, exact_found = per_query_ms(lambda q: set(exact.search(q[None], K)[0]), queries)
        with tempfile.TemporaryDirectory() as folder:
            client = chromadb.PersistentClient(path=folder, settings=Settings(anonymized_telemetry=False))
            started = time.perf_counter()
            collection = client.create_collection("corpus", embedding_function=None, configuration={"hnsw": HNSW})
            batch = client.get_max_batch_size()
            for start in range(0, docs, batch):
                collection.add(ids=ids[start:start + batch], embeddings=vectors[start:start + batch])
            hnsw_build = time.perf_counter() - started
            hnsw_ms, hnsw_found = per_query_ms(
                lambda q: set(collection.query(query_embeddings=q[None], n_results=K, include=["distances"])["ids"][0]), queries)
            client.close()
        recall = np.mean([len(a & e) / len(e) for a, e in zip(hnsw_found, exact_found)])
        print(f"{docs:>9,} docs: exact build {exact_build:.2f} s, {exact_ms:.2f} ms/query | "
              f"HNSW build {hnsw_build:.1f} s, {hnsw_ms:.2f} ms/query, recall@{K} {recall:.4f} | "
              f"exact/HNSW search time {exact_ms / hnsw_ms:.2f}", flush=True)


if __name__ == "__main__":
    main()
