"""``ragtrack run --dry-run``: the LLM calls a job would make, and their tokens, before it spends anything.

The dry run is the job's executor (``pipeline.execution.executor``) with the :class:`CountOnly` policy: it builds
the job as ``ragtrack run`` does, with every chat client offline
(:class:`~ragtrack.core.llm.ChatClient` ``offline``): nothing is sent; a prompt whose reply is cached is
answered from the cache as in the real run; every other prompt is counted as a request to send, with
its prompt tokens estimated (:func:`~ragtrack.core.llm.estimate_tokens`: characters / 4) and
``max_tokens`` as its completion tokens (an upper bound). Then, in the job's order:

1. The stages (retrievers, rewriters, fusions, rerankers) run inputs first. Retrieval runs as in the
   real job (the generator's prompts hold the retrieved passages; the indexes it builds are cached for
   the real run). An LLM stage whose run is cached costs nothing; one whose prompts all have cached
   replies is computed (and its run cached, as the real run would). Otherwise its uncached prompts are
   counted, nothing of it is stored, and its run is *unknown*: its prompts that depend on replies not
   cached yet (a listwise reranker's later windows) and every LLM stage made from an unknown system
   count as an upper bound (:meth:`~ragtrack.core.stages.Stage.max_chat_calls`, prompt tokens unknown).
2. The generator builds every system's prompts from its passages (an unknown system's from the
   passages of the nearest known system it is made from: an estimate, its calls an upper bound).
3. The evaluators that call an LLM (judges) and the pairwise judges build their prompts from the
   answers: a cached answer as it is, an answer not generated yet stood in by a text of ``max_tokens``
   tokens (4 characters each), so their prompts are upper bounds, counted as such. A judge asks once
   per answered query, so where every answer is non-empty (as with a working generator) the count is
   exact; answers that turn out empty, or equal across systems (pairwise), make the real run send fewer.
   Evaluators that ask in rounds (``nuggets``: creation window by window, then importance, then
   assignment; ``citations`` in ``llm`` mode: joint, then single-passage checks) count the rounds after
   a reply that is not cached as upper bounds (:meth:`~ragtrack.evaluators.base.Evaluator.unsent_followups`).
4. With a robustness study (``robustness``) and an LLM stage, steps 1 to 3 again on each perturbation's
   queries (``pipeline.execution.robustness.perturbed_queries``), filed under ``robustness/<perturbation>/<stage>``
   as the real run's reruns are (a prompt the dry run has already counted counts as cached: the real
   run would find its reply cached). The pairwise judges compare the main run's answers only, as in
   the real run.

So the dry run's count equals the real run's requests when no prompt is marked ≤ and no request fails
(retries send again). The judges' files go to a scratch folder that is removed; the dry run writes
``dry_run.json`` and logs nothing to MLflow.
"""

from __future__ import annotations

import contextlib
import logging
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.core.data import Dataset
from ragtrack.core.files import json_text, write_atomically
from ragtrack.core.llm import CHARS_PER_TOKEN, NOT_SENT, NotSent, chat_clients, retrieved_passages
from ragtrack.core.secrets import mask, masked
from ragtrack.core.stages import StageOutput
from ragtrack.pipeline.analysis.slices import Findings
from ragtrack.pipeline.execution import executor, robustness, usage
from ragtrack.pipeline.execution.executor import stage, stage_label, with_output_dir
from ragtrack.pipeline.execution.scoring import eval_input
from ragtrack.pipeline.execution.usage import Meter
from ragtrack.pipeline.redaction import check_variable_names, remember_config_secrets
from ragtrack.retrievers.chunking import plan_chunks

log = logging.getLogger(__name__)

FILE = "dry_run.json"


