"""Rank and score fusion as stages: every method of :mod:`ragtrack.retrievers.fusion_methods` (the
formulas and references are there; ranx's 25 methods and normalizations), plus linear fusion.

Every function fuses the ``members`` of ``runs`` (each member cut at its top ``depth`` documents in
trec_eval order) into the run ``system``, keeping the top ``depth``; ``weights`` give one weight per
member (default 1). The RRF, CombSUM and CombMNZ of ragtrack's first releases are those methods:

- RRF (Cormack, Clarke & Büttcher, SIGIR 2009): score(d) = Σ_{runs r ∋ d} w_r / (k + rank_r(d))
- CombSUM (Fox & Shaw, TREC-2 1994): score(d) = Σ_{r ∋ d} w_r · s'_r(d), s' = norm(s) per query over
  each member's top ``depth`` (normalizations after Lee, SIGIR 1997: none, minmax, zscore, max, sum,
  rank, borda, minmax-inverted); ``max`` is s / max(max, 1e-9) (ranx's ``max_norm``): a list whose
  maximum is ≤ 1e-9 (all scores negative) is divided by 1e-9, so its order is kept, never reversed
- CombMNZ: score(d) = |{r ∋ d}| · Σ_{r ∋ d} w_r · s'_r(d)

Linear (convex combination, Bruch, Gai & Ingber, TOIS 2023): score(d) = Σ_r α_r · s'_r(d) with
α_r = w_r / Σ w; a document missing from member r takes r's lowest normalized score for that query
(the most it could have had without being retrieved), not 0.

The learned methods (:class:`LearnedFusion`) never fuse a query they learned from: cross-fitted on folds
of the job's own judged queries (``train.folds``, the default: each fold fused by a model fitted on the
other folds), or fitted on the members' runs and the judgments of other queries, which the job may not
report: another query set of the corpus run in the same job (``train.dataset``) or files
(``train.qrels``, ``train.runs``).
"""

from __future__ import annotations

import hashlib
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field, Strict, ValidationInfo, field_validator, model_validator

from ragtrack.core.checksums import file_sha256
from ragtrack.core.data import Dataset, Qrels, load_qrels
from ragtrack.core.errors import RagtrackError
from ragtrack.core.folds import query_folds
from ragtrack.core.runs import Run, read_trec
from ragtrack.core.settings import (
    Count,
    Fraction,
    InputPath,
    NonNegative,
    NonNegativeInt,
    Normalization,
    Section,
    SystemName,
    SystemSettings,
    validated,
)
from ragtrack.core.stages import Stage, StageContext, StageOutput, chain_key
from ragtrack.retrievers.fusion_methods import LINEAR, Trained, condorcet, fuse, fuse_queries, members_of, normalize

__all__ = ["combmnz", "combsum", "condorcet", "fuse", "linear_fusion", "normalize", "reciprocal_rank_fusion"]


def reciprocal_rank_fusion(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str = "hybrid",
    k: float = 60,
    depth: int = 100,
    weights: Sequence[float] | None = None,
) -> Run:
    """Fuse ``members`` of ``runs`` into the run ``system`` with RRF (see module docstring)."""
    if k < 0:
        raise RagtrackError(f"RRF k must be >= 0, got {k}")
    return fuse(runs, members, "rrf", system, depth, weights, k=k)


def combsum(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str = "combsum",
    depth: int = 100,
    weights: Sequence[float] | None = None,
    normalization: str = "minmax",
) -> Run:
    """CombSUM of normalized scores (see module docstring); with weights, ranx's weighted sum."""
    return fuse(runs, members, "combsum", system, depth, weights, normalization)


def combmnz(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str = "combmnz",
    depth: int = 100,
    weights: Sequence[float] | None = None,
    normalization: str = "minmax",
) -> Run:
    """CombMNZ: CombSUM times the number of members that retrieved the document."""
    return fuse(runs, members, "combmnz", system, depth, weights, normalization)


def linear_fusion(
    runs: Mapping[str, Run],
    members: Sequence[str],
    system: str = "linear",
    depth: int = 100,
    weights: Sequence[float] | None = None,
    normalization: str = "minmax",
) -> Run:
    """Convex combination of normalized scores; a missing document takes the member's lowest score."""
    normalize([], normalization)  # unknown names (and borda, which reads every member) fail before any work
    chosen = [weight for _, weight in members_of(runs, members, weights)]
    if sum(chosen) <= 0 or any(weight < 0 for weight in chosen):
        raise RagtrackError(f"linear fusion weights must be >= 0 with a positive sum, got {chosen}")
    return fuse_queries(
        runs, members, system, depth, [weight / sum(chosen) for weight in chosen], normalization, LINEAR
    )


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

    @field_validator("normalization")
    @classmethod
    def _one_list_at_a_time(cls, normalization: str) -> str:
        if normalization == "borda":
            raise ValueError("borda reads every member's documents; linear fusion normalizes each list alone")
        return normalization


