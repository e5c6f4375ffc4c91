"""Systems as chains of stages: the one interface the experiment runs.

A system is what gets scored. Each system is made by one stage from the outputs of the systems it
reads (its ``inputs``): a retriever reads none (it indexes the corpus and searches), a query rewriter
reads one retriever (it searches that retriever's index with rewritten queries), a fusion reads its
members, a reranker reads one system and re-scores its top ``depth``. The experiment runs the stages in
dependency order with one loop and no per-kind branch: ``stage.produce(inputs, context)``.

Each output carries ``key``, the identity of the chain that made it: sha256 over the stage's validated
settings (:meth:`Stage.identity`), the corpus, the queries, the depth and the keys of its inputs
(:func:`chain_key`). Every cache entry of a stage is keyed by it, so a change of a downstream stage's
settings never recomputes an upstream stage, and a change upstream recomputes everything below.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from ragtrack.core.cache import Cache, cache_key
from ragtrack.core.data import Corpus, Dataset
from ragtrack.core.llm import ChatCall, ChatClient, NotSent
from ragtrack.core.runs import Run, read_trec, write_trec
from ragtrack.core.settings import StageSettings, validated

log = logging.getLogger(__name__)

RUN_FILE = "run.trec"  # a run cache entry's run (TREC, full-precision scores)
EFFICIENCY_FILE = "efficiency.json"  # its efficiency figures as measured when it was built
LATENCY_FILE = "latency.json"  # its per-query latencies (ms)
CHAT_CALLS_FILE = (
    "chat_calls.json"  # the chat calls its stage made to build it, per client (ragtrack.core.llm.ChatCall)
)


@dataclass
class StageContext:
    """What every stage of a job sees.

    ``dataset``: what retrievers index and search (its corpus holds the passages: chunks when the job
    chunks, else the documents); ``judged_corpus``: the texts of the ids that ``StageOutput.run`` ranks
    (documents, or chunks when judgments are per chunk), which rerankers read; ``depth``: documents per
    query in a system's run; ``search_depth``: passages a retriever returns per query (more than
    ``depth`` when chunks are folded into documents); ``judged(run)``: a retriever's passage run at the
    judged level, cut at ``depth``; ``passages(run, inputs)``: the passage run a generator reads for a
    run made from the inputs' passage runs."""

    dataset: Dataset
    judged_corpus: Corpus
    cache: Cache
    depth: int
    search_depth: int
    judged: Callable[[Run], Run] = lambda run: run
    passages: Callable[[Run, Mapping[str, Run]], Run] = lambda run, inputs: run

    def queries_hash(self) -> str:
        return hashlib.sha256(json.dumps(self.dataset.queries, sort_keys=True).encode()).hexdigest()


@dataclass
class StageOutput:
    """A system's result: ``run`` at the judged level, ``passage_run`` what a generator reads,
    ``key`` the chain's identity, efficiency figures, per-query latencies (ms) and whether the search
    was approximate somewhere up the chain; ``stage`` is the stage that made it, ready to use (a
    rewriter searches its input retriever through it)."""

    run: Run
    passage_run: Run
    key: str
    stage: "Stage"
    efficiency: dict[str, float | str] = field(
        default_factory=dict
    )  # figures, and labels (strings) such as encoded_by.device
    latency_ms: dict[str, float] = field(default_factory=dict)
    approximate: bool = False


