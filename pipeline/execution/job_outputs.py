"""The files a job writes into its output folder: results.json, per_query.csv, comparison.csv,
config.yaml, the run files, usage.csv and the comparison of its systems (report.html)."""

from __future__ import annotations

import hashlib
import html
import logging
import os
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd
from omegaconf import DictConfig, OmegaConf

from ragtrack.core import words
from ragtrack.core.data import Dataset
from ragtrack.core.files import json_text, write_atomically
from ragtrack.core.progress import step
from ragtrack.core.runs import trec_text
from ragtrack.core.secrets import masked
from ragtrack.pipeline.analysis.comparison import (
    Comparison,
    SystemRun,
    alias_of,
    compare_systems,
    find_baseline,
    per_query_differences,
    query_counts,
)
from ragtrack.pipeline.analysis.comparison_report import write_comparison
from ragtrack.pipeline.execution import robustness, usage
from ragtrack.pipeline.execution.agreement import report_section
from ragtrack.pipeline.execution.scoring import SystemResult, scored, shown_metrics, system_curves
from ragtrack.pipeline.execution.usage import Usage
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.records.csv_files import csv_text
from ragtrack.pipeline.redaction import redact

log = logging.getLogger(__name__)


def per_query_table(system: str, per_query: pd.DataFrame) -> pd.DataFrame:
    """Columns ``system``, ``qid``, then the system's per-query columns (texts first, then metrics)."""
    table = per_query.reset_index().assign(system=system)
    return table[["system", "qid", *[c for c in table.columns if c not in ("system", "qid")]]]


def write_outputs(
    cfg: DictConfig,
    resolved: dict,
    dataset: Dataset,
    results: dict[str, SystemResult],
    output_dir: Path,
    extra: dict | None = None,
    name: str = "ragtrack",
    used: Usage | None = None,
) -> dict:
    """``resolved``: ``cfg`` as a plain, resolved container (written redacted as config.yaml);
    ``extra``: more top-level sections of results.json (slices, robustness); ``name``: the job's
    (the title of its comparison); ``used``: its LLM calls (``usage.csv`` files, results.json ``usage``,
    a report.html section)."""
    for result in results.values():  # a run shared by the jobs of a multirun is formatted once
        text = scored.get((result.run,), ("trec", result.name), lambda: trec_text(result.run, result.name))
        write_atomically(output_dir / "runs" / f"{result.name}.trec", text)
    per_query = pd.concat([per_query_table(name, r.per_query) for name, r in results.items()], ignore_index=True)
    (output_dir / layout.PER_QUERY_FILE).write_text(
        csv_text(per_query)
    )  # floats as repr: shortest text that reads back exactly
    table = pd.DataFrame({name: r.summary["mean"] for name, r in results.items()})
    table.index.name = "metric"
    (output_dir / layout.COMPARISON_FILE).write_text(csv_text(table, index=True))
    config_yaml = yaml_text(redact(resolved))
    (output_dir / layout.CONFIG_FILE).write_text(config_yaml)
    spent = used.section() if used is not None else {}
    if spent:
        usage.write(used, output_dir)
    with step("compare systems", log):
        failed = failed_generations({name: r.efficiency for name, r in results.items()})
        sections = [
            found
            for found in [
                generation_section(failed, len(dataset.queries)),
                robustness.report_section(extra or {}),
                report_section(extra or {}),
            ]
            if found
        ]
        sections += [("cost", "Cost and tokens", usage.summary_html(used.calls))] if spent else []
        comparison = compare_job_systems(
            cfg, dataset, results, output_dir / layout.COMPARISON_DIR, name, config_yaml, sections
        )
    wide = None if comparison is None else per_query_differences(comparison, dict(dataset.queries.items()))
    if wide is not None:
        (output_dir / layout.PER_QUERY_WIDE_FILE).write_text(csv_text(wide))
    payload = results_record(cfg, dataset, results, config_yaml, spent, extra)
    write_atomically(
        output_dir / layout.RESULTS_FILE, json_text(masked(payload), indent=2)
    )  # last, whole: it marks the results complete
    return {
        "results": payload,
        "table": table,
        "per_query": per_query,
        "comparison": comparison,
        "per_query_wide": wide,
    }


