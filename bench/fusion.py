"""Fusion of two 1,000-deep runs over 300 queries by every method: ragtrack against ranx, side by side.

Both fuse the same seeded runs (documents drawn from a pool of 5,000 per query, so members overlap,
distinct uniform scores), min-max normalized (rank methods read the order only). ranx is timed on
``ranx.fuse`` over ``ranx.Run`` objects built beforehand (its numba functions compiled by a warm-up
call), ragtrack on its stage functions over ``Run`` objects whose rankings are sorted beforehand; both
keep every fused document (depth 2,000). The learned methods are timed on fusing only, their fit on
another 300 seeded queries with random judgments done beforehand. Best of ``--repeats``.

    python bench/fusion.py [--queries 300] [--depth 1000] [--repeats 3] [--methods rrf,borda]
"""

from __future__ import annotations

import argparse
import os
import random

import ranx
from machine import best_of, cpu_model  # bench/ scripts share the machine line and the timer
from ranx import fusion as ranx_fusion

from ragtrack.core.runs import Run, rank_documents
from ragtrack.retrievers.fusion_methods import Trained, fuse

WEIGHTS = [0.4, 0.6]
UNSUPERVISED = {  # ragtrack's method and parameters: ranx's
    "combsum": ({}, "sum", {}), "weighted sum": ({"weights": WEIGHTS}, "wsum", {"weights": WEIGHTS}),
    "combmnz": ({}, "mnz", {}), "combanz": ({}, "anz", {}), "combgmnz": ({"gamma": 0.5}, "gmnz", {"gamma": 0.5}),
    "combmin": ({}, "min", {}), "combmax": ({}, "max", {}), "combmed": ({}, "med", {}),
    "wmnz": ({"weights": WEIGHTS}, "wmnz", {"weights": WEIGHTS}), "mixed": ({"weights": WEIGHTS}, "mixed", {"weights": WEIGHTS}),
    "rrf": ({"k": 60}, "rrf", {"k": 60}), "isr": ({}, "isr", {}), "log_isr": ({}, "log_isr", {}),
    "logn_isr": ({"sigma": 0.01}, "logn_isr", {"sigma": 0.01}), "rbc": ({"phi": 0.8}, "rbc", {"phi": 0.8}),
    "borda": ({}, "bordafuse", {}), "weighted borda": ({"weights": WEIGHTS}, "w_bordafuse", {"weights": WEIGHTS}),
    "condorcet": ({}, "condorcet", {}), "weighted condorcet": ({"weights": WEIGHTS}, "w_condorcet", {"weights": WEIGHTS}),
}
LEARNED = {"posfuse": ({}, {}), "probfuse": ({"segments": 10}, {"n_segments": 10}), "segfuse": ({}, {}),
           "slidefuse": ({"window": 5}, {"w": 5}), "bayesfuse": ({}, {}), "mapfuse": ({}, {})}
RANK_ONLY = {"rrf", "isr", "log_isr", "logn_isr", "rbc", "borda", "weighted borda", "condorcet", "weighted condorcet"}


def runs(queries: int, depth: int, seed: int, prefix: str) -> dict[str, Run]:
    """Two runs ("bm25", "dense") held as ragtrack's stages and run files hold them: in trec_eval order."""
    rng = random.Random(seed)
    return {name: Run.from_rankings(name, {f"{prefix}{q}": rank_documents({f"d{d}": rng.random() for d in rng.sample(range(5000), depth)})
                                           for q in range(queries)}) for name in ("bm25", "dense")}


def warm_up(call, runs: dict[str, Run]) -> None:
    """Compile ranx's numba functions: ``call`` on the first 3 queries (the same types, so the same compiled code)."""
    call([ranx.Run({qid: dict(scores) for qid, scores in list(run.scores.items())[:3]}) for run in runs.values()])


def ranx_seconds(call, repeats: int) -> float:
    """ranx's best of ``repeats``, or of one call where that took over 10 s (its Borda and Condorcet:
    minutes, in Python loops over each query's candidates)."""
    once = best_of(call, 1)
    return once if once > 10 or repeats == 1 else min(once, best_of(call, repeats - 1))


def row(method: str, ours: float, theirs: float) -> str:
    return f"{method:<20}{ours:>12.3f}{theirs:>10.3f}{ours / theirs:>8.2f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--depth", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", default="", help="comma-separated (default: all)")
    args = parser.parse_args()
    chosen = set(filter(None, args.methods.split(",")))
    test, train = runs(args.queries, args.depth, 0, "test"), runs(args.queries, args.depth, 1, "train")
    rng = random.Random(2)
    qrels = {qid: {f"d{d}": 1 for d in rng.sample(range(5000), 30)} for qid in train["bm25"].scores}
    ranx_test = [ranx.Run({q: dict(s) for q, s in run.scores.items()}) for run in test.values()]
    ranx_train = [ranx.Run({q: dict(s) for q, s in run.scores.items()}) for run in train.values()]
    members, keep = list(test), 2 * args.depth
    print(f"{cpu_model()}; load average {os.getloadavg()[0]:.1f} at the start; {args.queries} queries, 2 runs {args.depth} deep, "
          f"best of {args.repeats} (ranx: once where that took over 10 s)")
    print(f"{'method':<20}{'ragtrack s':>12}{'ranx s':>10}{'ratio':>8}")
    for method, (ours, theirs_name, theirs) in UNSUPERVISED.items():
        if chosen and method not in chosen:
            continue
        norm = None if method in RANK_ONLY else "min-max"
        name = {"weighted sum": "combsum"}.get(method, method.split()[-1])
        warm_up(lambda given: ranx.fuse(given, norm=norm, method=theirs_name, params=theirs), test)
        theirs_s = ranx_seconds(lambda: ranx.fuse(ranx_test, norm=norm, method=theirs_name, params=theirs), args.repeats)
        ours_s = best_of(lambda: fuse(test, members, name, depth=keep, normalization="minmax", **ours), args.repeats)
        print(row(method, ours_s, theirs_s), flush=True)
    for method, (ours, theirs) in LEARNED.items():
        if chosen and method not in chosen:
            continue
        trained = Trained(method, members, depth=keep, normalization="minmax" if method == "segfuse" else "none", **ours).fit(train, qrels)
        train_params = {"n_segments": theirs["n_segments"]} if "n_segments" in theirs else {}
        learned = getattr(ranx_fusion, f"{method}_train")(ranx.Qrels(qrels), ranx_train, **train_params)
        key = {"mapfuse": "map_scores", "bayesfuse": "log_odds"}.get(method, "probs")
        apply = {"w": theirs["w"]} if "w" in theirs else {}
        normed = (lambda given: [ranx.normalization.min_max_norm(r) for r in given]) if method == "segfuse" else (lambda given: given)
        warm_up(lambda given: getattr(ranx_fusion, method)(normed(given), **{key: learned}, **apply), test)
        theirs_s = ranx_seconds(lambda: getattr(ranx_fusion, method)(normed(ranx_test), **{key: learned}, **apply), args.repeats)
        ours_s = best_of(lambda: trained.fuse(test), args.repeats)
        print(row(method, ours_s, theirs_s), flush=True)
    print(f"load average {os.getloadavg()[0]:.1f} at the end")

if __name__ == "__main__":
    main()
