"""``ragtrack compare`` over a real sweep, the statistics of a comparison by hand, failure analysis,
and ``ragtrack reproduce``."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from io import StringIO
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.significance import effect_size, holm, paired_t_test, randomization_test
from ragtrack.pipeline.analysis.compare import differing_settings, run_compare, select_jobs, short_settings
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems, find_baseline, is_best
from ragtrack.pipeline.analysis.comparison_plots import numeric_params
from ragtrack.pipeline.analysis.comparison_report import failure_report, html_report, verdicts
from ragtrack.pipeline.analysis.comparison_tables import render
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.commands.reproduce import reproduce
from ragtrack.pipeline.execution.terminal_report import report_table
from ragtrack.pipeline.records.layout import CONFIG_FILE, PER_QUERY_FILE, TAG_DATASET_HASH, TAG_PARENT, TAG_SYSTEM
from tests.support import TOY, ragtrack, reproduce_cli


def system(label: str, values: dict[str, list[float]], qids=("q1", "q2", "q3", "q4")) -> SystemRun:
    frame = pd.DataFrame(values, index=pd.Index(list(qids), name="qid"))
    return SystemRun(label, f"run-{label}", label, f"job-{label}", 0, frame, label=label)


BASE = system("bm25", {"ndcg@10": [0.5, 0.2, 0.0, 1.0]})
BETTER = system("hybrid", {"ndcg@10": [0.75, 0.5, 0.0, 1.0]})
WORSE = system("dense", {"ndcg@10": [0.25, 0.2, 0.5, 0.0]})


def test_comparison_statistics_by_hand() -> None:
    comparison = compare_systems([BASE, BETTER, WORSE], ["ndcg@10"], BASE, seed=1, resamples=1000)
    rows = comparison.table.set_index("system")
    assert rows.loc["hybrid", "mean"] == pytest.approx(2.25 / 4) and rows.loc["hybrid", "delta"] == pytest.approx(
        0.55 / 4
    )
    assert (rows.loc["hybrid", ["wins", "ties", "losses"]] == [2, 2, 0]).all()
    assert (rows.loc["dense", ["wins", "ties", "losses"]] == [1, 1, 2]).all()
    raw = [paired_t_test(s.per_query["ndcg@10"], BASE.per_query["ndcg@10"]).p_value for s in (BETTER, WORSE)]
    assert rows.loc[["hybrid", "dense"], "p_ttest"].tolist() == pytest.approx(raw)
    assert rows.loc[["hybrid", "dense"], "p_ttest_holm"].tolist() == pytest.approx(holm(raw).tolist())
    # differences 0.25, 0.3 (and two zeros): exact test over 4 sign vectors, |±0.25 ±0.3| >= 0.55 for 2 of them
    assert rows.loc["hybrid", "p_randomization"] == pytest.approx(
        randomization_test(BETTER.per_query["ndcg@10"], BASE.per_query["ndcg@10"]).p_value
    )
    assert rows.loc["hybrid", "p_randomization"] == pytest.approx(0.5)
    assert rows["best"].tolist() == [False, True, False] and np.isnan(rows.loc["bm25", "p_ttest"])
    effect = effect_size(BETTER.per_query["ndcg@10"], BASE.per_query["ndcg@10"])
    assert rows.loc["hybrid", ["delta_ci_low", "delta_ci_high", "cohens_d", "rank_biserial", "mdd"]].tolist() == [
        effect.ci_low,
        effect.ci_high,
        effect.cohens_d,
        effect.rank_biserial,
        effect.mdd,
    ]
    # 4 queries: Δ 0.1375 < MDD (δ*(4) · sd) and p > 0.05, so the query set could have missed it
    assert rows.loc["hybrid", "mdd"] > rows.loc["hybrid", "delta"] and rows.loc["hybrid", "underpowered"] == True  # noqa: E712
    assert pd.isna(rows.loc["bm25", "underpowered"])


def test_formats_mark_the_best_value() -> None:
    comparison = compare_systems([BASE, BETTER], ["ndcg@10"], BASE)
    assert "0.5625 [" in render(comparison, "table") and "]*" in render(comparison, "table")
    assert "| hybrid | **0.5625" in render(comparison, "markdown")
    assert r"\textbf{0.5625" in render(comparison, "latex") and r"$\Delta$ ndcg@10" in render(comparison, "latex")
    assert pd.read_csv(StringIO(render(comparison, "csv")))["mean"].tolist() == pytest.approx([0.425, 0.5625])
    payload = json.loads(render(comparison, "json"))
    assert payload["baseline"] == "bm25" and payload["rows"][1]["best"] is True
    with pytest.raises(RagtrackError, match="unknown format 'html'"):
        render(comparison, "html")


def test_means_equal_but_for_float_rounding_tie_for_the_best_mark() -> None:
    """0.2, 0.4, 0.6 summed in two orders: 0.4000000000000001 and 0.39999999999999997, the same mean;
    both rows are best in every format, the report and a job's terminal table (one rule, ``is_best``)."""
    base = system("bm25", {"p@5": [0.2, 0.2, 0.2]}, qids=("q1", "q2", "q3"))
    rows = [
        base,
        system("dense", {"p@5": [0.2, 0.4, 0.6]}, qids=("q1", "q2", "q3")),
        system("hybrid", {"p@5": [0.6, 0.4, 0.2]}, qids=("q1", "q2", "q3")),
    ]
    comparison = compare_systems(rows, ["p@5"], base, resamples=100)
    means = comparison.table["mean"].tolist()
    assert means[1] != means[2] and comparison.table["best"].tolist() == [False, True, True]
    assert render(comparison, "table").count("]*") == 2 and render(comparison, "markdown").count("| **0.4000") == 2
    assert render(comparison, "latex").count(r"\textbf{0.4000") == 2
    assert html_report(comparison, "t", []).count('<tr class="best">') == 2
    assert verdicts(comparison)[0].startswith("dense best on p@5 (tied with hybrid): 0.4000, +0.2000 over bm25")
    job_table = report_table(pd.DataFrame({"bm25": [0.2], "dense": [means[1]], "hybrid": [means[2]]}, index=["p@5"]))
    assert job_table.count("0.4000*") == 2
    tied = compare_systems(
        [rows[1], rows[2]], ["p@5"], rows[2], resamples=100
    )  # the baseline ties: it is the verdict's best
    assert verdicts(tied)[0] == "all 2 systems equal on p@5: 0.4000"  # ties are named, never "next ..., +0.0000"
    with_bm25 = compare_systems(rows[::-1], ["p@5"], rows[2], resamples=100)
    assert verdicts(with_bm25)[0].startswith(
        "hybrid (the baseline) best on p@5 (tied with dense): 0.4000; next bm25, -0.2000"
    )
    rng = np.random.default_rng(0)  # against the rule written out: max - v <= 1e-12 * |max|
    for _ in range(200):
        values = pd.Series(
            rng.choice([0.0, 1 / 3, 2 / 3, 1.0, -0.5], size=5) * (1 + rng.choice([0, 1e-13, 1e-11], size=5))
        )
        values[rng.random(5) < 0.2] = np.nan
        expected = [bool(v == v and values.max() - v <= 1e-12 * abs(values.max())) for v in values]
        assert is_best(values).tolist() == expected