class GMNZSettings(CombSettings, extra="forbid"):
    gamma: NonNegative = 0.5  # CombGMNZ's exponent of the number of members: 0 is CombSUM, 1 CombMNZ


class RankSettings(FusionSettings, extra="forbid"):
    """A rank method: reads each member's order only."""


class LogNISRSettings(FusionSettings, extra="forbid"):
    sigma: Fraction = 0.01


class RBCSettings(FusionSettings, extra="forbid"):
    phi: Annotated[float, Strict(), Field(gt=0, lt=1)] = 0.8


class TrainSettings(Section):
    """Where a learned fusion learns, never from a query it fuses; one of three:

    - ``folds``: cross-fitted on the job's own judged queries, cut into ``folds`` parts with ``seed`` as
      ``compare --folds`` cuts them (:func:`ragtrack.core.folds.query_folds`), each part fused by a
      model fitted on the other parts' judgments and member runs;
    - ``dataset``: another query set of the job's corpus, as settings that replace the job's dataset's
      (``{split: train}``; an ir_datasets ``id``; TREC ``topics`` and ``qrels``): the members are run on
      its queries in the same job and the fusion learns from their runs and its judgments;
    - files: ``qrels`` (BEIR or TREC) of training queries and each member's TREC run on them (``runs``,
      ``{member: path}``).

    The last two may not judge any query the job reports."""

    folds: Annotated[int, Strict(), Field(ge=2)] | None = None
    seed: NonNegativeInt = 0
    dataset: dict[str, Any] | None = None
    qrels: InputPath | None = None
    runs: dict[SystemName, InputPath] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> "TrainSettings":
        given = [self.folds is not None, self.dataset is not None, self.qrels is not None or self.runs is not None]
        if sum(given) != 1:
            raise ValueError(
                "one of folds (cross-fitted on the job's own queries), dataset (another split of its corpus) "
                "or qrels and runs (files); set the others to null"
            )
        if given[2] and (self.qrels is None or self.runs is None):
            raise ValueError("training files need both qrels and runs ({member: run file on those queries})")
        if self.dataset == {}:
            raise ValueError("dataset: the settings that replace the job's dataset's, e.g. {split: train}")
        return self


TRAIN_FOLDS = 5  # a learned fusion's default: cross-fitted on five folds of the job's queries


class LearnedSettings(FusionSettings, extra="forbid"):
    train: TrainSettings = Field(default_factory=lambda: TrainSettings(folds=TRAIN_FOLDS))
    relevance_threshold: Count = 1

    @field_validator("train")
    @classmethod
    def _a_run_per_member(cls, train: TrainSettings, info: ValidationInfo) -> TrainSettings:
        members = info.data.get("members") or []
        if train.runs is not None and sorted(train.runs) != sorted(members):
            raise ValueError(
                f"one training run per member ({', '.join(members)}), got {', '.join(train.runs) or 'none'}"
            )
        return train


class SegFuseSettings(LearnedSettings, extra="forbid"):
    normalization: Normalization = "minmax"


class ProbFuseSettings(LearnedSettings, extra="forbid"):
    segments: Count = 10


class SlideFuseSettings(LearnedSettings, extra="forbid"):
    window: NonNegativeInt = 5


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

    def fuse_on(self, runs: Mapping[str, Run], dataset: Dataset) -> Run:
        """The fused run of ``runs`` for the queries of ``dataset`` (a cross-fitted learned fusion reads
        its judgments); :meth:`fuse` by default."""
        return self.fuse(runs)

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        started = time.perf_counter()
        run = self.fuse_on({member: inputs[member].run for member in self.inputs}, context.dataset)
        seconds = time.perf_counter() - started
        share = seconds * 1000 / max(len(context.dataset.queries), 1)
        latency_ms = {
            qid: sum(inputs[m].latency_ms.get(qid, math.nan) for m in self.inputs) + share
            for qid in context.dataset.queries
        }
        return StageOutput(
            run,
            context.passages(run, {m: inputs[m].passage_run for m in self.inputs}),
            chain_key(self, inputs, context),
            self,
            {"fusion_seconds": seconds},
            latency_ms,
            any(inputs[m].approximate for m in self.inputs),
        )


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


