"""Time and peak memory of the ranking metrics: ragtrack vs pytrec_eval vs ranx, measured in one process.

Cases: 10,000 queries x 1,000 documents (synthetic, graded qrels 0-3, score ties) and a SciFact-size
run (the real SciFact test qrels, 300 queries, a synthetic 100-document run). Every tool gets the same
Python dicts and computes the same measures (the trec_eval set); ragtrack's full set (adding f1,
ndcg_exp, dcg, err, mean_rank, auc) is timed too. ranx's first call includes numba's JIT compilation
(its cache is pointed at an empty folder, as on a fresh install); warm is the best of the later calls.
Peak memory = the process's peak resident set during the call above its resident set before (Linux
/proc, peak reset before each call). Cold start = a fresh interpreter importing ragtrack's metrics and
scoring the SciFact-size case once (wall and CPU time, from a subprocess).

Start-up: the best of 10 fresh processes of ``ragtrack eval`` and ``ragtrack trec_eval`` on a two-line
qrels and run, ``ragtrack metrics`` and ``import ragtrack``.

Whole process: ``ragtrack eval QRELS RUN`` (and ``ragtrack trec_eval -c``) against a plain pytrec_eval script that reads the same
files (Python line splitting into dicts) and evaluates the same 5 measures, on 2,000 queries x 1,000
documents (2M run lines, generated seeded in a temporary folder); the median wall time and CPU time
(user + system, os.wait4) of 5 runs of each, alternating, their ratios, and the largest per-query
difference between ``ragtrack eval``'s values and pytrec_eval's on those files.

    python bench/metrics.py                  # both cases and the whole-process ratio (~4 GB, a few minutes)
    python bench/metrics.py --small          # 1,000 x 1,000 instead of 10,000 x 1,000
    python bench/metrics.py --whole-process  # only start-up and the whole-process ratios (about a minute)
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="ragtrack-bench-numba-"))  # before ranx imports numba

import numpy as np
from machine import cpu_model  # bench/ scripts share the machine line

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ragtrack.core.data import load_qrels  # noqa: E402
from ragtrack.evaluators.ranking import score_ranking  # noqa: E402

CUTOFFS = (1, 5, 10, 100)
TREC_SET = [f"{m}@{k}" for m in ("p", "recall", "ndcg", "hit") for k in CUTOFFS] + [
    "map",
    "map@100",
    "mrr",
    "r-precision",
    "bpref",
    "num_rel_ret",
]
FULL_SET = (
    TREC_SET + [f"{m}@{k}" for m in ("f1", "ndcg_exp", "dcg", "err") for k in CUTOFFS] + ["mrr@10", "mean_rank", "auc"]
)
PYTREC = {f"{m}.{','.join(map(str, CUTOFFS))}" for m in ("P", "recall", "ndcg_cut", "success")} | {
    "map",
    "map_cut.100",
    "recip_rank",
    "Rprec",
    "bpref",
    "num_rel_ret",
}
PYTREC_NAMES = (
    {f"p@{k}": f"P_{k}" for k in CUTOFFS}
    | {f"recall@{k}": f"recall_{k}" for k in CUTOFFS}
    | {f"ndcg@{k}": f"ndcg_cut_{k}" for k in CUTOFFS}
    | {f"hit@{k}": f"success_{k}" for k in CUTOFFS}
    | {
        "map": "map",
        "map@100": "map_cut_100",
        "mrr": "recip_rank",
        "r-precision": "Rprec",
        "bpref": "bpref",
        "num_rel_ret": "num_rel_ret",
    }
)
RANX_SET = [f"{m}@{k}" for m in ("precision", "recall", "ndcg", "hit_rate") for k in CUTOFFS] + [
    "map",
    "map@100",
    "mrr",
    "r-precision",
    "bpref",
    "hits",
]


def synthetic(queries: int, depth: int, seed: int = 0) -> tuple[dict, dict]:
    """Graded qrels (1-20 judged documents per query, half of them retrieved) and a run whose scores,
    rounded to 1e-4, tie now and then."""
    rng = np.random.default_rng(seed)
    pool = 1 << 17
    names = [f"doc{n}" for n in range(pool)]
    qrels, run = {}, {}
    for q in range(queries):
        qid = f"q{q}"
        ids = (
            rng.integers(pool) + (2 * rng.integers(pool // 2) + 1) * np.arange(depth)
        ) % pool  # distinct (odd stride)
        run[qid] = dict(zip([names[i] for i in ids], np.round(rng.random(depth), 4).tolist()))
        judged = rng.integers(1, 21)
        picks = np.concatenate([ids[rng.integers(0, depth, judged // 2 + 1)], rng.integers(0, pool, judged // 2)])
        qrels[qid] = {names[i]: int(g) for i, g in zip(picks, rng.choice(4, len(picks), p=[0.4, 0.3, 0.2, 0.1]))}
    return qrels, run


def scifact_like(seed: int = 0) -> tuple[dict, dict]:
    """The real SciFact test qrels and a 100-document run per query (each relevant document retrieved
    with probability 0.7, at a random rank)."""
    qrels, _ = load_qrels(ROOT / "data" / "scifact" / "qrels" / "test.tsv")
    rng = np.random.default_rng(seed)
    run = {}
    for qid, judged in qrels.items():
        docs = [f"doc{n}" for n in rng.choice(5183, 100, replace=False)]
        for doc in judged:
            if rng.random() < 0.7:
                docs[rng.integers(100)] = doc
        run[qid] = dict(zip(docs, rng.random(len(docs)).round(4).tolist()))
    return qrels, run


def peak_rss() -> tuple[int, int]:
    status = dict(line.split(":", 1) for line in Path("/proc/self/status").read_text().splitlines())
    return int(status["VmRSS"].split()[0]) * 1024, int(status["VmHWM"].split()[0]) * 1024


def measure(call: Callable[[], object]) -> tuple[float, float, float, object]:
    """Wall seconds, CPU seconds (all threads), peak extra resident memory (MB) and the result of one call."""
    gc.collect()
    try:
        Path("/proc/self/clear_refs").write_text("5")  # reset the peak resident set (Linux)
    except OSError:
        pass
    before, _ = peak_rss()
    started, cpu = time.perf_counter(), time.process_time()
    result = call()
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    return seconds, cpu, (peak_rss()[1] - before) / 2**20, result


def ragtrack_call(qrels: dict, run: dict, metrics: list[str]) -> Callable[[], object]:
    return lambda: score_ranking(run, qrels, metrics)[0]


def pytrec_call(qrels: dict, run: dict) -> Callable[[], object]:
    import pytrec_eval

    return lambda: pytrec_eval.RelevanceEvaluator(qrels, PYTREC).evaluate(run)


def ranx_call(qrels: dict, run: dict) -> Callable[[], object]:
    import ranx

    return lambda: ranx.evaluate(ranx.Qrels(qrels), ranx.Run(run), RANX_SET, return_mean=False, make_comparable=True)


def max_difference(ours, reference: dict) -> float:
    ours = ours.loc[list(reference)]
    return max(
        float(np.abs(ours[name].to_numpy() - np.array([reference[q][trec] for q in reference])).max())
        for name, trec in PYTREC_NAMES.items()
    )


def bench_case(label: str, qrels: dict, run: dict, repeats: int) -> list[tuple]:
    entries = sum(map(len, run.values()))
    print(
        f"\n{label}: {len(run):,} queries, {entries:,} run entries, {sum(map(len, qrels.values())):,} judgments",
        flush=True,
    )
    rows = []
    tools = [
        ("ragtrack (trec_eval set)", ragtrack_call(qrels, run, TREC_SET)),
        ("ragtrack (full set)", ragtrack_call(qrels, run, FULL_SET)),
        ("pytrec_eval (trec_eval set)", pytrec_call(qrels, run)),
        ("ranx (trec_eval set)", ranx_call(qrels, run)),
    ]
    results = {}
    for name, call in tools:
        timings = [measure(call) for _ in range(repeats + 1)]
        first, warm, warm_cpu = timings[0][0], min(t[0] for t in timings[1:]), min(t[1] for t in timings[1:])
        memory = max(t[2] for t in timings)
        results[name] = timings[-1][3]
        rows.append((label, name, first, warm, warm_cpu, memory))
        print(
            f"  {name:<28} first {first:8.3f} s   warm {warm:8.3f} s (CPU {warm_cpu:8.3f} s)   peak +{memory:7.0f} MB",
            flush=True,
        )
    print(
        f"  max |ragtrack - pytrec_eval| over {len(PYTREC_NAMES)} measures: {max_difference(results['ragtrack (trec_eval set)'], results['pytrec_eval (trec_eval set)']):.1e}"
    )
    return rows


def cold_start() -> tuple[float, float]:
    """A fresh interpreter: import ragtrack's metrics and score a SciFact-size case once."""
    script = textwrap.dedent(f"""
        import resource, sys, time
        sys.path.insert(0, {str(ROOT)!r})
        import random
        rng = random.Random(0)
        qrels = {{f"q{{q}}": {{f"doc{{rng.randrange(5183)}}": rng.randint(0, 2) for _ in range(3)}} for q in range(300)}}
        run = {{f"q{{q}}": {{f"doc{{rng.randrange(5183)}}": rng.random() for _ in range(100)}} for q in range(300)}}
        cpu = resource.getrusage(resource.RUSAGE_SELF)
        started = time.perf_counter()
        from ragtrack.evaluators.ranking import score_ranking
        score_ranking(run, qrels, {FULL_SET!r})
        after = resource.getrusage(resource.RUSAGE_SELF)
        print(time.perf_counter() - started, after.ru_utime + after.ru_stime - cpu.ru_utime - cpu.ru_stime)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    return float(out[0]), float(out[1])


WHOLE_MEASURES = ("ndcg@10", "map", "recall@100", "p@10", "mrr")
TREC_EVAL_MEASURES = (
    "-mndcg_cut.10",
    "-mmap",
    "-mrecall.100",
    "-mP.10",
    "-mrecip_rank",
)  # the same, as trec_eval names them
PYTREC_SCRIPT = """
import sys, pytrec_eval
qrels = {}
with open(sys.argv[1]) as f:
    next(f)
    for line in f:
        q, d, g = line.split()
        qrels.setdefault(q, {})[d] = int(g)
run = {}
with open(sys.argv[2]) as f:
    for line in f:
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
names = ("ndcg_cut_10", "map", "recall_100", "P_10", "recip_rank")
result = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "recall.100", "P.10", "recip_rank"}).evaluate(run)
for name in names:
    print(name, sum(r[name] for r in result.values()) / len(result))
