"""The judges' agreement with people, for a job: labels matched to what the judges said, figures
(``evaluators.agreement``) into results.json, MLflow, confusion CSVs, report.html and the run page.

For ``llm_judge`` (results.json ``agreement``): per system and metric ``judge_<rubric>``, Cohen's kappa
(quadratic weights), Krippendorff's alpha (ordinal) and accuracy between the judge's scores and the
labels, each with a bootstrap CI, the confusion matrix (``systems/<system>/<metric>_confusion.csv``) and
the PPI-corrected mean ``<metric>_ppi``; child-run metrics ``judge_correctness_kappa`` (``_ci_low``,
``_ci_high``), ``..._alpha``, ``..._accuracy``, ``..._ppi`` and ``..._human_labels``. A two-point scale
gets the unweighted kappa and the nominal alpha (the same numbers there).

For ``pairwise_judge`` (results.json ``pairwise_agreement``): per pair, unweighted kappa, nominal alpha
and accuracy of the outcomes win / tie / loss, the confusion matrix (``pairwise_confusion_<a>_vs_<b>.csv``)
and PPI-corrected ``win_rate_ppi``, ``tie_rate_ppi`` and ``loss_rate_ppi``; parent-run metrics
``pairwise/<a>_vs_<b>/kappa`` and so on.

Labels that cannot be compared are counted and warned about, never dropped silently: a query the
dataset does not have, a system or pair the job did not judge, a stale answer (the labelled ``answer``
is not the system's), a query the judge did not score (failed request, unparseable reply, no answer:
``judge_missing``) and a judge score between the scale's points (``off_scale``, left out of the
agreement figures, kept in the PPI mean).
"""

from __future__ import annotations

import html
import logging
import textwrap
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.core.data import Dataset
from ragtrack.core.files import write_atomically
from ragtrack.evaluators.agreement import CONFIDENCE, FIGURES, agreement, ppi_mean
from ragtrack.evaluators.base import SystemComparer
from ragtrack.evaluators.human_labels import OUTCOMES, PAIR_SEPARATOR, HumanLabel, HumanLabels, split_pair
from ragtrack.evaluators.judge import LLMJudge
from ragtrack.pipeline.analysis.slices import Findings
from ragtrack.pipeline.records import layout
from ragtrack.pipeline.records.csv_files import csv_text

log = logging.getLogger(__name__)

SWAPPED = {"win": "loss", "tie": "tie", "loss": "win"}
CONFUSION_CORNER = "judge \\ human"  # the first cell of a confusion CSV: rows are the judge's categories


def _collapsed(text: str) -> str:
    return " ".join(str(text).split())


def figures(judge: Sequence, human: Sequence, categories: Sequence, seed: int) -> dict:
    """Agreement of paired ``judge`` and ``human`` categories (values of ``categories``, in scale order):
    weighted kappa and ordinal alpha on graded scales (more than two categories given as integers),
    unweighted and nominal otherwise; each with its bootstrap CI, and the confusion matrix."""
    position = {category: i for i, category in enumerate(categories)}
    graded = len(categories) > 2 and all(isinstance(c, (int, np.integer)) for c in categories)
    weights, level = ("quadratic", "ordinal") if graded else ("none", "nominal")
    found = agreement(
        [position[v] for v in judge],
        [position[v] for v in human],
        len(categories),
        weights,
        level,
        resamples=1000,
        seed=seed,
    )
    return {
        "compared": found.n,
        **found.figures,
        "kappa_weights": weights,
        "alpha_level": level,
        "confusion": {"categories": list(categories), "counts": found.confusion.tolist()},
    }


def _ppi(prefix: str, judged: Mapping[str, float], human: Mapping[str, float]) -> dict:
    """The PPI mean of the judge's scores ``judged`` (query -> score) corrected by ``human`` (query ->
    label, a subset of ``judged``): ``<prefix>ppi`` with CI, and the judge's plain mean."""
    estimate = ppi_mean(
        [judged[q] for q in human], list(human.values()), [v for q, v in judged.items() if q not in human], CONFIDENCE
    )
    return {
        f"{prefix}judge_mean": estimate.judge_mean,
        f"{prefix}rectifier": estimate.rectifier,
        f"{prefix}ppi": estimate.estimate,
        f"{prefix}ppi_ci_low": estimate.ci_low,
        f"{prefix}ppi_ci_high": estimate.ci_high,
    }


