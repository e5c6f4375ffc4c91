"""BM25: ragtrack (Anserini's BM25, the default; and its bm25s backend with the regex tokenizer, the
default before) vs rank-bm25 and bm25s on SciFact, and vs bm25s on a synthetic corpus of short
documents (default 1M); ragtrack's default searches on one thread per core, and on one thread in
its own row. Index build seconds, queries/s (all queries in one call, top 100,
tokenization included), nDCG@10, and peak traced memory (tracemalloc, a separate pass).

    python bench/sparse.py [--docs 1000000] [--rank-bm25-queries 60] [--repeats 5]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import tracemalloc
from collections.abc import Callable
from functools import partial
from pathlib import Path

import bm25s
import numpy as np
import pandas as pd
import Stemmer
from machine import best_of, cpu_model  # bench/ scripts share the machine line and the timer
from rank_bm25 import BM25Okapi

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.porter import lucene_stem
from ragtrack.core.runs import Run
from ragtrack.core.settings import TokenizerSettings
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.ranking import RankingEvaluator
from ragtrack.retrievers.bm25 import BM25Retriever

SCIFACT = Path(__file__).resolve().parent.parent / "data" / "scifact"
DEPTH = 100


def measure(step: Callable[[], object]) -> tuple[float, int, object]:
    """Seconds of one call, then peak traced bytes of a second call (tracemalloc slows the call)."""
    started = time.perf_counter()
    result = step()
    seconds = time.perf_counter() - started
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return seconds, peak, result


def ragtrack_system(ids: list[str], texts: list[str], **settings):
    """ragtrack's BM25 retriever with ``settings`` (none: the default, Anserini's BM25)."""
    corpus = Corpus(
        ids=list(ids), titles=[""] * len(ids), texts=list(texts), hash="bench-sparse"
    )  # as loaded, before the timing

    def build():
        lucene_stem.cache_clear()  # each build stems its words anew, as one job does
        retriever = BM25Retriever(**settings)
        with tempfile.TemporaryDirectory() as folder:
            retriever.index(corpus, Cache(folder))
        return retriever

    return build, lambda retriever, queries: retriever.search(queries, DEPTH)


ragtrack_one_thread = partial(
    ragtrack_system, threads=1
)  # the default searches a batch of queries on one thread per core
# ragtrack's BM25 before it reproduced Anserini: the bm25s backend, regex tokens, NFKC and case folding, Snowball
bm25s_regex_system = partial(ragtrack_system, backend="bm25s", tokenizer=TokenizerSettings().model_dump())


def bm25s_system(ids: list[str], texts: list[str]):
    stemmer = Stemmer.Stemmer("english")

    def build():
        model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
        return model

    def search(model, queries):
        tokens = bm25s.tokenize(list(queries.values()), stopwords="en", stemmer=stemmer, show_progress=False)
        found, scores = model.retrieve(tokens, k=min(DEPTH, len(ids)), show_progress=False)
        return Run(
            "bm25s",
            {qid: {ids[d]: float(s) for d, s in zip(found[row], scores[row])} for row, qid in enumerate(queries)},
        )

    return build, search


def rank_bm25_system(ids: list[str], texts: list[str]):
    tokenizer = BM25Retriever().tokenizer

    def build():
        return BM25Okapi(tokenizer(texts), k1=0.9, b=0.4)

    def search(model, queries):
        scores = {}
        for qid, tokens in zip(queries, tokenizer(queries.values())):
            all_scores = model.get_scores(tokens)
            top = np.argpartition(-all_scores, DEPTH - 1)[:DEPTH]
            scores[qid] = {ids[d]: float(all_scores[d]) for d in top}
        return Run("rank_bm25", scores)

    return build, search


def compare(
    systems: dict,
    ids: list[str],
    texts: list[str],
    queries: dict[str, str],
    qrels=None,
    query_limits=None,
    repeats: int = 1,
) -> pd.DataFrame:
    rows = {}
    for name, make in systems.items():
        build, search = make(ids, texts)
        build_seconds, build_peak, model = measure(build)
        asked = dict(list(queries.items())[: (query_limits or {}).get(name, len(queries))])
        search_seconds, search_peak, run = measure(lambda: search(model, asked))
        if repeats > 1:
            build_seconds = min(build_seconds, best_of(build, repeats - 1))
            search_seconds = min(search_seconds, best_of(lambda: search(model, asked), repeats - 1))
        row = {
            "build s": build_seconds,
            "queries": len(asked),
            "queries/s": len(asked) / search_seconds,
            "peak build MB": build_peak / 2**20,
            "peak search MB": search_peak / 2**20,
        }
        if qrels is not None and len(asked) == len(queries):
            row["nDCG@10"] = (
                RankingEvaluator(metrics=["ndcg@10"]).evaluate(EvalInput(qrels=qrels, run=run))["ndcg@10"].mean()
            )
        rows[name] = row
        print(f"  {name}: {row}", flush=True)
    table = pd.DataFrame(rows).T
    table["ragtrack q/s ratio"] = table.loc["ragtrack", "queries/s"] / table["queries/s"]
    table["ragtrack build ratio"] = table["build s"] / table.loc["ragtrack", "build s"]
    return table


def synthetic(docs: int, queries: int, seed: int = 0) -> tuple[list[str], list[str], dict[str, str]]:
    """Short documents (5-15 words) and 3-word queries over a Zipf-distributed 50k-word vocabulary."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"w{i}x" for i in range(50_000)])
    words = vocabulary[np.minimum(rng.zipf(1.2, size=docs * 15), len(vocabulary)) - 1]
    lengths = rng.integers(5, 16, size=docs)
    texts = [" ".join(words[i * 15 : i * 15 + n]) for i, n in enumerate(lengths)]
    asked = {f"q{i}": " ".join(rng.choice(vocabulary[:5000], size=3)) for i in range(queries)}
    return [f"d{i}" for i in range(docs)], texts, asked


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1_000_000, help="synthetic corpus size (0 skips it)")
    parser.add_argument(
        "--rank-bm25-queries", type=int, default=60, help="rank-bm25 answers this many SciFact queries (it is slow)"
    )
    parser.add_argument("--repeats", type=int, default=5, help="build and search seconds: the best of this many calls")
    args = parser.parse_args()
    pd.set_option("display.width", 200)
    dataset = load_beir(SCIFACT, name="scifact")
    print(f"SciFact: {len(dataset.corpus)} documents, {len(dataset.queries)} queries, top {DEPTH}")
    print(cpu_model())
    systems = {
        "ragtrack": ragtrack_system,
        "ragtrack 1 thread": ragtrack_one_thread,
        "ragtrack bm25s+regex": bm25s_regex_system,
        "bm25s": bm25s_system,
        "rank_bm25": rank_bm25_system,
    }
    table = compare(
        systems,
        dataset.corpus.ids,
        dataset.corpus.full_texts(),
        dataset.queries,
        dataset.qrels,
        {"rank_bm25": args.rank_bm25_queries},
        args.repeats,
    )
    print(table.to_string(float_format=lambda v: f"{v:,.3f}"))
    if args.docs:
        ids, texts, queries = synthetic(args.docs, 1000)
        print(f"\nSynthetic: {len(ids):,} short documents, {len(queries)} queries, top {DEPTH}")
        table = compare(
            {
                "ragtrack": ragtrack_system,
                "ragtrack 1 thread": ragtrack_one_thread,
                "ragtrack bm25s+regex": bm25s_regex_system,
                "bm25s": bm25s_system,
            },
            ids,
            texts,
            queries,
            repeats=args.repeats,
        )
        print(table.to_string(float_format=lambda v: f"{v:,.3f}"))


if __name__ == "__main__":
    main()
