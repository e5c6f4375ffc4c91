"""``ragtrack compare --reference`` without MLflow: a comparison of hand-made rows against a published
table (exact differences, tolerance flags, unmatched systems named), against a job folder with
per-query values and runs (the measures of ``evaluators.reproduction`` and repro_eval on the same
inputs), and bad reference files (one line: file, line, problem)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.runs import Run, write_trec
from ragtrack.evaluators.reproduction import delta_relative_improvement, effect_ratio, ranking_agreement, rmse
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.comparison_report import html_report
from ragtrack.pipeline.analysis.comparison_tables import render
from ragtrack.pipeline.analysis.reference import check_reference, read_reference
from ragtrack.pipeline.records.csv_files import csv_text

QIDS = [f"q{i}" for i in range(12)]


def row(label: str, values, system: str | None = None, metrics=("ndcg@10", "recall@100")) -> SystemRun:
    frame = pd.DataFrame(
        {m: np.asarray(values) if i == 0 else np.asarray(values) ** 2 for i, m in enumerate(metrics)},
        index=pd.Index(QIDS, name="qid"),
    )
    return SystemRun(system or label, f"run-{label}", "job", "job", 0, frame, label=label)


def comparison_of(rows, baseline=0):
    return compare_systems(rows, ["ndcg@10", "recall@100"], rows[baseline], resamples=100)


ROWS = [
    row("bm25", np.linspace(0.1, 0.9, 12)),
    row("dense", np.linspace(0.3, 0.6, 12)),
    row("hybrid k=60", np.linspace(0.2, 1.0, 12), "hybrid"),
]


def mean(rows, label: str, metric: str) -> float:
    return float(next(r for r in rows if r.label == label).per_query[metric].mean())


def table_values(rows) -> dict:
    """bm25 exactly 0.0005 above its mean (within), dense 0.0006 below (outside), splade without a row."""
    return {
        "bm25": {"ndcg@10": mean(rows, "bm25", "ndcg@10") - 0.0005, "recall@100": mean(rows, "bm25", "recall@100")},
        "anserini-dense": {"ndcg@10": mean(rows, "dense", "ndcg@10") + 0.0006},
        "splade": {"ndcg@10": 0.7},
    }


def write_table(path, values: dict) -> None:
    if path.suffix == ".yaml":
        path.write_text(
            "".join(f"{s}:\n" + "".join(f"  {m}: {v!r}\n" for m, v in ms.items()) for s, ms in values.items())
        )
    else:
        sep = "\t" if path.suffix == ".tsv" else ","
        lines = ["# a comment", sep.join(["System", "metric", "value", "source"])]
        lines += [sep.join([s, m.upper(), repr(v), "paper"]) for s, ms in values.items() for m, v in ms.items()]
        path.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("suffix", [".tsv", ".csv", ".yaml"])
def test_a_published_table(tmp_path, suffix: str) -> None:
    values = table_values(ROWS)
    path = tmp_path / f"published{suffix}"
    write_table(path, values)
    comparison = comparison_of(ROWS)
    check = check_reference(comparison, read_reference(str(path)), ["dense=anserini-dense"])
    got = check.differences.set_index(["system", "metric"])
    assert list(got.index) == [("bm25", "ndcg@10"), ("bm25", "recall@100"), ("dense", "ndcg@10")]
    for (label, metric), reference in zip(
        got.index, (values["bm25"]["ndcg@10"], values["bm25"]["recall@100"], values["anserini-dense"]["ndcg@10"])
    ):
        assert got.loc[(label, metric), "difference"] == mean(ROWS, label, metric) - reference or reference == mean(
            ROWS, label, metric
        )
        assert got.loc[(label, metric), "reference_value"] == reference
    assert got["within_tolerance"].tolist() == [True, True, False]  # |Δ| = 0.0005 passes, 0.0006 fails
    assert got.loc[("bm25", "recall@100"), "difference"] == 0.0
    assert check.notes == [
        "the reference gives no recall@100 for anserini-dense",
        "reference systems matched by no row: splade (pair them with --reference-map ROW=REFERENCE)",
        "rows without a reference: hybrid k=60",
        f"per-query measures (RMSE, Kendall's tau, RBO) are not computable: {path} is a table of means",
    ]
    measures = check.measures.set_index(["system", "metric"])
    dense = measures.loc[("dense", "ndcg@10")]  # from the means: the same as per query over the same queries
    bm25_ours, dense_ours = mean(ROWS, "bm25", "ndcg@10"), mean(ROWS, "dense", "ndcg@10")
    bm25_ref, dense_ref = values["bm25"]["ndcg@10"], values["anserini-dense"]["ndcg@10"]
    assert dense["effect_ratio"] == pytest.approx((dense_ours - bm25_ours) / (dense_ref - bm25_ref), rel=1e-12)
    assert dense["delta_ri"] == pytest.approx(
        (dense_ref - bm25_ref) / bm25_ref - (dense_ours - bm25_ours) / bm25_ours, rel=1e-12
    )
    assert math.isnan(dense["rmse"]) and check.rankings.empty
    comparison.reference = check
    text = render(comparison, "table")
    assert max(map(len, text.splitlines())) <= 100 and "note: rows without a reference: hybrid k=60" in text
    assert (
        "bm25    ndcg@10 0.5000          0.4995 +0.0005     yes\n" in text
        and "anserini-dense    ndcg@10 0.4500          0.4506 -0.0006      no" in text
    )
    assert json.loads(render(comparison, "json"))["reference"]["notes"] == check.notes


def test_annotated_rows_carry_the_reference_figures(tmp_path) -> None:
    path = tmp_path / "t.tsv"
    write_table(path, table_values(ROWS))
    comparison = comparison_of(ROWS)
    comparison.reference = check_reference(comparison, read_reference(str(path)), ["dense=anserini-dense"])
    comparison.table = comparison.reference.annotate(comparison.table)
    rows = pd.DataFrame(json.loads(render(comparison, "json"))["rows"]).set_index(["system", "metric"])
    assert (
        rows.loc[("dense", "ndcg@10"), "reference"] == "anserini-dense"
        and rows.loc[("dense", "ndcg@10"), "reference_within_tolerance"] == False  # noqa: E712 (numpy's bool)
    )
    assert pd.isna(rows.loc[("hybrid k=60", "ndcg@10"), "reference"])
    assert "| bm25 | bm25 | ndcg@10 |" in render(comparison, "markdown") and r"\begin{tabular}{lllllll}" in render(
        comparison, "latex"
    )
    page = html_report(comparison, "t", [])
    assert (
        f'id="reference">Against the reference {path}</h2>' in page
        and "<td>anserini-dense</td>" in page
        and "rows without a reference" in page
    )


@pytest.mark.parametrize("suffix", [".tsv", ".yaml"])
def test_a_table_in_percent_is_one_line_naming_its_line(tmp_path, suffix: str) -> None:
    """Published tables often print 100 x the mean; a figure above 1 for a metric whose every per-query
    value lies in [0, 1] stops the check at that figure's line. A metric that can exceed 1 is compared."""
    path = tmp_path / f"t{suffix}"
    write_table(path, {"bm25": {"recall@100": 0.25, "ndcg@10": 49.95}})
    with pytest.raises(InputError) as raised:
        check_reference(comparison_of(ROWS), read_reference(str(path)))
    line = 4 if suffix == ".tsv" else 3
    assert str(raised.value) == (
        f"{path}:{line}: bm25 ndcg@10 is 49.95, but ndcg@10 lies in [0, 1] (here every query's value does): "
        "a table in percent? give fractions (0.4995, not 49.95)"
    )
    ranks = [row("bm25", np.linspace(1, 12, 12), metrics=("mean_rank", "ndcg@10"))]
    write_table(path, {"bm25": {"mean_rank": 6.0}})
    check = check_reference(compare_systems(ranks, ["mean_rank"], ranks[0], resamples=100), read_reference(str(path)))
    assert check.differences["difference"].tolist() == [0.5]