def test_a_misspelled_metric_is_named_with_the_closest_logged_one() -> None:
    timed = system(
        "bm25", {"ndcg@10": [0.5, 0.2, 0.0, 1.0], "mrr": [0.5, 0.2, 0.0, 1.0], "retrieval_ms": [1.0, 2.0, 3.0, 4.0]}
    )
    with pytest.raises(RagtrackError, match=r"^'ndgc@10' is not a logged metric; did you mean 'ndcg@10'\?$"):
        compare_systems([timed, BETTER], ["ndcg@10", "ndgc@10"], timed)
    with pytest.raises(
        RagtrackError, match="^'bleu' is not a logged metric; logged: ndcg@10, mrr$"
    ):  # timings are no metric
        compare_systems([timed], ["bleu"], timed)
    with pytest.raises(RagtrackError, match="^'ndcg@7' is not a logged metric; logged: ndcg@10$"):  # the cutoffs logged
        compare_systems([timed], ["ndcg@7"], timed)
    with pytest.raises(
        RagtrackError, match="^'mrr' is not a logged metric for hybrid; logged: ndcg@10$"
    ):  # logged by every row
        compare_systems([timed, BETTER], ["mrr"], timed)


def test_csv_escapes_text_that_looks_like_a_formula_but_no_number() -> None:
    hostile = system('=HYPERLINK("http://x")', {"ndcg@10": [0.25, 0.2, 0.0, 0.0]})
    rows = list(
        csv.DictReader(StringIO(render(compare_systems([BASE, hostile], ["ndcg@10"], BASE), "csv"), newline=""))
    )
    assert (
        rows[1]["system"] == '\'=HYPERLINK("http://x")'
        and float(rows[1]["delta"]) < 0
        and rows[1]["delta"].startswith("-")
    )


HOSTILE_QIDS = {"q1": "=1+1", "q2": "+33", "q3": "-5", "q4": "@SUM(A1)", "q5": "'quoted", "q6": "NA"}


