"""Slices: every metric per value of a query attribute (question type, query length, ...), with CIs.

An *attribute* gives each query of the run one string value. Three sources, all optional:

- a slices file, ``dataset.slices_file``: tab-separated, UTF-8, a header ``qid<TAB><attribute>[<TAB>...]``
  then one line per query. Strict: every line has the header's number of columns; a query id that is
  not in the dataset's queries.jsonl, a repeated id or an empty value is an error naming file and line;
  every query of the run must have a line (lines of queries of other splits are allowed);
- queries.jsonl ``metadata`` (BEIR's optional per-query object): ``dataset.slice_metadata`` lists the
  keys to slice by; every query of the run needs the key with a string, integer or boolean value;
- automatic, ``slices: [query_length, relevant_docs]``:
  ``query_length`` - terciles of the number of whitespace-separated tokens: with the lengths sorted
  ascending, c1 = the ⌈n/3⌉-th and c2 = the ⌈2n/3⌉-th smallest; ``short`` ≤ c1 < ``medium`` ≤ c2 <
  ``long``. Equal lengths always share a slice (ties go to the shorter slice), so slices can differ in
  size and an empty one is left out;
  ``relevant_docs`` - the number of judged documents with grade ≥ the relevance threshold: ``0``,
  ``1``, ``2``, ``3_or_more``.

A slice's metric is the mean over the slice's queries that count for that metric (the evaluator's
rule: for ranking metrics every judged query, as trec_eval counts them, or with ``without_relevant:
exclude`` those with a relevant judgment; for answer metrics those with gold answers), so it equals the mean over the slice's counted rows of per_query.csv, whose
``slice.<attribute>`` columns name each query's values. CIs are the same seeded percentile bootstrap
as the overall ones (``evaluators.base.aggregate``), drawn within the slice.

Outputs: results.json ``slices`` (see :func:`summarize`), MLflow metrics
:func:`ragtrack.pipeline.records.layout.slice_key` (child run) and ``<system>/`` + that key (parent run).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
from omegaconf import OmegaConf

from ragtrack.core.data import Dataset, load_queries
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import read_lines
from ragtrack.core.words import counted
from ragtrack.evaluators.base import aggregate
from ragtrack.evaluators.ranking import RELEVANCE_THRESHOLD
from ragtrack.pipeline.records import layout

AUTOMATIC = ("query_length", "relevant_docs")
COLUMN_PREFIX = "slice."  # per_query.csv column of an attribute: slice.question_type
_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass(frozen=True)
class Attribute:
    """One query attribute: its value for each query of the run, the values in reporting order, where it
    came from (``slices_file``, ``metadata`` or ``automatic``) and the rule that assigned it."""

    name: str
    values: dict[str, str]
    order: tuple[str, ...]
    source: str
    rule: str


@dataclass
class Findings:
    """What an analysis adds to a job's outputs: top-level results.json sections, MLflow metrics of
    the parent run and of each system's child run, and files logged as parent artifacts."""

    results: dict = field(default_factory=dict)
    parent_metrics: dict[str, float] = field(default_factory=dict)
    system_metrics: dict[str, dict[str, float]] = field(default_factory=dict)
    artifacts: list[Path] = field(default_factory=list)

    def merge(self, other: Findings) -> Findings:
        systems = {
            name: {**self.system_metrics.get(name, {}), **other.system_metrics.get(name, {})}
            for name in {**self.system_metrics, **other.system_metrics}
        }
        return Findings(
            {**self.results, **other.results},
            {**self.parent_metrics, **other.parent_metrics},
            systems,
            [*self.artifacts, *other.artifacts],
        )


# --------------------------------------------------------------------------- attributes