def test_nothing_matched_or_a_bad_pair_is_one_line(tmp_path) -> None:
    path = tmp_path / "t.tsv"
    write_table(path, {"splade": {"ndcg@10": 0.7}})
    reference = read_reference(str(path))
    with pytest.raises(
        RagtrackError,
        match=r"^no compared row matches a system of the reference .* \(splade\); rows: bm25, dense, "
        r"hybrid k=60; pair them with --reference-map ROW=REFERENCE$",
    ):
        check_reference(comparison_of(ROWS), reference)
    with pytest.raises(
        RagtrackError,
        match=r"^--reference-map 'bm25=splad': the reference has no system 'splad'; did you mean 'splade'\?",
    ):
        check_reference(comparison_of(ROWS), reference, ["bm25=splad"])
    with pytest.raises(
        RagtrackError,
        match=r"^--reference-map 'colbert=splade': no compared row 'colbert'; rows: bm25, dense, hybrid k=60$",
    ):
        check_reference(comparison_of(ROWS), reference, ["colbert=splade"])
    assert check_reference(comparison_of(ROWS), reference, ["hybrid=splade"]).differences["system"].tolist() == [
        "hybrid k=60"
    ]
    write_table(
        path, {"bm25": {"ndcg@11x": 0.5, "MRR": 0.4}}
    )  # a misspelt metric: nothing to check, not an empty table
    with pytest.raises(
        RagtrackError,
        match=r"^the reference .*t\.tsv gives none of the compared metrics \(ndcg@10, recall@100\) for bm25; "
        r"it gives NDCG@11X, MRR: compare those \(-m METRIC\)$",
    ):
        check_reference(comparison_of(ROWS), read_reference(str(path)))