def _method_stage(method: str, settings: type[FusionSettings], title: str) -> type[Fusion]:
    """The stage of a method of :func:`fuse` (its formula: :mod:`ragtrack.retrievers.fusion_methods`)."""

    def fuse_by(self: Fusion, runs: Mapping[str, Run]) -> Run:
        return fuse(runs, method=method, **self.identity())

    return type(
        title,
        (Fusion,),
        {
            "__doc__": f"{title} (:func:`ragtrack.retrievers.fusion_methods.fuse`, ``{method}``).",
            "settings_schema": settings,
            "fuse": fuse_by,
            "__module__": __name__,
        },
    )


CombMIN = _method_stage("combmin", CombSettings, "CombMIN")
CombMAX = _method_stage("combmax", CombSettings, "CombMAX")
CombMED = _method_stage("combmed", CombSettings, "CombMED")
CombANZ = _method_stage("combanz", CombSettings, "CombANZ")
CombGMNZ = _method_stage("combgmnz", GMNZSettings, "CombGMNZ")
WMNZ = _method_stage("wmnz", CombSettings, "WMNZ")
Mixed = _method_stage("mixed", CombSettings, "Mixed")
ISR = _method_stage("isr", RankSettings, "ISR")
LogISR = _method_stage("log_isr", RankSettings, "LogISR")
LogNISR = _method_stage("logn_isr", LogNISRSettings, "LogNISR")
RBC = _method_stage("rbc", RBCSettings, "RBC")
Borda = _method_stage("borda", RankSettings, "Borda")


class Condorcet(Fusion):
    """Condorcet fusion, weighted with ``weights`` (:func:`ragtrack.retrievers.fusion_methods.condorcet`)."""

    settings_schema = RankSettings
    method = staticmethod(condorcet)


