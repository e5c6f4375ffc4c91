"""The executor: a job's systems planned, produced, answered and scored by one loop.

:func:`plan` builds every system's stage from the config (``pipeline.configuration.systems``, inputs first) and checks
them; an :class:`Executor` then makes each system with its stage, answers its queries with the
generator and scores it with the evaluators, and after all systems the pairwise judges compare their
answers. What each step does is its :class:`Policy`'s: :class:`Live` runs and scores (``ragtrack run``);
the dry run's counts the LLM calls, sending nothing (``pipeline.execution.dryrun``). A robustness rerun
(``pipeline.execution.robustness``) is the same executor on perturbed queries with :meth:`Policy.perturbed`.
Nothing here knows the stage kinds.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from ragtrack.core.cache import Cache
from ragtrack.core.data import Dataset
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.progress import step
from ragtrack.core.stages import Stage, StageContext, StageOutput
from ragtrack.evaluators.base import Evaluator, SystemComparer
from ragtrack.evaluators.judge import LLMJudge
from ragtrack.pipeline import registry
from ragtrack.pipeline.analysis.slices import Findings
from ragtrack.pipeline.configuration.inputs import load_dataset
from ragtrack.pipeline.configuration.systems import PlannedSystem, plan_systems
from ragtrack.pipeline.execution.job_findings import judge_pairs
from ragtrack.pipeline.execution.scoring import (
    SystemResult,
    evaluate_run,
    labels,
    latency_quantiles,
    scored,
    with_latency,
)
from ragtrack.pipeline.execution.usage import Meter
from ragtrack.pipeline.redaction import flatten
from ragtrack.retrievers.chunking import Chunker, ChunkPlan
from ragtrack.retrievers.generation import Answers, Generator, NoGenerator, answer_questions

log = logging.getLogger(__name__)

Stages = list[tuple[PlannedSystem, Stage]]


def stage(name: str):
    """A step of the job, logged by this module (``ragtrack.core.progress.step``)."""
    return step(name, log)


def build_chunker(cfg: Mapping | None) -> tuple[Chunker | None, int]:
    """The chunker a ``chunking`` config names by ``type`` (a ``ragtrack.chunkers`` plugin; ``none``:
    no chunking) and its ``oversample``."""
    settings = dict(OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else (cfg or {}))
    if settings.get("type", "none") == "none":
        return None, 1
    chunker = registry.build("chunkers", settings)
    return chunker, getattr(chunker, "oversample", settings.get("oversample", 1))


def build_stages(cfg: DictConfig) -> Stages:
    """The stage of every system of ``cfg`` (``pipeline.configuration.systems``), inputs first, built and checked
    before the job does any work: a stage's :meth:`~ragtrack.core.stages.Stage.problems` (a model that
    cannot be found) is one line naming its setting."""
    planned = plan_systems(cfg)
    if not planned:
        raise RagtrackError("no systems configured: select at least one retriever (e.g. retriever=[bm25])")
    stages = [(system, registry.build(system.group, system.config, name=system.name)) for system in planned]
    for system, stage_object in stages:
        for setting, problem in stage_object.problems().items():
            raise InputError(f"{system.path}.{setting}", problem)
    return stages


def check_stages_on(stages: Stages, dataset: Dataset) -> None:
    """Each stage's :meth:`~ragtrack.core.stages.Stage.dataset_problems` on the job's dataset, before
    any system runs: the first is one line naming its setting."""
    for system, stage_object in stages:
        for setting, problem in stage_object.dataset_problems(dataset).items():
            raise InputError(f"{system.path}.{setting}", problem)


@dataclass
class Plan:
    """The plan step's result: every system's stage, the job's dataset, the chunker with its
    ``oversample``, and by system name the dataset a stage learns from before it produces
    (:meth:`~ragtrack.core.stages.Stage.training_dataset`)."""

    stages: Stages
    dataset: Dataset
    chunker: Chunker | None
    oversample: int
    training: dict[str, Dataset]


def plan(cfg: DictConfig, dataset: Dataset | None) -> Plan:
    """The plan step: every system's stage, built and checked on the job's dataset (``dataset``, or
    the one ``cfg.dataset`` names, loaded), the chunker, and the training datasets, loaded and checked."""
    chunker, oversample = build_chunker(cfg.get("chunking"))
    stages = build_stages(cfg)
    if dataset is None:  # ``ragtrack run`` reads it before importing this module (pipeline.app)
        with stage("load dataset"):
            dataset = load_dataset(cfg.dataset, check_documents=False)
    check_stages_on(stages, dataset)
    training = {
        system.name: training_set(cfg, system, stage_object, dataset, chunker)
        for system, stage_object in stages
        if stage_object.training_dataset() is not None
    }
    return Plan(stages, dataset, chunker, oversample, training)


def training_set(cfg: DictConfig, system: PlannedSystem, learner: Stage, dataset: Dataset, chunker) -> Dataset:
    """The dataset ``learner`` learns from: the job's dataset config with its settings replaced, loaded
    and refused (one line naming the setting) where it cannot serve: another corpus, no judged query,
    a judged query the job reports (whatever it learned from it would be scored on it), or chunking."""
    setting, replaced = learner.training_dataset()
    where = f"{system.path}.{setting}"
    if chunker is not None:
        raise InputError(where, "a job that chunks learns from folds (train.folds) or files, not another query set")
    settings = OmegaConf.to_container(cfg.dataset, resolve=True)
    if unknown := [key for key in replaced if key not in settings]:
        raise InputError(where, f"{unknown[0]}: no such key of the job's dataset ({', '.join(settings)})")
    settings |= replaced
    with stage(f"{system.name}: load its training dataset ({', '.join(f'{k}={v}' for k, v in replaced.items())})"):
        training = load_dataset(settings, check_documents=False)
    if training.corpus.hash != dataset.corpus.hash:
        raise InputError(
            where,
            f"{training.name}'s corpus differs from the job's ({dataset.name}): give another query set of the same corpus",
        )
    judged = [qid for qid, grades in training.qrels.items() if grades]
    overlap = sorted(set(judged) & set(dataset.queries))
    if not judged or overlap:
        problem = (
            f"{len(overlap)} of its {len(judged)} training queries are among the {len(dataset.queries)} queries "
            f"that this job reports (e.g. {overlap[0]!r}): learn from other queries than those scored"
            if overlap
            else f"{training.name} judges no query to learn from"
        )
        raise InputError(where, problem)
    return training


def build_evaluators(cfg: DictConfig, meter: Meter) -> tuple[list[Evaluator], list[SystemComparer]]:
    """The evaluators of ``cfg``, their stages named by their config keys on ``meter``, and apart the
    pairwise judges (they compare systems, after all have answered)."""
    evaluators = cfg.get("evaluator") or {}
    built = [meter.name(str(key), registry.build("evaluators", ecfg)) for key, ecfg in evaluators.items()]
    labelled = [
        f"evaluator.{key}"
        for key, e in zip(evaluators, built)
        if isinstance(e, LLMJudge) and e.human_labels is not None
    ]
    if len(labelled) > 1:  # results.json holds one agreement section: the rubric judge's
        raise RagtrackError(
            f"human_labels on {' and '.join(labelled)}: give them to one llm_judge (one judge grades several rubrics)"
        )
    return [e for e in built if isinstance(e, Evaluator)], [e for e in built if isinstance(e, SystemComparer)]


def warn_cutoffs_past_depth(cfg: DictConfig, depth: int) -> None:
    """One warning where a ranking metric's cutoff is deeper than the job's ``depth``: no system returns
    more, so recall@100 at depth 10 equals recall@10 (trec_eval would say the same)."""
    deeper = [
        str(m)
        for e in (cfg.get("evaluator") or {}).values()
        if e.get("type") == "ranking"
        for m in (e.get("metrics") or [])
        if str(m).partition("@")[2].isdigit() and int(str(m).partition("@")[2]) > depth
    ]
    if deeper:
        log.warning(
            "depth %d is below the cutoff of %s: no system returns more than %d documents, so each equals its value at %d",
            depth,
            ", ".join(deeper),
            depth,
            depth,
        )


def with_output_dir(cfg: DictConfig, folder: Path) -> DictConfig:
    """A copy of ``cfg`` writing its files under ``folder``."""
    copy = cfg.copy()
    copy.paths = {**OmegaConf.to_container(cfg.paths, resolve=True), "output_dir": str(folder)}
    return copy


def stage_context(dataset: Dataset, cache: Cache, depth: int, chunks: ChunkPlan) -> StageContext:
    """What the stages of a job see (:class:`StageContext`)."""
    indexed = replace(dataset, corpus=chunks.corpus(dataset.corpus))
    return StageContext(
        indexed,
        chunks.judged_corpus(dataset.corpus),
        cache,
        depth,
        chunks.search_depth(depth),
        judged=lambda run: chunks.evaluated(run, depth),
        passages=chunks.passages,
    )


def stage_label(system: PlannedSystem) -> str:
    """The step's name in the log: ``bm25+llm: reranker of bm25``."""
    return f"{system.name}: {system.section}" + (f" of {', '.join(system.inputs)}" if system.inputs else "")