def random_job(tmp_path, rng, names=("bm25", "dense", "hybrid")) -> tuple:
    """A job folder (results.json, per_query.csv, runs/) of random per-query values and rankings."""
    folder = tmp_path / "job"
    tables, runs = {}, {}
    for name in names:
        tables[name] = pd.DataFrame(
            {"ndcg@10": rng.uniform(0, 1, len(QIDS)), "recall@100": rng.uniform(0, 1, len(QIDS))},
            index=pd.Index(QIDS, name="qid"),
        )
        runs[name] = Run(
            name,
            {
                q: {f"d{j}": float(rng.uniform()) for j in rng.choice(40, size=int(rng.integers(1, 20)), replace=False)}
                for q in QIDS
            },
        )
        write_trec(runs[name], folder / "runs" / f"{name}.trec")
    per_query = pd.concat([t.reset_index().assign(system=n) for n, t in tables.items()])[
        ["system", "qid", "ndcg@10", "recall@100"]
    ]
    (folder / "per_query.csv").write_text(csv_text(per_query))
    results = {
        "dataset": {"hash": "abc"},
        "systems": {n: {m: float(t[m].mean()) for m in t.columns} for n, t in tables.items()},
    }
    (folder / "results.json").write_text(json.dumps(results))
    (folder / "config.yaml").write_text("evaluator:\n  ranking:\n    relevance_threshold: 2\n")
    return folder, tables, runs


