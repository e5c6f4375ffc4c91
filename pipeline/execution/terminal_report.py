"""What a job prints at its end: the metrics x systems table, over how many queries each mean is, the
failed generations, the robustness drops, the LLM calls, the judges' agreement and where the outputs
and the MLflow runs are."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from ragtrack.core import words
from ragtrack.core.secrets import mask
from ragtrack.pipeline.analysis.comparison import is_best
from ragtrack.pipeline.execution import robustness, usage
from ragtrack.pipeline.execution.agreement import summary_text as agreement_text
from ragtrack.pipeline.execution.job_outputs import GENERATION_NOTE, failed_generations, failure_lines
from ragtrack.pipeline.execution.usage import Usage
from ragtrack.pipeline.records.tracking import Tracker


def report_table(table: pd.DataFrame, width: int = 100) -> str:
    """``table`` (metrics x systems) as text, 4 decimals, the largest value of each row (:func:`is_best`)
    marked ``*``, split into column blocks that fit ``width`` characters."""
    best = table.apply(is_best, axis=1)
    cells = pd.DataFrame(
        {
            system: [("" if pd.isna(v) else f"{v:.4f}{'*' if best.loc[m, system] else ' '}") for m, v in column.items()]
            for system, column in table.items()
        },
        index=table.index,
    )
    return cells.to_string(line_width=width)


def counts_text(counted: Mapping[str, Mapping[str, int]], width: int = 100) -> str:
    """Over how many queries each mean of the terminal table is, from results.json's ``queries_counted``
    (system -> metric -> n): ``6 queries; mean per query`` when every mean is over the same queries, else
    metrics with the same counts together: ``mean per query over 952 queries (ndcg@10, answer_f1), 1190
    queries (abstention_rate); abstention_precision: 470 bm25, 364 dense``."""
    systems = list(counted)
    metrics = list(dict.fromkeys(m for n in counted.values() for m in n))
    groups: dict[tuple, list[str]] = {}
    for metric in metrics:
        groups.setdefault(tuple(counted[s].get(metric) for s in systems), []).append(metric)
    if len(groups) == 1 and len(set(next(iter(groups)))) == 1:
        return f"{words.counted(next(iter(groups))[0], 'query')}; mean per query; * best of each metric"
    same = [f"{ns[0]} queries ({', '.join(ms)})" for ns, ms in groups.items() if len(set(ns)) == 1]
    apart = [
        f"{', '.join(ms)}: " + ", ".join(f"{n} {s}" for s, n in zip(systems, ns) if n is not None)
        for ns, ms in groups.items()
        if len(set(ns)) > 1
    ]
    text = "mean per query over " + "; ".join(filter(None, [", ".join(same), *apart])) + "; * best of each metric"
    return textwrap.fill(text, width, subsequent_indent="  ", break_on_hyphens=False)


def print_report(
    table: pd.DataFrame,
    tracker: Tracker,
    output_dir: Path,
    counted: Mapping[str, Mapping[str, int]],
    blocks: Sequence[tuple[str, str]] = (),
) -> None:
    """The metrics x systems table (the best value of each metric marked ``*``; columns wrapped at 100
    characters), over how many queries each mean is (:func:`counts_text`), the ``blocks`` (heading, text;
    those with text: the failed generations, the robustness study's drops, the LLM calls' tokens and
    cost, the judges' agreement with people), then where the outputs and the MLflow runs are."""
    lines = [
        "",
        report_table(table),
        counts_text(counted),
        *(line for heading, text in blocks if text for line in ("", heading, text)),
        "",
        f"Output folder: {output_dir}",
        *tracker.where(),
    ]
    print(mask("\n".join(lines)))


def generation_text(results: Mapping) -> str:
    """The failed generations of results.json ``results`` for the job's terminal summary ("" when none failed)."""
    failed = failed_generations(results.get("efficiency", {}))
    if not failed:
        return ""
    return "\n".join([*failure_lines(failed, results["dataset"]["queries"]), usage.wrapped(GENERATION_NOTE)])


def print_summary(written: dict, tracker: Tracker, output_dir: Path, used: Usage) -> None:
    """The job's summary (:func:`print_report`) from what :func:`~ragtrack.pipeline.execution.job_outputs.write_outputs`
    returned and the job's LLM calls."""
    results = written["results"]
    print_report(
        written["table"],
        tracker,
        output_dir,
        results["queries_counted"],
        [
            ("Answer generation failed:", generation_text(results)),
            ("Robustness (metric drop, clean - perturbed):", robustness.summary_text(results)),
            ("LLM calls:", usage.summary_text(used.calls)),
            ("Judge agreement with people:", agreement_text(results)),
        ],
    )
