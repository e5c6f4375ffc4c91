"""A benchmark: systems over several datasets (pipeline/analysis/benchmark.py) — its statistics by hand, its
formats, readable row labels, published references matched by dataset, ``ragtrack compare`` over two
datasets' jobs in MLflow, and ``ragtrack.benchmark`` from Python."""

from __future__ import annotations

import json
import shutil
from io import StringIO
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

import ragtrack
from ragtrack.core.errors import RagtrackError
from ragtrack.evaluators.significance import holm, randomization_test
from ragtrack.pipeline.analysis.benchmark import benchmark, render_benchmark
from ragtrack.pipeline.analysis.compare import readable_settings, short_settings
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.comparison_tables import latex_escape
from ragtrack.pipeline.analysis.reference import canonical_dataset, read_reference
from ragtrack.pipeline.records.layout import TAG_BENCHMARK, TAG_DATASET, TAG_PARENT, TAG_SYSTEM
from tests.support import TOY
from tests.support import ragtrack as ragtrack_cli

RNG = np.random.default_rng(7)


def rows(dataset: str, n: int, shifts: dict[str, float]) -> list[SystemRun]:
    """Per system a per-query ndcg@10: a shared random base plus the system's shift (and a little noise)."""
    base = RNG.uniform(0.2, 0.8, n)
    qids = pd.Index([f"q{i}" for i in range(n)], name="qid")
    return [
        SystemRun(
            name,
            f"{dataset}-{name}",
            dataset,
            dataset,
            0,
            pd.DataFrame({"ndcg@10": np.clip(base + shift + RNG.normal(0, 0.01, n), 0, 1)}, index=qids),
            label=name,
        )
        for name, shift in shifts.items()
    ]


def two_datasets() -> dict:
    a = rows("a", 40, {"bm25": 0.0, "hybrid": 0.1, "dense": -0.1})
    b = rows("b", 30, {"bm25": 0.0, "hybrid": 0.0, "dense": 0.05})
    return {
        "a": compare_systems(a, ["ndcg@10"], a[0], resamples=2000),
        "b": compare_systems(b, ["ndcg@10"], b[0], resamples=2000),
    }


def test_benchmark_figures_by_hand() -> None:
    comparisons = two_datasets()
    result = benchmark(comparisons, pooled=True, resamples=2000)
    means = result.means("ndcg@10")
    for dataset, comparison in comparisons.items():
        for s in comparison.systems:
            assert means.loc[s.label, dataset] == pytest.approx(s.per_query["ndcg@10"].mean(), abs=1e-15)
    assert means["average"].tolist() == pytest.approx(means[["a", "b"]].mean(axis=1).tolist())
    marks = result.marks("ndcg@10")
    for dataset, comparison in comparisons.items():
        table = comparison.table.set_index("system")
        base = comparison.baseline.per_query["ndcg@10"]
        raw = [randomization_test(s.per_query["ndcg@10"], base, resamples=2000).p_value for s in comparison.systems[1:]]
        for s, p in zip(comparison.systems[1:], holm(raw)):
            assert table.loc[s.label, "p_randomization_holm"] == pytest.approx(p)
            expected = int(np.sign(table.loc[s.label, "delta"])) if p < 0.05 else 0
            assert marks.loc[s.label, dataset] == expected
    assert (
        marks.loc["hybrid", "a"] == 1
        and marks.loc["dense", "a"] == -1
        and marks.loc["hybrid", "b"] == 0
        and marks.loc["dense", "b"] == 1
    )
    per_row, per_dataset = result.wins_ties_losses("ndcg@10")
    assert per_row.to_dict() == {"bm25": "", "hybrid": "1/1/0", "dense": "1/0/1"}
    assert per_dataset.to_dict() == {"a": "1/0/1", "b": "1/1/0"}
    pooled = result.pooled.set_index("system")
    merged = {
        s.label: pd.concat([c.systems[i].per_query["ndcg@10"] for c in comparisons.values()], ignore_index=True)
        for i, s in enumerate(comparisons["a"].systems)
    }
    assert pooled.loc["hybrid", "n"] == 70 and pooled.loc["hybrid", "mean"] == pytest.approx(merged["hybrid"].mean())
    assert pooled.loc["hybrid", "p_randomization"] == pytest.approx(
        randomization_test(merged["hybrid"], merged["bm25"], resamples=2000).p_value
    )