def _confusion_csv(path: Path, section: dict) -> Path:
    categories, counts = section["confusion"]["categories"], section["confusion"]["counts"]
    frame = pd.DataFrame(
        counts,
        index=pd.Index([str(c) for c in categories], name=CONFUSION_CORNER),
        columns=[str(c) for c in categories],
    )
    return write_atomically(path, csv_text(frame, index=True))


def _warn(what: str, labels: HumanLabels, counts: Counter, examples: dict[str, HumanLabel]) -> None:
    """One warning per kind of label that could not be compared, with its count and first line."""
    for kind, count in counts.items():
        first = examples[kind]
        log.warning(
            "%s human labels %s: %d label(s) %s; first: line %d (query %r, %s %r)",
            what,
            labels.path.name,
            count,
            kind.replace("_", " "),
            first.line,
            first.qid,
            labels.item,
            first.item,
        )


def _counted(kinds: Sequence[str], skipped: Counter) -> dict[str, int]:
    return {kind: skipped.get(kind, 0) for kind in kinds}


RUBRIC_SKIPS = ("unknown_query", "unknown_system", "stale", "judge_missing", "off_scale")
PAIR_SKIPS = ("unknown_query", "unknown_pair", "judge_missing")


def rubric_agreement(judges: Sequence, results: Mapping, dataset: Dataset, output_dir: Path, seed: int) -> Findings:
    """Agreement of each ``llm_judge`` given ``human_labels`` with them, per system (``results``: the
    job's SystemResult by name) and rubric (module docstring)."""
    section: dict = {}
    system_metrics: dict[str, dict[str, float]] = {}
    for judge in judges:
        if not isinstance(judge, LLMJudge) or judge.human_labels is None:
            continue
        labels, skipped, examples = judge.human_labels, Counter(), {}

        def skip(kind: str, label: HumanLabel) -> None:
            skipped[kind] += 1
            examples.setdefault(kind, label)

        grouped: dict[tuple[str, str], list[HumanLabel]] = {}
        for label in labels.labels:
            if label.qid not in dataset.queries:
                skip("unknown_query", label)
            elif label.item not in results:
                skip("unknown_system", label)
            else:
                grouped.setdefault((label.item, label.criterion), []).append(label)
        systems: dict[str, dict] = {}
        scales = {r.name: sorted(r.scale) for r in judge.rubrics}
        for (system, criterion), group in sorted(grouped.items()):
            per_query, metric = results[system].per_query, f"judge_{criterion}"
            scores = (
                per_query[metric].dropna().to_dict() if metric in per_query else {}
            )  # none: the judge did not apply (no answers)
            answers = per_query["generated_answer"].to_dict() if "generated_answer" in per_query else {}
            before = skipped.copy()
            labelled, on_scale = {}, {}
            for label in group:
                if label.answer is not None and _collapsed(label.answer) != _collapsed(answers.get(label.qid, "")):
                    skip("stale", label)
                elif label.qid not in scores:
                    skip("judge_missing", label)
                else:
                    labelled[label.qid] = float(label.label)
                    if scores[label.qid] in scales[criterion]:
                        on_scale[label.qid] = label.label
                    else:
                        skip("off_scale", label)
            found = {
                "labels": len(group),
                **_counted(RUBRIC_SKIPS[2:], skipped - before),
                **figures([int(scores[q]) for q in on_scale], list(on_scale.values()), scales[criterion], seed),
                **_ppi("", scores, labelled),
                "ppi_labelled": len(labelled),
                "judged": len(scores),
            }
            systems.setdefault(system, {})[metric] = found
            _confusion_csv(output_dir / "systems" / system / f"{metric}_confusion.csv", found)
            key = layout.metric_key(metric)
            system_metrics.setdefault(system, {}).update(
                {f"{key}_{name}": float(found[name]) for name in _logged(("ppi",)) if pd.notna(found[name])}
                | {f"{key}_human_labels": float(found["compared"])}
            )
        _warn("llm_judge", labels, skipped, examples)
        section = {
            "file": str(labels.path),
            "labels": len(labels.labels),
            **_counted(RUBRIC_SKIPS, skipped),
            "systems": systems,
        }
    return Findings({"agreement": section}, {}, system_metrics) if section else Findings()


