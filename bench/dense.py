"""Encoders: documents/s of each backend vs plain sentence-transformers (PyTorch fp32) on the same
SciFact texts, agreement with it (cosine), and the nDCG@10 each reaches on full SciFact (exact cosine
search; embeddings cached in --cache-dir under the same keys `ragtrack run` uses, so they are shared).

    python bench/dense.py [--docs 512] [--full] [--cache-dir .cache/ragtrack]
"""

from __future__ import annotations

import argparse
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir

from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.ranking import RankingEvaluator
from ragtrack.pipeline import registry
from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.runs import Run
from ragtrack.retrievers.dense import EMBEDDINGS, DenseRetriever

PROJECT = Path(__file__).resolve().parent.parent
BACKENDS = {"torch fp32 (sentence-transformers)": "minilm", "onnx fp32": "minilm_onnx", "onnx int8": "minilm_onnx_int8"}
REFERENCE = "torch fp32 (sentence-transformers)"


def encoder(config_name: str):
    with initialize_config_dir(str(PROJECT / "conf"), version_base="1.3"):
        return registry.build("encoders", compose("config", overrides=[f"encoder={config_name}"]).encoder)


def ndcg_at_10(retriever: DenseRetriever, dataset, cache: Cache) -> float:
    folder, _ = retriever._embeddings(dataset.corpus, cache)
    documents = np.load(folder / EMBEDDINGS)
    qids = list(dataset.queries)
    scores = retriever.encoder.encode([dataset.queries[q] for q in qids], kind="query") @ documents.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = Run("dense", {qid: {dataset.corpus.ids[d]: float(scores[row, d]) for d in top[row]} for row, qid in enumerate(qids)})
    return float(RankingEvaluator(metrics=["ndcg@10"]).evaluate(EvalInput(qrels=dataset.qrels, run=run))["ndcg@10"].mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=512, help="texts timed per backend (the first N SciFact documents)")
    parser.add_argument("--full", action="store_true", help="also encode full SciFact per backend for nDCG@10 (cached)")
    parser.add_argument("--cache-dir", default=".cache/ragtrack")
    args = parser.parse_args()
    dataset = load_beir(PROJECT / "data" / "scifact", name="scifact")
    cache = Cache(args.cache_dir)
    texts = dataset.corpus.full_texts()[:args.docs]
    rows, vectors = {}, {}
    for label, config_name in BACKENDS.items():
        model = encoder(config_name)
        model.prepare(cache)
        model.encode(texts[:8])  # load the model and warm up
        started = time.perf_counter()
        vectors[label] = model.encode(texts, progress=True)
        seconds = time.perf_counter() - started
        rows[label] = {"docs/s": len(texts) / seconds, "min cosine vs torch": float((vectors[label] * vectors[REFERENCE]).sum(axis=1).min())}
        if args.full:
            rows[label]["nDCG@10 SciFact"] = ndcg_at_10(DenseRetriever(model), dataset, cache)
        print(f"  {label}: {rows[label]}", flush=True)
    table = pd.DataFrame(rows).T
    table["speed ratio vs torch"] = table["docs/s"] / table.loc[REFERENCE, "docs/s"]
    if args.full:
        table["nDCG@10 delta"] = table["nDCG@10 SciFact"] - table.loc[REFERENCE, "nDCG@10 SciFact"]
    print(f"\n{len(texts)} SciFact documents (title + text), batch sizes from conf/encoder/")
    print(table.to_string(float_format=lambda v: f"{v:,.4f}"))
    print(f"peak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