def query_attributes(cfg: Mapping, dataset: Dataset, threshold: int = RELEVANCE_THRESHOLD) -> list[Attribute]:
    """The attributes a job's config asks for (``dataset.slices_file``, ``dataset.slice_metadata``,
    ``slices``), checked before any system runs."""
    data = cfg.get("dataset") or {}
    attributes = []
    if data.get("slices_file"):
        attributes += read_slices_file(Path(str(data["slices_file"])), dataset)
    keys = _string_list(data.get("slice_metadata"), "dataset.slice_metadata")
    attributes += [metadata_attribute(key, dataset) for key in keys]
    for name in _string_list(cfg.get("slices"), "slices"):
        if name not in AUTOMATIC:
            raise RagtrackError(f"slices: unknown automatic slice {name!r}; known: {', '.join(AUTOMATIC)}")
        attributes.append(
            query_length_terciles(dataset.queries) if name == "query_length" else relevant_documents(dataset, threshold)
        )
    names = [a.name for a in attributes]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise RagtrackError(
            f"slice attribute {repeated[0]!r} is defined twice (slices file, dataset.slice_metadata or slices)"
        )
    return attributes


def _string_list(value, key: str) -> list[str]:
    if value is None:
        return []
    items = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
    if not isinstance(items, list) or not all(isinstance(item, str) and item for item in items):
        raise RagtrackError(f"{key} must be a list of names, got {items!r}")
    return items


def _ordered(values: dict[str, str]) -> tuple[str, ...]:
    return tuple(sorted(set(values.values())))


def read_slices_file(path: Path, dataset: Dataset) -> list[Attribute]:
    """The attributes of a slices file (format in the module docstring), strictly parsed."""
    queries_path = dataset.queries_path
    lines = read_lines(path)
    header = next(lines, None)
    if header is None:
        raise InputError(path, "empty slices file; expected a header 'qid<TAB><attribute>...'")
    number, text = header
    names = text.split("\t")
    if names[0] != "qid" or len(names) < 2:
        raise InputError(path, f"header must be 'qid<TAB><attribute>[<TAB>...]', got {text!r}", number)
    for name in names[1:]:
        if not _NAME.match(name) or set(name) == {"."}:
            raise InputError(path, f"attribute name {name!r} must be letters, digits, '_', '.' or '-'", number)
    if len(set(names)) < len(names):
        raise InputError(path, "the header repeats a column name", number)
    columns: list[dict[str, str]] = [{} for _ in names[1:]]
    first_line: dict[str, int] = {}
    known: set[str] | None = (
        None  # every query id of the queries file, read only if a line names a query outside the run
    )
    for number, text in lines:
        cells = text.split("\t")
        if len(cells) != len(names):
            raise InputError(path, f"expected {len(names)} tab-separated columns, got {len(cells)}", number)
        qid = cells[0].strip()
        if qid in first_line:
            raise InputError(path, f"duplicate query id {qid!r} (first on line {first_line[qid]})", number)
        first_line[qid] = number
        if qid not in dataset.queries:
            known = known if known is not None else _all_query_ids(dataset)
            if qid not in known:
                raise InputError(
                    path,
                    f"unknown query id {qid!r} (not in {queries_path.name if queries_path else 'the dataset'})",
                    number,
                )
            continue  # a query of another split
        for name, column, cell in zip(names[1:], columns, cells[1:]):
            if not cell.strip():
                raise InputError(path, f"empty {name!r} value for query {qid!r}", number)
            column[qid] = cell.strip()
    missing = [qid for qid in dataset.queries if qid not in first_line]
    if missing:
        raise InputError(path, f"no line for {counted(len(missing), 'query')} of the run, the first: {missing[0]!r}")
    return [
        Attribute(
            name,
            {qid: column[qid] for qid in dataset.queries},
            _ordered(column),
            "slices_file",
            f"column {name!r} of {path.name}",
        )
        for name, column in zip(names[1:], columns)
    ]


def _all_query_ids(dataset: Dataset) -> set[str]:
    """Every query id of the dataset's queries file, judged in its split or not (BEIR's queries.jsonl)."""
    path = dataset.queries_path
    return set(load_queries(path)[0]) if path is not None and path.name.endswith(".jsonl") else set(dataset.queries)


