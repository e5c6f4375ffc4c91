"""ragtrack end to end at 10k, 100k (and by flag 1M) documents: each stage's time and peak memory,
and how they grow with the corpus.

    python bench/scale.py [--sizes 10000,100000] [--root DIR] [--plot docs/scale.png] [--table docs/scale.md]
    python bench/scale.py --sizes 10000,100000,1000000           # the 1M case (about an hour on 2 cores)

Each corpus is synthetic and seeded (the same bytes on every machine): a Zipf(1.1) vocabulary of
200,000 pseudo-words, document lengths drawn from SciFact's (title + abstract, in words), and 1,000
queries, each made from 6 words of one document, which is its one relevant document (grade 1).

Every size runs ``ragtrack run`` as a child process on that corpus with the hashing encoder, so model
time is left out: BM25, dense into Chroma, RRF, ranking evaluation, MLflow. A stage's time comes from
the job's own log (``<stage> done in X s``); its peak memory is the child's largest resident set while
the stage ran, sampled from /proc every 20 ms. The growth exponent of a stage between two sizes n1 < n2
is log(t2 / t1) / log(n2 / n1): 1.0 is linear.
"""

from __future__ import annotations

import argparse
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
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from end_to_end import cpu_model  # noqa: E402  (bench/ scripts share the CPU line)

REPO = Path(__file__).resolve().parent.parent
SCIFACT_CORPUS = REPO / "data" / "scifact" / "corpus.jsonl.gz"
VOCABULARY = 200_000
ZIPF_EXPONENT = 1.1
QUERIES = 1_000
QUERY_WORDS = 6
EXPONENT_TARGET = 1.15
STAGE_LINE = re.compile(r"\] - (?P<stage>.+?) (?:\.\.\.|done in (?P<seconds>[\d.]+) s)$")


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


def write_corpus(folder: Path, documents: int, seed: int = 0) -> None:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/test.tsv) of ``documents`` synthetic documents."""
    rng = np.random.default_rng(seed)
    words = np.array(pseudo_words(VOCABULARY))
    weights = 1.0 / np.arange(1, VOCABULARY + 1) ** ZIPF_EXPONENT
    weights /= weights.sum()
    lengths = rng.choice(scifact_lengths(), size=documents)
    relevant = rng.choice(documents, size=QUERIES, replace=False)
    wanted = set(relevant.tolist())
    query_texts = {}
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "corpus.jsonl", "w", encoding="utf-8") as corpus:
        for start in range(0, documents, 10_000):
            block = lengths[start:start + 10_000]
            tokens = words[rng.choice(VOCABULARY, size=int(block.sum()), p=weights)]
            bounds = np.concatenate([[0], np.cumsum(block)])
            for offset, (begin, end) in enumerate(zip(bounds[:-1], bounds[1:])):
                doc = start + offset
                text = tokens[begin:end]
                corpus.write(json.dumps({"_id": f"d{doc}", "title": "", "text": " ".join(text)}) + "\n")
                if doc in wanted:
                    query_texts[doc] = " ".join(rng.choice(text, size=min(QUERY_WORDS, len(text)), replace=False))
    with open(folder / "queries.jsonl", "w", encoding="utf-8") as queries:
        for number, doc in enumerate(relevant):
            queries.write(json.dumps({"_id": f"q{number}", "text": query_texts[int(doc)]}) + "\n")
    (folder / "qrels").mkdir(exist_ok=True)
    with open(folder / "qrels" / "test.tsv", "w", encoding="utf-8") as qrels:
        qrels.write("query-id\tcorpus-id\tscore\n")
        qrels.writelines(f"q{number}\td{doc}\t1\n" for number, doc in enumerate(relevant))


class RssSampler(threading.Thread):
    """The resident set of process ``pid``, sampled every 20 ms; :meth:`peak_since` reads the largest
    sample since a moment."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples, self.done = pid, [], threading.Event()

    def run(self) -> None:
        status = Path(f"/proc/{self.pid}/status")
        while not self.done.wait(0.02):
            try:
                rss_kb = next(int(line.split()[1]) for line in status.read_text().splitlines() if line.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
            self.samples.append((time.perf_counter(), rss_kb / 1024))

    def peak_between(self, start: float, end: float) -> float:
        """The largest sample between ``start`` and ``end``, or the last one before ``end`` when the
        stage was shorter than the sampling interval."""
        inside = [mb for t, mb in self.samples if start <= t <= end]
        before = [mb for t, mb in self.samples if t <= end]
        return max(inside) if inside else (before[-1] if before else 0.0)


def run_job(corpus: Path, root: Path, cache: Path, overrides: list[str]) -> tuple[dict[str, tuple[float, float]], float, float]:
    """Stage -> (seconds, peak MB), the whole job's wall seconds and peak MB (os.wait4). ``cache`` is
    emptied before the job, so every index is built, and removed after it."""
    shutil.rmtree(cache, ignore_errors=True)
    command = [sys.executable, "-m", "ragtrack", "run", "dataset=beir", f"dataset.path={corpus}", "encoder=hashing",
               f"paths.cache_dir={cache}", f"tracking.uri=sqlite:///{root / 'mlflow.db'}",
               f"hydra.run.dir={root / 'outputs' / corpus.name}", *overrides]
    env = {**os.environ, "TQDM_DISABLE": "1"}
    started = time.perf_counter()
    child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=root)
    sampler = RssSampler(child.pid)
    sampler.start()
    stages, opened, log = {}, {}, []
    for line in child.stdout:
        log.append(line)
        match = STAGE_LINE.search(line.rstrip())
        if not match:
            continue
        now = time.perf_counter()
        if match["seconds"] is None:
            opened[match["stage"]] = now
        else:
            begin = opened.pop(match["stage"], now - float(match["seconds"]))
            stages[match["stage"]] = (float(match["seconds"]), sampler.peak_between(begin, now))
    _, status, usage = os.wait4(child.pid, 0)
    sampler.done.set()
    shutil.rmtree(cache, ignore_errors=True)
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(command)}\n{''.join(log[-40:])}")
    return stages, time.perf_counter() - started, usage.ru_maxrss / 1024