class LearnedFusion(Fusion):
    """A fusion that learns from judged queries (:class:`ragtrack.retrievers.fusion_methods.Trained`),
    never from one it fuses (``train``, :class:`TrainSettings`). Cross-fitted (``train.folds``): each
    fold of the job's queries is fused by a model fitted on the other folds, so every query is fused
    once, by a model that never saw its judgments. On another query set of the corpus
    (``train.dataset``): the executor runs the members on it and calls :meth:`learn` before the fusion
    produces. From files (``train.qrels``, ``train.runs``): fitted once, when it first fuses. The
    training queries of the last two must not be among the job's (refused before any system runs),
    and the fitted method refuses any query it was trained on. A subclass names its ``learned`` method."""

    settings_schema: type[LearnedSettings] = LearnedSettings
    learned: str

    def __init__(self, name: str | None = None, **values):
        super().__init__(name, **values)
        self.trained: Trained | None = None
        self.learned_from: str | None = None  # train.dataset: the sha256 of the dataset it learned from

    def training_dataset(self) -> tuple[str, dict] | None:
        """``train.dataset``: the members are run on that query set first (:meth:`learn`)."""
        dataset = self.settings.train.dataset
        return None if dataset is None else ("train.dataset", dict(dataset))

    def learn(self, inputs: Mapping[str, StageOutput], dataset: Dataset) -> None:
        """Fitted on the members' outputs on the queries of ``dataset`` (``train.dataset``) and its judgments."""
        self.fit({member: inputs[member].run for member in self.inputs}, dataset.qrels)
        self.learned_from = dataset.hash

    def identity(self) -> dict:
        identity = super().identity()
        train = self.settings.train
        if train.folds is not None:
            identity["train"] = {"folds": train.folds, "seed": train.seed}
        elif train.dataset is not None:  # learned (learn) before it fuses: the data it learned from
            identity["train"] = {"dataset": train.dataset, "learned_from": self.learned_from}
        else:
            identity["train"] = {
                "qrels": file_sha256(Path(train.qrels)),
                "runs": {m: file_sha256(Path(p)) for m, p in sorted(train.runs.items())},
            }
        return identity

    def identity_on(self, dataset: Dataset) -> dict:
        """Cross-fitted, the output depends on the job's judgments: their sha256."""
        if self.settings.train.folds is None:
            return {}
        return {"qrels": hashlib.sha256(json.dumps(dataset.qrels, sort_keys=True).encode()).hexdigest()}

    @cached_property
    def training_qrels(self) -> Qrels:
        """The judgments of the training queries (``train.qrels``), read once."""
        return load_qrels(Path(self.settings.train.qrels))[0]

    def dataset_problems(self, dataset: Dataset) -> dict[str, str]:
        """What stops this fusion on ``dataset``, found before any system runs. From files: training
        queries (those ``train.qrels`` judges) among the queries the job reports — never allowed, as
        whatever it learned from them would be scored on them (test-set tuning). Cross-fitted: more
        folds than queries, or a fold whose other folds hold no judged query to learn from."""
        train = self.settings.train
        if train.folds is not None:
            return self._fold_problems(dataset)
        if train.dataset is not None:  # the executor checks the training queries once it has loaded them
            return {}
        overlap = set(self.training_qrels) & set(dataset.queries)
        if not overlap:
            return {}
        return {
            "train.qrels": f"{len(overlap)} of its {len(self.training_qrels)} training queries are among the {len(dataset.queries)} "
            f"queries of {dataset.name} that this job reports (e.g. {min(overlap)!r}): a learned fusion learns "
            "from other queries than those it is scored on (a train split, other topics, or train.folds)"
        }

    def _fold_problems(self, dataset: Dataset) -> dict[str, str]:
        folds = self.settings.train.folds
        if folds > len(dataset.queries):
            return {
                "train.folds": f"{folds} folds of the {len(dataset.queries)} queries of {dataset.name}: give 2 to {len(dataset.queries)}"
            }
        for number, part in enumerate(self.folds(dataset), start=1):
            if not self.training_judgments(dataset, part):
                return {
                    "train.folds": f"fold {number} of {folds} (seed {self.settings.train.seed}): the other folds hold "
                    f"no judged query of {dataset.name} to learn from; use fewer folds"
                }
        return {}

    def folds(self, dataset: Dataset) -> list[list[str]]:
        """The job's queries in ``train.folds`` parts, cut as ``compare --folds`` cuts them."""
        return query_folds(list(dataset.queries), self.settings.train.folds, self.settings.train.seed)

    @staticmethod
    def training_judgments(dataset: Dataset, held_out: Sequence[str]) -> Qrels:
        """The judgments a fold's model learns from: those of the job's queries outside ``held_out``."""
        held = set(held_out)
        return {qid: judged for qid, judged in dataset.qrels.items() if qid in dataset.queries and qid not in held}

    def model(self) -> Trained:
        """The method, not yet fitted, with this fusion's settings."""
        values = self.settings.model_dump(exclude={"type", "target", "alias", "train", "relevance_threshold"})
        return Trained(self.learned, threshold=self.settings.relevance_threshold, **values)

    def fit(self, runs: Mapping[str, Run], qrels: Mapping[str, Mapping[str, int]]) -> "LearnedFusion":
        """Learn from the members' ``runs`` on training queries and their judgments ``qrels``."""
        self.trained = self.model().fit(runs, dict(qrels))
        return self

    def fuse(self, runs: Mapping[str, Run]) -> Run:
        if self.trained is None and self.settings.train.dataset is not None:
            raise RagtrackError(
                f"fusion {self.settings.system!r} learns from train.dataset before it fuses: learn() from its "
                "members' outputs on those queries first (a job does)"
            )
        if self.trained is None:
            self.fit({m: read_trec(path, m) for m, path in self.settings.train.runs.items()}, self.training_qrels)
        return self.trained.fuse(runs)

    def fuse_on(self, runs: Mapping[str, Run], dataset: Dataset) -> Run:
        """Cross-fitted: each fold fused by a model fitted on the other folds (class docstring)."""
        if self.settings.train.folds is None:
            return self.fuse(runs)
        fused: dict[str, list[tuple[str, float]]] = {}
        for part in self.folds(dataset):
            held = {name: Run(name, {q: run.scores[q] for q in part if q in run.scores}) for name, run in runs.items()}
            fused |= dict(self.model().fit(runs, self.training_judgments(dataset, part)).fuse(held).rankings())
        order = dict.fromkeys(qid for member in self.inputs for qid in runs[member].scores)
        return Run.from_rankings(self.settings.system, {qid: fused[qid] for qid in order if qid in fused})


def _learned_stage(method: str, settings: type[LearnedSettings], title: str) -> type[LearnedFusion]:
    return type(
        title,
        (LearnedFusion,),
        {
            "__doc__": f"{title}, learned on training queries (``{method}``).",
            "settings_schema": settings,
            "learned": method,
            "__module__": __name__,
        },
    )


PosFuse = _learned_stage("posfuse", LearnedSettings, "PosFuse")
ProbFuse = _learned_stage("probfuse", ProbFuseSettings, "ProbFuse")
SegFuse = _learned_stage("segfuse", SegFuseSettings, "SegFuse")
SlideFuse = _learned_stage("slidefuse", SlideFuseSettings, "SlideFuse")
BayesFuse = _learned_stage("bayesfuse", LearnedSettings, "BayesFuse")
MAPFuse = _learned_stage("mapfuse", LearnedSettings, "MAPFuse")
