"""The MLflow UI in a real browser: ``ragtrack ui`` on a store filled by a real sweep and a comparison.

The browser is Debian's chromium where present (``make test`` installs it with apt-get when run as
root), else playwright's own Chromium (``make test`` runs ``playwright install chromium``, which needs
the internet). Without either the tests are skipped, with the reason, except under ``CI=true``, where
they must run. MLflow pages never reach network idle, so the tests wait for elements.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.pipeline.analysis.compare import run_compare
from ragtrack.pipeline.analysis.comparison_tables import p_text
from tests.support import stop_group

DEBIAN_CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
]
SCREENSHOTS = Path(
    os.environ.get("RAGTRACK_SCREENSHOTS", Path(__file__).parent.parent.parent / "outputs" / "screenshots")
)
TIMEOUT_MS = 240_000  # a cold MLflow server and page on a loaded 2-core machine take over a minute


def launch(playwright):
    """Debian's chromium, else playwright's own; skip when neither is there (fail under CI=true)."""
    if Path(DEBIAN_CHROMIUM).exists():
        return playwright.chromium.launch(executable_path=DEBIAN_CHROMIUM, args=CHROMIUM_ARGS)
    try:
        return playwright.chromium.launch(args=CHROMIUM_ARGS)
    except Exception as exc:  # playwright raises its own Error when its browser was never installed
        reason = f"no browser: neither {DEBIAN_CHROMIUM} nor playwright's Chromium ({str(exc).splitlines()[0]})"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise AssertionError(f"ragtrack ui exited with code {server.returncode}")
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=5) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"MLflow server at {url} not healthy after {timeout:.0f} s")


def show(page, url: str, *expected, tries: int = 3) -> None:
    """Open ``url`` and wait for each of ``expected`` (functions giving a locator); reloaded up to
    ``tries`` times, as a person would, when the page stays incomplete (the single-worker server can drop
    one of the UI's many requests on a loaded machine, and the UI does not ask again). The last try's
    screenshot is kept beside the others."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    page.goto(url, wait_until="domcontentloaded")
    for attempt in range(1, tries + 1):
        try:
            for locator in expected:
                locator().wait_for(timeout=TIMEOUT_MS / tries)
            return
        except PlaywrightTimeout:
            if attempt == tries:
                page.screenshot(path=str(SCREENSHOTS / "failed.png"))
                raise
            page.reload(wait_until="domcontentloaded")


@pytest.fixture
def sweep_comparison(toy_sweep):
    """The sweep compared against bm25 (``run_compare``), logged as its own run: that run."""
    client = MlflowClient(toy_sweep.uri)
    sweep = client.search_runs(
        [client.get_experiment_by_name(toy_sweep.experiment).experiment_id], "tags.`ragtrack.sweep` != ''"
    )[0].data.tags["ragtrack.sweep"]
    compared, _ = run_compare(toy_sweep.uri, sweep=sweep, baseline="bm25")
    return client.get_run(compared.logged.split()[0])  # not the sweep's own comparison run


@pytest.fixture
def ui_server(toy_sweep, sweep_comparison, tmp_path):
    """``ragtrack ui`` on the sweep's store, in its own process group, stopped by PID after the test;
    started after the comparison is logged (a run logged while the server ran was once missing from
    its pages for minutes on a loaded machine: not what this test is about)."""
    port = free_port()
    log = open(tmp_path / "ui.log", "w+")
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrack.pipeline.commands.cli",
            "ui",
            "--tracking-uri",
            toy_sweep.uri,
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        text=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, server, TIMEOUT_MS / 1000)
        log.seek(0)
        assert f"MLflow UI on {toy_sweep.uri}: {url}" in log.read(), "ragtrack ui must print its URL"
        yield url
    finally:
        stop_group(server)
        log.close()