def metadata_attribute(key: str, dataset: Dataset) -> Attribute:
    """Attribute ``key`` of the queries' ``metadata`` objects; a missing or non-scalar value is an error
    naming the queries.jsonl line."""
    queries_path = dataset.queries_path
    if not _NAME.match(key):
        raise RagtrackError(f"dataset.slice_metadata: key {key!r} must be letters, digits, '_', '.' or '-'")
    values = {}
    for qid in dataset.queries:
        value = dataset.metadata.get(qid, {}).get(key)
        if isinstance(value, bool):
            value = str(value).lower()
        elif isinstance(value, (str, int)) and str(value).strip():
            value = str(value).strip()
        else:
            problem = "no" if value is None else f"a {type(value).__name__} (not a string, integer or boolean) as"
            raise InputError(
                queries_path or f"{dataset.source} queries",
                f"query {qid!r} has {problem} metadata {key!r} (dataset.slice_metadata)",
                _line_of(queries_path, qid) if queries_path and queries_path.name.endswith(".jsonl") else None,
            )
        values[qid] = value
    return Attribute(key, values, _ordered(values), "metadata", f"metadata key {key!r} of queries.jsonl")


def _line_of(path: Path, qid: str) -> int | None:
    return next((number for number, text in read_lines(path) if json.loads(text).get("_id") == qid), None)


def query_length_terciles(queries: Mapping[str, str]) -> Attribute:
    """``short``/``medium``/``long`` by whitespace-token count (rule in the module docstring)."""
    lengths = {qid: len(text.split()) for qid, text in queries.items()}
    ranked = sorted(lengths.values())
    n = len(ranked)
    first, second = ranked[math.ceil(n / 3) - 1], ranked[math.ceil(2 * n / 3) - 1]
    values = {
        qid: "short" if length <= first else "medium" if length <= second else "long" for qid, length in lengths.items()
    }
    order = tuple(v for v in ("short", "medium", "long") if v in values.values())
    rule = f"whitespace tokens: short <= {first} < medium <= {second} < long (terciles, ties to the shorter slice)"
    return Attribute("query_length", values, order, "automatic", rule)


def relevant_documents(dataset: Dataset, threshold: int) -> Attribute:
    """``0``/``1``/``2``/``3_or_more`` judged documents with grade ≥ ``threshold``."""
    counts = {qid: sum(g >= threshold for g in dataset.qrels.get(qid, {}).values()) for qid in dataset.queries}
    values = {qid: str(count) if count < 3 else "3_or_more" for qid, count in counts.items()}
    order = tuple(v for v in ("0", "1", "2", "3_or_more") if v in values.values())
    return Attribute("relevant_docs", values, order, "automatic", f"judged documents with grade >= {threshold}")


_WH_WORDS = {
    "what": "what",
    "who": "who",
    "whom": "who",
    "whose": "who",
    "when": "when",
    "where": "where",
    "which": "which",
    "why": "why",
    "how": "how",
}


def question_type(question: str) -> str:
    """The question's wh-word type: the first word (lower-cased, punctuation stripped) that is what,
    who/whom/whose (-> who), when, where, which, why or how decides; ``how`` followed by ``many`` or
    ``much`` is ``how_many``; no such word: ``other``. ("In what year ...?" -> what.)"""
    words = [re.sub(r"[^\w]", "", word) for word in question.lower().split()]
    for position, word in enumerate(words):
        if word in _WH_WORDS:
            following = words[position + 1] if position + 1 < len(words) else ""
            return "how_many" if word == "how" and following in ("many", "much") else _WH_WORDS[word]
    return "other"


def question_types_tsv(queries: Mapping[str, str]) -> str:
    """A slices file with one attribute, ``question_type`` (:func:`question_type`), in query order."""
    return "".join(["qid\tquestion_type\n", *(f"{qid}\t{question_type(text)}\n" for qid, text in queries.items())])


# --------------------------------------------------------------------------- scoring