def results_record(
    cfg: DictConfig,
    dataset: Dataset,
    results: dict[str, SystemResult],
    config_yaml: str,
    spent: dict,
    extra: dict | None,
) -> dict:
    """results.json: the dataset, the config's hash, each system's means, aggregates, counts,
    efficiency, search and alias, the LLM calls (``spent``) and the ``extra`` sections."""
    return {
        "dataset": {
            "name": dataset.name,
            "provider": cfg.dataset.type,
            "source": dataset.source,
            "hash": dataset.hash,
            "hashes": dataset.hashes,
            "documents": len(dataset.corpus),
            "queries": len(dataset.queries),
        },
        "config_hash": hashlib.sha256(config_yaml.encode()).hexdigest(),
        "systems": {name: r.summary["mean"].to_dict() for name, r in results.items()},
        "aggregates": {name: r.summary.drop(columns="n").to_dict(orient="index") for name, r in results.items()},
        "queries_counted": {name: {str(m): int(n) for m, n in r.summary["n"].items()} for name, r in results.items()},
        "efficiency": {name: r.efficiency for name, r in results.items()},
        "search": {
            name: r.params["search"] for name, r in results.items()
        },  # exact, or approximate (see approximate_recall)
        "aliases": {
            name: alias for name, r in results.items() if (alias := alias_of(r.params))
        },  # row labels across jobs (the alias setting)
        **({"usage": spent} if spent else {}),
        **(extra or {}),
    }


def compare_job_systems(
    cfg: DictConfig,
    dataset: Dataset,
    results: dict[str, SystemResult],
    folder: Path,
    name: str,
    config_yaml: str,
    sections: Sequence[tuple[str, str, str]] = (),
) -> Comparison | None:
    """The job's systems side by side on its key metrics (``pipeline.analysis.comparison``, as ``ragtrack compare``
    does across jobs): comparison.md/.png, failures/ and report.html (with the extra ``sections``) in
    ``folder``; baseline bm25 or the first system; per metric, the queries where every system has a
    value (``comparison.defined_queries``: ranking metrics, those the ranking evaluator counts)."""
    metrics = shown_metrics(cfg, results)
    if not metrics:
        return None
    systems = [
        SystemRun(system, system, name, "", 0, r.per_query, label=system, curves=system_curves(r, dataset, cfg))
        for system, r in results.items()
    ]
    comparison = compare_systems(systems, metrics, find_baseline(systems, None), seed=int(cfg.seed))
    title = f"{dataset.name} ({query_counts(comparison)}): {name}"
    write_comparison(
        comparison,
        folder,
        title,
        dataset,
        {system: r.run for system, r in results.items()},
        config_text=config_yaml,
        sections=sections,
    )
    return comparison


def yaml_text(container: dict) -> str:
    """A plain container as YAML that ``OmegaConf.load`` reads back (``ragtrack reproduce`` does)."""
    return OmegaConf.to_yaml(container)


def write_system_files(results: dict[str, SystemResult], output_dir: Path) -> dict[str, Path]:
    """Each system's folder of files for its tracker run, ``systems/<name>/``: its run file (a second
    name of ``runs/<name>.trec``) and its ``per_query.csv``; by system name."""
    folders = {}
    for name, result in results.items():
        folder = folders[name] = output_dir / "systems" / name
        folder.mkdir(parents=True, exist_ok=True)
        link_or_copy(output_dir / "runs" / f"{name}.trec", folder / layout.RUN_FILE)
        text = scored.get((result.per_query,), ("csv", name), lambda: csv_text(per_query_table(name, result.per_query)))
        write_atomically(folder / layout.PER_QUERY_FILE, text)
    return folders


def link_or_copy(source: Path, target: Path) -> None:
    """A second name for an output file (a hard link; a copy where the file system has none)."""
    target.unlink(missing_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy(source, target)


def failed_generations(efficiency: Mapping[str, Mapping[str, float | str]]) -> dict[str, int]:
    """The systems whose answer generation failed for some queries, with how many (``generation_failures``)."""
    return {
        name: int(figures["generation_failures"])
        for name, figures in efficiency.items()
        if figures.get("generation_failures")
    }


def failure_lines(failed: Mapping[str, int], queries: int) -> list[str]:
    return [
        f"{name}: {count} of {words.counted(queries, 'query')} (errors: systems/{name}/generation.json)"
        for name, count in failed.items()
    ]


GENERATION_NOTE = (
    "a failed query's answer is empty: it scores 0 on the answer metrics (answer_f1, exact_match, ...) and is blank "
    "(left out of the mean) on the judge, citation and nugget metrics"
)


def generation_section(failed: Mapping[str, int], queries: int) -> tuple[str, str, str] | None:
    """The report.html section of the failed generations (None when none failed)."""
    if not failed:
        return None
    items = "".join(f"<li>{html.escape(line)}</li>" for line in failure_lines(failed, queries))
    return (
        "generation",
        "Answer generation failed",
        f'<ul>{items}</ul><p class="note">{html.escape(GENERATION_NOTE)}</p>',
    )