@pytest.mark.parametrize("seed", range(3))
def test_a_job_folder_gives_the_reproduction_measures(tmp_path, seed: int) -> None:
    rng = np.random.default_rng(seed)
    folder, original, original_runs = random_job(tmp_path, rng)
    rows = [
        SystemRun(n, f"run-{n}", "job", "job", 0, t + rng.normal(0, 0.05, t.shape), label=n)
        for n, t in original.items()
    ]
    rows.append(SystemRun("hybrid", "run-h2", "job", "job", 0, original["hybrid"].copy(), label="hybrid k=1"))
    rows[2].label = "hybrid k=60"
    new_runs = {
        r.run_id: Run(
            r.label,
            {
                q: {d: s + rng.normal(0, 0.1) for d, s in docs.items()}
                for q, docs in original_runs[r.system].scores.items()
            },
        )
        for r in rows
    }
    comparison = compare_systems(rows, ["ndcg@10", "recall@100"], rows[0], QIDS[1:], resamples=100)  # q0 not compared
    reference = read_reference(str(folder))
    assert reference.kind == "job" and reference.dataset_hash == "abc" and reference.threshold == 2
    check = check_reference(comparison, reference, row_run=lambda s: new_runs[s.run_id])
    assert check.notes == []
    measures = check.measures.set_index(["system", "metric"])
    queries = QIDS[1:]
    from repro_eval.measure.effectiveness import RMSE  # the reference implementation
    from repro_eval.measure.overall_effects import DRI, ER
    from statsmodels.stats.weightstats import ttost_paired  # the reference for the equivalence test

    def topics(table, metric):
        return {q: {metric: float(table.loc[q, metric])} for q in queries}

    for r in rows:
        for metric in ("ndcg@10", "recall@100"):
            x, y = original[r.system].loc[queries, metric].to_numpy(), r.per_query.loc[queries, metric].to_numpy()
            got = measures.loc[(r.label, metric)]
            assert got["queries"] == len(queries) and got["rmse"] == pytest.approx(rmse(x, y), rel=1e-12)
            assert got["rmse"] == pytest.approx(
                RMSE(topics(original[r.system], metric), topics(r.per_query, metric))[metric], rel=1e-12
            )
            assert got["equivalence_p"] == pytest.approx(
                ttost_paired(y, x, -check.tolerance, check.tolerance)[0], rel=1e-9
            )
            row_diff = check.differences.set_index(["system", "metric"]).loc[(r.label, metric)]
            assert row_diff["difference"] == pytest.approx(
                r.per_query.loc[queries, metric].mean() - original[r.system][metric].mean(), abs=1e-15
            )
            if r is rows[0]:
                assert math.isnan(got["effect_ratio"])
                continue
            xb, yb = original["bm25"].loc[queries, metric].to_numpy(), rows[0].per_query.loc[queries, metric].to_numpy()
            assert got["effect_ratio"] == pytest.approx(effect_ratio(x, xb, y, yb), rel=1e-12)
            assert got["delta_ri"] == pytest.approx(delta_relative_improvement(x, xb, y, yb), rel=1e-12, abs=1e-15)
            args = (
                topics(original[r.system], metric),
                topics(original["bm25"], metric),
                topics(r.per_query, metric),
                topics(rows[0].per_query, metric),
            )
            assert got["effect_ratio"] == pytest.approx(ER(*args)[metric], rel=1e-10)
            assert got["delta_ri"] == pytest.approx(DRI(*args)[metric], rel=1e-10, abs=1e-14)
    rankings = check.rankings.set_index("system")
    for r in rows:
        assert rankings.loc[r.label].tolist() == list(
            ranking_agreement(original_runs[r.system], new_runs[r.run_id], queries=set(queries))
        )
    assert len(set(ranking_agreement(original_runs["bm25"], new_runs["run-bm25"]))) == 3  # every query would differ


def test_a_job_folder_without_per_query_values_or_runs_says_so(tmp_path) -> None:
    folder, original, _ = random_job(tmp_path, np.random.default_rng(0))
    (folder / "per_query.csv").unlink()
    for run in (folder / "runs").iterdir():
        run.unlink()
    rows = [SystemRun(n, f"run-{n}", "job", "job", 0, t, label=n) for n, t in original.items()]
    check = check_reference(
        compare_systems(rows, ["ndcg@10"], rows[0], resamples=100),
        read_reference(str(folder / "results.json")),
        row_run=lambda s: None,
    )
    assert check.measures.empty and check.rankings.empty and (check.differences["difference"] == 0).all()
    assert check.notes == [
        f"per-query measures (RMSE, effect ratio, ΔRI) are not computable: {folder / 'results.json'} has no per-query "
        "values of the matched systems (per_query.csv)",
        f"Kendall's tau and RBO are not computable: {folder / 'results.json'} has no run files of the matched systems",
    ]


