"""ragtrack end to end at 10k, 100k (and by flag 1M) documents: each stage's time and peak memory,
and how they grow with the corpus.

    python bench/scale.py [--sizes 10000,100000] [--root DIR] [--json FILE] [--plot docs/scale.png] [--table FILE]
    python bench/scale.py --sizes 100000,1000000 --root DIR     # the 1M case
    python bench/scale.py --sizes 100000,1000000 --root DIR retriever.dense.chroma.build=always   # with Chroma's HNSW build
    python bench/scale.py --lengths msmarco --queries 200 --sizes 1000000,8841823 --root DIR 'retriever=[bm25]' 'fusion=[]'
    python bench/scale.py --bm25s --lengths msmarco --queries 200 --sizes 1000000,8841823 --root DIR   # BM25 against bm25s

Each corpus is synthetic and seeded (the same bytes on every machine): a Zipf(1.1) vocabulary of
200,000 pseudo-words, document lengths drawn from SciFact's (title + abstract, in words; ``--lengths
scifact``, the default) or MS MARCO passages' (``--lengths msmarco``: lognormal with MS MARCO's
published mean of 56.3 words and an assumed standard deviation of 22.5, rounded, at least 1), and
1,000 queries (``--queries``), each made from 6 words of one document, which is its one relevant
document (grade 1). Corpora are written once into ``--root`` and reused. The last command is the
TREC DL scale: BM25 alone over as many passages as MS MARCO has.

Every size runs ``ragtrack run`` as a child process on that corpus with the hashing encoder, so model
time is left out: BM25, dense (exact search over the cached embeddings; the Chroma collection too when
an override such as ``retriever.dense.chroma.build=always`` asks for it), RRF, ranking evaluation,
MLflow. The job's cache is emptied
first, so every index is built. A stage's wall time comes from the job's own log (``<stage> done in
X s``); its CPU seconds (user + system, all threads) and peak memory (largest resident set) come from
/proc, sampled every 20 ms while the stage ran. The growth exponent of a stage between two sizes
n1 < n2 is log(c2 / c1) / log(n2 / n1) of its CPU seconds c (1.0 is linear): CPU time, unlike wall
time, hardly changes with what else a shared machine runs. ``--json`` merges the measures into a file
and reports every size it holds, so a 1M run adds to an earlier 10k + 100k run; the file records the
jobs' overrides and takes no job run with others.

``--bm25s`` runs no job: at each size it compares ragtrack's BM25 (the default, Lucene's) with bm25s
(``BM25(k1=0.9, b=0.4, method="lucene")``, its tokenizer with English stopwords and PyStemmer, as its
README indexes MS MARCO), sampled as the jobs are. Each builds in its own process after loading the
corpus (``load_beir``): bm25s tokenizes, indexes and saves; ragtrack builds into its cache. The ragtrack
process then searches all queries in one call per system (``BM25Retriever.search`` with ``threads`` 1
and 2; bm25s's ``retrieve`` with ``n_threads`` 1 and 2 and its numpy and numba backends over its index
memory-mapped; queries tokenized inside the timing), ``--repeats`` rounds with the systems taking
turns, and each system's fastest round gives its queries/s. A fourth system, bm25s's numba backend
over ragtrack's own postings (its score matrix linked to ragtrack's cached boost-1 clause scores,
the queries analyzed by ragtrack's tokenizer), searches the same postings as ragtrack at every size.
``--ragtrack-only`` leaves bm25s's own build out (it holds every token in Python lists: past 21 GB
at 8.8M passages, where it was stopped); the fourth system stays.
Pyserini is not compared (not installed where this was written).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import gzip
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from machine import cpu_model  # bench/ scripts share the machine line

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, load_beir
from ragtrack.core.words import counted
from ragtrack.retrievers.bm25 import BM25Retriever

REPO = Path(__file__).resolve().parent.parent
SCIFACT_CORPUS = REPO / "data" / "scifact" / "corpus.jsonl.gz"
VOCABULARY = 200_000
ZIPF_EXPONENT = 1.1
QUERIES = 1_000
QUERY_WORDS = 6
MSMARCO_WORDS = (56.3, 22.5)  # mean (published) and standard deviation (assumed) of a passage's words
EXPONENT_TARGET = 1.15
STAGE_LINE = re.compile(
    r"\](?: -)? (?P<stage>[^\]]+?) (?:\.\.\.|done in (?P<seconds>[\d.]+) s)$"
)  # "[10:00:00][INFO] bm25: retriever done in 1.2 s"


def pseudo_words(count: int) -> list[str]:
    """``count`` distinct pronounceable words (consonant-vowel syllables of the word's rank), so the
    tokenizer keeps them (no digits, at least two letters) and the stemmer changes few."""
    consonants, vowels = "bcdfghjklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    words = []
    for rank in range(count):
        word, n = "", rank + len(syllables)  # every word has at least two syllables
        while n:
            n, digit = divmod(n, len(syllables))
            word += syllables[digit]
        words.append(word + "x")  # a closing consonant keeps Snowball's suffix rules off most words
    return words


def scifact_lengths() -> np.ndarray:
    """Words per SciFact document (title + text), the length distribution of the synthetic corpora."""
    with gzip.open(SCIFACT_CORPUS, "rt", encoding="utf-8") as lines:
        return np.array([len(f"{doc['title']} {doc['text']}".split()) for doc in map(json.loads, lines)])


def msmarco_lengths(rng: np.random.Generator, count: int) -> np.ndarray:
    """``count`` passage lengths in words: lognormal with the mean and standard deviation of
    :data:`MSMARCO_WORDS`, rounded, at least 1."""
    mean, sd = MSMARCO_WORDS
    sigma2 = math.log(1 + (sd / mean) ** 2)
    return np.maximum(np.rint(rng.lognormal(math.log(mean) - sigma2 / 2, math.sqrt(sigma2), size=count)), 1).astype(
        np.int64
    )


LENGTHS = {"scifact": lambda rng, count: rng.choice(scifact_lengths(), size=count), "msmarco": msmarco_lengths}


def corpus_folder(root: Path, documents: int, lengths: str, queries: int) -> Path:
    """Where the corpus of these settings lives in ``root`` (the default settings keep their old name)."""
    tags = [] if lengths == "scifact" else [lengths]
    tags += [] if queries == QUERIES else [f"{queries}q"]
    return root / "-".join(["synthetic", *tags, str(documents)])


def write_corpus(folder: Path, documents: int, lengths: str = "scifact", queries: int = QUERIES, seed: int = 0) -> None:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) of ``documents`` synthetic
    documents whose lengths follow ``lengths`` (a key of :data:`LENGTHS`), and ``queries`` queries."""
    rng = np.random.default_rng(seed)
    words = np.array(pseudo_words(VOCABULARY))
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** ZIPF_EXPONENT
    weights /= weights.sum()
    lengths = LENGTHS[lengths](rng, documents)
    relevant = rng.choice(documents, size=queries, replace=False)
    wanted = set(relevant.tolist())
    query_texts = {}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for start in range(0, documents, 10_000):
            block = lengths[start : start + 10_000]
            tokens = words[rng.choice(VOCABULARY, size=int(block.sum()), p=weights)]
            bounds = np.concatenate([[0], np.cumsum(block)])
            for offset, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
                doc = start + offset
                text = tokens[begin:end]
                corpus.write(json.dumps({"_id": f"d{doc}", "title": "", "text": " ".join(text)}) + "\n")
                if doc in wanted:
                    query_texts[doc] = " ".join(rng.choice(text, size=min(QUERY_WORDS, len(text)), replace=False))
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as lines:
        for number, doc in enumerate(relevant):
            lines.write(json.dumps({"_id": f"q{number}", "text": query_texts[int(doc)]}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        qrels.writelines(f"q{number}\td{doc}\t1\n" for number, doc in enumerate(relevant))


@dataclass
class Measure:
    """Wall seconds, CPU seconds (user + system, all threads) and peak resident MB of a stage or job,
    and of that the peak anonymous MB (RssAnon: memory no file backs; the rest are pages of files
    read, memory-mapped indexes among them, which the kernel may drop and read again; 0: not sampled)."""

    seconds: float
    cpu: float
    peak: float
    anon: float = 0.0


class Sampler(threading.Thread):
    """The resident set (all of it, and its anonymous part) and CPU time of process ``pid``, sampled
    every 20 ms."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.done = pid, [], threading.Event()

    def run(self) -> None:
        status, stat = Path(f"/proc/{self.pid}/status"), Path(f"/proc/{self.pid}/stat")
        tick = os.sysconf("SC_CLK_TCK")
        while not self.done.wait(0.02):
            try:
                kb = {
                    key: int(value.split()[0])
                    for key, _, value in (line.partition(":") for line in status.read_text().splitlines())
                    if key in ("VmRSS", "RssAnon")
                }
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except (OSError, ValueError):
                continue
            if len(kb) == 2:  # absent once the process has ended
                self.samples.append(
                    (
                        time.perf_counter(),
                        kb["VmRSS"] / 1024,
                        kb["RssAnon"] / 1024,
                        (int(fields[11]) + int(fields[12])) / tick,
                    )
                )

    def measure(self, start: float, end: float) -> Measure:
        """The stage from ``start`` to ``end``: its CPU seconds and its largest sample (the last one
        before ``end`` when the stage was shorter than the sampling interval)."""
        inside = [(mb, anon) for t, mb, anon, _ in self.samples if start <= t <= end]
        before = [(mb, anon) for t, mb, anon, _ in self.samples if t <= end]
        peaks = [max(column) for column in zip(*inside)] if inside else (before[-1] if before else (0.0, 0.0))
        return Measure(end - start, self._cpu_at(end) - self._cpu_at(start), *peaks)

    def _cpu_at(self, moment: float) -> float:
        """The process's CPU seconds at its last sample before ``moment`` (0 before the first)."""
        return max((cpu for t, _, _, cpu in self.samples if t <= moment), default=0.0)


def measured(command: list[str], cwd: Path) -> tuple[list[tuple[str, Measure]], Measure, list[str]]:
    """Run ``command`` as a child process: each stage its output announces (``<stage> ...``, then
    ``<stage> done in X s``) with its measure, in order; the whole process's measure (CPU and peak
    from os.wait4); its output lines. A failed child ends this script with the end of its output."""
    env = {**os.environ, "TQDM_DISABLE": "1"}
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    sampler = Sampler(child.pid)
    sampler.start()
    stages, opened, log = [], {}, []
    for line in child.stdout:
        log.append(line)
        match = STAGE_LINE.search(line.rstrip())
        if not match:
            continue
        now = time.perf_counter()
        if match["seconds"] is None:
            opened[match["stage"]] = now
        else:
            stages.append(
                (match["stage"], sampler.measure(opened.pop(match["stage"], now - float(match["seconds"])), now))
            )
    _, status, usage = os.wait4(child.pid, 0)
    sampler.done.set()
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(command)}\n{''.join(log[-40:])}")
    anon = max((anon for _, _, anon, _ in sampler.samples), default=0.0)
    return (
        stages,
        Measure(time.perf_counter() - started, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024, anon),
        log,
    )


def run_job(corpus: Path, root: Path, cache: Path, overrides: list[str]) -> tuple[dict[str, Measure], Measure]:
    """Stage -> its measure, and the whole job's. ``cache`` is emptied before the job, so every index
    is built, and removed after it."""
    shutil.rmtree(cache, ignore_errors=True)
    command = [
        sys.executable,
        "-m",
        "ragtrack",
        "run",
        "dataset=beir",
        f"dataset.path={corpus}",
        "encoder=hashing",
        f"paths.cache_dir={cache}",
        f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
        f"hydra.run.dir={root / 'outputs' / corpus.name}",
        *overrides,
    ]
    try:
        stages, job, _ = measured(command, root)
    finally:
        shutil.rmtree(cache, ignore_errors=True)
    return {stage_name(stage): measure for stage, measure in stages}, job


def stage_name(stage: str) -> str:
    """A stage's name without the size in it (``bm25: search 1000 queries`` -> ``bm25: search``)."""
    return re.sub(r" [\d,]+ quer(?:y|ies)$", "", stage)


def exponent(small: tuple[int, float], large: tuple[int, float]) -> float:
    (n1, t1), (n2, t2) = small, large
    return math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 and t2 > 0 else float("nan")


Results = dict[int, tuple[dict[str, Measure], Measure]]


def rows(results: Results) -> dict[str, dict[int, Measure]]:
    """Stage (and ``whole job``) -> size -> measure, stages in job order."""
    table: dict[str, dict[int, Measure]] = {}
    for size in sorted(results):
        for stage, measure in results[size][0].items():
            table.setdefault(stage, {})[size] = measure
    table["whole job"] = {size: results[size][1] for size in sorted(results)}
    return table


def table(results: Results) -> str:
    """Markdown: per stage, wall seconds, CPU seconds and peak MB (anonymous MB) at every size, and the
    exponent of CPU seconds between the two largest sizes (CPU time, unlike wall time, hardly depends
    on what else the machine runs)."""
    sizes = sorted(results)
    header = ["stage", *[f"{size:,} docs: s / CPU s / peak MB (anon)" for size in sizes]]
    if len(sizes) > 1:
        header.append(f"exponent (CPU) {sizes[-2]:,}→{sizes[-1]:,}")
    lines = [header, ["---"] * len(header)]
    for stage, by_size in rows(results).items():
        cells = [stage]
        for size in sizes:
            m = by_size.get(size)
            cells.append(
                (f"{m.seconds:.2f} / {m.cpu:.2f} / {m.peak:,.0f}" + (f" ({m.anon:,.0f})" if m.anon else ""))
                if m
                else "—"
            )
        if len(sizes) > 1:
            small, large = by_size.get(sizes[-2]), by_size.get(sizes[-1])
            if not small or not large or min(small.cpu, large.cpu) < 0.5:  # too short to time: the ratio is noise
                cells.append("—")
            else:
                growth = exponent((sizes[-2], small.cpu), (sizes[-1], large.cpu))
                cells.append(f"{growth:.2f}{'' if growth <= EXPONENT_TARGET else f' (above {EXPONENT_TARGET})'}")
        lines.append(cells)
    return "\n".join("| " + " | ".join(row) + " |" for row in lines)


def plot(results: Results, path: Path) -> None:
    """Log-log CPU seconds against documents, one line per stage that takes at least 1 CPU second at
    the largest size, the whole job, and a linear reference."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    figure, axes = plt.subplots(figsize=(8, 5))
    by_stage = rows(results)
    for stage, by_size in by_stage.items():
        if by_size.get(sizes[-1], Measure(0, 0, 0)).cpu >= 1.0:
            style = {"marker": "s", "color": "black"} if stage == "whole job" else {"marker": "o"}
            axes.plot(
                sizes, [by_size[size].cpu if size in by_size else float("nan") for size in sizes], label=stage, **style
            )
    job = by_stage["whole job"]
    axes.plot(
        sizes,
        [job[sizes[0]].cpu * size / sizes[0] for size in sizes],
        linestyle="--",
        color="grey",
        label="linear (from the smallest whole job)",
    )
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="documents",
        ylabel="CPU seconds",
        title=f"ragtrack run at scale (hashing encoder), {cpu_model()}",
    )
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


# ----------------------------------------------------------------------------- BM25 against bm25s

SIDES = (
    "bm25s",
    "ragtrack",
)  # each builds in its own process, in this order; the ragtrack one then searches with every system
ON_POSTINGS = "bm25s numba on ragtrack's postings"  # bm25s searching ragtrack's index files (bm25s_over_postings)
SYSTEMS = (
    "ragtrack",
    "bm25s numpy",
    "bm25s numba",
    ON_POSTINGS,
)  # ragtrack; bm25s's retrieval backends over its own index, numpy (its default) and numba; bm25s numba over ragtrack's
THREADS = (1, 2)
RESULT = "RESULT "  # a side's output line with its figures, as JSON
K1, B = 0.9, 0.4  # ragtrack's default BM25 (Anserini's), given to bm25s too


@contextlib.contextmanager
def stage(name: str) -> Iterator[None]:
    """Announce a stage as a job's log does (``[bench] name ...``, then ``... done in X s``), for the
    parent's sampler (:func:`measured`)."""
    print(f"[bench] {name} ...", flush=True)
    started = time.perf_counter()
    yield
    print(f"[bench] {name} done in {time.perf_counter() - started:.3f} s", flush=True)


def bm25s_tokens(texts: Sequence[str]):
    """bm25s's own tokenizer as its README indexes MS MARCO: English stopwords, PyStemmer's English stemmer."""
    import bm25s
    import Stemmer

    return bm25s.tokenize(texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)


def bm25s_search(model, corpus: Corpus, depth: int, threads: int, queries: dict[str, str]) -> dict[str, list[str]]:
    """Each query's top ``depth`` ids from a bm25s model (its queries tokenized inside the timing, as
    ragtrack's are)."""
    return retrieved_ids(model, corpus, bm25s_tokens(list(queries.values())), depth, threads, queries)


def retrieved_ids(
    model, corpus: Corpus, tokens, depth: int, threads: int, queries: dict[str, str]
) -> dict[str, list[str]]:
    """Each of ``queries``' top ``depth`` ids from bm25s's ``retrieve`` on its ``tokens``."""
    documents, _ = model.retrieve(tokens, k=depth, n_threads=threads, show_progress=False)
    return {qid: [corpus.ids[doc] for doc in row.tolist()] for qid, row in zip(queries, documents)}


def bm25s_over_postings(cache: Cache, folder: Path, n_docs: int) -> Path:
    """``folder`` made a saved bm25s index (its five files) over the postings of ragtrack's cached BM25
    index: its score matrix is ragtrack's boost-1 clause scores (``unit.npy``, Lucene's BM25 with its
    one-byte lengths; terms × documents rows are bm25s's documents × terms columns), linked, not
    copied. bm25s then searches the very postings ragtrack does, also where its own build does not fit
    in memory (8.8M passages here)."""
    import bm25s

    contents = next(cache.root.glob("bm25/*/contents"))
    folder.mkdir(parents=True, exist_ok=True)
    for ours, theirs in (("unit", "data"), ("indices", "indices"), ("indptr", "indptr")):
        (folder / f"{theirs}.csc.index.npy").symlink_to(contents / f"{ours}.npy")
    terms = json.loads((contents / "terms.json").read_text())
    (folder / "vocab.index.json").write_text(json.dumps({term: row for row, term in enumerate(terms)}))
    params = {"k1": K1, "b": B, "delta": 0.5, "method": "lucene", "idf_method": "lucene", "dtype": "float32"}
    params |= {"int_dtype": "int32", "num_docs": n_docs, "version": bm25s.__version__, "backend": "numba"}
    (folder / "params.index.json").write_text(json.dumps(params))
    return folder


def postings_search(
    model, retriever: BM25Retriever, corpus: Corpus, depth: int, threads: int, queries: dict[str, str]
) -> dict[str, list[str]]:
    """Each query's top ``depth`` ids from bm25s over ragtrack's postings, the queries analyzed by
    ragtrack's tokenizer inside the timing (a repeated term is added once per occurrence: Anserini's
    boost c)."""
    vocabulary = model.vocab_dict
    tokens = [[term for term in query if term in vocabulary] for query in retriever.tokenizer(list(queries.values()))]
    return retrieved_ids(model, corpus, tokens, depth, threads, queries)


def ragtrack_search(retriever: BM25Retriever, depth: int, queries: dict[str, str]) -> dict[str, list[str]]:
    """Each query's top ``depth`` ids from one call of ``BM25Retriever.search`` with every query."""
    run = retriever.search(queries, depth)
    return {qid: [doc for doc, _ in run.ranking(qid)] for qid in queries}


def searches(
    corpus: Corpus, cache: Cache, bm25s_folder: Path, depth: int
) -> dict[str, Callable[[dict[str, str]], dict[str, list[str]]]]:
    """Per system and thread count (``ragtrack, 2 threads``), a search of all queries at once: ragtrack's
    BM25 loaded from ``cache``; bm25s's numba backend over ragtrack's postings
    (:func:`bm25s_over_postings`); bm25s's own index memory-mapped from ``bm25s_folder``, where built,
    searched by each of its backends."""
    import bm25s

    found = {}
    for threads in THREADS:
        retriever = BM25Retriever(threads=threads)
        retriever.index(corpus, cache)  # loaded: one cache entry for every thread count
        found[f"ragtrack, {counted(threads, 'thread')}"] = functools.partial(ragtrack_search, retriever, depth)
    postings = bm25s_over_postings(cache, bm25s_folder.with_name("bm25s-postings"), len(corpus.ids))
    model = bm25s.BM25.load(str(postings), mmap=True, backend="numba")
    for threads in THREADS:
        found[f"{ON_POSTINGS}, {counted(threads, 'thread')}"] = functools.partial(
            postings_search, model, retriever, corpus, depth, threads
        )
    for system in SYSTEMS[1:] if bm25s_folder.is_dir() else ():  # not built: ragtrack alone (--ragtrack-only)
        model = bm25s.BM25.load(str(bm25s_folder), mmap=True, backend=system.split()[1])
        for threads in THREADS:
            found[f"{system}, {counted(threads, 'thread')}"] = functools.partial(
                bm25s_search, model, corpus, depth, threads
            )
    return found


def run_side(side: str, corpus_folder: Path, work: Path, depth: int, repeats: int) -> None:
    """One side of the comparison, in a child process whose stages :func:`measured` samples: load the
    corpus, build the side's index and save it in ``work``. The ragtrack side then searches every query
    with each system, ``repeats`` rounds with the systems taking turns, and prints per system its
    recall@10 (each query's relevant documents found in its top 10)."""
    with stage(f"{side}: load corpus"):
        dataset = load_beir(corpus_folder)
    cache, bm25s_folder = Cache(work / "cache"), work / "bm25s"
    with stage(f"{side}: index"):
        if side == "bm25s":
            import bm25s

            model = bm25s.BM25(k1=K1, b=B, method="lucene")
            model.index(bm25s_tokens(dataset.corpus.full_texts()), show_progress=False)
            model.save(str(bm25s_folder), show_progress=False)
        else:
            BM25Retriever(threads=1).index(dataset.corpus, cache)
    if side == "bm25s":
        return
    systems = searches(dataset.corpus, cache, bm25s_folder, depth)
    first = dict([next(iter(dataset.queries.items()))])
    for search in systems.values():
        search(first)  # warm: numba compiles, thread pools start
    recall = {}
    for _ in range(repeats):
        for name, search in systems.items():
            with stage(f"{name}: search"):
                ranked = search(dataset.queries)
            recall[name] = sum(
                len(dataset.qrels[qid].keys() & set(docs[:10])) / len(dataset.qrels[qid])
                for qid, docs in ranked.items()
            ) / len(ranked)
    print(RESULT + json.dumps({"queries": len(dataset.queries), "recall@10": recall}), flush=True)


def side_by_side(
    corpus: Path, work: Path, depth: int, repeats: int, sides: Sequence[str] = SIDES
) -> tuple[dict[str, Measure], dict]:
    """The ``sides`` run on ``corpus`` (:func:`run_side`), ``work`` emptied before and removed after: every
    stage's measure (a search's: its fastest round), each side's whole process (``bm25s: process``),
    and the figures the ragtrack side printed."""
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    stages, figures = {}, {}
    try:
        for side in sides:
            command = [
                sys.executable,
                str(Path(__file__).resolve()),
                "--side",
                side,
                "--work",
                str(work),
                "--depth",
                str(depth),
                "--repeats",
                str(repeats),
                str(corpus),
            ]
            found, whole, log = measured(command, work)
            for name, measure in found:
                if name not in stages or measure.seconds < stages[name].seconds:
                    stages[name] = measure
            stages[f"{side}: process"] = whole
            figures |= next((json.loads(line[len(RESULT) :]) for line in log if line.startswith(RESULT)), {})
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return stages, figures


def side_table(stages: dict[str, Measure], figures: dict) -> str:
    """Markdown: per system its build (seconds, CPU seconds, peak MB, the loaded corpus included, whose
    own peak follows; in brackets the anonymous peak where sampled, what no file backs: the rest are
    pages of files read or written, memory-mapped indexes among them, which the kernel may drop),
    queries/s on each thread count (CPU seconds), the two-thread speed-up and recall@10; then the
    ratios of ragtrack's queries/s to each bm25s backend's."""
    speed = {
        name[: -len(": search")]: figures["queries"] / m.seconds
        for name, m in stages.items()
        if name.endswith(": search")
    }
    lines = [
        [
            "system",
            "index: s / CPU s / peak MB (anon)",
            *(f"{counted(n, 'thread')}: q/s (CPU s)" for n in THREADS),
            "2 threads ÷ 1",
            "recall@10",
        ]
    ]
    lines.append(["---"] * len(lines[0]))
    systems = [system for system in SYSTEMS if f"{system}, 1 thread" in speed]
    for system in systems:
        build = stages.get(f"{system.split()[0]}: index")
        names = [f"{system}, {counted(n, 'thread')}" for n in THREADS]
        lines.append(
            [
                system,
                "(ragtrack's index)"
                if system == ON_POSTINGS
                else f"{build.seconds:.1f} / {build.cpu:.1f} / {build.peak:,.0f}"
                + (f" ({build.anon:,.0f})" if build.anon else ""),
                *(f"{speed[name]:.2f} ({stages[name + ': search'].cpu:.1f})" for name in names),
                f"{speed[names[1]] / speed[names[0]]:.2f}",
                f"{figures['recall@10'][names[0]]:.3f}",
            ]
        )
    text = "\n".join("| " + " | ".join(row) + " |" for row in lines)
    if "ragtrack: load corpus" in stages:
        text += f"\n\n(The corpus loaded, before any build: {stages['ragtrack: load corpus'].peak:,.0f} MB.)"

    def per_second(system: str, threads: int) -> float:
        return speed[f"{system}, {counted(threads, 'thread')}"]

    ratios = [
        f"ragtrack ÷ {system}: {per_second('ragtrack', 1) / per_second(system, 1):.2f} on 1 thread each; ragtrack on 2 threads ÷ "
        f"{system} on 1: {per_second('ragtrack', 2) / per_second(system, 1):.2f}; {per_second('ragtrack', 2) / per_second(system, 2):.2f} "
        f"on 2 threads each"
        for system in systems[1:]
    ]
    return "\n".join([text, "", *(f"- {line}" for line in ratios)]) if ratios else text


OVERRIDES = "overrides"  # the JSON file's one key that is not a size: the jobs' extra overrides


def stored_overrides(path: Path) -> list[str] | None:
    """The overrides of the jobs the JSON file ``path`` holds (None: no file yet)."""
    return json.loads(path.read_text()).get(OVERRIDES, []) if path.is_file() else None


def save(results: Results, path: Path, overrides: list[str]) -> None:
    """Merge ``results`` into the JSON file ``path`` (sizes measured now replace stored ones)."""
    stored = json.loads(path.read_text()) if path.is_file() else {}
    stored |= {
        str(size): {"stages": {s: asdict(m) for s, m in stages.items()}, "job": asdict(job)}
        for size, (stages, job) in results.items()
    }
    path.write_text(json.dumps({**stored, OVERRIDES: overrides}, indent=1))


def load(path: Path) -> Results:
    return {
        int(size): ({s: Measure(**m) for s, m in entry["stages"].items()}, Measure(**entry["job"]))
        for size, entry in json.loads(path.read_text()).items()
        if size != OVERRIDES
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--sizes",
        default="10000,100000",
        help="corpus sizes, comma-separated (add 1000000 for the 1M case); empty: only report --json",
    )
    parser.add_argument(
        "--lengths",
        choices=sorted(LENGTHS),
        default="scifact",
        help="document lengths: SciFact's or MS MARCO passages'",
    )
    parser.add_argument("--queries", type=int, default=QUERIES, help="queries per corpus")
    parser.add_argument("--root", type=Path, help="working folder (corpora, cache, store); default: a temporary one")
    parser.add_argument(
        "--cache",
        type=Path,
        help="where each job's cache goes, emptied before and removed after it; default: ROOT/cache",
    )
    parser.add_argument("--json", type=Path, help="merge the measures into this file and report every size it holds")
    parser.add_argument("--table", type=Path, help="also write the markdown table here")
    parser.add_argument("--plot", type=Path, help="also draw the log-log plot here")
    parser.add_argument(
        "--bm25s", action="store_true", help="instead of the job: ragtrack's BM25 against bm25s, side by side"
    )
    parser.add_argument(
        "--ragtrack-only",
        action="store_true",
        help="--bm25s without bm25s (its build passed 21 GB at 8.8M passages)",
    )
    parser.add_argument("--depth", type=int, default=100, help="--bm25s: documents retrieved per query")
    parser.add_argument(
        "--repeats", type=int, default=2, help="--bm25s: rounds of searches (each system's fastest is reported)"
    )
    parser.add_argument("--side", choices=SIDES, help=argparse.SUPPRESS)  # a side of --bm25s, in its own process
    parser.add_argument("--work", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("overrides", nargs="*", help="extra ragtrack run overrides (--side: the corpus folder)")
    args = parser.parse_args()
    if args.bm25s and (args.json or args.plot or args.overrides):
        parser.error("--bm25s runs no job: --json, --plot and overrides are for the jobs")
    return args


def main() -> None:
    args = arguments()
    if args.side:
        return run_side(args.side, Path(args.overrides[0]), args.work, args.depth, args.repeats)
    sizes = sorted(int(size) for size in args.sizes.split(",") if size)
    corpus_flags = [
        f"--{flag}={value}"
        for flag, value, default in (("lengths", args.lengths, "scifact"), ("queries", args.queries, QUERIES))
        if value != default
    ]
    settings = corpus_flags + args.overrides  # what the JSON file records: its jobs' corpora and overrides
    earlier = stored_overrides(args.json) if args.json else None
    if sizes and earlier is not None and earlier != settings:
        sys.exit(
            f"{args.json}: its jobs ran with {earlier or 'no overrides'}, these would run with "
            f"{settings or 'no overrides'}; measure them into another --json file"
        )
    with tempfile.TemporaryDirectory(prefix="ragtrack-scale-") as scratch:
        root = (args.root or Path(scratch)).resolve()
        results, texts = {}, []
        for size in sizes:
            corpus = corpus_folder(root, size, args.lengths, args.queries)
            if not (corpus / "qrels" / "test.tsv").is_file():
                started = time.perf_counter()
                write_corpus(corpus, size, args.lengths, args.queries)
                print(f"{size:,} documents written in {time.perf_counter() - started:.1f} s", flush=True)
            if args.bm25s:
                before = os.getloadavg()[0]
                stages, figures = side_by_side(
                    corpus,
                    root / "bm25s-side-by-side",
                    args.depth,
                    args.repeats,
                    SIDES[1:] if args.ragtrack_only else SIDES,
                )
                texts.append(
                    f"{size:,} documents ({corpus.name}), {figures['queries']} queries, top {args.depth}; load average "
                    f"{before:.1f} before, {os.getloadavg()[0]:.1f} after.\n\n{side_table(stages, figures)}"
                )
                print(texts[-1], flush=True)
                continue
            results[size] = run_job(corpus, root, (args.cache or root / "cache").resolve(), args.overrides)
            job = results[size][1]
            print(
                f"{size:,} documents: job {job.seconds:.1f} s ({job.cpu:.1f} CPU s), peak {job.peak:,.0f} MB",
                flush=True,
            )
            if args.json:
                save({size: results[size]}, args.json, settings)
    overrides = settings
    if args.json:
        results, overrides = load(args.json), stored_overrides(args.json) or []
    setting = f" Overrides: {' '.join(overrides)}." if overrides else ""
    text = f"Machine: {cpu_model()}.{setting}\n\n" + ("\n\n".join(texts) if args.bm25s else table(results)) + "\n"
    print(text)
    if args.table:
        args.table.write_text(text)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