@dataclass
class JobParts:
    """What a job runs with: its config, its systems' stages, evaluators and pairwise judges (their
    chat calls named on ``meter``), its chunking, the cache, its depth, and the datasets stages learn
    from (``training``, by system name; ``learned``: those that have; ``training_outputs``: the
    systems made on each training dataset's queries, by its hash)."""

    cfg: DictConfig
    stages: Stages
    evaluators: list[Evaluator]
    comparers: list[SystemComparer]
    chunks: ChunkPlan
    cache: Cache
    meter: Meter
    training: dict[str, Dataset] = field(default_factory=dict)
    learned: set[str] = field(default_factory=set)
    training_outputs: dict[str, dict[str, Any]] = field(default_factory=dict)  # by training dataset hash

    @classmethod
    def build(cls, cfg: DictConfig, planned: Plan, chunks: ChunkPlan, meter: Meter) -> JobParts:
        """The cache (its folder checked at once) and the evaluators of ``cfg``."""
        cache = Cache(cfg.paths.cache_dir)
        return cls(cfg, planned.stages, *build_evaluators(cfg, meter), chunks, cache, meter, planned.training)

    @property
    def depth(self) -> int:
        return int(self.cfg.depth)

    @cached_property
    def generator(self) -> Generator | None:
        """The job's generator, built on first use (``None`` without one)."""
        built = registry.build("generators", self.cfg.generator) if self.cfg.get("generator") else None
        return None if isinstance(built, NoGenerator) else built


