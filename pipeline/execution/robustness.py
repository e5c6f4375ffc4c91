"""The query-robustness study (``experiment=query_robustness``): every system again on perturbed
queries, and how much each metric drops.

Config block ``robustness`` (absent or null: no study):

- ``seed`` (int): the perturbation seed (``ragtrack.evaluators.perturbation``: per query, independent of order);
- ``metrics`` (list of metric names, or null for every metric the job scores): the drop table's metrics;
- ``perturbations``: name -> ``{kind: typos | drop_words | lowercase | uppercase, rate: (0, 1]}``
  (``rate`` for typos and drop_words only).

Per perturbation the queries are perturbed (:func:`perturbed_queries`), every system of the job runs on
them (same retrievers, fusions, generator and evaluators; runs are cached by query text like any run;
their LLM calls are metered under ``robustness/<perturbation>/<stage>``, ``pipeline.execution.usage``, and planned
by ``ragtrack run --dry-run`` too) and, per system and metric, over the queries that count in both the
clean and the perturbed run:
drop = mean_i(clean_i − perturbed_i), with the percentile-bootstrap 95% CI of that mean (the paired
bootstrap: queries are resampled with both their values, ``evaluators.base.aggregate``); a positive
drop means the perturbation hurts.

Outputs: ``robustness.csv`` (one row per system, perturbation and metric) and
``perturbed_queries.jsonl`` (``{"perturbation", "_id", "text", "original"}`` per perturbed query) as
job artifacts, results.json ``robustness`` (:func:`study`), MLflow metrics :func:`layout.drop_key`
with ``_ci_low``/``_ci_high`` (child runs; the parent with the ``<system>/`` prefix), and the drop
table (:func:`drop_rows`) in the job's terminal summary (:func:`summary_text`) and report.html
(:func:`report_section`).
"""

from __future__ import annotations

import html
import json
import logging
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ragtrack.core import words
from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import write_atomically
from ragtrack.evaluators.base import aggregate
from ragtrack.evaluators.perturbation import KINDS, perturb_queries
from ragtrack.pipeline.analysis.comparison_tables import TEXT_WIDTH
from ragtrack.pipeline.analysis.slices import Findings
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.records.csv_files import csv_text

log = logging.getLogger(__name__)

TABLE_FILE = "robustness.csv"
QUERIES_FILE = "perturbed_queries.jsonl"
RATED = ("typos", "drop_words")


def perturbations(settings: Mapping) -> dict[str, dict]:
    """The configured perturbations, checked: name -> {kind, rate}."""
    configured = settings.get("perturbations") or {}
    if not isinstance(configured, Mapping) or not configured:
        raise RagtrackError(
            "robustness.perturbations must map names to {kind, rate}, e.g. typos_10: {kind: typos, rate: 0.1}"
        )
    checked = {}
    for name, spec in configured.items():
        spec = spec or {}
        kind, rate = spec.get("kind"), spec.get("rate")
        if kind not in KINDS:
            raise RagtrackError(f"robustness.perturbations.{name}.kind: {kind!r} is not one of {', '.join(KINDS)}")
        if kind in RATED and (not isinstance(rate, (int, float)) or isinstance(rate, bool) or not 0 < rate <= 1):
            raise RagtrackError(f"robustness.perturbations.{name}.rate: {rate!r} must be a number in (0, 1] for {kind}")
        checked[str(name)] = {"kind": kind, "rate": float(rate) if kind in RATED else None}
    return checked


def perturbed_queries(settings: Mapping, dataset: Dataset) -> dict[str, dict[str, str]]:
    """The queries of ``dataset`` under each configured perturbation (``settings``: the ``robustness``
    block, checked by :func:`perturbations`): name -> (query id -> text)."""
    settings = _plain(settings)
    seed = int(settings.get("seed", 0))
    return {
        name: perturb_queries(dataset.queries, name, spec["kind"], spec["rate"] or 0.0, seed)
        for name, spec in perturbations(settings).items()
    }


def _plain(settings: Mapping) -> dict:
    return OmegaConf.to_container(settings, resolve=True) if OmegaConf.is_config(settings) else dict(settings)


def study(
    settings: Mapping,
    dataset: Dataset,
    clean: Mapping,
    rerun: Callable[[str, Dataset, Path], Mapping],
    output_dir: Path,
    bootstrap_seed: int = 0,
) -> Findings:
    """Run the study; ``clean``: the job's system results (``per_query``, ``counted``, ``summary``),
    ``rerun(perturbation, dataset, folder)``: every system on another dataset (the job's
    :meth:`~ragtrack.pipeline.execution.executor.Executor.rerun`). results.json ``robustness``::

        {"seed": 0, "perturbations": {"<name>": {"kind", "rate", "queries_changed"}},
         "drops": {"<system>": {"<perturbation>": {"<metric>": {"clean", "perturbed", "drop", "ci_low", "ci_high", "n"}}}}}
    """
    settings = _plain(settings)
    chosen = perturbations(settings)
    seed = int(settings.get("seed", 0))
    scored = list(next(iter(clean.values())).summary.index)
    metrics = settings.get("metrics") or scored
    unknown = [m for m in metrics if m not in scored]
    if unknown:
        raise RagtrackError(f"robustness.metrics: {unknown} are not scored by this job; scored: {', '.join(scored)}")
    texts = perturbed_queries(settings, dataset)
    rows = []
    for name, queries in texts.items():
        changed = sum(queries[q] != dataset.queries[q] for q in queries)
        log.info("robustness: %s changes %d of %d queries; running every system", name, changed, len(queries))
        perturbed = rerun(name, replace(dataset, queries=queries), output_dir / "robustness" / name)
        for system, result in clean.items():
            rows += [_drop(system, name, metric, result, perturbed[system], bootstrap_seed) for metric in metrics]
    table = pd.DataFrame(rows)
    write_atomically(output_dir / TABLE_FILE, csv_text(table))
    write_atomically(
        output_dir / QUERIES_FILE,
        "".join(
            json.dumps(
                {"perturbation": name, "_id": qid, "text": text, "original": dataset.queries[qid]}, ensure_ascii=False
            )
            + "\n"
            for name, queries in texts.items()
            for qid, text in queries.items()
        ),
    )
    log.info(
        "robustness: metric drops (clean - perturbed)\n%s",
        table.to_string(index=False, float_format=lambda v: f"{v:.4f}"),
    )
    return _findings(table, chosen, texts, dataset, seed, output_dir)