def test_hostile_query_ids_are_escaped_in_per_query_csv_and_read_back_exactly(tmp_path) -> None:
    """Query ids that a spreadsheet would run as formulas: per_query.csv holds them escaped, metrics as
    plain numbers, and ``ragtrack compare`` reads back the ids as they were."""
    data = tmp_path / "data"
    shutil.copytree(TOY, data)
    for name in ("queries.jsonl", "qrels/test.tsv"):
        text = (data / name).read_text()
        for qid, hostile in HOSTILE_QIDS.items():
            text = text.replace(f'"_id": "{qid}"', f'"_id": {json.dumps(hostile)}').replace(
                f"\n{qid}\t", f"\n{hostile}\t"
            )
        (data / name).write_text(text)
    done = ragtrack(
        tmp_path, "run", "dataset=beir", f"dataset.path={data}", "retriever=[bm25]", "fusion=[]", "hydra.run.dir=job"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = list(csv.DictReader((tmp_path / "job" / "per_query.csv").open(newline="")))
    assert {row["qid"] for row in rows} == {"'" + qid for qid in HOSTILE_QIDS.values() if qid != "NA"} | {"NA"}
    assert all(not cell.startswith(("=", "+", "-", "@")) for row in rows for cell in row.values())
    assert all(float(row["ndcg@10"]) >= 0 for row in rows)
    comparison, _ = run_compare(f"sqlite:///{tmp_path}/mlruns/mlflow.db", fmt="csv", log_to_mlflow=False, failures=0)
    assert set(comparison.systems[0].per_query.index) == set(HOSTILE_QIDS.values())


def test_baseline_by_label_system_or_run_id() -> None:
    systems = [BASE, BETTER, WORSE]
    assert find_baseline(systems, None) is BASE
    assert find_baseline(systems, "hybrid") is BETTER and find_baseline(systems, "job-dense") is WORSE
    with pytest.raises(
        RagtrackError, match="baseline 'splade' is not a compared system or run; rows: bm25, hybrid, dense"
    ):
        find_baseline(systems, "splade")
    sweep = [system(f"hybrid k={k}", {"ndcg@10": [0.5, 0.5, 0.5, 0.5]}) for k in (1, 10)]
    for row in sweep:
        row.system = "hybrid"
    with pytest.raises(
        RagtrackError, match="^baseline 'hybrid' matches 2 rows; pass one of: 'hybrid k=1', 'hybrid k=10'$"
    ):
        find_baseline([BASE, *sweep], "hybrid")
    assert find_baseline([BASE, *sweep], "hybrid k=10") is sweep[1]


def test_rows_are_named_by_the_settings_that_differ_between_jobs() -> None:
    assert short_settings({"retriever.bm25.k1": "0.6", "retriever.bm25.b": "0.4"}) == "k1=0.6 b=0.4"
    assert short_settings({"retriever.bm25.k": "1", "fusion.rrf.k": "60"}) == "retriever.bm25.k=1 fusion.rrf.k=60"
    jobs = {
        job: SimpleNamespace(
            data=SimpleNamespace(tags={"ragtrack.overrides": f"experiment=bm25_params retriever.bm25.k1={k1} +x=1"})
        )
        for job, k1 in (("a", "0.6"), ("b", "1.2"))
    }
    assert differing_settings(jobs) == {"a": {"retriever.bm25.k1": "0.6"}, "b": {"retriever.bm25.k1": "1.2"}}


def test_sweep_latest_names_the_experiment_searched_and_the_sweeps_found() -> None:
    def job(run_id: str, sweep: str | None) -> SimpleNamespace:
        return SimpleNamespace(
            info=SimpleNamespace(status="FINISHED", run_id=run_id),
            data=SimpleNamespace(tags={"ragtrack.sweep": sweep} if sweep else {}),
        )

    with pytest.raises(RagtrackError, match="^no sweep in experiment 'scifact'; run one with"):
        select_jobs([job("a", None)], "latest", "scifact")
    jobs, scope = select_jobs(
        [job("a", "/o/multiruns/s1"), job("b", "/o/multiruns/s2"), job("c", None)], "latest", "scifact"
    )
    assert list(jobs) == ["b"] and scope == "sweep s2 of experiment 'scifact'; its sweeps: s1, s2"
    with pytest.raises(RagtrackError, match="^no finished runs of sweep 's3' in experiment 'scifact'; sweeps: s1, s2$"):
        select_jobs([job("a", "/o/multiruns/s1"), job("b", "/o/multiruns/s2")], "s3", "scifact")


def test_a_wide_table_becomes_a_block_per_metric() -> None:
    metrics = ["ndcg@10", "recall@100", "mrr"]
    rows = [
        system(name, {m: values for m in metrics})
        for name, values in (("bm25", [0.5, 0.2, 0.0, 1.0]), ("hybrid", [0.75, 0.5, 0.0, 1.0]))
    ]
    comparison = compare_systems(rows, metrics, rows[0], resamples=100)
    text = render(comparison, "table")
    assert max(map(len, text.splitlines())) <= 100 and render(comparison, "table", width=None).count("\n") < text.count(
        "\n"
    )
    for metric in metrics:
        assert f"\n{metric}\n" in "\n" + text
    assert text.splitlines()[1].split() == ["mean", "[95%", "CI]", "Δ", "p", "t-test", "p", "rand.", "W/T/L"]


def test_failure_report_shows_why() -> None:
    dataset = load_beir(TOY)
    base = system("bm25", {"ndcg@10": [1.0, 1.0]}, qids=("q1", "q2"))
    worse = system("dense", {"ndcg@10": [0.5, 1.0]}, qids=("q1", "q2"))
    runs = {
        "run-bm25": Run("bm25", {"q1": {"d1": 2.0, "d2": 1.0}}),
        "run-dense": Run("dense", {"q1": {"d3": 2.0, "d1": 1.0}}),
    }
    report = failure_report(compare_systems([base, worse], ["ndcg@10"], base, ["q1", "q2"]), worse, runs, dataset)
    assert "1 of 2 queries lose" in report and "## q1: ndcg@10 1.0000 -> 0.5000 (-0.5000)" in report
    assert "Query: how do plants make glucose from sunlight" in report
    assert "  - d1 (grade 2) Photosynthesis" in report
    assert "bm25 top 5:\n  1. d1 (grade 2) Photosynthesis\n  2. d2 (grade 0) Cellular respiration" in report
    assert "dense top 5:\n  1. d3 Plate tectonics\n  2. d1 (grade 2) Photosynthesis" in report


def test_compare_over_a_real_sweep(toy_sweep, tmp_path) -> None:
    client = MlflowClient(toy_sweep.uri)
    judged, _ = run_compare(
        toy_sweep.uri, sweep="latest", metrics=["ndcg@10"], log_to_mlflow=False
    )  # no --baseline: the sweep's default
    assert (
        judged.baseline.label == "hybrid k=60 (default)"
        and judged.table.set_index("system").loc["hybrid k=10", "delta"] == 0.0
    )
    tuned, tuned_text = run_compare(
        toy_sweep.uri, sweep="latest", metrics=["ndcg@10"], folds=3, resamples=100
    )  # k-fold tuning, logged
    assert "Tuned on other folds (3-fold cross-validation on ndcg@10" in tuned_text and tuned_text.count("  fold ") == 3
    logged_tuning = client.get_run(tuned.logged.split()[0])
    assert logged_tuning.data.metrics["tuning/ndcg_at_10/cross_validated"] == pytest.approx(
        float(tuned.table.set_index("system").loc["hybrid k=60 (default)", "mean"])
    )
    assert "tuning.json" in {a.path for a in client.list_artifacts(logged_tuning.info.run_id)}
    comparison, text = run_compare(
        toy_sweep.uri,
        sweep="latest",
        metrics=["ndcg@10", "map"],
        baseline="bm25",
        fmt="markdown",
        plot_file=str(tmp_path / "plot.png"),
        failures=3,
    )
    labels = [s.label for s in comparison.systems]
    assert labels == ["bm25", "dense", *[f"hybrid k={k}" for k in toy_sweep.ks]]  # bm25/dense shown once
    assert [s.params for s in comparison.systems] == [{}, {}, *[{"fusion.rrf.k": str(k)} for k in toy_sweep.ks]]
    assert numeric_params(comparison.systems) == ["fusion.rrf.k"]  # the plot's numeric axis
    for s in comparison.systems:  # the logged means and CIs, recomputed from the per-query tables
        logged = client.get_run(s.run_id).data.metrics
        row = comparison.table[
            (comparison.table["system"] == s.label) & (comparison.table["metric"] == "ndcg@10")
        ].iloc[0]
        assert (row["mean"], row["ci_low"], row["ci_high"]) == pytest.approx(
            (logged["ndcg_at_10"], logged["ndcg_at_10_ci_low"], logged["ndcg_at_10_ci_high"]), abs=1e-12
        )
    assert "| hybrid k=30 |" in text and len(comparison.queries) == 6
    assert (tmp_path / "plot.png").read_bytes()[:4] == b"\x89PNG"
    logged = client.search_runs(
        [client.get_experiment_by_name(toy_sweep.experiment).experiment_id],
        filter_string="tags.`ragtrack.comparison` = 'true'",
    )
    assert (
        logged and logged[0].info.run_name.startswith("comparison vs bm25 (") and logged[0].data.tags["ragtrack.sweep"]
    )
    assert logged[0].data.metrics["hybrid_k_30/ndcg_at_10"] == pytest.approx(
        float(comparison.table.query("system == 'hybrid k=30' and metric == 'ndcg@10'")["mean"].iloc[0])
    )  # each row's metrics name it
    note = logged[0].data.tags["mlflow.note.content"]
    assert (
        note.startswith("- ")
        and " best on ndcg@10 (tied with hybrid k=1, " in note
        and "| hybrid k=30 |" in note
        and "artifacts/report.html)" in note
    )
    artifacts = {f.path for f in client.list_artifacts(logged[0].info.run_id)} | {
        f.path for f in client.list_artifacts(logged[0].info.run_id, "failures")
    }
    assert {
        "comparison.md",
        "comparison.csv",
        "comparison.json",
        "comparison.png",
        "failures/dense.md",
        "failures/hybrid_k=30.md",
    } <= artifacts


def test_compare_cli(toy_sweep, capsys) -> None:
    assert (
        cli_main(
            [
                "compare",
                "--tracking-uri",
                toy_sweep.uri,
                "--sweep",
                "latest",
                "--format",
                "csv",
                "--no-log",
                "-m",
                "mrr",
            ]
        )
        == 0
    )
    table = pd.read_csv(StringIO(capsys.readouterr().out))
    assert set(table["metric"]) == {"mrr"} and len(table) == 2 + len(toy_sweep.ks)
    assert cli_main(["compare", "--tracking-uri", toy_sweep.uri, "--experiment", "nope"]) == 2
    assert "ragtrack: error: no MLflow experiment 'nope'" in capsys.readouterr().err
    assert cli_main(["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "2001-01-01_00-00-00"]) == 2
    assert "no finished runs of sweep" in capsys.readouterr().err


def test_reproduce_reports_identical_metrics_or_each_mismatch(toy_sweep, tmp_path) -> None:
    client = MlflowClient(toy_sweep.uri)
    job = next(
        r
        for r in client.search_runs([client.get_experiment_by_name(toy_sweep.experiment).experiment_id])
        if r.info.run_name == "hybrid k=30"
    )
    done = reproduce_cli(job.info.run_id, toy_sweep.uri, "--output-dir", str(tmp_path / "kept"))
    assert done.returncode == 0 and f"reproduced run {job.info.run_id}: all 54 metrics identical" in done.stdout, (
        done.stderr[-2000:]
    )
    assert (
        "ragtrack-reproduce-" not in done.stdout + done.stderr
    )  # no temporary folder is named: it is gone when the command ends
    assert (
        f"reproduced job's outputs: {tmp_path / 'kept'}" in done.stdout
        and (tmp_path / "kept" / "per_query.csv").is_file()
    )
    measures, rankings = done.stdout.split("\nreproduction measures")[1].split(
        "\nrankings:"
    )  # identical: RMSE 0, ER 1, ΔRI 0, tau 1, RBO 1
    table = pd.read_fwf(StringIO("\n".join(measures.splitlines()[1:])))  # columns aligned; blank where not computable
    others = table[table["system"] != "bm25"]
    assert (
        len(table) == 54
        and set(table["rmse"]) == {0.0}
        and table[table["system"] == "bm25"][["effect_ratio", "delta_ri"]].isna().all().all()
    )
    assert set(map(str, zip(others["effect_ratio"], others["delta_ri"]))) <= {
        "(1.0, 0.0)",
        "(nan, 0.0)",
        "(nan, nan)",
    }  # ER 0/0 where no improvement
    assert "NaN" not in measures
    assert [line.split()[1:] for line in rankings.splitlines()[2:]] == [["1", "1", "1"]] * 3  # KTU, tau_b, RBO
    original = job.data.metrics["hybrid/ndcg_at_10"]
    client.log_metric(job.info.run_id, "hybrid/ndcg_at_10", original + 0.25, step=1)
    try:
        done = reproduce_cli(job.info.run_id, toy_sweep.uri)
        assert done.returncode == 1 and "did NOT reproduce: 1 of 54 metrics differ" in done.stdout
        line = next(line.split() for line in done.stdout.splitlines() if line.startswith("hybrid ndcg@10"))
        assert [float(v) for v in line[2:]] == pytest.approx([original + 0.25, original, -0.25], abs=1e-12)
    finally:
        client.log_metric(job.info.run_id, "hybrid/ndcg_at_10", original, step=2)
    client.set_tag(job.info.run_id, "ragtrack.dataset_hash", "0" * 64)
    try:
        with pytest.raises(RagtrackError, match="changed since run"):
            reproduce(job.info.run_id, toy_sweep.uri)  # fails on the hash, before running anything
    finally:
        client.set_tag(job.info.run_id, "ragtrack.dataset_hash", job.data.tags["ragtrack.dataset_hash"])


def test_the_python_compare_equals_the_command_on_the_same_runs(toy_sweep, tmp_path) -> None:
    """``ragtrack.compare`` on the run files a sweep logged gives every statistic ``ragtrack compare`` gives."""
    import ragtrack
    from ragtrack.core.runs import read_trec

    metrics = ["ndcg@10", "recall@100", "map"]
    comparison, _ = run_compare(
        toy_sweep.uri, toy_sweep.experiment, metrics=metrics, seed=5, resamples=500, failures=0, log_to_mlflow=False
    )
    client = MlflowClient(toy_sweep.uri)
    runs = {
        s.label: read_trec(client.download_artifacts(s.run_id, "run.trec", str(tmp_path / s.run_id)))
        for s in comparison.systems
    }
    table = ragtrack.compare(
        runs, TOY / "qrels" / "test.tsv", metrics, baseline=comparison.baseline.label, seed=5, resamples=500
    )
    assert table.attrs == {"baseline": comparison.baseline.label, "queries": len(comparison.queries)}
    expected = comparison.table.set_index(["system", "metric"])
    assert len(expected) == len(runs) * len(metrics) >= 9
    pd.testing.assert_frame_equal(table, expected, check_exact=True, check_like=False)


@pytest.mark.slow  # a whole job or several: make test-slow
def test_compare_refuses_jobs_of_different_thresholds_unless_allowed(tmp_path) -> None:
    """Two toy jobs at relevance thresholds 1 and 2: refused in one line naming both jobs and the
    difference; --allow-mixed keeps them, each row labelled with its threshold, over the queries
    relevant at both thresholds."""
    env = {**os.environ, "RAGTRACK_ROOT": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    for threshold in (1, 2):
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "ragtrack.pipeline.commands.cli",
                "run",
                "dataset=toy",
                "encoder=hashing",
                f"evaluator.ranking.relevance_threshold={threshold}",
                f"hydra.job.name=t{threshold}",
            ],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert done.returncode == 0, done.stderr[-3000:]
    uri = f"sqlite:///{tmp_path}/mlruns/mlflow.db"
    with pytest.raises(
        RagtrackError,
        match=r"^jobs '.*' \(run \w{8}\) and '.*' \(run \w{8}\) differ in relevance threshold \(1 vs 2\); .* --allow-mixed",
    ) as refused:
        run_compare(uri, metrics=["map"], log_to_mlflow=False)
    assert "\n" not in str(refused.value)
    comparison, _ = run_compare(uri, metrics=["map"], log_to_mlflow=False, allow_mixed=True, failures=0)
    assert len(comparison.systems) == 6 and {s.label.rsplit(" [", 1)[1] for s in comparison.systems} == {
        "threshold 1]",
        "threshold 2]",
    }
    assert 0 < len(comparison.queries)


def test_compare_against_a_reference_job(toy_sweep, tmp_path, capsys) -> None:
    """``--reference`` with the MLflow run of the sweep's k=30 job: each row against the system of its
    name there (every hybrid row against that hybrid), the k=30 row reproducing it exactly; the measures
    equal ``evaluators.reproduction`` on the two jobs' per_query.csv and run files (read from their output
    folders), and are logged on the comparison run; a system run gives that system. A bad table: one
    line naming file and line, exit 2."""
    from ragtrack.evaluators.reproduction import ranking_agreement, rmse
    from ragtrack.pipeline.analysis.compare import load_logged_reference
    from ragtrack.pipeline.analysis.reference import read_reference

    client = MlflowClient(toy_sweep.uri)
    runs = client.search_runs([client.get_experiment_by_name(toy_sweep.experiment).experiment_id])
    job = next(r for r in runs if r.info.run_name == "hybrid k=30")
    comparison, text = run_compare(
        toy_sweep.uri,
        sweep="latest",
        metrics=["ndcg@10", "map"],
        failures=0,
        reference=job.info.run_id,
        reference_map=["dense=dense"],
    )
    check = comparison.reference
    assert check.notes == [] and max(map(len, text.splitlines())) <= 100
    differences = check.differences.set_index(["system", "metric"])
    assert set(differences["reference"]) == {"bm25", "dense", "hybrid"} and len(differences) == 2 * (
        2 + len(toy_sweep.ks)
    )
    assert (differences.loc["hybrid k=30", "difference"] == 0).all() and differences["within_tolerance"].loc[
        "hybrid k=30"
    ].all()
    measures, rankings = check.measures.set_index(["system", "metric"]), check.rankings.set_index("system")
    assert measures.loc["hybrid k=30", "rmse"].tolist() == [0.0, 0.0] and rankings.loc[
        "hybrid k=30"
    ].tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-15)
    folders = {
        rrf_k(path / "config.yaml"): path
        for path in toy_sweep.root.glob("outputs/multiruns/*/*/")
        if (path / "results.json").exists()
    }
    original, other = read_reference(str(folders[30])), read_reference(str(folders[1]))
    queries = comparison.queries
    for metric in ("ndcg@10", "map"):
        x, y = original.per_query["hybrid"].loc[queries, metric], other.per_query["hybrid"].loc[queries, metric]
        assert measures.loc[("hybrid k=1", metric), "rmse"] == pytest.approx(rmse(x, y), abs=1e-15)
    expected = ranking_agreement(original.runs["hybrid"](), other.runs["hybrid"](), queries=set(queries))
    assert rankings.loc["hybrid k=1"].tolist() == pytest.approx(list(expected), abs=1e-15)
    logged = client.get_run(comparison.logged.split()[0]).data
    assert logged.params["reference"] == job.info.run_id and logged.params["reference_tolerance"] == "0.0005"
    assert logged.metrics["hybrid_k_1/ndcg_at_10/reference/rmse"] == pytest.approx(
        measures.loc[("hybrid k=1", "ndcg@10"), "rmse"]
    )
    assert (
        logged.metrics["hybrid_k_30/reference/ktu"]
        == logged.metrics["hybrid_k_30/reference/kendall_tau_b"]
        == pytest.approx(1.0, abs=1e-15)
    )
    child = next(
        r
        for r in runs
        if r.data.tags.get("mlflow.parentRunId") == job.info.run_id and r.data.tags["ragtrack.system"] == "hybrid"
    )
    system = load_logged_reference(client, child.info.run_id, tmp_path)  # a system run: that system only
    assert (
        list(system.values) == list(system.per_query) == list(system.runs) == ["hybrid"]
        and system.values["hybrid"] == original.values["hybrid"]
    )
    pd.testing.assert_frame_equal(system.per_query["hybrid"], original.per_query["hybrid"])
    assert (
        system.runs["hybrid"]().scores == original.runs["hybrid"]().scores
        and system.threshold == original.threshold == 1
    )
    table = tmp_path / "published.tsv"
    table.write_text("system\tmetric\tvalue\nbm25\tndcg@10\t0.9\nbm25\tmap\tn/a\n")
    assert (
        cli_main(
            ["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "latest", "--no-log", "--reference", str(table)]
        )
        == 2
    )
    assert capsys.readouterr().err == f"ragtrack: error: {table}:3: value 'n/a' of bm25 map is not a number\n"
    assert (
        cli_main(["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "latest", "--no-log", "--reference", "0" * 32])
        == 2
    )
    assert "no such file or folder, and no such run in the tracking store" in capsys.readouterr().err
    assert cli_main(["compare", "--tracking-uri", toy_sweep.uri, "--reference-map", "bm25=x"]) == 2
    assert capsys.readouterr().err == (
        "ragtrack: error: --reference-map and --tolerance check against a reference: give it with "
        "--reference RUN_OR_TABLE\n"
    )


def rrf_k(config) -> int:
    """fusion.rrf.k of a job's config.yaml."""
    from omegaconf import OmegaConf

    return OmegaConf.select(OmegaConf.load(config), "fusion.rrf.k")


def logged_job(
    client,
    experiment_id: str,
    name: str,
    config: dict,
    dataset_hash: str,
    rows: dict[str, dict[str, list[float]]],
    folder,
) -> dict[str, str]:
    """A finished job as ``ragtrack run`` logs it (parent run with config.yaml and the dataset hash, a
    child run per system with per_query.csv, written into ``folder`` first); its system run ids by system."""
    from omegaconf import OmegaConf

    parent = client.create_run(experiment_id, run_name=name, tags={TAG_DATASET_HASH: dataset_hash}).info.run_id
    folder.mkdir(exist_ok=True)
    OmegaConf.save(OmegaConf.create(config), folder / CONFIG_FILE)
    client.log_artifact(parent, str(folder / CONFIG_FILE))
    children = {}
    for name_, columns in rows.items():
        child = client.create_run(
            experiment_id, run_name=f"{name_} · {name}", tags={TAG_PARENT: parent, TAG_SYSTEM: name_}
        ).info.run_id
        client.log_param(child, "retriever", name_)
        pd.DataFrame({"system": name_, "qid": [f"q{i}" for i in range(1, 7)], **columns}).to_csv(
            folder / PER_QUERY_FILE, index=False
        )
        client.log_artifact(child, str(folder / PER_QUERY_FILE))
        client.set_terminated(child, "FINISHED")
        children[name_] = child
    client.set_terminated(parent, "FINISHED")
    return children


def test_identical_jobs_merge_and_changed_qrels_keep_their_judged_queries(tmp_path) -> None:
    """The user's trial, as MLflow holds it: two identical bm25 + hybrid jobs (their hybrid timings
    differ), then a third after one grade of the dataset folder changed (2 -> 1). The identical jobs'
    rows are shown once (not the third's, of other qrels) and either job's run ids pick them as the baseline; the refusal names the two
    jobs apart; --allow-mixed compares the 6 queries judged in every job; --plot writes the format of
    its suffix into a folder it makes."""
    data = tmp_path / "data"
    shutil.copytree(TOY, data)
    old_hash = load_beir(data).hash
    qrels = data / "qrels" / "test.tsv"
    qrels.write_text(qrels.read_text().replace("q1\td1\t2", "q1\td1\t1"))
    config = {
        "dataset": {
            "type": "beir",
            "name": "data",
            "path": str(data),
            "split": "test",
            "qrels_file": None,
            "slices_file": None,
            "slice_metadata": [],
        },
        "evaluator": {"ranking": {"relevance_threshold": 1}},
    }
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    experiment = client.create_experiment("ragtrack-data", artifact_location=str(tmp_path / "artifacts"))
    bm25 = {"ndcg@10": [1.0, 0.5, 0.25, 0.0, 1.0, 0.5], "retrieval_ms": [0.5] * 6}
    hybrid = {"ndcg@10": [1.0, 0.75, 0.5, 0.25, 1.0, 0.5]}
    first = logged_job(
        client,
        experiment,
        "bm25_job",
        config,
        old_hash,
        {"bm25": bm25, "hybrid": {**hybrid, "retrieval_ms": [1.5] * 6}},
        tmp_path / "upload",
    )
    second = logged_job(
        client,
        experiment,
        "bm25_job",
        config,
        old_hash,
        {"bm25": bm25, "hybrid": {**hybrid, "retrieval_ms": [2.5] * 6}},
        tmp_path / "upload",
    )
    changed = {
        "ndcg@10": [0.9, 0.5, 0.25, 0.0, 1.0, 0.5]
    }  # bm25's scores the same under the new grade: still its own row
    third = logged_job(
        client,
        experiment,
        "bm25_job",
        config,
        load_beir(data).hash,
        {"bm25": bm25, "hybrid": changed},
        tmp_path / "upload",
    )
    jobs = {r.info.run_id: r.info.run_id[:8] for r in client.search_runs([experiment]) if TAG_SYSTEM not in r.data.tags}
    with pytest.raises(
        RagtrackError,
        match=r"^jobs 'bm25_job' \(run (\w{8})\) and 'bm25_job' \(run (\w{8})\) differ in qrels \(dataset hash\) "
        r"\(\w{12} vs \w{12}\); compare them apart",
    ) as refused:
        run_compare(uri, metrics=["ndcg@10"], log_to_mlflow=False)
    assert len({word for word in str(refused.value).split() if word.rstrip(")") in jobs.values()}) == 2
    plot = tmp_path / "new" / "folder" / "comparison.pdf"
    comparison, _ = run_compare(
        uri,
        metrics=["ndcg@10"],
        baseline=second["hybrid"],
        log_to_mlflow=False,
        allow_mixed=True,
        failures=0,
        resamples=100,
        plot_file=str(plot),
    )
    assert [(s.system, s.run_id) for s in comparison.systems] == [
        ("bm25", first["bm25"]),
        ("hybrid", first["hybrid"]),
        ("bm25", third["bm25"]),
        ("hybrid", third["hybrid"]),
    ]
    assert comparison.baseline is comparison.systems[1] and comparison.queries == [f"q{i}" for i in range(1, 7)]
    assert plot.read_bytes()[:5] == b"%PDF-"
    for wrong in ("comparison.txt", "comparison"):  # refused before the store is read
        with pytest.raises(
            RagtrackError, match=rf"^--plot {wrong}: name a .png, .pdf, .svg file \(the suffix picks the format\)$"
        ):
            run_compare(f"sqlite:///{tmp_path}/missing/mlflow.db", plot_file=wrong)