class Stage(ABC):
    """One step of a system. ``name`` is the system it makes, ``inputs`` the systems it reads;
    ``kind`` names the config group (``retriever``, ``rewriter``, ``fusion``, ``reranker``)."""

    kind: ClassVar[str] = "stage"
    approximate: bool = False  # true where the stage may miss what an exhaustive one would return

    def __init__(self, name: str, inputs: list[str] | tuple[str, ...] = ()):
        self.name = name
        self.inputs = list(inputs)

    @abstractmethod
    def identity(self) -> dict:
        """Everything in this stage's settings that changes its output (part of every downstream key)."""

    @abstractmethod
    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        """This stage's system, from its inputs' outputs (by system name)."""

    def identity_on(self, dataset: Dataset) -> dict:
        """What of ``dataset`` beyond its corpus and queries changes this stage's output (the judgments
        a learned fusion cross-fitted on the job's queries reads); part of its chain key where not
        empty. Nothing by default."""
        return {}

    def training_dataset(self) -> tuple[str, dict] | None:
        """Where this stage learns before it produces: the setting that says so and the dataset settings
        that replace the job's dataset's (``("train.dataset", {"split": "train"})``). The executor loads
        that dataset, refuses it where it judges a query the job reports, makes this stage's inputs on
        its queries and calls :meth:`learn`. ``None`` (the default): it learns nothing there."""
        return None

    def learn(self, inputs: Mapping[str, StageOutput], dataset: Dataset) -> None:
        """Learn from ``inputs`` (this stage's inputs' outputs on the queries of ``dataset``, the
        :meth:`training_dataset`) before :meth:`produce`; nothing by default."""

    def problems(self) -> dict[str, str]:
        """What would stop this stage, found before the job does any work (a model that cannot be
        found), by setting name: what is wrong; none by default."""
        return {}

    def dataset_problems(self, dataset: Dataset) -> dict[str, str]:
        """What would stop this stage on ``dataset``, found once it is loaded and before any system runs
        (a learned fusion's training queries among the queries the job reports), by setting name; none
        by default."""
        return {}

    @classmethod
    def input_problem(cls, given: type["Stage"]) -> str | None:
        """What this stage needs of an input that a stage of class ``given`` makes, when that one
        cannot serve (``"a BM25 retriever"``), else ``None``: checked with the settings, before anything
        is built, and again when the stage runs. Any input serves by default."""
        return None

    def max_chat_calls(self, queries: int, depth: int) -> int:
        """The most chat prompts this stage sends for ``queries`` queries whose input rankings hold
        ``depth`` documents: what a dry run counts when the prompts cannot be known yet (0: no LLM)."""
        return 0


class SingleInputStage(Stage):
    """A stage that reads one system, ``input``, and makes ``system`` (default ``<input>+<type>``, the
    pipeline passes the config key's as ``name``): a reranker, a rewriter. Built from its validated
    settings (``settings_schema``, a :class:`~ragtrack.core.settings.StageSettings`), held as ``settings``."""

    settings_schema: type[StageSettings] = StageSettings

    def __init__(self, name: str | None = None, **values):
        settings = validated(
            self.settings_schema, values, f"{self.kind} {values.get('system') or name or type(self).__name__}"
        )
        super().__init__(settings.system or name or f"{settings.input}+{settings.type or self.kind}", [settings.input])
        self.settings, self.input = settings, settings.input


def chain_key(stage: Stage, inputs: Mapping[str, StageOutput], context: StageContext) -> str:
    """The identity of ``stage``'s output: sha256 over its class, its settings, the corpus, the
    queries, the depths, its inputs' keys and what else of the dataset it reads (:meth:`Stage.identity_on`)."""
    identity = {
        "class": f"{type(stage).__module__}.{type(stage).__qualname__}",
        "stage": stage.identity(),
        "corpus": context.dataset.corpus.hash,
        "queries": context.queries_hash(),
        "depth": context.depth,
        "search_depth": context.search_depth,
        "inputs": [inputs[name].key for name in stage.inputs],
    }
    if read := stage.identity_on(context.dataset):
        identity["dataset"] = read
    return cache_key("system", identity)


def cached_run(
    context: StageContext,
    key: str,
    label: str,
    compute: Callable[[], tuple[Run, dict[str, float], dict[str, float]]],
    clients: Sequence[ChatClient] = (),
) -> tuple[Run, dict[str, float], dict[str, float]]:
    """A stage's run from the run cache (entry ``run/<key>``), or ``compute()``d and stored there with
    its efficiency figures, per-query latencies (seconds from ``compute``, kept in ms) and the calls its
    chat ``clients`` made. Returns the run, the efficiency (``run_from_cache`` 1 on a hit) and the
    latencies in ms. On a hit the stored calls are recorded on the clients again, as cached (the run's
    tokens without new spend). A dry run's compute that needed replies not in the cache (planned calls)
    stores nothing and raises :class:`~ragtrack.core.llm.NotSent`, its calls left on the clients."""

    def build(folder: Path) -> None:
        run, efficiency, latencies = compute()
        calls = [client.take_calls() for client in clients]
        for client, made in zip(clients, calls):
            client.record(made)
        if any(call.planned for made in calls for call in made):
            raise NotSent(f"{label}: its run needs replies that are not cached")
        write_trec(run, folder / RUN_FILE, tag=label)
        (folder / EFFICIENCY_FILE).write_text(json.dumps(efficiency))
        (folder / LATENCY_FILE).write_text(json.dumps({qid: seconds * 1000 for qid, seconds in latencies.items()}))
        if clients:
            (folder / CHAT_CALLS_FILE).write_text(json.dumps([[call.to_json() for call in made] for made in calls]))

    builds_before = len(context.cache.builds)
    folder = context.cache.entry("run", {"system": key}, build, label=f"{label} run")
    if len(context.cache.builds) == builds_before and (folder / CHAT_CALLS_FILE).exists():
        for client, made in zip(clients, json.loads((folder / CHAT_CALLS_FILE).read_text())):
            client.record(replace(ChatCall.from_json(record), cached=True, seconds=0.0) for record in made)
    efficiency = json.loads((folder / EFFICIENCY_FILE).read_text())
    latency_ms = json.loads((folder / LATENCY_FILE).read_text()) if (folder / LATENCY_FILE).exists() else {}
    return (
        read_cached_run(folder / RUN_FILE, label),
        {**efficiency, "run_from_cache": float(len(context.cache.builds) == builds_before)},
        latency_ms,
    )