BAD = [
    ("t.tsv", "system\tmetric\tvalue\nbm25\tndcg@10\tabc\n", r"t\.tsv:2: value 'abc' of bm25 ndcg@10 is not a number$"),
    (
        "t.tsv",
        "system\tmetric\tvalue\nbm25\tndcg@10\tnan\n",
        r"t\.tsv:2: value 'nan' of bm25 ndcg@10 is not a finite number$",
    ),
    (
        "t.tsv",
        "system\tmetric\tvalue\nbm25\tndcg@10\t-inf\n",
        r"t\.tsv:2: value '-inf' of bm25 ndcg@10 is not a finite number$",
    ),
    (
        "t.tsv",
        "system\tmetric\tvalue\nbm25\tndcg@10\t0_6789\n",
        r"t\.tsv:2: value '0_6789' of bm25 ndcg@10 is not a number$",
    ),  # Python's float: 6789
    (
        "t.csv",
        "system,metric,value\nbm25,ndcg@10,\u0660.5\n",
        r"t\.csv:2: value '\u0660\.5' of bm25 ndcg@10 is not a number$",
    ),  # an Arabic-Indic zero
    ("t.yaml", "bm25:\n  ndcg@10: 0x1p-1\n", r"t\.yaml:2: value '0x1p-1' of bm25 ndcg@10 is not a number$"),
    (
        "t.csv",
        "# c\nsystem,score\nbm25,0.5\n",
        r"t\.csv:2: the header has no metric, value column \(a table's columns: system, metric, value\)$",
    ),
    (
        "t.csv",
        "system,metric,value\nbm25,ndcg@10,0.5\n\nbm25,NDCG@10,0.6\n",
        r"t\.csv:4: NDCG@10 of bm25 given twice \(first on line 2\)$",
    ),
    ("t.csv", "system,metric,value\nbm25,ndcg@10\n", r"t\.csv:2: 2 fields, the header has 3$"),
    ("t.csv", "system,metric,value\n,ndcg@10,0.5\n", r"t\.csv:2: empty system name$"),
    (
        "t.csv",
        "# only a comment\n",
        r"t\.csv: no figures: a table has a header naming system, metric, value and a row per figure$",
    ),
    ("t.yaml", "bm25:\n  ndcg@10: 0.5\n  recall@100: [1]\n", r"t\.yaml:3: bm25: expected metric: value$"),
    ("t.yaml", "bm25:\n  ndcg@10: high\n", r"t\.yaml:2: value 'high' of bm25 ndcg@10 is not a number$"),
    ("t.yaml", "- bm25\n", r"t\.yaml:1: expected a mapping of system to \{metric: value\}$"),
    ("t.yaml", "bm25: {ndcg@10: 0.5\n", r"t\.yaml:2: invalid YAML: "),
    ("t.yaml", "bm25: 0.5\n", r"t\.yaml:1: expected a system name with a mapping of metric to value$"),
    ("results.json", '{"systems": {"bm25": {"ndcg@10": 0.5}\n', r"results\.json:2: invalid JSON: "),
    (
        "results.json",
        '{"dataset": {}}',
        r"results\.json: no 'systems' mapping of system to \{metric: mean\}: not a ragtrack job's results\.json$",
    ),
    ("t.txt", "bm25 ndcg@10 0.5\n", r"t\.txt: not a reference: give a table"),
]