def stage_name(stage: str) -> str:
    """A stage's name without the size in it (``bm25: search 1000 queries`` -> ``bm25: search``)."""
    return re.sub(r" \d+ queries$", "", stage)


def exponent(small: tuple[int, float], large: tuple[int, float]) -> float:
    (n1, t1), (n2, t2) = small, large
    return math.log(t2 / t1) / math.log(n2 / n1) if t1 > 0 and t2 > 0 else float("nan")


def table(results: dict[int, tuple[dict, float, float]]) -> str:
    """Markdown: per stage, seconds and peak MB at every size, and the exponent between the two largest."""
    sizes = sorted(results)
    stages = list(dict.fromkeys(stage_name(s) for size in sizes for s in results[size][0]))
    per_size = {size: {stage_name(s): v for s, v in results[size][0].items()} for size in sizes}
    header = ["stage", *[f"{size:,} docs: s / peak MB" for size in sizes]]
    if len(sizes) > 1:
        header.append(f"exponent {sizes[-2]:,}→{sizes[-1]:,}")
    rows = [header, ["---"] * len(header)]
    for stage in stages + ["whole job"]:
        cells, times = [stage], []
        for size in sizes:
            seconds, peak = (results[size][1], results[size][2]) if stage == "whole job" else per_size[size].get(stage, (float("nan"), 0.0))
            times.append(seconds)
            cells.append(f"{seconds:.2f} / {peak:,.0f}")
        if len(sizes) > 1:
            if min(times[-2:]) < 0.05:  # too short to time: the ratio is noise
                cells.append("—")
            else:
                growth = exponent((sizes[-2], times[-2]), (sizes[-1], times[-1]))
                cells.append(f"{growth:.2f}{'' if growth <= EXPONENT_TARGET or times[-1] < 1.0 else ' (above 1.15)'}")
        rows.append(cells)
    return "\n".join("| " + " | ".join(row) + " |" for row in rows)


def plot(results: dict[int, tuple[dict, float, float]], path: Path) -> None:
    """Log-log seconds against documents, one line per stage that takes at least 0.5 s at the largest size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = sorted(results)
    figure, axes = plt.subplots(figsize=(8, 5))
    per_size = {size: {stage_name(s): v[0] for s, v in results[size][0].items()} for size in sizes}
    for stage in dict.fromkeys(stage_name(s) for s in results[sizes[-1]][0]):
        if per_size[sizes[-1]].get(stage, 0.0) >= 0.5:
            axes.plot(sizes, [per_size[size].get(stage, float("nan")) for size in sizes], marker="o", label=stage)
    axes.plot(sizes, [results[size][1] for size in sizes], marker="s", color="black", label="whole job")
    reference = [results[sizes[0]][1] * size / sizes[0] for size in sizes]
    axes.plot(sizes, reference, linestyle="--", color="grey", label="linear (from the smallest whole job)")
    axes.set(xscale="log", yscale="log", xlabel="documents", ylabel="seconds",
             title=f"ragtrack run at scale (hashing encoder), {cpu_model()}")
    axes.legend(fontsize=7)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10000,100000", help="corpus sizes, comma-separated (add 1000000 for the 1M case)")
    parser.add_argument("--root", type=Path, help="working folder (corpora, cache, store); default: a temporary one")
    parser.add_argument("--cache", type=Path, help="where each job's cache goes, emptied before and removed after it; default: ROOT/cache")
    parser.add_argument("--table", type=Path, help="also write the markdown table here")
    parser.add_argument("--plot", type=Path, help="also draw the log-log plot here")
    parser.add_argument("overrides", nargs="*", help="extra ragtrack run overrides")
    args = parser.parse_args()
    sizes = sorted(int(size) for size in args.sizes.split(","))
    with tempfile.TemporaryDirectory(prefix="ragtrack-scale-") as scratch:
        root = (args.root or Path(scratch)).resolve()
        results = {}
        for size in sizes:
            corpus = root / f"synthetic-{size}"
            if not (corpus / "qrels" / "test.tsv").is_file():
                started = time.perf_counter()
                write_corpus(corpus, size)
                print(f"{size:,} documents written in {time.perf_counter() - started:.1f} s", flush=True)
            results[size] = run_job(corpus, root, (args.cache or root / 'cache').resolve(), args.overrides)
            print(f"{size:,} documents: job {results[size][1]:.1f} s, peak {results[size][2]:,.0f} MB", flush=True)
    text = f"Machine: {cpu_model()}, {os.cpu_count()} cores.\n\n{table(results)}\n"
    print(text)
    if args.table:
        args.table.write_text(text)
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
