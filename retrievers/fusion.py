"""Rank fusion: pure functions over runs.

Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009):
score(d) = Σ_{runs r} w_r / (k + rank_r(d)), ranks 1-based in trec_eval order, each member cut at
``depth``; documents missing from a member get nothing from it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pipeline.errors import RagtrackError
from pipeline.runs import Run


def _members(runs: Mapping[str, Run], members: Sequence[str], weights: Sequence[float] | None) -> list[tuple[Run, float]]:
    missing = [name for name in members if name not in runs]
    if missing:
        raise RagtrackError(f"fusion members {missing} are not among the systems of this job ({', '.join(runs)})")
    if weights is not None and len(weights) != len(members):
        raise RagtrackError(f"fusion has {len(members)} members but {len(weights)} weights")
    return [(runs[name], 1.0 if weights is None else float(w)) for name, w in zip(members, weights or [None] * len(members))]


def reciprocal_rank_fusion(runs: Mapping[str, Run], members: Sequence[str], system: str = "hybrid",
                           k: float = 60, depth: int = 100, weights: Sequence[float] | None = None) -> Run:
    """Fuse ``members`` of ``runs`` into the run ``system`` with RRF (see module docstring)."""
    if k < 0:
        raise RagtrackError(f"RRF k must be >= 0, got {k}")
    fused: dict[str, dict[str, float]] = {}
    for run, weight in _members(runs, members, weights):
        for qid, ranked in run.rankings():
            scores = fused.setdefault(qid, {})
            for rank, (doc_id, _) in enumerate(ranked[:depth], start=1):
                scores[doc_id] = scores.get(doc_id, 0.0) + weight / (k + rank)
    return Run(system, fused).truncated(depth)