@dataclass
class DryRun:
    """What a dry run found: one row per call (``pipeline.execution.usage.COLUMNS``; ``planned``: to send)."""

    calls: pd.DataFrame

    @property
    def to_send(self) -> int:
        """Requests the job would send (an upper bound when :attr:`upper_bound`)."""
        return int((~self.calls["cached"].astype(bool)).sum())

    @property
    def upper_bound(self) -> bool:
        return bool(self.calls["bound"].astype(bool).any())

    def record(self) -> dict:
        """``dry_run.json``: the totals and, per (system, stage), calls to send, cached, whether an upper
        bound, estimated prompt tokens, completion tokens (max_tokens) and cost."""
        rows = []
        for (system, stage_name), group in self.calls.groupby(["system", "stage"], sort=False):
            spend = group[~group["cached"].astype(bool)]
            rows.append(
                {
                    "system": system,
                    "stage": stage_name,
                    "to_send": len(spend),
                    "cached": int(group["cached"].astype(bool).sum()),
                    "upper_bound": bool(spend["bound"].astype(bool).any()),
                    "prompt_tokens": _total(spend["prompt_tokens"]),
                    "completion_tokens": _total(spend["completion_tokens"]),
                    "cost": float(spend["cost"].sum()) if spend["cost"].notna().any() else None,
                }
            )
        return {"to_send": self.to_send, "upper_bound": self.upper_bound, "stages": rows}

    def text(self) -> str:
        if self.calls.empty:
            return "Dry run: this job makes no LLM calls."
        head = (
            f"Dry run: nothing was sent. The job would send {'at most ' if self.upper_bound else ''}{self.to_send:,} LLM "
            "requests (caches as they are now):"
        )
        return "\n".join([usage.wrapped(head), usage.summary_text(self.calls, dry=True)])


def _total(values: pd.Series) -> int | None:
    """The sum, ``None`` when some value is unknown."""
    return None if values.isna().any() else int(values.sum())


def stand_in(system: str, max_tokens: int | None) -> str:
    """The answer a dry run puts where ``system``'s answer is not generated yet: ``max_tokens`` tokens'
    worth of characters (4 each; 64 tokens when not set), different for every system."""
    return f"[{system}] " + "x" * CHARS_PER_TOKEN * (max_tokens or 64)


def dry_run(cfg: DictConfig, dataset: Dataset | None = None) -> DryRun:
    """The LLM calls of the job ``cfg`` from the cache state, sending nothing (module docstring); writes
    ``dry_run.json`` into ``paths.output_dir``."""
    remember_config_secrets(cfg)
    check_variable_names(OmegaConf.to_container(cfg, resolve=True))
    output_dir = Path(cfg.paths.output_dir)
    with tempfile.TemporaryDirectory(prefix="ragtrack-dry-run-") as scratch, _quiet_about_unsent():
        calls = _plan(with_output_dir(cfg, Path(scratch)), dataset)
    found = DryRun(calls)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_atomically(output_dir / FILE, json_text(masked(found.record()), indent=2))
    return found


@contextlib.contextmanager
def _quiet_about_unsent():
    """Without the stages' warnings about prompts that failed because a dry run did not send them."""

    def sent(record: logging.LogRecord) -> bool:
        return NOT_SENT not in record.getMessage()

    handlers = logging.getLogger().handlers
    for handler in handlers:
        handler.addFilter(sent)
    try:
        yield
    finally:
        for handler in handlers:
            handler.removeFilter(sent)


def _plan(cfg: DictConfig, dataset: Dataset | None) -> pd.DataFrame:
    """The job's steps by the executor with the :class:`CountOnly` policy: the planned calls."""
    planned = executor.plan(cfg, dataset)
    stages, dataset = planned.stages, planned.dataset
    perturbed = robustness.perturbed_queries(cfg.robustness, dataset) if cfg.get("robustness") else {}
    meter = Meter()
    parts = executor.JobParts.build(cfg, planned, plan_chunks(dataset, planned.chunker, planned.oversample), meter)
    metered = [*(s for _, s in stages), *([parts.generator] if parts.generator else [])]
    metered += [e for e in parts.evaluators if chat_clients(e)]  # what the robustness reruns run
    for component in [*metered, *parts.comparers]:
        for client in chat_clients(component):
            client.offline = True
    run = executor.Executor(parts, CountOnly(meter))
    planned = run.run(dataset)
    if any(chat_clients(component) for component in metered):  # else the reruns cost nothing: no need to retrieve
        for name, queries in perturbed.items():
            run.rerun(name, replace(dataset, queries=queries), Path(cfg.paths.output_dir) / "robustness" / name)
    run.compare(planned, dataset)
    return meter.table()


@dataclass
class Planned:
    """What a dry run keeps of a system: its answers (stand-ins where not generated yet; ``None``
    without a generator) and the queries whose answers are stand-ins."""

    answers: dict[str, str] | None
    stood_in: set[str]