@functools.lru_cache(maxsize=16)
def read_cached_run(path: Path, name: str) -> Run:
    """A run file of a complete cache entry, read once per process (entries never change once complete,
    and the jobs of a multirun in one process share the run object, so its scores are computed once).
    An empty file is the valid run of a system that found nothing for any query."""
    if path.stat().st_size == 0:
        return Run(name, {})
    return read_trec(path, name=name)


LATENCY_QUERIES = 100  # the most queries searched alone for the latency figures (timed_search)
LATENCY_MIN_QUERIES = 5  # the fewest, whatever they cost
LATENCY_SHARE = 0.5  # no more once they took this share of the batch's time
LATENCY_SEED = 0  # the sample's seed


def timed_search(
    name: str, queries: Mapping[str, object], search: Callable[[dict[str, object]], Run]
) -> tuple[Run, dict[str, float], float]:
    """``search`` of every query in one call, timed, then a seeded sample (:func:`latency_sample`) of
    queries searched alone, one call each: at most :data:`LATENCY_QUERIES`, and no more once they took
    :data:`LATENCY_SHARE` of the batch's time (:data:`LATENCY_MIN_QUERIES` at least). Returns the run
    (queries with hits), the figures (``search_seconds`` and ``queries_per_second``: the batch;
    ``latency_*_seconds``: one query alone over the sample; ``latency_queries``) and the batch's
    seconds. A query whose answer alone differs from its answer in the batch is a warning: results
    never depend on batching."""
    from ragtrack.core.progress import step
    from ragtrack.core.words import counted

    with step(f"{name}: search {counted(len(queries), 'query')}"):
        started = time.perf_counter()
        found = search(dict(queries))
        seconds = time.perf_counter() - started
    run = Run(name, {qid: ranked for qid, ranked in found.scores.items() if ranked})
    alone: dict[str, float] = {}
    for qid in latency_sample(queries):
        started = time.perf_counter()
        answer = search({qid: queries[qid]}).scores.get(qid, {})
        alone[qid] = time.perf_counter() - started
        if answer != run.scores.get(qid, {}):
            log.warning("%s: query %s searched alone gives another ranking than in the batch", name, qid)
        if len(alone) >= LATENCY_MIN_QUERIES and sum(alone.values()) >= LATENCY_SHARE * seconds:
            break
    figures = {
        **latency_figures(alone),
        "search_seconds": seconds,
        "queries_per_second": len(queries) / seconds if seconds else 0.0,
        "latency_queries": float(len(alone)),
    }
    return run, figures, seconds


def latency_sample(queries: Mapping[str, object]) -> list[str]:
    """Up to :data:`LATENCY_QUERIES` query ids in a seeded random order (of the sorted ids: the same
    sample for the same queries, whatever their order or the hash seed)."""
    ids = sorted(queries)
    return [ids[i] for i in np.random.default_rng(LATENCY_SEED).permutation(len(ids))[:LATENCY_QUERIES]]


def latency_figures(seconds: Mapping[str, float]) -> dict[str, float]:
    """Mean, p50 and p95 of per-query seconds (0 without queries)."""
    p50, p95 = np.percentile(list(seconds.values()), [50, 95]) if seconds else (0.0, 0.0)
    return {
        "latency_mean_seconds": sum(seconds.values()) / len(seconds) if seconds else 0.0,
        "latency_p50_seconds": float(p50),
        "latency_p95_seconds": float(p95),
    }
