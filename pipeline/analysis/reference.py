"""``ragtrack compare --reference``: the compared rows against an original job or a published table.

A reference is read by :func:`read_reference` (a file or folder) or, for an MLflow run id, by
``compare.load_logged_reference``:

- a job: its output folder, its ``results.json`` (the folder around it) or its MLflow run: the means
  of ``results.json`` (``systems``), the per-query values of ``per_query.csv`` and the run files
  ``runs/<system>.trec`` where they exist, the dataset hash and the relevance threshold of
  ``config.yaml``;
- a published table of means (:func:`read_table`): CSV (``.csv``) or TSV (``.tsv``) with a header
  naming the columns ``system``, ``metric`` and ``value`` and optionally ``dataset`` (more columns,
  such as ``source``, are kept out; ``#`` lines are comments), or YAML (``.yaml``/``.yml``), a mapping
  of system to a mapping of metric to value. Metric names are ragtrack's (``ragtrack metrics``),
  compared case-insensitively. A table with a ``dataset`` column is matched to each compared job by
  its dataset's name (:func:`canonical_dataset`: ``beir-scifact-test``, an ir_datasets id, is
  ``scifact``). ``beir`` names the shipped table of published BEIR figures (``data/beir_published.tsv``:
  Anserini's BM25 flat and multifield for every BEIR dataset, all-MiniLM-L6-v2's nDCG@10 from MTEB).

A compared row is matched to the reference system named like its label, else like its system;
``ROW=REFERENCE`` pairs (``--reference-map``, ROW a label or system name) choose others. Per matched
row and compared metric (:func:`check_reference`):

- the difference (the row's mean minus the reference's) and whether it is within ``tolerance``
  (Pyserini's 2cr check: OK when equal, OKish within 0.0005, else FAIL);
- with per-query values on both sides, the reproduction measures of ``evaluators.reproduction`` over
  the compared queries: RMSE, the equivalence test (TOST: p small where the mean difference lies
  within ±``tolerance``), and effect ratio and ΔRI against the comparison's baseline row and its
  reference; with a table only, effect ratio and ΔRI from the means (the per-query definition gives
  the same figures when both sides average over the same queries) and no RMSE;
- with run files on both sides, KTU (Kendall's tau union, as repro_eval), Kendall's τ_b and RBO between the
  document rankings, mean over queries.

Whatever cannot be computed, and which systems on either side went unmatched, is said in a note.
"""

from __future__ import annotations

import csv
import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import yaml
from omegaconf import OmegaConf
from omegaconf.errors import OmegaConfBaseException

from ragtrack.core.errors import InputError, RagtrackError, did_you_mean
from ragtrack.core.files import read_bytes, read_lines, yaml_error, yaml_text
from ragtrack.core.runs import Run, read_trec
from ragtrack.evaluators.reproduction import (
    MEASURE_COLUMNS,
    RANKING_COLUMNS,
    delta_relative_improvement,
    effect_ratio,
    measures_table,
    rankings_table,
)
from ragtrack.pipeline.analysis.comparison_tables import p_text
from ragtrack.pipeline.configuration.config import datasets_dir
from ragtrack.pipeline.records.csv_files import read_csv
from ragtrack.pipeline.records.layout import CONFIG_FILE, PER_QUERY_FILE, RESULTS_FILE

if TYPE_CHECKING:
    from ragtrack.pipeline.analysis.comparison import Comparison, SystemRun

TOLERANCE = 0.0005  # Pyserini's 2cr: |measured - expected| <= 0.0005 is "OKish"
FLOAT_SLACK = 1e-12  # a difference of exactly the tolerance in decimals may be a hair above it in binary
TABLE_DELIMITERS = {".csv": ",", ".tsv": "\t"}
YAML_SUFFIXES = (".yaml", ".yml")
TABLE_COLUMNS = ("system", "metric", "value")
BUILT_IN = {"beir": "beir_published.tsv"}  # --reference NAME -> a table shipped in ragtrack.datasets
DECIMAL = re.compile(
    r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
)  # a table's value, as written in a paper
DIFFERENCE_COLUMNS = ["system", "reference", "metric", "value", "reference_value", "difference", "within_tolerance"]