class CountOnly(executor.Policy):
    """Steps 1 to 3 of the module docstring: each step's chat calls counted on the meter, nothing sent
    (the components' clients are offline); a system whose run is unknown is ``None``."""

    def produce(self, system, stage_object, outputs, context) -> StageOutput | None:
        queries, meter = context.dataset.queries, self.meter
        if any(outputs[name] is None for name in system.inputs):  # made from an unknown system
            for client in chat_clients(stage_object):
                calls = stage_object.max_chat_calls(len(queries), context.depth)
                meter.add_bound(system.name, system.section, client, calls, chain=True)
            return None
        output = None
        with contextlib.suppress(NotSent), stage(stage_label(system)):  # NotSent: a reply not cached yet
            output = stage_object.produce({name: outputs[name] for name in system.inputs}, context)
        counted = meter.collect(system.name, system.section, [stage_object], chain=True)
        if output is None:  # the prompts after those that need replies not cached yet
            for client in chat_clients(stage_object):
                calls = stage_object.max_chat_calls(len(queries), context.depth) - counted
                meter.add_bound(system.name, system.section, client, calls, chain=True)
        return output

    def learn(self, system, stage_object, outputs, training) -> bool:
        """Learned where every input is known on the training queries; else the system is unknown."""
        if any(outputs[name] is None for name in system.inputs):
            return False
        stage_object.learn({name: outputs[name] for name in system.inputs}, training)
        return True

    def generate(self, system, outputs, parts, context) -> tuple[dict[str, str], set[str], StageOutput]:
        """The answers (stand-ins where not generated yet), the queries stood in for and the output
        they were made from: the nearest known system's where ``system``'s run is unknown."""
        name, queries, generator = system.name, context.dataset.queries, parts.generator
        known = outputs[name] is not None
        output = outputs[name] if known else outputs[_nearest_known(name, parts, outputs)]
        generated, stood_in = {}, set() if known else set(queries)
        if generator is not None:
            texts = generator.generate(
                queries, retrieved_passages(output.passage_run, context.dataset.corpus, queries, generator.top_k)
            )
            self.meter.collect(name, "generator", [generator], bound=lambda qid: not known)
            stood_in |= {qid for qid, reason in generator.failures.items() if reason == NOT_SENT}
            longest = max((client.max_tokens or 0 for client in chat_clients(generator)), default=0) or None
            generated = {qid: stand_in(name, longest) if qid in stood_in else texts.get(qid, "") for qid in queries}
        return generated, stood_in, output

    def evaluate(self, system, outputs, answers, parts, dataset, context) -> Planned:
        """The judges (evaluators with a chat client) on the answers; later rounds as upper bounds."""
        generated, stood_in, output = answers
        name, meter = system.name, self.meter
        data = eval_input(output.run, context.dataset, generated, output.passage_run)
        for judge in [e for e in parts.evaluators if chat_clients(e)]:
            followups = 0
            if judge.applies_to(data):
                judge.evaluate(data)
                followups = judge.unsent_followups()
            meter.collect(name, meter.stage_of(judge), [judge], bound=lambda qid: qid in stood_in)
            for client in chat_clients(judge)[:1]:  # later rounds built from replies not sent: upper bounds
                meter.add_bound(name, meter.stage_of(judge), client, followups)
        return Planned(generated if parts.generator is not None else None, stood_in)

    def compare(self, parts, results, dataset) -> Findings:
        """The pairwise judges' prompts from the main run's answers (upper bounds where stood in)."""
        answers = {name: r.answers for name, r in results.items() if r.answers is not None}
        for judge in parts.comparers:
            judge.compare(answers, dataset.queries, dataset.answers)
            self.meter.collect(
                usage.PAIRWISE,
                self.meter.stage_of(judge),
                [judge],
                bound=lambda qid: any(qid in r.stood_in for r in results.values()),
            )
        return Findings()

    def perturbed(self, perturbation: str, folder: Path) -> CountOnly:
        return CountOnly(self.meter.rerun(perturbation))


def _nearest_known(name: str, parts: executor.JobParts, outputs: dict[str, StageOutput | None]) -> str:
    """The first system ``name`` is made from (breadth first) whose run is known."""
    inputs = {system.name: system.inputs for system, _ in parts.stages}
    todo = list(inputs[name])
    while todo:
        candidate = todo.pop(0)
        if outputs[candidate] is not None:
            return candidate
        todo += inputs[candidate]
    raise AssertionError(f"{name}: no known system it is made from")  # a retriever (no inputs) always runs


def print_dry_run(found: DryRun, output_dir: Path) -> None:
    print(mask("\n".join(["", found.text(), "", f"Output folder: {output_dir} ({FILE})"])))