def test_runs_metrics_and_comparison_visible_in_the_mlflow_ui(toy_sweep, sweep_comparison, ui_server) -> None:
    from playwright.sync_api import sync_playwright

    client = MlflowClient(toy_sweep.uri)
    experiment = client.get_experiment_by_name(toy_sweep.experiment).experiment_id
    sweep_link = re.search(r"^Sweep runs:\s+http://127\.0\.0\.1:5000(/\S+)$", toy_sweep.log, re.MULTILINE).group(1)
    sweep_run = re.search(
        r"^Sweep report: http://\S+/runs/(\w+)/artifacts/report\.html$", toy_sweep.log, re.MULTILINE
    ).group(1)
    jobs = [
        r
        for r in client.search_runs([experiment], filter_string="tags.`ragtrack.sweep` != ''")
        if "ragtrack.comparison" not in r.data.tags and "mlflow.parentRunId" not in r.data.tags
    ]
    comparison = sweep_comparison
    assert "comparison.md" in {a.path for a in client.list_artifacts(comparison.info.run_id)}
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1600, "height": 900})
            page.set_default_timeout(TIMEOUT_MS)
            page.goto(ui_server + sweep_link, wait_until="domcontentloaded")  # the sweep's view as printed: no click
            page.get_by_role("columnheader").filter(has_text="fusion.rrf.k").first.wait_for()
            page.get_by_role("columnheader").filter(has_text="hybrid/ndcg_at_10").first.wait_for()
            for job in (
                jobs
            ):  # each job's swept value and hybrid nDCG@10 (the grid draws the pinned name column as a row of its own)
                index = (
                    page.get_by_role("row")
                    .filter(has=page.get_by_text(job.info.run_name, exact=True))
                    .first.get_attribute("row-index")
                )
                cells = (
                    page.locator(f"[role=row][row-index='{index}']")
                    .filter(has_text=str(job.data.metrics["hybrid/ndcg_at_10"]))
                    .first
                )
                cells.get_by_text(job.data.params["fusion.rrf.k"], exact=True).first.wait_for()
            page.screenshot(path=str(SCREENSHOTS / "mlflow_sweep_view.png"))
            show(  # the key metrics against k, with CIs
                page,
                f"{ui_server}/#/experiments/{experiment}/runs/{sweep_run}/artifacts/sweep.png",
                lambda: page.get_by_role("img", name="sweep.png").first,
            )
            page.screenshot(path=str(SCREENSHOTS / "mlflow_sweep_plot.png"))
            page.set_viewport_size({"width": 2400, "height": 1100})
            page.goto(f"{ui_server}/#/experiments/{experiment}/runs", wait_until="domcontentloaded")
            for k in toy_sweep.ks:  # every job of the sweep, by its readable name
                page.get_by_text(f"hybrid k={k}", exact=True).first.wait_for()
            page.get_by_role("button", name="Columns", exact=True).click()
            search = page.get_by_placeholder("Search columns")
            for metric in ("hybrid/ndcg_at_10", "bm25/ndcg_at_10"):
                search.fill(metric)
                page.get_by_text(metric, exact=True).last.click()
            page.keyboard.press("Escape")
            for metric in ("hybrid/ndcg_at_10", "bm25/ndcg_at_10"):
                page.get_by_role("columnheader").filter(has_text=metric).first.wait_for()
            page.screenshot(path=str(SCREENSHOTS / "mlflow_runs.png"))

            show(  # the rendered comparison table
                page,
                f"{ui_server}/#/experiments/{comparison.info.experiment_id}/runs/{comparison.info.run_id}"
                "/artifacts/comparison.md",
                lambda: page.get_by_text("hybrid k=30", exact=True).first,
                lambda: page.get_by_text("W/T/L ndcg@10").first,
            )
            page.screenshot(path=str(SCREENSHOTS / "mlflow_comparison.png"))
        finally:
            browser.close()
    for shot in ("mlflow_sweep_view.png", "mlflow_sweep_plot.png", "mlflow_runs.png"):
        assert (SCREENSHOTS / shot).stat().st_size > 10_000, shot
    assert (SCREENSHOTS / "mlflow_comparison.png").stat().st_size > 10_000


