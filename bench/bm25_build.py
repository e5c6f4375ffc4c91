"""BM25 index build: ragtrack against bm25s on the same synthetic corpus, in the same run.

Both sides tokenize (regex words of 2+ characters, lower-cased, English stopwords, Snowball stems)
and build the Lucene BM25 index with bm25s; ragtrack with its own tokenizer (ragtrack.core.text) and
its cache (the index is saved and loaded back), bm25s with ``bm25s.tokenize`` and ``BM25.index``
plus ``save`` to a temporary folder. The corpus is seeded: a Zipf-distributed vocabulary of English
stopwords followed by random words, document lengths drawn from SciFact's (title + text word counts,
215 words on average) or, with ``--lengths short``, 5-15 words (bench/sparse.py's synthetic corpus).

    python bench/bm25_build.py [--docs 1000000] [--lengths scifact|short] [--repeats 1]
    python bench/bm25_build.py --beir ROOT/synthetic-1000000     # bench/scale.py's corpus instead
"""

from __future__ import annotations

import argparse
import gc
import tempfile
import time
from pathlib import Path

import bm25s
import numpy as np
import Stemmer
from machine import cpu_model  # bench/ scripts share the machine line

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.settings import TokenizerSettings
from ragtrack.retrievers.bm25 import BM25Retriever

SCIFACT = Path(__file__).resolve().parent.parent / "data" / "scifact"
LETTERS = np.array(list("abcdefghijklmnopqrstuvwxyz"))


def synthetic_corpus(docs: int, lengths_from: str = "scifact", vocabulary_size: int = 200_000, seed: int = 0) -> Corpus:
    """``docs`` documents over a Zipf(1.1) vocabulary: English stopwords first (the most frequent
    words, as in text), then random 3-12 letter words; lengths sampled from SciFact's documents, or
    uniform in 5-15 words (``short``)."""
    rng = np.random.default_rng(seed)
    if lengths_from == "short":
        lengths = rng.integers(5, 16, size=docs)
    else:
        lengths_of = [len(text.split()) for text in load_beir(SCIFACT).corpus.full_texts()]
        lengths = rng.choice(np.asarray(lengths_of), size=docs)
    sizes = rng.integers(3, 13, size=vocabulary_size)
    letters = LETTERS[rng.integers(0, 26, size=int(sizes.sum()))]
    ends = np.cumsum(sizes)
    random_words = ["".join(letters[end - size : end]) for size, end in zip(sizes, ends)]
    vocabulary = np.array(list(bm25s.stopwords.STOPWORDS_EN) + random_words, dtype=object)
    ranks = np.minimum(rng.zipf(1.1, size=int(lengths.sum())), len(vocabulary)) - 1
    words = vocabulary[ranks]
    ends = np.cumsum(lengths)
    texts = [" ".join(words[end - length : end]) for length, end in zip(lengths.tolist(), ends.tolist())]
    return Corpus(ids=[f"d{i}" for i in range(docs)], titles=[""] * docs, texts=texts, hash=f"synthetic-{docs}-{seed}")


def build_ragtrack(corpus: Corpus) -> float:
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        BM25Retriever(backend="bm25s", tokenizer=TokenizerSettings().model_dump()).index(
            corpus, Cache(folder)
        )  # bm25s's index, regex tokens
        return time.perf_counter() - started


def build_bm25s(corpus: Corpus) -> float:
    texts = list(corpus.full_texts())  # ragtrack's index() joins title and text itself; joined outside the timing here
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        tokens = bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        model = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
        model.index(tokens, show_progress=False)
        model.save(folder, allow_pickle=False)
        return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, help="synthetic corpus size (default 100000)")
    parser.add_argument("--lengths", choices=("scifact", "short"), help="synthetic document lengths (default scifact)")
    parser.add_argument("--repeats", type=int, default=1, help="builds per library; the fastest counts")
    parser.add_argument(
        "--beir", type=Path, help="build on this BEIR folder's corpus (e.g. one bench/scale.py wrote) instead"
    )
    args = parser.parse_args()
    if args.beir and (args.docs or args.lengths):
        parser.error("--beir builds on that folder's corpus: --docs and --lengths describe a synthetic one")
    args.docs, args.lengths = args.docs or 100_000, args.lengths or "scifact"
    print(f"CPU: {cpu_model()}")
    started = time.perf_counter()
    corpus = load_beir(args.beir).corpus if args.beir else synthetic_corpus(args.docs, args.lengths)
    words = sum(len(text.split()) for text in corpus.texts)
    print(f"corpus: {len(corpus):,} documents, {words:,} words (ready in {time.perf_counter() - started:.1f} s)")
    times = {"ragtrack": [], "bm25s": []}
    for _ in range(args.repeats):  # interleaved, so a busy spell of the machine hits both
        for name, build in (("ragtrack", build_ragtrack), ("bm25s", build_bm25s)):
            gc.collect()
            times[name].append(build(corpus))
            print(f"  {name}: {times[name][-1]:.2f} s", flush=True)
    best = {name: min(seconds) for name, seconds in times.items()}
    print(
        f"index build, best of {args.repeats}: ragtrack {best['ragtrack']:.2f} s, bm25s {best['bm25s']:.2f} s, "
        f"ratio ragtrack/bm25s {best['ragtrack'] / best['bm25s']:.2f}"
    )


if __name__ == "__main__":
    main()