def test_formats_of_a_benchmark() -> None:
    result = benchmark(two_datasets())
    text = render_benchmark(result, "table")
    assert "average" in text and "W/T/L" in text and "†" in text and "‡" in text
    markdown = render_benchmark(result, "markdown")
    hybrid = next(line for line in markdown.splitlines() if line.startswith("| hybrid"))
    assert "**" in hybrid and "†" in hybrid  # best on dataset a, and significantly better there
    latex = render_benchmark(result, "latex")
    assert (
        latex.count(r"\begin{tabular}") == latex.count(r"\end{tabular}") == 1
        and r"$^{\dagger}$" in latex
        and r"\textbf{" in latex
    )
    assert latex.count("{") == latex.count("}") and "†" not in latex
    assert all(line.endswith(r"\\") for line in latex.splitlines() if " & " in line)
    frame = pd.read_csv(StringIO(render_benchmark(result, "csv")))
    assert set(frame["dataset"]) == {"a", "b"} and len(frame) == 6
    assert json.loads(render_benchmark(result, "json"))["datasets"] == ["a", "b"]


def test_average_only_for_rows_on_every_dataset_and_one_baseline() -> None:
    comparisons = two_datasets()
    only_a = rows("a", 40, {"bm25": 0.0, "splade": 0.2})
    comparisons["a"] = compare_systems(only_a, ["ndcg@10"], only_a[0], resamples=500)
    result = benchmark(comparisons)
    means = result.means("ndcg@10")
    assert (
        pd.isna(means.loc["splade", "average"])
        and pd.isna(means.loc["splade", "b"])
        and not pd.isna(means.loc["bm25", "average"])
    )
    renamed = rows("b", 30, {"BM25": 0.0, "dense": 0.1})
    comparisons["b"] = compare_systems(renamed, ["ndcg@10"], renamed[0], resamples=500)
    with pytest.raises(RagtrackError, match="baselines differ"):
        benchmark(comparisons)


def test_row_labels_are_readable_and_latex_safe() -> None:
    params = {
        "reranker": "[llm]",
        "reranker.llm.model": "lex",
        "reranker.llm.base_url": r"http\://127.0.0.1\:8011/v1",
        "reranker.llm.api_key_env": "OPENAI_API_KEY",
        "reranker.llm.depth": "10",
        "fusion.rrf.k": "30",
        "paths.cache_dir": "/tmp/x",
        "normalization": "none",
        "encoder": "minilm",
        "run_name": "documents",
    }
    assert readable_settings(params) == {
        "reranker.llm.model": "lex",
        "reranker.llm.depth": "10",
        "fusion.rrf.k": "30",
        "normalization": "none",
        "encoder": "minilm",
    }
    assert short_settings(params) == "model=lex depth=10 k=30 normalization=none encoder=minilm"
    assert latex_escape(r"bm25_multifield k=30 50% a&b #1 {x} ~^\ Δ") == (
        r"bm25\_multifield k=30 50\% a\&b \#1 \{x\} \textasciitilde{}"
        r"\textasciicircum{}\textbackslash{} $\Delta$"
    )


def test_published_beir_figures_are_matched_by_dataset() -> None:
    assert [canonical_dataset(n) for n in ("scifact", "beir-scifact-test", "beir/cqadupstack/android", "NFCorpus")] == [
        "scifact",
        "scifact",
        "cqadupstack-android",
        "nfcorpus",
    ]
    published = read_reference("beir")
    assert published.for_dataset("beir-scifact-test").values["bm25"] == {
        "ndcg@10": 0.6789,
        "recall@100": 0.9253,
        "recall@1000": 0.9767,
    }
    assert published.for_dataset("nfcorpus").values["bm25_multifield"] == {
        "ndcg@10": 0.3254,
        "recall@100": 0.25,
        "recall@1000": 0.3718,
    }
    assert published.for_dataset("scifact").values["dense"] == {"ndcg@10": 0.64508}
    assert len(published.datasets) == 29
    with pytest.raises(RagtrackError, match="no figures for dataset 'toy'"):
        published.for_dataset("toy")


