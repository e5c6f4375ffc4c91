"""Every job writes and logs its own systems side by side: comparison.md, the plot, the failure
analysis and a self-contained report.html holding the numbers of results.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.support import TOY_JOB, ragtrack


def test_a_job_writes_and_logs_its_comparison_and_report(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, "hydra.run.dir=outputs/job")
    assert done.returncode == 0, done.stderr[-3000:]
    job = tmp_path / "outputs" / "job"
    folder = job / "comparison"
    assert {"comparison.md", "comparison.csv", "comparison.json", "comparison.txt", "comparison.png", "report.html"} <= {p.name for p in folder.iterdir()}
    assert sorted(p.name for p in (folder / "failures").iterdir()) == ["dense.md", "hybrid.md"]  # baseline: bm25

    results = json.loads((job / "results.json").read_text())
    report = (folder / "report.html").read_text()
    assert not re.search(r"""(src|href)=["']?(https?:|//|file:)""", report), "report.html must be self-contained"
    assert "data:image/png;base64," in report and "<style>" in report
    for system, metrics in results["systems"].items():  # the same means, to the 4 decimals shown
        row = re.search(rf"<tr><td>{system}</td>(.*?)</tr>", report).group(1)
        assert f"{metrics['ndcg@10']:.4f} [" in row
    assert "toy" in report.split("</h1>")[0]  # the dataset is named in the title
    assert "relevance_threshold" in report  # the config

    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    experiment = client.get_experiment_by_name("ragtrack-toy")
    (parent,) = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" not in r.data.tags]
    logged = {a.path for a in client.list_artifacts(parent.info.run_id, "comparison")}
    assert {"comparison/report.html", "comparison/comparison.md", "comparison/comparison.png", "comparison/failures"} <= logged
