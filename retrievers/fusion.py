"""Rank and score fusion: pure functions over runs.

Every function fuses the ``members`` of ``runs`` (each member cut at its top ``depth`` documents in
trec_eval order) into the run ``system``, keeping the top ``depth``; ``weights`` give one weight per
member (default 1).

Reciprocal Rank Fusion (Cormack, Clarke & Büttcher, SIGIR 2009):
score(d) = Σ_{runs r ∋ d} w_r / (k + rank_r(d)), ranks 1-based.

Score fusion (Fox & Shaw, TREC-2 1994; normalizations after Lee, SIGIR 1997) first normalizes each
member's scores per query over its top ``depth`` list, s' = norm(s):

- ``none``:   s' = s
- ``minmax``: s' = (s − min) / (max − min); a list whose scores are all equal gets s' = 1
- ``zscore``: s' = (s − mean) / std (population std); a list with std 0 gets s' = 0
- ``max``:    s' = s / max(max, 1e-9) (ranx's ``max_norm``): a list whose maximum is ≤ 1e-9 (all scores
  negative: reranker logits, log-probabilities) is divided by 1e-9, so its order is kept, never reversed

then combines them:

- CombSUM: score(d) = Σ_{r ∋ d} w_r · s'_r(d)
- CombMNZ: score(d) = |{r ∋ d}| · Σ_{r ∋ d} w_r · s'_r(d)
- linear (convex combination, Bruch, Gai & Ingber, TOIS 2023): score(d) = Σ_r α_r · s'_r(d) with
  α_r = w_r / Σ w; a document missing from member r takes r's lowest normalized score for that
  query (the most it could have had without being retrieved), not 0.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated

from pydantic import Field, ValidationInfo, field_validator

from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run, rank_documents
from ragtrack.core.settings import Count, NonNegative, Normalization, SystemName, SystemSettings, validated
from ragtrack.core.stages import Stage, StageContext, StageOutput, chain_key


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
        contributions = [weight / (k + rank) for rank in range(1, depth + 1)]
        for qid, ranked in run.rankings():
            scores = fused.setdefault(qid, {})
            seen = scores.get
            for (doc_id, _), contribution in zip(ranked, contributions):
                scores[doc_id] = seen(doc_id, 0.0) + contribution
    return _top(system, fused, depth)


def _top(system: str, fused: dict[str, dict[str, float]], depth: int) -> Run:
    """The fused run, each query cut at its top ``depth`` documents in trec_eval order."""
    return Run.from_rankings(system, {qid: rank_documents(scores)[:depth] for qid, scores in fused.items()})


def _minmax(scores: list[float]) -> list[float]:
    low, high = min(scores), max(scores)
    return [1.0] * len(scores) if high == low else [(s - low) / (high - low) for s in scores]


def _zscore(scores: list[float]) -> list[float]:
    mean = sum(scores) / len(scores)
    std = math.sqrt(sum((s - mean) ** 2 for s in scores) / len(scores))
    return [0.0] * len(scores) if std == 0 else [(s - mean) / std for s in scores]


MAX_NORM_FLOOR = 1e-9  # ranx's: the least ``max`` divides by, so a non-positive maximum never flips the signs


def _max(scores: list[float]) -> list[float]:
    high = max(max(scores), MAX_NORM_FLOOR)
    return [s / high for s in scores]


NORMALIZATIONS: dict[str, Callable[[list[float]], list[float]]] = {
    "none": list, "minmax": _minmax, "zscore": _zscore, "max": _max,
}


def normalize(ranked: Sequence[tuple[str, float]], method: str) -> dict[str, float]:
    """Normalized scores of one ranked list (see module docstring for the formulas)."""
    if method not in NORMALIZATIONS:
        raise RagtrackError(f"unknown score normalization {method!r}; known: {', '.join(NORMALIZATIONS)}")
    if not ranked:
        return {}
    return dict(zip([doc_id for doc_id, _ in ranked], NORMALIZATIONS[method]([float(s) for _, s in ranked])))


def _normalized_members(runs: Mapping[str, Run], members: Sequence[str], weights: Sequence[float] | None,
                        depth: int, normalization: str) -> list[tuple[dict[str, dict[str, float]], float]]:
    """Per member: {qid: {doc: normalized score}} over its top ``depth``, with its weight."""
    normalize([], normalization)  # unknown names fail before any work
    return [({qid: normalize(ranked[:depth], normalization) for qid, ranked in run.rankings()}, weight)
            for run, weight in _members(runs, members, weights)]


def _comb(runs: Mapping[str, Run], members: Sequence[str], system: str, depth: int,
          weights: Sequence[float] | None, normalization: str, multiply_by_hits: bool) -> Run:
    fused: dict[str, dict[str, float]] = {}
    hits: dict[str, dict[str, int]] = {}
    for scores_by_query, weight in _normalized_members(runs, members, weights, depth, normalization):
        for qid, scores in scores_by_query.items():
            total, count = fused.setdefault(qid, {}), hits.setdefault(qid, {})
            for doc_id, score in scores.items():
                total[doc_id] = total.get(doc_id, 0.0) + weight * score
                count[doc_id] = count.get(doc_id, 0) + 1
    if multiply_by_hits:
        fused = {qid: {d: s * hits[qid][d] for d, s in scores.items()} for qid, scores in fused.items()}
    return _top(system, fused, depth)


def combsum(runs: Mapping[str, Run], members: Sequence[str], system: str = "combsum", depth: int = 100,
            weights: Sequence[float] | None = None, normalization: str = "minmax") -> Run:
    """CombSUM of normalized scores (see module docstring)."""
    return _comb(runs, members, system, depth, weights, normalization, multiply_by_hits=False)


def combmnz(runs: Mapping[str, Run], members: Sequence[str], system: str = "combmnz", depth: int = 100,
            weights: Sequence[float] | None = None, normalization: str = "minmax") -> Run:
    """CombMNZ: CombSUM times the number of members that retrieved the document."""
    return _comb(runs, members, system, depth, weights, normalization, multiply_by_hits=True)


def linear_fusion(runs: Mapping[str, Run], members: Sequence[str], system: str = "linear", depth: int = 100,
                  weights: Sequence[float] | None = None, normalization: str = "minmax") -> Run:
    """Convex combination of normalized scores; a missing document takes the member's lowest score."""
    normalized = _normalized_members(runs, members, weights, depth, normalization)
    total_weight = sum(weight for _, weight in normalized)
    if total_weight <= 0 or any(weight < 0 for _, weight in normalized):
        raise RagtrackError(f"linear fusion weights must be >= 0 with a positive sum, got {[w for _, w in normalized]}")
    fused: dict[str, dict[str, float]] = {}
    for qid in dict.fromkeys(qid for scores_by_query, _ in normalized for qid in scores_by_query):
        lists = [(scores_by_query.get(qid, {}), weight / total_weight) for scores_by_query, weight in normalized]
        documents = dict.fromkeys(doc_id for scores, _ in lists for doc_id in scores)
        fused[qid] = {doc_id: sum(alpha * scores.get(doc_id, min(scores.values(), default=0.0)) for scores, alpha in lists)
                      for doc_id in documents}
    return _top(system, fused, depth)


