"""Encoders: documents/s of each backend vs plain sentence-transformers (PyTorch fp32) on the same
SciFact texts in one process, the GFLOP/s each achieves against the CPU's measured float32 peak,
agreement with PyTorch (cosine), and the nDCG@10 each reaches on full SciFact (exact cosine search;
embeddings cached in --cache-dir under the same keys `ragtrack run` uses, so they are shared).

    python bench/dense.py [--docs 512] [--repeats 3] [--full] [--cache-dir .cache/ragtrack]

PyTorch bf16 (mixed precision: bf16 matrix products, AMX or AVX512-BF16 where the CPU has them) runs
everywhere; where torch sees a GPU, the encoders run there (``device=auto``) and PyTorch fp16 is added.

Backends are timed in alternating rounds, the best round of each counted, so a machine whose load
changes hurts every backend alike. GFLOP/s counts the encoder's multiply-adds (x2) over the real tokens
of each text (no padding): per layer and token the Q, K, V and output projections and the feed-forward,
per layer and text the attention's scores and weighted sums. The peak is numpy's float32 matrix product
on every core, measured before and after the encoders (the higher counts); int8 runs other kernels, so
its share of the float32 peak is not given, nor is bf16's (other kernels, other peak). The last line
is the fp32 ceiling: the GFLOP/s a 2.0x speed-up over PyTorch fp32 needs against the measured peak,
and the most any encoder computing the same FLOPs in float32 could reach on this CPU.
"""

from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
from hydra import compose, initialize_config_dir
from machine import cpu_model, matmul_peak  # bench/ scripts share the machine line

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.models import resolve_model
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.ranking import RankingEvaluator
from ragtrack.pipeline import registry
from ragtrack.retrievers.dense import EMBEDDINGS, DenseRetriever

PROJECT = Path(__file__).resolve().parent.parent
BACKENDS = {
    "torch fp32 (sentence-transformers)": ["encoder=minilm"],
    "onnx fp32 (fused)": ["encoder=minilm_onnx"],
    "onnx int8": ["encoder=minilm_onnx_int8"],
    "torch bf16": ["encoder=minilm", "encoder.precision=bf16"],
}
GPU_BACKENDS = {"torch fp16": ["encoder=minilm", "encoder.precision=fp16"]}
REFERENCE = "torch fp32 (sentence-transformers)"
TARGET = 2.0  # issue 27: the default encoder against PyTorch fp32 on a 2-core AVX-512 CPU
MODEL = "all-MiniLM-L6-v2"


def encoder(overrides: list[str]):
    with initialize_config_dir(str(PROJECT / "conf"), version_base="1.3"):
        return registry.build("encoders", compose("config", overrides=overrides).encoder)


def token_lengths(texts: list[str]) -> np.ndarray:
    """Tokens per text as the model sees them (its tokenizer.json, truncated to its max_seq_length)."""
    from tokenizers import Tokenizer

    folder = Path(resolve_model(MODEL))
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"])
    return np.array([len(e.ids) for e in tokenizer.encode_batch(texts)], dtype=np.float64)


def encoder_flops(lengths: np.ndarray) -> float:
    """Floating-point operations of the model's transformer over texts of ``lengths`` tokens (module docstring)."""
    config = json.loads((Path(resolve_model(MODEL)) / "config.json").read_text())
    hidden, ffn, layers = config["hidden_size"], config["intermediate_size"], config["num_hidden_layers"]
    return 2 * layers * (lengths.sum() * (4 * hidden * hidden + 2 * hidden * ffn) + 2 * hidden * (lengths**2).sum())


