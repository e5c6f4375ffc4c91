"""What a job finds beyond each system's metrics (:class:`~ragtrack.pipeline.analysis.slices.Findings`): metrics
per slice, the robustness study, the pairwise judges' verdicts and each system against its input."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig

from ragtrack.core.data import Dataset
from ragtrack.evaluators.base import SystemComparer
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.slices import Attribute, Findings, annotate, summarize
from ragtrack.pipeline.execution import robustness, usage
from ragtrack.pipeline.execution.agreement import pairwise_agreement
from ragtrack.pipeline.execution.scoring import SystemResult, job_key_metrics
from ragtrack.pipeline.execution.usage import Meter
from ragtrack.pipeline.records import layout


def findings(
    cfg: DictConfig,
    dataset: Dataset,
    results: dict[str, SystemResult],
    attributes: list[Attribute],
    output_dir: Path,
    rerun: Callable[[str, Dataset, Path], dict[str, SystemResult]],
) -> Findings:
    """What the job adds beyond each system's metrics: metrics per slice (``pipeline.analysis.slices``; the
    per-query tables get the slice columns), latency quantiles for the parent run and, when
    ``robustness`` is set, the perturbed-query study (``pipeline.execution.robustness``; ``rerun(perturbation,
    dataset, folder)`` runs every system on a dataset with other queries, writing into another folder
    and metering its LLM calls apart)."""
    for result in results.values():
        result.per_query = annotate(result.per_query, attributes)
    found = summarize({name: (r.per_query, r.counted) for name, r in results.items()}, attributes, int(cfg.seed))
    found.parent_metrics |= {
        layout.system_metric_key(name, key): value
        for name, r in results.items()
        for key, value in r.efficiency.items()
        if key.startswith("latency/")
    }
    if cfg.get("robustness"):
        found = found.merge(robustness.study(cfg.robustness, dataset, results, rerun, output_dir, int(cfg.seed)))
    return found


def judge_pairs(
    judges: list[SystemComparer],
    results: dict[str, SystemResult],
    dataset: Dataset,
    output_dir: Path,
    seed: int = 0,
    meter: Meter | None = None,
) -> Findings:
    """The pairwise judges' summaries by pair (results.json ``pairwise``, parent metrics
    ``pairwise/<first>_vs_<second>/<name>``, ``pairwise.jsonl``) over the systems that generated answers,
    their agreement with people where a judge has ``human_labels`` (``pipeline.execution.agreement``); their chat
    calls go to ``meter`` (under :data:`usage.PAIRWISE`)."""
    answers = {
        name: r.per_query["generated_answer"].to_dict()
        for name, r in results.items()
        if "generated_answer" in r.per_query
    }
    pairs, agreed = {}, Findings()
    for judge in judges:
        summaries, records = judge.judge(answers, dataset.queries, dataset.answers)
        pairs |= summaries
        agreed = agreed.merge(pairwise_agreement(judge, records, dataset, output_dir, seed))
        if meter is not None:
            meter.collect(usage.PAIRWISE, meter.stage_of(judge), [judge])
    if not pairs:
        return agreed
    metrics = {
        f"pairwise/{layout.system_key(s['first'])}_vs_{layout.system_key(s['second'])}/{k}": v
        for s in pairs.values()
        for k, v in s.items()
        if isinstance(v, float) and pd.notna(v)
    }
    return Findings(
        {"pairwise": pairs}, metrics, {}, [p for p in [output_dir / "pairwise.jsonl"] if p.is_file()]
    ).merge(agreed)


def against_inputs(cfg: DictConfig, dataset: Dataset, results: dict[str, SystemResult]) -> Findings:
    """Each system made from one other (a reranker, a rewriter) against that input, on the key metrics
    over the queries where both have a value: the difference, paired t-test and randomization p-values and W/T/L
    (results.json ``against_input``; child-run metrics ``<metric>_vs_input_delta`` and ``_vs_input_p``,
    the randomization test's)."""
    key_metrics = job_key_metrics(cfg)
    section, child_metrics = {}, {}
    for name, result in results.items():
        if len(result.inputs) != 1 or result.inputs[0] not in results:
            continue
        first = results[result.inputs[0]]
        metrics = [m for m in key_metrics if m in result.per_query.columns and m in first.per_query.columns]
        if not metrics:
            continue
        pair = [SystemRun(r.name, r.name, "", "", 0, r.per_query, label=r.name) for r in (first, result)]
        table = compare_systems(pair, metrics, pair[0], seed=int(cfg.seed)).table
        rows = table[~table["baseline"]].set_index("metric")
        section[name] = {
            "input": first.name,
            **{
                metric: {
                    column: float(rows.at[metric, column])
                    for column in ("delta", "p_ttest", "p_randomization", "wins", "ties", "losses")
                }
                for metric in metrics
            },
        }
        child_metrics[name] = {
            f"{layout.metric_key(m)}_vs_input_{figure}": float(rows.at[m, column])
            for m in metrics
            for figure, column in (("delta", "delta"), ("p", "p_randomization"))
        }
    return Findings({"against_input": section}, {}, child_metrics) if section else Findings()