def _logged(extra: Sequence[str]) -> list[str]:
    """The figures logged as MLflow metrics, each with its CI: kappa, alpha, accuracy and ``extra``."""
    return [f"{name}{suffix}" for name in (*FIGURES, *extra) for suffix in ("", "_ci_low", "_ci_high")]


def pairwise_agreement(
    judge: SystemComparer, records: Sequence[Mapping], dataset: Dataset, output_dir: Path, seed: int
) -> Findings:
    """Agreement of a pairwise judge's outcomes (``records``: those of ``pairwise.jsonl``) with its
    ``human_labels``, per pair (module docstring)."""
    labels = judge.human_labels
    if labels is None:
        return Findings()
    outcomes: dict[str, dict[str, str | None]] = {}
    for record in records:
        outcomes.setdefault(record["pair"], {})[record["qid"]] = record["outcome"]
    skipped, examples, grouped = Counter(), {}, {}
    for label in labels.labels:
        first, second = split_pair(label.item)
        reverse = f"{second}{PAIR_SEPARATOR}{first}"
        pair = label.item if label.item in outcomes else reverse if reverse in outcomes else None
        kind = (
            "unknown_query"
            if label.qid not in dataset.queries
            else "unknown_pair"
            if pair is None
            else "judge_missing"
            if outcomes[pair].get(label.qid) is None
            else None
        )
        if kind:
            skipped[kind] += 1
            examples.setdefault(kind, label)
        else:
            grouped.setdefault(pair, {})[label.qid] = label.label if pair == label.item else SWAPPED[str(label.label)]
    pairs, metrics, artifacts = {}, {}, []
    for pair, human in sorted(grouped.items()):
        judged = {q: o for q, o in outcomes[pair].items() if o is not None}
        found = {
            "criterion": judge.criterion.name,
            "labels": len(human),
            **figures([judged[q] for q in human], list(human.values()), OUTCOMES, seed),
            "judged": len(judged),
        }
        for outcome in OUTCOMES:
            rate = f"{outcome}_rate_"
            found |= _ppi(
                rate,
                {q: float(o == outcome) for q, o in judged.items()},
                {q: float(h == outcome) for q, h in human.items()},
            )
        pairs[pair] = found
        first, second = split_pair(pair)
        artifacts.append(
            _confusion_csv(
                output_dir / f"pairwise_confusion_{layout.key_part(first)}_vs_{layout.key_part(second)}.csv", found
            )
        )
        prefix = f"pairwise/{layout.system_key(first)}_vs_{layout.system_key(second)}/"
        metrics |= {
            f"{prefix}{name}": float(found[name])
            for name in _logged([f"{o}_rate_ppi" for o in OUTCOMES])
            if pd.notna(found[name])
        }
    _warn("pairwise_judge", labels, skipped, examples)
    section = {"file": str(labels.path), "labels": len(labels.labels), **_counted(PAIR_SKIPS, skipped), "pairs": pairs}
    return Findings({"pairwise_agreement": section}, metrics, {}, artifacts)


# --------------------------------------------------------------------------- report and run page


def _interval(row: Mapping, name: str) -> str:
    value = row.get(name)
    if value is None or pd.isna(value):
        return "–"
    low, high = row.get(f"{name}_ci_low"), row.get(f"{name}_ci_high")
    return f"{value:.3f} [{low:.3f}, {high:.3f}]" if pd.notna(low) and pd.notna(high) else f"{value:.3f}"


def _rows(results: Mapping) -> list[tuple[str, str, dict, str, str]]:
    """(what, figure, figures, judge's mean, corrected) per system and metric, and per pair."""
    rows = []
    for system, metrics in (results.get("agreement") or {}).get("systems", {}).items():
        for metric, found in metrics.items():
            rows.append((system, metric, found, f"{found['judge_mean']:.3f}", _interval(found, "ppi")))
    for pair, found in (results.get("pairwise_agreement") or {}).get("pairs", {}).items():
        rows.append(
            (
                pair,
                f"pairwise_{found['criterion']} win rate",
                found,
                f"{found['win_rate_judge_mean']:.3f}",
                _interval(found, "win_rate_ppi"),
            )
        )
    return rows


def _note(results: Mapping) -> str:
    parts = []
    for name, key in (("llm_judge", "agreement"), ("pairwise_judge", "pairwise_agreement")):
        section = results.get(key)
        if section:
            skipped = ", ".join(
                f"{count} {kind.replace('_', ' ')}"
                for kind, count in section.items()
                if kind not in ("file", "labels", "systems", "pairs") and count
            )
            parts.append(
                f"{name}: {section['labels']} labels from {Path(section['file']).name}"
                + (f" ({skipped}: not compared)" if skipped else "")
            )
    return "; ".join(parts)


