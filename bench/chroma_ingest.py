"""Chroma ingestion throughput by batch size: the vectors per second a PersistentClient collection
(cosine, the dense retriever's HNSW settings) takes, each batch size measured in its own process;
per wall second and per CPU second (all of Chroma's threads), which a shared machine disturbs less.

    python bench/chroma_ingest.py [--vectors 20000] [--dim 384] [--batches 500,1000,2500,max] [--repeat 3]

``max`` is ``client.get_max_batch_size()``, what the dense retriever uses. Random unit vectors, seeded.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time

from machine import cpu_model  # bench/ scripts share the machine line

HNSW = {"space": "cosine", "ef_construction": 200, "ef_search": 200, "max_neighbors": 32}  # conf/retriever/dense.yaml


def ingest(vectors: int, dim: int, batch: str) -> dict:
    """One measurement (run in a child process): seconds to add ``vectors`` in batches of ``batch``."""
    import chromadb
    import numpy as np
    from chromadb.config import Settings

    rng = np.random.default_rng(0)
    data = rng.standard_normal((vectors, dim)).astype(np.float32)
    data /= np.linalg.norm(data, axis=1, keepdims=True)
    ids = [f"d{i}" for i in range(vectors)]
    with tempfile.TemporaryDirectory() as folder:
        client = chromadb.PersistentClient(path=folder, settings=Settings(anonymized_telemetry=False))
        collection = client.create_collection("corpus", embedding_function=None, configuration={"hnsw": HNSW})
        size = client.get_max_batch_size() if batch == "max" else int(batch)
        started, cpu = time.perf_counter(), time.process_time()
        for start in range(0, vectors, size):
            collection.add(ids=ids[start : start + size], embeddings=data[start : start + size])
        return {"batch": size, "seconds": time.perf_counter() - started, "cpu": time.process_time() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=20_000)
    parser.add_argument("--dim", type=int, default=384)
    parser.add_argument("--batches", default="500,1000,2500,max")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(ingest(args.vectors, args.dim, args.child)))
        return
    print(
        f"{args.vectors:,} vectors of {args.dim} dims; {cpu_model()}; median of {args.repeat}, each in a fresh process"
    )
    print(f"{'batch':>7} {'seconds':>8} {'vectors/s':>10} {'CPU s':>8} {'vectors/CPU s':>14}")
    for batch in args.batches.split(","):
        runs = [
            json.loads(
                subprocess.run(
                    [sys.executable, __file__, f"--vectors={args.vectors}", f"--dim={args.dim}", f"--child={batch}"],
                    capture_output=True,
                    text=True,
                    check=True,
                ).stdout.splitlines()[-1]
            )
            for _ in range(args.repeat)
        ]
        seconds, cpu = (statistics.median(run[key] for run in runs) for key in ("seconds", "cpu"))
        print(
            f"{runs[0]['batch']:>7} {seconds:>8.2f} {args.vectors / seconds:>10,.0f} {cpu:>8.2f} {args.vectors / cpu:>14,.0f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