def annotate(per_query: pd.DataFrame, attributes: list[Attribute]) -> pd.DataFrame:
    """The per-query table with a ``slice.<attribute>`` column per attribute appended."""
    if not attributes:
        return per_query
    labels = pd.DataFrame(
        {COLUMN_PREFIX + a.name: [a.values.get(qid, "") for qid in per_query.index] for a in attributes},
        index=per_query.index,
    )
    return pd.concat([per_query, labels], axis=1)


def slice_summaries(
    per_query: pd.DataFrame, counted: pd.DataFrame, attribute: Attribute, seed: int
) -> dict[str, pd.DataFrame]:
    """Per value: mean, std, 95% CI and n of every metric column of ``counted`` over the value's
    counted queries (``counted``: booleans, queries x metrics, as the evaluators decided)."""
    out = {}
    for value in attribute.order:
        rows = [qid for qid in counted.index if attribute.values.get(qid) == value]
        parts = []
        for mask, metrics in _columns_by_mask(counted.loc[rows]).items():
            parts.append(aggregate(per_query.loc[rows, metrics], pd.Series(mask, index=rows), seed=seed))
        out[value] = pd.concat(parts).loc[list(counted.columns)] if parts else pd.DataFrame()
    return out


def _columns_by_mask(counted: pd.DataFrame) -> dict[tuple[bool, ...], list[str]]:
    """Metric columns grouped by identical counted-query masks (one bootstrap per group)."""
    groups: dict[tuple[bool, ...], list[str]] = {}
    for column in counted.columns:
        groups.setdefault(tuple(bool(v) for v in counted[column]), []).append(column)
    return groups


def summarize(
    systems: Mapping[str, tuple[pd.DataFrame, pd.DataFrame]], attributes: list[Attribute], seed: int
) -> Findings:
    """Slice findings of every system (``systems``: name -> (per-query table, counted mask)).

    results.json ``slices``::

        {"attributes": {"<attribute>": {"source": "slices_file|metadata|automatic", "rule": "...",
                                         "queries": {"<value>": <queries with that value>, ...}}},
         "systems": {"<system>": {"<attribute>": {"<value>": {"<metric>": {"mean", "std", "ci_low", "ci_high", "n"}}}}}}

    Values appear in reporting order; ``n`` is the number of the value's queries that count for the
    metric (mean, std and CI are ``null`` when it is 0).
    """
    if not attributes:
        return Findings()
    findings = Findings()
    described = {
        a.name: {
            "source": a.source,
            "rule": a.rule,
            "queries": {v: sum(x == v for x in a.values.values()) for v in a.order},
        }
        for a in attributes
    }
    report: dict = {}
    for system, (per_query, judged) in systems.items():
        metrics: dict[str, float] = {}
        for attribute in attributes:
            keys = _value_keys(attribute)
            for value, summary in slice_summaries(per_query, judged, attribute, seed).items():
                report.setdefault(system, {}).setdefault(attribute.name, {})[value] = {
                    metric: {k: (None if pd.isna(v) else float(v)) if k != "n" else int(v) for k, v in row.items()}
                    for metric, row in summary.to_dict(orient="index").items()
                }
                for metric, row in summary.iterrows():
                    key = layout.slice_key(str(metric), attribute.name, keys[value])
                    metrics |= {
                        f"{key}{suffix}": row[column]
                        for suffix, column in layout.SUMMARY_SUFFIXES.items()
                        if pd.notna(row[column])
                    }
                    if pd.notna(row["mean"]):
                        findings.parent_metrics[layout.system_metric_key(system, key)] = float(row["mean"])
        findings.system_metrics[system] = metrics
    findings.results = {"slices": {"attributes": described, "systems": report}}
    return findings


def _value_keys(attribute: Attribute) -> dict[str, str]:
    """Each value as an MLflow-legal key part (:func:`layout.key_part`); two values that would
    share one key are an error."""
    keys = {value: layout.key_part(value) for value in attribute.order}
    seen: dict[str, str] = {}
    for value, key in keys.items():
        if key in seen:
            raise RagtrackError(
                f"slice attribute {attribute.name!r}: values {seen[key]!r} and {value!r} map to the same MLflow key {key!r}"
            )
        seen[key] = value
    return keys