@dataclass
class Reference:
    """What a comparison is checked against: per system its means, and where known its per-query
    values (indexed by qid), its run (read when asked) and the job's dataset hash and threshold."""

    source: str  # as the user gave it
    kind: str  # "table" (means only) or "job"
    values: dict[str, dict[str, float]]
    per_query: dict[str, pd.DataFrame] = field(default_factory=dict)
    runs: dict[str, Callable[[], Run]] = field(default_factory=dict)
    dataset_hash: str | None = None
    threshold: int | None = None
    per_query_file: str = ""  # where the per-query values came from (for messages)
    lines: dict[tuple[str, str], int] = field(
        default_factory=dict
    )  # a table's (system, metric in lower case) -> its line
    datasets: dict[str, Reference] = field(
        default_factory=dict
    )  # a table with a dataset column: one reference per dataset

    def for_dataset(self, name: str) -> Reference:
        """The reference for the dataset ``name`` (a table with a dataset column; else itself)."""
        if not self.datasets:
            return self
        wanted = canonical_dataset(name)
        if wanted not in self.datasets:
            raise RagtrackError(
                f"the reference {self.source} has no figures for dataset {name!r} (as {wanted!r}); its datasets: "
                f"{', '.join(self.datasets)}{did_you_mean(wanted, list(self.datasets))}"
            )
        return self.datasets[wanted]

    def only(self, system: str) -> Reference:
        """The reference restricted to one system (a system run given as the reference)."""
        return Reference(
            self.source,
            self.kind,
            {system: self.values[system]},
            {k: v for k, v in self.per_query.items() if k == system},
            {k: v for k, v in self.runs.items() if k == system},
            self.dataset_hash,
            self.threshold,
            self.per_query_file,
            {k: v for k, v in self.lines.items() if k[0] == system},
        )


# --------------------------------------------------------------------------- reading


def read_reference(source: str) -> Reference | None:
    """The reference at the path ``source``: a table, a job's results.json or its output folder; None
    when no such path exists (then ``source`` may be an MLflow run id). A relative ``data/...`` path
    that is not in the current folder names a shipped file (``data/scifact/published.tsv``), as in a
    checkout of the repository."""
    path = (
        datasets_dir() / BUILT_IN[source] if source in BUILT_IN and not Path(source).exists() else shipped(Path(source))
    )
    if path.is_dir():
        return read_job(path / RESULTS_FILE, source)
    if not path.exists():
        return None
    suffix = path.suffix.lower()
    if suffix == ".json":
        return read_job(path, source)
    if suffix in TABLE_DELIMITERS or suffix in YAML_SUFFIXES:
        tables = read_table(path)
        if None in tables:
            values, lines = tables[None]
            return Reference(source, "table", values, lines=lines)
        return Reference(
            source,
            "table",
            {},
            datasets={d: Reference(f"{source} [{d}]", "table", *table) for d, table in tables.items()},
        )
    raise InputError(
        path,
        "not a reference: give a table (.csv, .tsv, .yaml), a job's results.json or output folder, or an MLflow run id",
    )


def shipped(path: Path) -> Path:
    """``path``, or for a relative ``data/<dataset>/...`` path that does not exist, the shipped file of
    that name (``config.datasets_dir``: the repository's ``data/`` installs as ``ragtrack.datasets``)."""
    if path.exists() or path.is_absolute() or len(path.parts) < 2 or path.parts[0] != "data":
        return path
    installed = datasets_dir().joinpath(*path.parts[1:])
    return installed if installed.exists() else path