def ndcg_at_10(retriever: DenseRetriever, dataset, cache: Cache) -> float:
    folder, _ = retriever._embeddings(dataset.corpus, cache)
    documents = np.load(folder / EMBEDDINGS)
    qids = list(dataset.queries)
    scores = retriever.encoder.encode([dataset.queries[q] for q in qids], kind="query") @ documents.T
    top = np.argsort(-scores, axis=1)[:, :100]
    run = Run(
        "dense", {qid: {dataset.corpus.ids[d]: float(scores[row, d]) for d in top[row]} for row, qid in enumerate(qids)}
    )
    return float(
        RankingEvaluator(metrics=["ndcg@10"]).evaluate(EvalInput(qrels=dataset.qrels, run=run))["ndcg@10"].mean()
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=512, help="texts timed per backend (the first N SciFact documents)")
    parser.add_argument("--repeats", type=int, default=3, help="alternating rounds; each backend's best counts")
    parser.add_argument("--full", action="store_true", help="also encode full SciFact per backend for nDCG@10 (cached)")
    parser.add_argument("--cache-dir", default=".cache/ragtrack")
    args = parser.parse_args()
    dataset = load_beir(PROJECT / "data" / "scifact", name="scifact")
    cache = Cache(args.cache_dir)
    texts = dataset.corpus.full_texts()[: args.docs]
    lengths = token_lengths(texts)
    flops = encoder_flops(lengths)
    peak = matmul_peak()
    import torch

    backends = BACKENDS | (GPU_BACKENDS if torch.cuda.is_available() else {})
    models = {label: encoder(overrides) for label, overrides in backends.items()}
    for model in models.values():
        model.prepare(cache)
        model.encode(texts[:8])  # load the model and warm up
    seconds = {label: [] for label in models}
    vectors = {}
    for _ in range(args.repeats):
        for label, model in models.items():
            started = time.perf_counter()
            vectors[label] = model.encode(texts)
            seconds[label].append(time.perf_counter() - started)
    peak = max(peak, matmul_peak())
    rows = {}
    for label, model in models.items():
        best = min(seconds[label])
        runtime = model.runtime()
        fp32_on_cpu = (
            runtime["device"] == "cpu" and runtime["precision"] == "fp32"
        )  # int8 and bf16 kernels have other peaks
        rows[label] = {
            "device": runtime["device"],
            "docs/s": len(texts) / best,
            "GFLOP/s": float(flops / best / 1e9),
            "% of fp32 peak": float(100 * flops / best / 1e9 / peak) if fp32_on_cpu else float("nan"),
            "min cosine vs torch": f"{(vectors[label] * vectors[REFERENCE]).sum(axis=1).min():.7f}",
            "rounds s": " ".join(f"{s:.2f}" for s in seconds[label]),
        }
        if args.full:
            rows[label]["nDCG@10 SciFact"] = ndcg_at_10(DenseRetriever(model), dataset, cache)
        print(f"  {label}: {rows[label]}", flush=True)
    table = pd.DataFrame(rows).T
    table.insert(2, "speed ratio vs torch", table["docs/s"].astype(float) / float(table.loc[REFERENCE, "docs/s"]))
    if args.full:
        table["nDCG@10 delta"] = table["nDCG@10 SciFact"].astype(float) - float(table.loc[REFERENCE, "nDCG@10 SciFact"])
    print(f"\nCPU: {cpu_model()}; float32 peak (numpy matmul, every core): {peak:,.1f} GFLOP/s")
    print(
        f"{len(texts)} SciFact documents (title + text), {int(lengths.sum()):,} tokens, {flops / 1e12:.2f} TFLOP; "
        f"batch sizes from conf/encoder/; best of {args.repeats} alternating rounds"
    )
    print(table.to_string(float_format=lambda v: f"{v:,.2f}"))
    reference = float(table.loc[REFERENCE, "GFLOP/s"])
    print(
        f"fp32 ceiling: {TARGET:.1f}x PyTorch fp32 needs {TARGET * reference:,.1f} GFLOP/s, {100 * TARGET * reference / peak:.0f}% of the "
        f"float32 peak; an fp32 encoder of these FLOPs reaches at most {peak / reference:.2f}x here"
    )
    print(f"peak resident memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
