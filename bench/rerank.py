"""Cross-encoder reranking: (query, document) pairs scored per second by ragtrack's cross-encoder
reranker over BM25's top --depth for the first --queries SciFact queries, and the time all 300
queries at that depth would take at that rate (an extrapolation, labelled so). On a shared machine the
pairs per CPU second (user + system time of this process) move less than the wall-clock rate.

    python bench/rerank.py [--queries 20] [--depth 100] [--model FOLDER] [--device auto]

Without --model the model has cross-encoder/ms-marco-MiniLM-L-6-v2's shape (BERT, 6 layers, 384 wide,
one output, pairs up to 512 tokens), built from the shipped all-MiniLM-L6-v2 body with an untrained
head: the real weights cannot be downloaded offline. Its speed is the real model's; its scores mean
nothing, so no nDCG is reported.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from hydra import compose, initialize_config_dir
from machine import cpu_model  # bench/ scripts share the machine line

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.models import quiet_model_loading, resolve_model
from ragtrack.core.stages import StageContext, StageOutput
from ragtrack.pipeline import registry
from ragtrack.retrievers.rerankers import CrossEncoderReranker

PROJECT = Path(__file__).resolve().parent.parent
MAX_LENGTH = 512  # ms-marco-MiniLM-L-6-v2's tokens per pair


def minilm_cross_encoder(folder: Path) -> Path:
    """The shipped all-MiniLM-L6-v2 body with a one-output head (untrained) and its tokenizer, saved to ``folder``."""
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    quiet_model_loading()
    source = resolve_model("all-MiniLM-L6-v2")
    AutoModelForSequenceClassification.from_pretrained(source, num_labels=1).save_pretrained(folder)
    AutoTokenizer.from_pretrained(source).save_pretrained(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=20, help="the first N SciFact queries")
    parser.add_argument("--depth", type=int, default=100, help="BM25 documents reranked per query")
    parser.add_argument("--model", help="a local cross-encoder folder (default: the MiniLM-shaped model above)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()
    dataset = load_beir(PROJECT / "data" / "scifact", name="scifact")
    with tempfile.TemporaryDirectory() as scratch:
        model = args.model or str(minilm_cross_encoder(Path(scratch) / "model"))
        context = StageContext(
            dataset=dataset,
            judged_corpus=dataset.corpus,
            cache=Cache(Path(scratch) / "cache"),  # an empty pair store
            depth=args.depth,
            search_depth=args.depth,
        )
        with initialize_config_dir(str(PROJECT / "conf"), version_base="1.3"):
            bm25 = registry.build("retrievers", compose("config").retriever.bm25, name="bm25")
        bm25.index(dataset.corpus, context.cache)
        qids = sorted(dataset.queries)[: args.queries]
        run = bm25.search({qid: dataset.queries[qid] for qid in qids}, args.depth)
        reranker = CrossEncoderReranker(
            input="bm25",
            model=model,
            depth=args.depth,
            batch_size=args.batch_size,
            max_length=MAX_LENGTH,
            device=args.device,
        )
        warm_up = bm25.search({qid: dataset.queries[qid] for qid in sorted(dataset.queries)[-1:]}, 2)  # loads the model
        reranker.produce(
            {"bm25": StageOutput(warm_up, warm_up, "warm-up", bm25)},
            replace(context, cache=Cache(Path(scratch) / "warm-up")),
        )
        started, cpu_started = time.perf_counter(), time.process_time()
        output = reranker.produce({"bm25": StageOutput(run, run, "bm25", bm25)}, context)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    pairs = output.efficiency["pairs_scored"]
    rate = pairs / output.efficiency["score_seconds"]
    full = len(dataset.queries) * args.depth
    print(
        f"CPU: {cpu_model()}; device: {'cuda' if output.efficiency['on_gpu'] else 'cpu'}; load average {os.getloadavg()[0]:.1f}"
    )
    print(
        f"model: {args.model or 'MiniLM-L6 cross-encoder shape (untrained head)'}; max {MAX_LENGTH} tokens per pair; batch {args.batch_size}"
    )
    print(
        f"{len(qids)} queries x top {args.depth}: {pairs:,.0f} pairs scored in {output.efficiency['score_seconds']:.1f} s "
        f"({rate:,.1f} pairs/s; the whole stage {seconds:.1f} s wall, {cpu_seconds:.1f} s CPU: {pairs / cpu_seconds:,.1f} pairs per CPU second)"
    )
    print(
        f"extrapolated: {len(dataset.queries)} queries x {args.depth} = {full:,} pairs at that rate = {full / rate:,.0f} s ({full / rate / 60:.1f} min)"
    )


if __name__ == "__main__":
    main()