def test_compare_two_datasets_from_mlflow(tmp_path: Path) -> None:
    """Two jobs of two datasets (toy, and toy2 with one judgment fewer): one command prints the
    benchmark table, logs one benchmark run (its description the table, the .tex among its artifacts),
    and every system run carries its dataset's name."""
    other = tmp_path / "toy2"
    shutil.copytree(TOY, other)
    qrels = (other / "qrels" / "test.tsv").read_text().splitlines()
    (other / "qrels" / "test.tsv").write_text(
        "\n".join(qrels[:-1]) + "\n"
    )  # one judgment fewer: another dataset (hash)
    for args in (["dataset=toy"], ["dataset=beir", f"dataset.path={other}", "dataset.name=toy2"]):
        done = ragtrack_cli(
            tmp_path,
            "run",
            *args,
            "retriever=[bm25,bm25_multifield]",
            "fusion=[]",
            "retriever.bm25_multifield.alias='BM25 (multifield)'",
        )
        assert done.returncode == 0, done.stderr
    done = ragtrack_cli(
        tmp_path, "compare", "--experiment", "ragtrack-toy,ragtrack-toy2", "--format", "markdown", "--pooled"
    )  # rows by alias
    assert done.returncode == 0, done.stderr
    header = next(line for line in done.stdout.splitlines() if line.startswith("| ndcg@10"))
    assert header.split(" | ")[1:4] == ["toy", "toy2", "average"]
    assert any(line.startswith("| BM25 (multifield) |") for line in done.stdout.splitlines())
    assert "Pooled over every dataset's queries" in done.stdout
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlruns' / 'mlflow.db'}")
    experiments = {e.name: e.experiment_id for e in client.search_experiments()}
    runs = client.search_runs([experiments["ragtrack-toy"], experiments["ragtrack-toy2"]])
    logged = [r for r in runs if r.data.tags.get(TAG_BENCHMARK) == "true"]
    assert len(logged) == 1 and "| ndcg@10 | toy | toy2 | average |" in logged[0].data.tags["mlflow.note.content"]
    artifacts = {a.path for a in client.list_artifacts(logged[0].info.run_id)}
    assert {"benchmark.tex", "benchmark.md", "benchmark.csv", "report.html", "toy", "toy2"} <= artifacts
    system_runs = [r for r in runs if TAG_SYSTEM in r.data.tags and TAG_PARENT in r.data.tags]
    assert len(system_runs) == 4 and {r.data.tags[TAG_DATASET] for r in system_runs} == {"toy", "toy2"}
    jobs = [r.info.run_id for r in runs if TAG_SYSTEM not in r.data.tags and TAG_BENCHMARK not in r.data.tags]
    by_id = ragtrack_cli(
        tmp_path, "compare", "--run", ",".join(jobs), "--no-log", "--label", "bm25_multifield=multifield"
    )
    assert by_id.returncode == 0, by_id.stderr
    assert "toy2" in by_id.stdout and "multifield" in by_id.stdout and "BM25 (multifield)" not in by_id.stdout
    (tmp_path / "published.tsv").write_text(
        "dataset\tsystem\tmetric\tvalue\ntoy\tbm25\tndcg@10\t0.5\ntoy2\tbm25\tndcg@10\t0.4\n"
    )
    checked = ragtrack_cli(
        tmp_path,
        "compare",
        "--experiment",
        "ragtrack-toy,ragtrack-toy2",
        "--no-log",
        "--reference",
        "published.tsv",
        "-m",
        "ndcg@10",
    )
    assert checked.returncode == 0, checked.stderr
    assert "published.tsv [toy]" in checked.stdout and "published.tsv [toy2]" in checked.stdout
    bm25_row = next(line for line in checked.stdout.splitlines() if line.startswith("bm25 "))
    assert (
        bm25_row.count("≠") == 2 and "reproduced within 0.0005 / not" in checked.stdout
    )  # 0.5 and 0.4 are not toy's figures


def test_python_benchmark_of_two_jobs(tmp_path: Path) -> None:
    other = tmp_path / "toy2"
    shutil.copytree(TOY, other)
    common = [
        "retriever=[bm25,bm25_multifield]",
        "fusion=[]",
        "tracking=none",
        f"paths.log_dir={tmp_path / 'logs'}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "retriever.bm25_multifield.alias='BM25 (multifield)'",
    ]
    jobs = [
        ragtrack.run_experiment(["dataset=toy", *common]),
        ragtrack.run_experiment(["dataset=beir", f"dataset.path={other}", "dataset.name=toy2", *common]),
    ]
    assert repr(jobs[0]).startswith("<ExperimentResult toy: bm25: ndcg@10 ") and "<table" in jobs[0]._repr_html_()
    assert set(jobs[0].comparison["system"]) == {"bm25", "bm25_multifield"} and jobs[0].results["aliases"] == {
        "bm25_multifield": "BM25 (multifield)"
    }
    means = ragtrack.benchmark(jobs, metrics="ndcg@10").means("ndcg@10")
    assert list(means.index) == ["bm25", "BM25 (multifield)"]
    result = ragtrack.benchmark(jobs, metrics="ndcg@10", labels={"bm25_multifield": "multifield"})
    means = result.means("ndcg@10")
    assert list(means.columns) == ["toy", "toy2", "average"] and list(means.index) == ["bm25", "multifield"]
    assert means.loc["bm25", "toy"] == pytest.approx(jobs[0].systems["bm25"]["ndcg@10"], abs=1e-12)
    assert "average" in repr(result) and "<table>" in result._repr_html_() and r"\toprule" in result.render("latex")