"""


def write_trec_files(folder: Path, queries: int = 2000, depth: int = 1000, seed: int = 0) -> tuple[Path, Path]:
    """BEIR qrels (with header) and a TREC run of ``synthetic(queries, depth, seed)``."""
    qrels, run = synthetic(queries, depth, seed)
    qrels_path, run_path = folder / "qrels.tsv", folder / "run.trec"
    qrels_path.write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    with run_path.open("w") as handle:
        for qid, docs in run.items():
            ranked = sorted(docs.items(), key=lambda item: -item[1])
            handle.write(
                "".join(f"{qid} Q0 {doc} {rank} {score!r} bench\n" for rank, (doc, score) in enumerate(ranked, start=1))
            )
    return qrels_path, run_path


def timed(command: list[str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system, of the process and its threads) of one command."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(process.pid, 0)
    wall = time.perf_counter() - started
    if status:
        raise RuntimeError(f"{command[:4]} failed: {process.stderr.read().decode()}")
    process.stderr.close()
    return wall, usage.ru_utime + usage.ru_stime


def whole_process_exactness(qrels_path: Path, run_path: Path) -> float:
    """max |ragtrack eval's per-query value - pytrec_eval's| over the 5 measures, both reading the files."""
    import pytrec_eval

    from ragtrack.pipeline.run_files import evaluate_files

    ours = evaluate_files(qrels_path, run_path, list(WHOLE_MEASURES)).per_query_rows()
    with open(qrels_path) as q, open(run_path) as r:
        next(q)  # the BEIR header
        qrels = pytrec_eval.parse_qrel(line.replace("\t", " 0 ", 1) for line in q)
        reference = pytrec_eval.RelevanceEvaluator(
            qrels, {"ndcg_cut.10", "map", "recall.100", "P.10", "recip_rank"}
        ).evaluate(pytrec_eval.parse_run(r))
    names = {"ndcg@10": "ndcg_cut_10", "map": "map", "recall@100": "recall_100", "p@10": "P_10", "mrr": "recip_rank"}
    return max(abs(ours[qid][name] - values[trec]) for qid, values in reference.items() for name, trec in names.items())


def whole_process(repeats: int = 5) -> float:
    """Median wall and CPU seconds of ``ragtrack eval`` and of the pytrec_eval script (alternating runs,
    the same files); prints both ratios and checks that ragtrack's values equal pytrec_eval's."""
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="ragtrack-bench-eval-") as folder:
        qrels, run = write_trec_files(Path(folder))
        script = Path(folder) / "pytrec.py"
        script.write_text(PYTREC_SCRIPT)
        commands = {
            "ragtrack eval": [
                sys.executable,
                "-m",
                "ragtrack",
                "eval",
                str(qrels),
                str(run),
                *(f"-m{m}" for m in WHOLE_MEASURES),
            ],
            "ragtrack trec_eval": [
                sys.executable,
                "-m",
                "ragtrack",
                "trec_eval",
                "-c",
                *TREC_EVAL_MEASURES,
                str(qrels),
                str(run),
            ],
            "pytrec_eval script": [sys.executable, str(script), str(qrels), str(run)],
        }
        times: dict[str, list[tuple[float, float]]] = {name: [] for name in commands}
        for _ in range(repeats):
            for name, command in commands.items():
                times[name].append(timed(command))
        difference = whole_process_exactness(qrels, run)
    walls = {name: statistics.median(wall for wall, _ in values) for name, values in times.items()}
    cpus = {name: statistics.median(cpu for _, cpu in values) for name, values in times.items()}
    ratio = walls["ragtrack eval"] / walls["pytrec_eval script"]
    print(
        f"\nwhole process, 2,000 queries x 1,000 documents (2M run lines), {len(WHOLE_MEASURES)} measures, median of {repeats}; {cpu_model()}"
    )
    for name, values in times.items():
        print(
            f"  {name:<20} wall {walls[name]:.2f} s, CPU {cpus[name]:.2f} s   (runs, wall/CPU: {', '.join(f'{w:.2f}/{c:.2f}' for w, c in values)})"
        )
    for name in ("ragtrack eval", "ragtrack trec_eval"):
        print(
            f"  {name} / pytrec_eval script: wall {walls[name] / walls['pytrec_eval script']:.2f}x (target <= 0.5x), "
            f"CPU {cpus[name] / cpus['pytrec_eval script']:.2f}x"
        )
    print(f"  load average {load:.1f} before, {os.getloadavg()[0]:.1f} after")
    print(f"  max |ragtrack eval - pytrec_eval| per query over the {len(WHOLE_MEASURES)} measures: {difference:.1e}")
    return ratio


def start_up(repeats: int = 10) -> None:
    """Best-of wall time of short commands in a fresh process: ``ragtrack eval`` and ``ragtrack
    trec_eval`` on a two-line qrels and run, ``ragtrack metrics``, ``import ragtrack`` (target for the
    two-line eval: <= 0.25 s)."""
    with tempfile.TemporaryDirectory(prefix="ragtrack-bench-start-") as folder:
        qrels, run = Path(folder) / "qrels", Path(folder) / "run"
        qrels.write_text("q1 0 d1 1\n")
        run.write_text("q1 Q0 d1 1 1.0 tag\n")
        commands = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "import ragtrack": [sys.executable, "-c", "import ragtrack"],
            "ragtrack eval (2 lines)": [sys.executable, "-m", "ragtrack", "eval", str(qrels), str(run)],
            "ragtrack trec_eval (2 lines)": [sys.executable, "-m", "ragtrack", "trec_eval", str(qrels), str(run)],
            "ragtrack metrics": [sys.executable, "-m", "ragtrack", "metrics"],
        }
        print(f"\nstart-up, best of {repeats} (wall / CPU s); {cpu_model()}, load average {os.getloadavg()[0]:.1f}")
        for name, command in commands.items():
            wall, cpu = min(timed(command) for _ in range(repeats))
            print(f"  {name:<30} {wall:.3f} / {cpu:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="1,000 x 1,000 instead of 10,000 x 1,000")
    parser.add_argument(
        "--whole-process",
        action="store_true",
        help="only start-up and the whole-process ratio of ragtrack eval to a pytrec_eval script",
    )
    args = parser.parse_args()
    if args.whole_process:
        start_up()
        whole_process()
        return
    queries = 1_000 if args.small else 10_000
    print(
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} (wall times grow with the load; CPU times less so)"
    )
    rows = bench_case("SciFact-size (300 test queries x 100 documents)", *scifact_like(), repeats=5)
    rows += bench_case(f"{queries:,} queries x 1,000 documents", *synthetic(queries, 1000), repeats=2)
    walls, cpus = zip(*(cold_start() for _ in range(3)))
    print(
        f"\ncold start (fresh interpreter: import + first evaluation, SciFact-size, full set): best of 3 wall {min(walls):.3f} s, CPU {min(cpus):.3f} s"
    )
    print(f"load average now {os.getloadavg()[0]:.1f}")

    print("\n| case | tool | first call s | warm s | warm / ragtrack | warm CPU s | CPU / ragtrack | peak MB |")
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for label, name, first, warm, cpu, memory in rows:
        base = next(r for r in rows if r[0] == label and r[1].startswith("ragtrack (trec"))
        print(
            f"| {label} | {name} | {first:.3f} | {warm:.3f} | {warm / base[3]:.2f}x | {cpu:.3f} | {cpu / base[4]:.2f}x | {memory:.0f} |"
        )
    start_up()
    whole_process()


if __name__ == "__main__":
    main()