class Policy(ABC):
    """What each step of the executor does. ``meter``: where the chat calls of its steps go."""

    def __init__(self, meter: Meter) -> None:
        self.meter = meter

    @abstractmethod
    def produce(
        self, system: PlannedSystem, stage_object: Stage, outputs: Mapping[str, Any], context: StageContext
    ) -> Any:
        """``system`` made by its stage from ``outputs`` (the systems made so far, by name)."""

    @abstractmethod
    def learn(self, system: PlannedSystem, stage_object: Stage, outputs: Mapping[str, Any], training: Dataset) -> bool:
        """``system``'s stage learns from its inputs' ``outputs`` on the queries of ``training``; whether
        it could (a dry run cannot where an input is unknown)."""

    @abstractmethod
    def generate(
        self, system: PlannedSystem, outputs: Mapping[str, Any], parts: JobParts, context: StageContext
    ) -> Any:
        """The answers of ``system`` (nothing without a generator)."""

    @abstractmethod
    def evaluate(
        self,
        system: PlannedSystem,
        outputs: Mapping[str, Any],
        answers: Any,
        parts: JobParts,
        dataset: Dataset,
        context: StageContext,
    ) -> Any:
        """What the job keeps of ``system``: ``dataset``: the queries it ran on, as given."""

    @abstractmethod
    def compare(self, parts: JobParts, results: Mapping[str, Any], dataset: Dataset) -> Findings:
        """The pairwise judges on every system's answers, after all have answered."""

    @abstractmethod
    def perturbed(self, perturbation: str, folder: Path) -> Policy:
        """This policy for a rerun on the queries of ``perturbation``, writing into ``folder``."""


class Executor:
    """A job's systems, run by ``policy``: plan, produce, generate, evaluate."""

    def __init__(self, parts: JobParts, policy: Policy) -> None:
        self.parts, self.policy = parts, policy

    def run(self, dataset: Dataset) -> dict[str, Any]:
        """Every system made by its stage, inputs first (one loop, whatever the stage kinds), then
        answered and evaluated, one system after the other: what the policy keeps of each, by name."""
        parts, policy = self.parts, self.policy
        context = stage_context(dataset, parts.cache, parts.depth, parts.chunks)
        outputs: dict[str, Any] = {}
        for system, stage_object in parts.stages:
            ready = self.learn(system, stage_object)
            outputs[system.name] = policy.produce(system, stage_object, outputs, context) if ready else None
        results = {}
        for system, _ in parts.stages:
            answers = policy.generate(system, outputs, parts, context)
            results[system.name] = policy.evaluate(system, outputs, answers, parts, dataset, context)
        return results

    def learn(self, system: PlannedSystem, stage_object: Stage) -> bool:
        """Where ``system``'s stage learns from a training dataset and has not yet: the systems its
        inputs need made on the training queries (those that learn too, learning first), then its
        :meth:`Policy.learn`. Whether it is ready to produce."""
        parts = self.parts
        if system.name not in parts.training or system.name in parts.learned:
            return True
        training = parts.training[system.name]
        context = stage_context(training, parts.cache, parts.depth, parts.chunks)
        needed = upstream(parts.stages, system)
        outputs = parts.training_outputs.setdefault(training.hash, {})  # shared by the stages that learn there
        for member, member_stage in parts.stages:
            if member.name in needed and member.name not in outputs:
                ready = self.learn(member, member_stage)
                outputs[member.name] = self.policy.produce(member, member_stage, outputs, context) if ready else None
        if not self.policy.learn(system, stage_object, outputs, training):
            return False
        parts.learned.add(system.name)
        return True

    def rerun(self, perturbation: str, dataset: Dataset, folder: Path) -> dict[str, Any]:
        """Every system again on ``dataset`` (perturbed queries), its files in ``folder`` and its chat
        calls filed under the perturbation (``pipeline.execution.robustness``)."""
        return Executor(self.parts, self.policy.perturbed(perturbation, folder)).run(dataset)

    def compare(self, results: Mapping[str, Any], dataset: Dataset) -> Findings:
        """The pairwise judges' step, after every system has answered."""
        return self.policy.compare(self.parts, results, dataset)