def test_the_printed_run_page_shows_every_systems_ndcg_without_a_click(tmp_path) -> None:
    """A toy job, then the run page its last lines name: the description table holds the three
    systems' nDCG@10 (mean [95% CI]) as results.json has them, dense's Holm-corrected p against bm25 and a
    link to report.html, and only the Hydra choices that differ from the defaults as tags; a system run's queries.json opens as a
    table of queries; the run lists its dataset (name and digest) under Datasets; the job's report.html, opened from the run's artifacts on the same server, holds
    the same nDCG@10 cells."""
    import json
    import re

    env = {**os.environ, "RAGTRACK_ROOT": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    env.pop("MLFLOW_TRACKING_URI", None)
    done = subprocess.run(
        [sys.executable, "-m", "ragtrack", "run", "dataset=toy", "encoder=hashing", f"hydra.run.dir={tmp_path}/job"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    link = re.search(r"^Run page:\s+(http://127\.0\.0\.1:5000/\S+)$", done.stdout, re.MULTILINE).group(1)
    results = json.loads((tmp_path / "job" / "results.json").read_text())
    aggregates, digest = results["aggregates"], results["dataset"]["hash"][:16]
    cells = {
        s: "{mean:.4f} [{ci_low:.4f}, {ci_high:.4f}]".format(**aggregates[s]["ndcg@10"])
        for s in ("bm25", "dense", "hybrid")
    }
    comparison = json.loads((tmp_path / "job" / "comparison" / "comparison.json").read_text())["rows"]
    dense = next(r for r in comparison if r["system"] == "dense" and r["metric"] == "ndcg@10")
    p_dense = f"{dense['delta']:+.4f} (p {p_text(dense['p_ttest_holm'])})"
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ragtrack",
            "ui",
            "--tracking-uri",
            f"sqlite:///{tmp_path}/mlruns/mlflow.db",
            "--port",
            str(port),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        wait_until_healthy(url, server, TIMEOUT_MS / 1000)
        from playwright.sync_api import sync_playwright

        with sync_playwright() as playwright:
            browser = launch(playwright)
            try:
                page = browser.new_page(viewport={"width": 1600, "height": 1400})
                page.set_default_timeout(TIMEOUT_MS)
                page.goto(link.replace("http://127.0.0.1:5000", url), wait_until="domcontentloaded")
                for system, cell in cells.items():  # a column per system: the mean, then its CI beneath
                    page.get_by_role("columnheader", name=system, exact=True).first.wait_for()
                    for value in cell.replace(" [", "|[").split("|"):
                        page.get_by_role("cell", name=value, exact=True).first.wait_for()
                page.get_by_text(
                    digest, exact=False
                ).first.wait_for()  # the Datasets section: what the job was evaluated on
                page.get_by_role("cell", name=p_dense, exact=True).first.wait_for()  # Δ and Holm p against bm25
                page.get_by_role("link", name="report.html").first.wait_for()
                assert (
                    page.get_by_text("hydra.choice.encoder").count()
                    and not page.get_by_text("hydra.choice.paths").count()
                )
                SCREENSHOTS.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(SCREENSHOTS / "mlflow_run_page.png"))
                table_link = re.search(
                    r"^Runs table:\s+(http://127\.0\.0\.1:5000/\S+)$", done.stdout, re.MULTILINE
                ).group(1)
                page.goto(table_link.replace("http://127.0.0.1:5000", url), wait_until="domcontentloaded")
                for system in ("bm25", "dense", "hybrid"):  # the job's system runs, with their key metric columns
                    page.get_by_text(f"{system} · ", exact=False).first.wait_for()
                page.get_by_text("ndcg_at_10", exact=False).first.wait_for()
                page.screenshot(path=str(SCREENSHOTS / "mlflow_runs_table.png"))
                page.goto(
                    link.replace("http://127.0.0.1:5000", url) + "/artifacts/comparison/report.html",
                    wait_until="domcontentloaded",
                )
                report = page.frame_locator("iframe").first  # the UI shows an HTML artifact in a frame
                report.get_by_role("heading", level=1).filter(has_text="toy").wait_for()
                for system, cell in cells.items():
                    report.get_by_role("cell", name=system, exact=True).first.wait_for()
                    report.get_by_role("cell", name=cell, exact=True).first.wait_for()
                page.screenshot(path=str(SCREENSHOTS / "report.png"), full_page=False)
                bm25 = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db").search_runs(
                    [re.search(r"/experiments/(\w+)/", link).group(1)], filter_string="tags.`ragtrack.system` = 'bm25'"
                )[0]
                page.goto(
                    f"{url}/#/experiments/{bm25.info.experiment_id}/runs/{bm25.info.run_id}/artifacts/queries.json",
                    wait_until="domcontentloaded",
                )
                page.get_by_text(
                    "View as table"
                ).first.wait_for()  # log_table's file opens as a table, one row per query
                for header in (
                    "query",
                    "retrieved",
                    "relevant",
                    "ndcg@10",
                ):  # the grid's headers are buttons titled by column
                    page.get_by_title(header, exact=True).first.wait_for()
                page.get_by_role("cell", name="how do plants make glucose from sunlight", exact=True).first.wait_for()
                page.get_by_role("cell").filter(has_text="1. d1 [2]").first.click()  # rank, id, grade, score, title
                page.get_by_text(
                    "Preview", exact=True
                ).first.wait_for()  # a clicked cell opens whole, one document per line
                page.screenshot(path=str(SCREENSHOTS / "mlflow_queries_table.png"))
            finally:
                browser.close()
    finally:
        stop_group(server)
    for shot in ("mlflow_run_page.png", "report.png", "mlflow_queries_table.png"):
        assert (SCREENSHOTS / shot).stat().st_size > 10_000, shot


class _NoBrowser:
    """A playwright whose Chromium was never downloaded."""

    class chromium:  # noqa: N801 (playwright's attribute name)
        @staticmethod
        def launch(**kwargs):
            raise RuntimeError("Executable doesn't exist at /root/.cache/ms-playwright/chromium/chrome\nmore")


def test_without_any_browser_the_ui_tests_skip_except_in_ci(monkeypatch) -> None:
    from _pytest.outcomes import Failed, Skipped

    monkeypatch.setattr(sys.modules[__name__], "DEBIAN_CHROMIUM", "/nonexistent/chromium")
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(
        Skipped, match="no browser: neither /nonexistent/chromium nor playwright's Chromium .Executable doesn't exist"
    ):
        launch(_NoBrowser)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(Failed, match="no browser"):
        launch(_NoBrowser)