@pytest.mark.parametrize(("name", "content", "message"), BAD, ids=[f"{n}-{i}" for i, (n, _, _) in enumerate(BAD)])
def test_bad_reference_files_are_one_line_naming_file_and_line(tmp_path, name: str, content: str, message: str) -> None:
    (tmp_path / name).write_text(content)
    with pytest.raises(InputError) as raised:
        read_reference(str(tmp_path / name))
    assert str(raised.value).startswith(str(tmp_path) + "/") and "\n" not in str(raised.value)
    assert raised.value.path.endswith(name) or name == "results.json"
    import re

    assert re.search(message, str(raised.value)), str(raised.value)


def test_a_bad_per_query_value_or_folder(tmp_path) -> None:
    folder, original, _ = random_job(tmp_path, np.random.default_rng(1))
    (folder / "per_query.csv").write_text("system,qid,ndcg@10,recall@100\r\nbm25,q1,oops,0.5\r\n")
    rows = [SystemRun("bm25", "run-bm25", "job", "job", 0, original["bm25"], label="bm25")]
    with pytest.raises(InputError, match=r"per_query\.csv: ndcg@10 of bm25 for query 'q1' is 'oops', not a number$"):
        check_reference(compare_systems(rows, ["ndcg@10"], rows[0], resamples=100), read_reference(str(folder)))
    (folder / "per_query.csv").write_text("qid,ndcg@10\r\nq1,0.5\r\n")
    with pytest.raises(
        InputError, match=r"per_query\.csv:1: no 'system' and 'qid' columns: not a ragtrack per_query\.csv$"
    ):
        read_reference(str(folder))
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match=r"empty: no results\.json: not the output folder of a ragtrack job$"):
        read_reference(str(tmp_path / "empty"))
    assert read_reference(str(tmp_path / "absent")) is None  # then an MLflow run id


def test_the_shipped_scifact_table_reads() -> None:
    from ragtrack.pipeline.configuration.config import datasets_dir

    values = read_reference(str(datasets_dir() / "scifact" / "published.tsv")).values
    assert (
        values["bm25"] == {"ndcg@10": 0.6789, "recall@100": 0.9253, "recall@1000": 0.9767}
        and values["dense"]["ndcg@10"] == 0.64508
    )


def test_the_documented_data_path_finds_the_shipped_table_from_any_folder(tmp_path, monkeypatch) -> None:
    """``--reference data/scifact/published.tsv`` (README, ablations.md) outside a checkout: the shipped
    file; a ``data/`` file of the current folder comes first; a missing one stays missing (a run id)."""
    monkeypatch.chdir(tmp_path)
    reference = read_reference("data/scifact/published.tsv")
    assert reference.source == "data/scifact/published.tsv" and reference.values["bm25"]["ndcg@10"] == 0.6789
    (tmp_path / "data" / "scifact").mkdir(parents=True)
    (tmp_path / "data" / "scifact" / "published.tsv").write_text("system\tmetric\tvalue\nbm25\tndcg@10\t0.5\n")
    assert read_reference("data/scifact/published.tsv").values == {"bm25": {"ndcg@10": 0.5}}
    assert read_reference("data/scifact/absent.tsv") is None and read_reference("data/nfcorpus/published.tsv") is None


def test_a_reference_per_query_table_with_a_repeated_or_blank_query_is_one_line(tmp_path: Path) -> None:
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "results.json").write_text(json.dumps({"systems": {"bm25": {"ndcg@10": 0.5}}}))
    for rows, problem in (
        (["bm25,q1,0.5", "bm25,q2,0.25", "bm25,q1,0.5"], r":4: query 'q1' of bm25 is given twice \(first on line 2\)$"),
        (["bm25,q1,0.5", "bm25,,0.25"], r":3: empty qid$"),
        (["bm25,q1,0.5", ",q2,0.25"], r":3: empty system$"),
    ):
        (folder / "per_query.csv").write_text("\r\n".join(["system,qid,ndcg@10", *rows]) + "\r\n")
        with pytest.raises(InputError, match=r"per_query\.csv" + problem):
            read_reference(str(folder))
