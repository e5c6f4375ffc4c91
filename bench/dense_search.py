"""Exact dense search (ragtrack's ExactIndex) at the matrix-product bound, and against Chroma's HNSW,
on the same random vectors in one run: every query in one call (as a job searches) in seconds and
GFLOP/s against this machine's float32 peak (a 4096² numpy product) and against the product Q @ Xᵀ
alone (the same blocks into one buffer, nothing picked); one query per call (a seeded sample: the
latency of one query alone); HNSW's build, ms per query and recall@k of the exact top k. The search,
the product and the peak take turns, ``--repeats`` rounds, and each one's best round counts: on a
shared machine a busy spell then slows all three alike instead of one (the load average is printed
before and after).

    python bench/dense_search.py [--docs 5000 20000] [--queries 300] [--dim 384] [--alone 20] [--no-hnsw]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
from machine import best_of, cpu_model, matmul_peak  # bench/ scripts share the machine line

from ragtrack.retrievers.dense import QUERIES_PER_PASS, SCORES_PER_BLOCK, ExactIndex

K = 100
HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}  # conf/retriever/dense.yaml


def product_seconds(queries: np.ndarray, vectors: np.ndarray, repeats: int) -> float:
    """The best seconds of Q @ Xᵀ alone, in the blocks ExactIndex scores (into one reused buffer)."""
    rows = SCORES_PER_BLOCK // min(len(queries), QUERIES_PER_PASS)
    scores = np.empty((len(queries), rows), dtype=np.float32)

    def product() -> None:
        for first in range(0, len(vectors), rows):
            block = vectors[first : first + rows]
            np.matmul(queries, block.T, out=scores[:, : len(block)])

    return best_of(product, repeats)


def hnsw_line(vectors: np.ndarray, queries: np.ndarray, exact_found: list[set[str]]) -> str:
    """Chroma's HNSW on the same vectors: build seconds, ms per query, recall@K of the exact top K."""
    import chromadb
    from chromadb.config import Settings

    ids = [f"d{i}" for i in range(len(vectors))]
    with tempfile.TemporaryDirectory() as folder:
        client = chromadb.PersistentClient(path=folder, settings=Settings(anonymized_telemetry=False))
        started = time.perf_counter()
        collection = client.create_collection("corpus", embedding_function=None, configuration={"hnsw": HNSW})
        batch = client.get_max_batch_size()
        for start in range(0, len(ids), batch):
            collection.add(ids=ids[start : start + batch], embeddings=vectors[start : start + batch])
        build = time.perf_counter() - started
        started = time.perf_counter()
        found = [
            set(collection.query(query_embeddings=q[None], n_results=K, include=["distances"])["ids"][0])
            for q in queries
        ]
        ms = (time.perf_counter() - started) / len(queries) * 1000
        client.close()
    recall = np.mean([len(a & e) / len(e) for a, e in zip(found, exact_found)])
    return f"HNSW build {build:.1f} s, {ms:.2f} ms/query, recall@{K} {recall:.4f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--docs", type=int, nargs="+", default=[5000, 20_000], help="corpus sizes (docs/determinism.md: 5000 100000)"
    )
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--alone", type=int, default=20, help="queries of the seeded sample searched one per call")
    parser.add_argument(
        "--repeats", type=int, default=3, help="rounds of the batch, the product and the peak, taking turns (best of N)"
    )
    parser.add_argument(
        "--hnsw", action=argparse.BooleanOptionalAction, default=True, help="Chroma's HNSW beside (slow past 100k)"
    )
    args = parser.parse_args()
    print(
        f"CPU: {cpu_model()}; load average {os.getloadavg()[0]:.1f}; {args.queries} queries, top {K}, "
        f"dimension {args.dim}",
        flush=True,
    )
    rng = np.random.default_rng(0)
    for docs in args.docs:
        vectors = rng.standard_normal((docs, args.dim), dtype=np.float32)
        queries = rng.standard_normal((args.queries, args.dim), dtype=np.float32)
        index = ExactIndex(vectors, np.array([f"d{i}" for i in range(docs)], dtype=object))
        found = index.search(queries, K)
        batch, product, peak = float("inf"), float("inf"), 0.0
        for _ in range(args.repeats):  # the three take turns
            batch = min(batch, best_of(lambda: index.search(queries, K), 1))
            product = min(product, product_seconds(queries, vectors, 1))
            peak = max(peak, matmul_peak(repeats=1))
        sample = np.random.default_rng(1).choice(len(queries), min(args.alone, len(queries)), replace=False)
        started = time.perf_counter()
        assert [index.search(queries[i][None], K)[0] for i in sample] == [
            found[i] for i in sample
        ]  # the same bits alone
        alone_ms = (time.perf_counter() - started) / len(sample) * 1000
        flops = 2 * docs * args.queries * args.dim / 1e9
        print(
            f"{docs:>9,} docs: exact, all queries in one call {batch:.2f} s = {flops / batch:.0f} GFLOP/s "
            f"({flops / batch / peak:.0%} of the float32 peak, {peak:.0f} GFLOP/s; {product / batch:.0%} of Q @ Xᵀ alone: "
            f"{product:.2f} s = {flops / product:.0f} GFLOP/s); one query per call {alone_ms:.2f} ms/query "
            f"({len(sample)} queries); load average {os.getloadavg()[0]:.1f}",
            flush=True,
        )
        if args.hnsw:
            print(f"{'':>15}{hnsw_line(vectors, queries, [set(f) for f in found])}", flush=True)


if __name__ == "__main__":
    main()