def upstream(stages: Stages, system: PlannedSystem) -> set[str]:
    """The systems ``system`` reads, directly or through others."""
    inputs = {planned.name: planned.inputs for planned, _ in stages}
    found, pending = set(), list(system.inputs)
    while pending:
        name = pending.pop()
        if name not in found:
            found.add(name)
            pending += inputs[name]
    return found


class Live(Policy):
    """The real run: each system made, answered and scored (:class:`SystemResult`); the per-system
    files (generation.json) under ``folder``/systems."""

    def __init__(self, meter: Meter, folder: Path) -> None:
        super().__init__(meter)
        self.folder = folder

    def produce(self, system, stage_object, outputs, context) -> StageOutput:
        with stage(stage_label(system)):
            output = stage_object.produce({name: outputs[name] for name in system.inputs}, context)
        self.meter.collect(system.name, system.section, [stage_object], chain=True)
        return output

    def learn(self, system, stage_object, outputs, training) -> bool:
        with stage(f"{system.name}: learn from {len(training.qrels)} judged queries of {training.name}"):
            stage_object.learn({name: outputs[name] for name in system.inputs}, training)
        return True

    def generate(self, system, outputs, parts, context) -> tuple[Answers | None, float | None]:
        """The answers and the generator's time per query (``None, None`` without a generator)."""
        name, generator = system.name, parts.generator
        if generator is None:
            return None, None
        with stage(f"{name}: generate answers"):
            started = time.perf_counter()
            answers = answer_questions(
                generator, outputs[name].passage_run, context.dataset, self.folder / "systems" / name
            )
            generation_ms = (time.perf_counter() - started) * 1000 / len(context.dataset.queries)  # a batch
        self.meter.collect(name, "generator", [generator])
        if answers is not None and (why := answers.none_given()):
            log.warning(
                "%s: no answers: %s; every metric of the answers is blank (judge, citations, nuggets) or 0 "
                "(answer_f1, exact_match)",
                name,
                why,
            )
        return answers, generation_ms

    def evaluate(self, system, outputs, answers, parts, dataset, context) -> SystemResult:
        name, output, indexed = system.name, outputs[system.name], context.dataset
        (answered, generation_ms), seed = answers, int(parts.cfg.seed)
        run, passage_run, efficiency = output.run, output.passage_run, dict(output.efficiency)
        with stage(f"{name}: evaluate"):
            if answered:
                per_query, summary, counted = evaluate_run(
                    run, indexed, parts.evaluators, seed, answered.texts, passage_run
                )
            else:  # a run the jobs of a multirun share (a cached retriever run) is scored once
                key = (run, passage_run, indexed.qrels, indexed.queries, indexed.answers, indexed.corpus)
                evaluation = ("evaluate", OmegaConf.to_yaml(parts.cfg.get("evaluator") or {}, resolve=True), seed)
                per_query, summary, counted = scored.get(
                    key, evaluation, lambda: evaluate_run(run, indexed, parts.evaluators, seed, None, passage_run)
                )
        for evaluator in parts.evaluators:
            self.meter.collect(name, self.meter.stage_of(evaluator), [evaluator])
        if answered:
            per_query, efficiency = answered.annotate(per_query, dataset), efficiency | answered.efficiency
        per_query = with_latency(per_query, output.latency_ms, generation_ms)
        efficiency |= latency_quantiles(per_query)
        without_hits = sum(1 for qid in dataset.queries if not run.scores.get(qid))
        if without_hits:
            log.warning(
                "%s: %d of %d queries have no hits (they score 0 on every metric)",
                name,
                without_hits,
                len(dataset.queries),
            )
        params = flatten(OmegaConf.to_container(system.config, resolve=True)) | parts.chunks.params()
        return SystemResult(
            name,
            run,
            per_query,
            summary,
            {**efficiency, "queries_without_hits": float(without_hits), **parts.chunks.stats(dataset.corpus)},
            params | {"search": "approximate" if output.approximate else "exact"} | labels(efficiency),
            passage_run,
            indexed.corpus,
            counted,
            list(output.stage.inputs),
        )

    def compare(self, parts, results, dataset) -> Findings:
        return judge_pairs(parts.comparers, results, dataset, self.folder, int(parts.cfg.seed), self.meter)

    def perturbed(self, perturbation: str, folder: Path) -> Live:
        return Live(self.meter.rerun(perturbation), folder)