def _drop(system: str, perturbation: str, metric: str, clean, perturbed, seed: int) -> dict:
    """Mean paired difference clean − perturbed of one metric, with its bootstrap CI."""
    counted = clean.counted[metric] & perturbed.counted[metric].reindex(clean.counted.index, fill_value=False)
    difference = clean.per_query[metric] - perturbed.per_query[metric].reindex(clean.per_query.index)
    summary = aggregate(pd.DataFrame({metric: difference}), counted, seed=seed).loc[metric]
    rows = counted[counted].index
    return {
        "system": system,
        "perturbation": perturbation,
        "metric": metric,
        "clean": clean.per_query.loc[rows, metric].mean(),
        "perturbed": perturbed.per_query.loc[rows, metric].mean(),
        "drop": summary["mean"],
        "ci_low": summary["ci_low"],
        "ci_high": summary["ci_high"],
        "n": int(summary["n"]),
    }


def _findings(
    table: pd.DataFrame, chosen: dict, texts: dict, dataset: Dataset, seed: int, output_dir: Path
) -> Findings:
    found = Findings(artifacts=[output_dir / TABLE_FILE, output_dir / QUERIES_FILE])
    drops: dict = {}
    for row in table.itertuples(index=False):
        figures = {
            "clean": row.clean,
            "perturbed": row.perturbed,
            "drop": row.drop,
            "ci_low": row.ci_low,
            "ci_high": row.ci_high,
        }
        drops.setdefault(row.system, {}).setdefault(row.perturbation, {})[row.metric] = {
            **{k: None if pd.isna(v) else float(v) for k, v in figures.items()},
            "n": int(row.n),
        }
        key = layout.drop_key(row.metric, row.perturbation)
        metrics = {
            f"{key}{suffix}": getattr(row, column)
            for suffix, column in (("", "drop"), ("_ci_low", "ci_low"), ("_ci_high", "ci_high"))
        }
        metrics = {k: float(v) for k, v in metrics.items() if pd.notna(v)}
        found.system_metrics.setdefault(row.system, {}).update(metrics)
        found.parent_metrics |= {layout.system_metric_key(row.system, k): v for k, v in metrics.items()}
    described = {
        name: {**spec, "queries_changed": sum(texts[name][q] != dataset.queries[q] for q in dataset.queries)}
        for name, spec in chosen.items()
    }
    found.results = {"robustness": {"seed": seed, "perturbations": described, "drops": drops}}
    return found


def drop_rows(results: Mapping) -> pd.DataFrame | None:
    """The drops of results.json ``robustness`` (None without the study) as display cells, a row per
    system, perturbation and metric: the clean and perturbed means, the drop with its 95% CI and the
    queries counted; blank where a figure is undefined."""
    section = results.get("robustness")
    if not section:
        return None

    def shown(value: float | None, sign: str = "") -> str:
        return "" if value is None else f"{value:{sign}.4f}"

    rows = [
        (
            system,
            perturbation,
            metric,
            shown(f["clean"]),
            shown(f["perturbed"]),
            "" if f["drop"] is None else f"{f['drop']:+.4f} [{shown(f['ci_low'], '+')}, {shown(f['ci_high'], '+')}]",
            f["n"],
        )
        for system, by_perturbation in section["drops"].items()
        for perturbation, by_metric in by_perturbation.items()
        for metric, f in by_metric.items()
    ]
    return pd.DataFrame(rows, columns=["system", "perturbation", "metric", "clean", "perturbed", "drop [95% CI]", "n"])


def _note(results: Mapping) -> str:
    section = results["robustness"]
    queries = {name: spec["queries_changed"] for name, spec in section["perturbations"].items()}
    described = "; ".join(
        f"{name}: {spec['kind']}"
        + (f" at rate {spec['rate']:g}" if spec.get("rate") is not None else "")
        + f", {words.counted(queries[name], 'query')} changed"
        for name, spec in section["perturbations"].items()
    )
    return (
        f"drop = mean over the queries counted in both runs of (clean - perturbed), with its paired percentile-bootstrap "
        f"95% CI; positive: the perturbation hurts (seed {section['seed']}; {described}; per query: robustness.csv)"
    )


def summary_text(results: Mapping) -> str:
    """The drop table for the job's terminal summary ("" without the study), within 100 columns."""
    rows = drop_rows(results)
    if rows is None:
        return ""
    return (
        rows.to_string(index=False, line_width=TEXT_WIDTH)
        + "\n"
        + textwrap.fill(_note(results), TEXT_WIDTH, subsequent_indent="  ", break_on_hyphens=False)
    )


def report_section(results: Mapping) -> tuple[str, str, str] | None:
    """The report.html section (anchor, heading, HTML) of the study in ``results`` (results.json), if any."""
    rows = drop_rows(results)
    if rows is None:
        return None
    return (
        "robustness",
        "Robustness to perturbed queries",
        rows.to_html(index=False, escape=True) + f'<p class="note">{html.escape(_note(results))}</p>',
    )