# ----------------------------------------------------------------------------- fusion as a stage
class FusionSettings(SystemSettings):
    """A fusion's common keys: the system it makes, the systems it fuses (any systems of the job:
    retrievers, rewriters, rerankers, other fusions), how deep each is read, one weight per member."""

    system: SystemName
    members: Annotated[list[SystemName], Field(min_length=1)]
    depth: Count = 100
    weights: list[NonNegative] | None = None

    @field_validator("weights")
    @classmethod
    def _one_per_member(cls, weights: list[float] | None, info: ValidationInfo) -> list[float] | None:
        members = info.data.get("members")
        if weights is not None and members is not None and len(weights) != len(members):
            raise ValueError(f"null or one weight per member ({len(members)}: {', '.join(members)})")
        return weights


class RRFSettings(FusionSettings, extra="forbid"):
    k: NonNegative = 60


class CombSettings(FusionSettings, extra="forbid"):
    normalization: Normalization = "minmax"


class LinearSettings(CombSettings, extra="forbid"):
    @field_validator("weights")
    @classmethod
    def _positive_sum(cls, weights: list[float] | None) -> list[float] | None:
        if weights is not None and not sum(weights) > 0:
            raise ValueError("weights >= 0 with a positive sum")
        return weights


class Fusion(Stage):
    """A stage that fuses the runs of ``members`` into the system ``system``. Built from its settings
    (``settings_schema``; keyword arguments, validated; ``name`` is the system's, which ``system``
    gives); a subclass names its ``method``, one of the functions above, which is called with every
    setting (or overrides :meth:`fuse`). A query's latency is the sum of its members' plus an even share of the batch fusion."""

    kind = "fusion"
    settings_schema: type[FusionSettings] = FusionSettings
    method: Callable[..., Run]

    def __init__(self, name: str | None = None, **values):
        self.settings = validated(self.settings_schema, values, f"fusion {values.get('system', name)!r}")
        super().__init__(self.settings.system, self.settings.members)

    def identity(self) -> dict:
        return self.settings.model_dump(exclude={"type", "target", "alias"})

    def fuse(self, runs: Mapping[str, Run]) -> Run:
        """The fused run of ``runs`` (by member name)."""
        return self.method(runs, **self.identity())

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        started = time.perf_counter()
        run = self.fuse({member: inputs[member].run for member in self.inputs})
        seconds = time.perf_counter() - started
        share = seconds * 1000 / max(len(context.dataset.queries), 1)
        latency_ms = {qid: sum(inputs[m].latency_ms.get(qid, math.nan) for m in self.inputs) + share for qid in context.dataset.queries}
        return StageOutput(run, context.passages(run, {m: inputs[m].passage_run for m in self.inputs}), chain_key(self, inputs, context), self,
                           {"fusion_seconds": seconds}, latency_ms, any(inputs[m].approximate for m in self.inputs))


class RRF(Fusion):
    """Reciprocal Rank Fusion (:func:`reciprocal_rank_fusion`)."""

    settings_schema = RRFSettings
    method = staticmethod(reciprocal_rank_fusion)


class CombSUM(Fusion):
    """CombSUM of normalized scores (:func:`combsum`)."""

    settings_schema = CombSettings
    method = staticmethod(combsum)


class CombMNZ(Fusion):
    """CombMNZ (:func:`combmnz`)."""

    settings_schema = CombSettings
    method = staticmethod(combmnz)


class LinearFusion(Fusion):
    """Convex combination of normalized scores (:func:`linear_fusion`)."""

    settings_schema = LinearSettings
    method = staticmethod(linear_fusion)