def read_job(results: Path, source: str, runs: Mapping[str, Callable[[], Run]] | None = None) -> Reference:
    """A job's means (``results``), per-query values (per_query.csv beside it), runs (``runs``, default
    ``runs/<system>.trec`` beside it), dataset hash and relevance threshold (config.yaml beside it)."""
    if not results.is_file():
        raise InputError(results.parent, f"no {RESULTS_FILE}: not the output folder of a ragtrack job")
    try:
        payload = json.loads(read_bytes(results).decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(results, f"invalid JSON: {exc.msg}", exc.lineno) from None
    except RecursionError:
        raise InputError(results, "invalid JSON: nesting too deep") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(results, f"cannot read it: {exc}") from None
    systems = payload.get("systems") if isinstance(payload, dict) else None
    if not isinstance(systems, dict) or not systems or not all(isinstance(v, dict) for v in systems.values()):
        raise InputError(results, "no 'systems' mapping of system to {metric: mean}: not a ragtrack job's results.json")
    values = {str(name): {str(m): float(v) for m, v in means.items() if _number(v)} for name, means in systems.items()}
    folder = results.parent
    dataset = payload.get("dataset")
    per_query_path = folder / PER_QUERY_FILE
    per_query = read_per_query(per_query_path) if per_query_path.exists() else {}
    if runs is None:
        runs = {
            name: partial(read_trec, folder / "runs" / f"{name}.trec")
            for name in values
            if (folder / "runs" / f"{name}.trec").is_file()
        }
    return Reference(
        source,
        "job",
        values,
        per_query,
        dict(runs),
        dataset.get("hash") if isinstance(dataset, dict) else None,
        _threshold(folder / CONFIG_FILE),
        str(per_query_path),
    )


def _number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _threshold(config: Path) -> int | None:
    """``evaluator.ranking.relevance_threshold`` of a job's config.yaml (default 1); None without the file."""
    if not config.is_file():
        return None
    try:
        loaded = OmegaConf.create(yaml_text(config, "job config"))
        return int(OmegaConf.select(loaded, "evaluator.ranking.relevance_threshold", default=1))
    except (OmegaConfBaseException, yaml.YAMLError, UnicodeDecodeError, TypeError, ValueError) as exc:
        raise InputError(config, f"no relevance threshold to read: {str(exc).splitlines()[0]}") from None


def read_per_query(path: Path) -> dict[str, pd.DataFrame]:
    """A job's per_query.csv split by system, indexed by qid."""
    import pandas.errors

    try:
        table = read_csv(path, dtype={"qid": str, "system": str})
    except (pandas.errors.ParserError, pandas.errors.EmptyDataError, UnicodeDecodeError, ValueError) as exc:
        raise InputError(path, f"not a readable CSV: {str(exc).strip().splitlines()[-1]}") from None
    if not {"system", "qid"} <= set(table.columns):
        raise InputError(path, "no 'system' and 'qid' columns: not a ragtrack per_query.csv", 1)
    blank = table[["system", "qid"]].isna()
    if blank.to_numpy().any():
        row = int(blank.any(axis=1).to_numpy().argmax())
        raise InputError(path, f"empty {'system' if blank['system'].iat[row] else 'qid'}", _row_lines(path)[row])
    repeated = table.duplicated(["system", "qid"]).to_numpy()
    if repeated.any():
        row = int(repeated.argmax())
        system, qid = table["system"].iat[row], table["qid"].iat[row]
        first = int(((table["system"] == system) & (table["qid"] == qid)).to_numpy().argmax())
        lines = _row_lines(path)
        raise InputError(path, f"query {qid!r} of {system} is given twice (first on line {lines[first]})", lines[row])
    return by_system(table)


def _row_lines(path: Path) -> list[int]:
    """The line on which each data row of a CSV file starts (a quoted cell may hold line breaks; blank
    lines are skipped, as pandas skips them)."""
    import io

    reader = csv.reader(io.StringIO(read_bytes(path).decode("utf-8-sig"), newline=""))
    starts, end = [], 0
    for record in reader:
        if record:
            starts.append(end + 1)
        end = reader.line_num
    return starts[1:]


def by_system(per_query: pd.DataFrame) -> dict[str, pd.DataFrame]:
    """A per-query table (columns system, qid, ...) split by system, indexed by qid."""
    return {
        name: rows.drop(columns="system").set_index("qid") for name, rows in per_query.groupby("system", sort=False)
    }


def read_table(path: Path) -> dict[str | None, tuple[dict[str, dict[str, float]], dict[tuple[str, str], int]]]:
    """A published table of means (module docstring), per dataset (a CSV/TSV ``dataset`` column, names
    made canonical) or under None for a table without one: system -> metric -> value, and the line of
    each figure, keyed by (system, metric in lower case)."""
    if path.suffix.lower() in YAML_SUFFIXES:
        tables = {None: _read_yaml_table(path)}
    else:
        tables = {}
        for dataset, line, system, metric, value in _delimited_rows(path):
            values, first = tables.setdefault(None if dataset is None else canonical_dataset(dataset), ({}, {}))
            _add(values, first, path, line, system, metric, value)
    if not any(values for values, _ in tables.values()):
        raise InputError(path, "no figures: a table has a header naming system, metric, value and a row per figure")
    return tables


def canonical_dataset(name: str) -> str:
    """A dataset's name as the BEIR table spells it: lower case, without a leading ``beir/`` or
    ``beir-`` and a trailing split (ir_datasets ids: ``beir/cqadupstack/android`` is
    ``cqadupstack-android``, ``beir-scifact-test`` is ``scifact``)."""
    name = name.strip().lower().replace("/", "-")
    name = name.removeprefix("beir-")
    return re.sub(r"-(test|dev|train)$", "", name)


def _add(values: dict, first: dict, path: Path, line: int, system: str, metric: str, value: str) -> None:
    """Record one figure, refusing an empty name, a value that is not a plain decimal number (``0.6789``,
    ``-1e-3``; not ``1_0``, ``nan`` or ``inf``) and a repeat."""
    if not system or not metric:
        raise InputError(path, f"empty {'system' if not system else 'metric'} name", line)
    if not DECIMAL.fullmatch(value):
        finite = value.strip("+-").lower() not in ("nan", "inf", "infinity")
        raise InputError(
            path, f"value {value!r} of {system} {metric} is not a {'' if finite else 'finite '}number", line
        )
    number = float(value)
    key = (system, metric.lower())
    if key in first:
        raise InputError(path, f"{metric} of {system} given twice (first on line {first[key]})", line)
    first[key] = line
    values.setdefault(system, {})[metric] = number


def _delimited_rows(path: Path):
    """Each figure of a CSV/TSV table as (dataset or None, line, system, metric, value)."""
    delimiter = TABLE_DELIMITERS[path.suffix.lower()]
    columns, dataset_column = None, None
    for line, text in read_lines(path):
        if text.lstrip().startswith("#"):
            continue
        cells = [cell.strip() for cell in next(csv.reader([text], delimiter=delimiter))]
        if columns is None:
            names = [cell.lower() for cell in cells]
            missing = [c for c in TABLE_COLUMNS if c not in names]
            if missing:
                raise InputError(
                    path,
                    f"the header has no {', '.join(missing)} column (a table's columns: system, metric, value)",
                    line,
                )
            columns, width = [names.index(c) for c in TABLE_COLUMNS], len(cells)
            dataset_column = names.index("dataset") if "dataset" in names else None
            continue
        if len(cells) != width:
            raise InputError(path, f"{len(cells)} fields, the header has {width}", line)
        dataset = None if dataset_column is None else cells[dataset_column]
        if dataset == "":
            raise InputError(path, "empty dataset name", line)
        yield dataset, line, *(cells[i] for i in columns)


def _read_yaml_table(path: Path) -> dict[str, dict[str, float]]:
    try:
        root = yaml.compose(yaml_text(path, "reference table"), Loader=yaml.SafeLoader)
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        raise yaml_error(path, exc) from None
    if not isinstance(root, yaml.MappingNode):
        raise InputError(
            path, "expected a mapping of system to {metric: value}", root.start_mark.line + 1 if root else None
        )
    values, first = {}, {}
    for key, metrics in root.value:
        if not isinstance(key, yaml.ScalarNode) or not isinstance(metrics, yaml.MappingNode):
            raise InputError(path, "expected a system name with a mapping of metric to value", key.start_mark.line + 1)
        for metric, value in metrics.value:
            if not isinstance(metric, yaml.ScalarNode) or not isinstance(value, yaml.ScalarNode):
                raise InputError(path, f"{key.value}: expected metric: value", metric.start_mark.line + 1)
            _add(
                values,
                first,
                path,
                value.start_mark.line + 1,
                key.value.strip(),
                metric.value.strip(),
                value.value.strip(),
            )
    return values, first


# --------------------------------------------------------------------------- checking


@dataclass
class ReferenceCheck:
    """The result of :func:`check_reference`."""

    source: str
    kind: str
    tolerance: float
    baseline: str  # the comparison's baseline row, the base of effect ratio and ΔRI
    differences: pd.DataFrame  # DIFFERENCE_COLUMNS
    measures: pd.DataFrame  # MEASURE_COLUMNS (queries and rmse blank for a table)
    rankings: pd.DataFrame  # RANKING_COLUMNS
    notes: list[str]

    def annotate(self, table: pd.DataFrame) -> pd.DataFrame:
        """A comparison's long table with the reference's columns (``reference`` and ``reference_*``)
        on the rows it matched; csv and json carry them."""
        differences = self.differences.drop(columns="value").rename(
            columns={c: f"reference_{c}" for c in ("difference", "within_tolerance")}
        )
        measures = self.measures.rename(columns={c: f"reference_{c}" for c in MEASURE_COLUMNS[2:]})
        rankings = self.rankings.rename(columns={c: f"reference_{c}" for c in RANKING_COLUMNS[1:]})
        merged = table.merge(differences, on=["system", "metric"], how="left").merge(
            measures, on=["system", "metric"], how="left"
        )
        return merged.merge(rankings, on="system", how="left")

    def summary(self) -> dict:
        """The json format's ``reference`` section (the figures are in its rows)."""
        return {
            "source": self.source,
            "kind": self.kind,
            "tolerance": self.tolerance,
            "baseline": self.baseline,
            "notes": self.notes,
        }

    def tables(self) -> list[tuple[str, pd.DataFrame]]:
        """(title, table of display strings) for the text, markdown, latex and HTML formats."""
        differences = self.differences.assign(
            value=self.differences["value"].map(lambda v: f"{v:.4f}"),
            reference_value=self.differences["reference_value"].map(_as_given),
            difference=self.differences["difference"].map(lambda v: f"{round(v, 4) + 0.0:+.4f}"),  # + 0.0: no "-0.0000"
            within_tolerance=self.differences["within_tolerance"].map({True: "yes", False: "no"}),
        )
        shown = [
            (
                f"against the reference {self.source}: Δ = value − reference value",
                differences.rename(
                    columns={
                        "reference_value": "reference value",
                        "difference": "Δ",
                        "within_tolerance": f"±{self.tolerance:g}",
                    }
                ),
            )
        ]
        measured = self.measures.dropna(subset=["rmse", "effect_ratio", "delta_ri", "equivalence_p"], how="all")
        if not measured.empty:
            columns = ["system", "metric", "effect_ratio", "delta_ri"] if self.kind == "table" else MEASURE_COLUMNS
            what = (
                "from the means"
                if self.kind == "table"
                else f"RMSE over the queries both scored; equivalence_p: TOST p that the mean difference lies within ±{self.tolerance:g} (small: equivalent)"
            )
            shown.append(
                (
                    f"reproduction measures (docs/metrics.md): effect ratio and ΔRI against {self.baseline}; {what}",
                    _strings(measured[columns]),
                )
            )
        if not self.rankings.empty:
            shown.append(
                (
                    "rankings: KTU (repro_eval's Kendall's tau union), Kendall's tau_b and RBO (p=0.95) between the reference's runs and the rows', mean over queries",
                    _strings(self.rankings),
                )
            )
        return shown


def _as_given(value: float) -> str:
    """A reference value to 4 decimals, or to 6 significant digits where it has more (0.64508)."""
    return f"{value:.4f}" if abs(value - round(value, 4)) < 1e-12 else f"{value:.6g}"


def _strings(frame: pd.DataFrame) -> pd.DataFrame:
    """Numbers to 4 decimals (counts as integers, p-values as :func:`p_text`), blank where there is none."""

    def shown(column: pd.Series) -> pd.Series:
        if column.name == "equivalence_p":
            return column.map(p_text)
        return column.map(lambda v: "" if pd.isna(v) else f"{int(v)}" if column.name == "queries" else f"{v:.4f}")

    return frame.apply(lambda column: shown(column) if pd.api.types.is_numeric_dtype(column) else column)


def match(systems: Sequence[SystemRun], names: Sequence[str], pairs: Sequence[str]) -> list[tuple[SystemRun, str]]:
    """Each row with its reference system: by ``ROW=REFERENCE`` (``pairs``; ROW a label, else a system
    name and then all its rows), else the reference system named like the row's label, else like its
    system."""
    chosen: dict[str, str] = {}
    for pair in pairs:
        row, sep, name = (part.strip() for part in pair.partition("="))
        if not sep or not row or not name:
            raise RagtrackError(f"--reference-map {pair!r}: give ROW=REFERENCE, e.g. bm25=anserini-bm25-flat")
        if name not in names:
            raise RagtrackError(
                f"--reference-map {pair!r}: the reference has no system {name!r}{did_you_mean(name, names)}; "
                f"its systems: {', '.join(names)}"
            )
        rows = [s for s in systems if s.label == row] or [s for s in systems if s.system == row]
        if not rows:
            raise RagtrackError(
                f"--reference-map {pair!r}: no compared row {row!r}; rows: {', '.join(s.label for s in systems)}"
            )
        chosen.update((s.label, name) for s in rows)
    matched = []
    for s in systems:
        name = chosen.get(s.label) or next((n for n in (s.label, s.system) if n in names), None)
        if name is not None:
            matched.append((s, name))
    return matched


def check_reference(
    comparison: Comparison,
    reference: Reference,
    pairs: Sequence[str] = (),
    tolerance: float = TOLERANCE,
    row_run: Callable[[SystemRun], Run] | None = None,
) -> ReferenceCheck:
    """The comparison's rows against ``reference`` (module docstring); ``pairs``: ``ROW=REFERENCE``;
    ``row_run``: a row's run (for Kendall's τ and RBO; without it they are not computed)."""
    names = list(reference.values)
    matched = match(comparison.systems, names, pairs)
    if not matched:
        raise RagtrackError(
            f"no compared row matches a system of the reference {reference.source} ({', '.join(names)}); rows: "
            f"{', '.join(s.label for s in comparison.systems)}; pair them with --reference-map ROW=REFERENCE"
        )
    notes = []
    means = comparison.table.set_index(["system", "metric"])["mean"]
    rows, lacking = [], {}
    for s, name in matched:
        given = {metric.lower(): value for metric, value in reference.values[name].items()}
        for metric in comparison.metrics:
            expected = given.get(metric.lower())
            if expected is None:
                lacking.setdefault(metric, []).append(name)
                continue
            value = float(means[(s.label, metric)])
            if reference.kind == "table":
                _refuse_percent(reference, name, metric, expected, s.per_query.get(metric))
            difference = 0.0 if value == expected else value - expected
            rows.append(
                {
                    "system": s.label,
                    "reference": name,
                    "metric": metric,
                    "value": value,
                    "reference_value": expected,
                    "difference": difference,
                    "within_tolerance": bool(abs(difference) <= tolerance + FLOAT_SLACK),
                }
            )
    if not rows:
        given = ", ".join(dict.fromkeys(m for _, name in matched for m in reference.values[name]))
        raise RagtrackError(
            f"the reference {reference.source} gives none of the compared metrics ({', '.join(comparison.metrics)}) for "
            f"{', '.join(dict.fromkeys(name for _, name in matched))}; it gives {given}: compare those (-m METRIC)"
        )
    differences = pd.DataFrame(rows, columns=DIFFERENCE_COLUMNS)
    notes += [
        f"the reference gives no {metric} for {', '.join(dict.fromkeys(systems))}"
        for metric, systems in lacking.items()
    ]
    unmatched = [n for n in names if n not in {name for _, name in matched}]
    if unmatched:
        notes.append(
            f"reference systems matched by no row: {', '.join(unmatched)} (pair them with --reference-map ROW=REFERENCE)"
        )
    alone = [s.label for s in comparison.systems if s.label not in {m.label for m, _ in matched}]
    if alone:
        notes.append(f"rows without a reference: {', '.join(alone)}")
    base = next((name for s, name in matched if s is comparison.baseline), None)
    if base is None:
        notes.append(
            f"effect ratio and ΔRI need a reference for the baseline {comparison.baseline.label} (--baseline, --reference-map)"
        )
    if reference.kind == "table":
        notes.append(
            f"per-query measures (RMSE, Kendall's tau, RBO) are not computable: {reference.source} is a table of means"
        )
        measures = _measures_from_means(differences, comparison.baseline.label if base else None)
    else:
        measures = _per_query_measures(comparison, reference, matched, base, notes, tolerance)
    return ReferenceCheck(
        reference.source,
        reference.kind,
        tolerance,
        comparison.baseline.label,
        differences,
        measures,
        _rankings(comparison, reference, matched, row_run, notes),
        notes,
    )


def _refuse_percent(
    reference: Reference, system: str, metric: str, expected: float, measured: pd.Series | None
) -> None:
    """Stop where a table gives a figure above 1 for a metric whose every per-query value here lies in
    [0, 1] (nDCG, recall, MRR, ...): published tables often print 100 x the mean (67.89 for 0.6789)."""
    if measured is None or expected <= 1 or not len(measured) or not measured.between(0, 1).all():
        return
    path = shipped(Path(reference.source))
    raise InputError(
        path,
        f"{system} {metric} is {expected:g}, but {metric} lies in [0, 1] (here every query's value does): "
        f"a table in percent? give fractions ({expected / 100:g}, not {expected:g})",
        reference.lines.get((system, metric.lower())),
    )


def _measures_from_means(differences: pd.DataFrame, baseline: str | None) -> pd.DataFrame:
    """Effect ratio and ΔRI of each row from its and the baseline's means and their references."""
    by = differences.set_index(["system", "metric"])
    rows = []
    for (system, metric), row in by.iterrows():
        base = (
            by.loc[(baseline, metric)]
            if baseline is not None and (baseline, metric) in by.index and system != baseline
            else None
        )
        four = (
            ([row["reference_value"]], [base["reference_value"]], [row["value"]], [base["value"]])
            if base is not None
            else None
        )
        rows.append(
            {
                "system": system,
                "metric": metric,
                "queries": math.nan,
                "rmse": math.nan,
                "effect_ratio": effect_ratio(*four) if four else math.nan,
                "delta_ri": delta_relative_improvement(*four) if four else math.nan,
                "equivalence_p": math.nan,
            }
        )
    return pd.DataFrame(rows, columns=MEASURE_COLUMNS)


def _per_query_measures(
    comparison: Comparison, reference: Reference, matched: list, base: str | None, notes: list[str], tolerance: float
) -> pd.DataFrame:
    """RMSE, the equivalence test within ±``tolerance``, effect ratio and ΔRI (``evaluators.reproduction.measures_table``)
    over the compared queries."""
    with_values = [(s, name) for s, name in matched if name in reference.per_query]
    if not with_values:
        notes.append(
            f"per-query measures (RMSE, effect ratio, ΔRI) are not computable: {reference.source} has no per-query values "
            f"of the matched systems ({PER_QUERY_FILE})"
        )
        return pd.DataFrame(columns=MEASURE_COLUMNS)
    metrics = [m for m in comparison.metrics if all(m in reference.per_query[name].columns for _, name in with_values)]
    if len(metrics) < len(comparison.metrics):
        notes.append(
            f"{PER_QUERY_FILE} of {reference.source} has no per-query "
            f"{', '.join(m for m in comparison.metrics if m not in metrics)}: no RMSE, effect ratio or ΔRI for it"
        )
    queries = pd.Index(comparison.queries)
    pairs = [
        (s.label, _numbers(reference, name, metrics), s.per_query.loc[queries, metrics]) for s, name in with_values
    ]
    baseline = comparison.baseline.label if base is not None and base in reference.per_query else None
    return measures_table(
        [(label, original[original.index.isin(queries)], ours) for label, original, ours in pairs],
        metrics,
        baseline,
        tolerance,
    )


def _numbers(reference: Reference, system: str, metrics: Sequence[str]) -> pd.DataFrame:
    """The reference's per-query ``metrics`` of ``system`` as numbers; a cell that is not one is an error."""
    table = reference.per_query[system][list(metrics)]
    numbers = table.apply(pd.to_numeric, errors="coerce")
    bad = numbers.isna() & table.notna()
    if bad.any().any():
        metric = bad.any().idxmax()
        qid = bad[metric].idxmax()
        raise InputError(
            reference.per_query_file,
            f"{metric} of {system} for query {qid!r} is {table.loc[qid, metric]!r}, not a number",
        )
    return numbers


def _rankings(comparison: Comparison, reference: Reference, matched: list, row_run, notes: list[str]) -> pd.DataFrame:
    """KTU, Kendall's τ_b and RBO (``evaluators.reproduction.rankings_table``) of each row with a run on both sides."""
    if reference.kind == "table":
        return pd.DataFrame(columns=RANKING_COLUMNS)
    with_runs = [(s, name) for s, name in matched if name in reference.runs]
    if not with_runs or row_run is None:
        notes.append(
            f"Kendall's tau and RBO are not computable: {'the rows have no run files' if with_runs else reference.source + ' has no run files'} "
            "of the matched systems"
        )
        return pd.DataFrame(columns=RANKING_COLUMNS)
    return rankings_table(
        [(s.label, reference.runs[name](), row_run(s)) for s, name in with_runs], set(comparison.queries)
    )