HEADER = (
    "system or pair",
    "judge",
    "labels compared",
    "κ [95% CI]",
    "α [95% CI]",
    "accuracy [95% CI]",
    "judge mean",
    "PPI-corrected [95% CI]",
)


def report_section(results: Mapping) -> tuple[str, str, str] | None:
    """The report.html section (anchor, heading, HTML) of the agreement in ``results`` (results.json), if any."""
    rows = _rows(results)
    if not rows:
        return None
    frame = pd.DataFrame(
        [
            (
                what,
                figure,
                found["compared"],
                _interval(found, "kappa"),
                _interval(found, "alpha"),
                _interval(found, "accuracy"),
                mean,
                corrected,
            )
            for what, figure, found, mean, corrected in rows
        ],
        columns=list(HEADER),
    )
    table = frame.to_html(index=False, escape=True)
    confusions = "".join(
        f"<details><summary>{html.escape(what)}, {html.escape(figure)}: confusion matrix (rows: judge, columns: people)</summary>"
        + pd.DataFrame(
            found["confusion"]["counts"],
            index=list(map(str, found["confusion"]["categories"])),
            columns=list(map(str, found["confusion"]["categories"])),
        ).to_html(escape=True)
        + "</details>"
        for what, figure, found, _, _ in rows
    )
    note = (
        f'<p class="note">{html.escape(_note(results))}. κ: Cohen\'s kappa (quadratic weights on graded scales, unweighted on two-point '
        "scales and pairwise outcomes); α: Krippendorff's alpha (ordinal, or nominal); both and accuracy over the labelled items "
        "the judge scored, with 95% percentile bootstrap CIs. PPI-corrected: the judge's mean plus the mean human − judge "
        "difference on the labelled items (prediction-powered inference, Angelopoulos et al., Science 2023), normal 95% CI.</p>"
    )
    return "agreement", "Judge agreement with people", table + note + confusions


def summary_text(results: Mapping) -> str:
    """The agreement in the job's terminal summary ("" without labels): per system and rubric, and per
    pair, the items compared, kappa, alpha, accuracy, the judge's mean and the PPI-corrected score
    with its CI, in 100 columns (the other CIs are in results.json and report.html)."""
    rows = _rows(results)
    if not rows:
        return ""
    frame = pd.DataFrame(
        [
            (
                what,
                figure,
                found["compared"],
                *(_interval(found, name).split(" [")[0] for name in ("kappa", "alpha", "accuracy")),
                mean,
                corrected,
            )
            for what, figure, found, mean, corrected in rows
        ],
        columns=[
            "system or pair",
            "judge",
            "compared",
            "kappa",
            "alpha",
            "accuracy",
            "judge mean",
            "PPI-corrected [95% CI]",
        ],
    )
    note = (
        f"{_note(results)}; kappa: Cohen's, alpha: Krippendorff's, over the labelled items the judge scored (their CIs: "
        "results.json, report.html); PPI-corrected: the judge's mean plus the mean human - judge difference"
    )
    return (
        frame.to_string(index=False, line_width=100)
        + "\n"
        + textwrap.fill(note, 100, subsequent_indent="  ", break_on_hyphens=False)
    )


def run_page_note(results: Mapping) -> str:
    """Markdown lines for the job's run page: the agreement table of :func:`report_section`, if any."""
    rows = _rows(results)
    if not rows:
        return ""
    lines = [
        "",
        "",
        "| " + " | ".join(HEADER) + " |",
        "|---|---|" + "---:|" * (len(HEADER) - 2),
    ]  # a blank line before the table
    lines += [
        f"| {what} | {figure} | {found['compared']} | {_interval(found, 'kappa')} | {_interval(found, 'alpha')} | "
        f"{_interval(found, 'accuracy')} | {mean} | {corrected} |"
        for what, figure, found, mean, corrected in rows
    ]
    return "\n".join(
        [
            *lines,
            "",
            f"**Judge agreement with people** ({_note(results)}): kappa, alpha and accuracy with 95% bootstrap CIs; "
            "the judge's mean corrected by the labels (prediction-powered inference) with its 95% CI. Details in report.html.",
        ]
    )
