"""report.html in a real browser at 1,280 px: no horizontal overflow, a verdict per metric, contents,
each system's wins and losses as tables, slices named or said absent, a numeric axis for a swept
numeric parameter."""

from __future__ import annotations

import re

import pandas as pd

from ragtrack.core.data import load_beir
from ragtrack.core.runs import Run
from ragtrack.pipeline.analysis.comparison import SystemRun, compare_systems
from ragtrack.pipeline.analysis.comparison_plots import numeric_params
from ragtrack.pipeline.analysis.comparison_report import REPORT_FILE, verdicts, write_comparison
from tests.integration.test_ui import launch
from tests.support import TOY

QIDS = ("q1", "q2", "q3", "q4", "q5", "q6")
METRICS = ("ndcg@10", "recall@100", "mrr", "map", "p@10")


def _system(system: str, values: list[float], params: dict[str, str] | None = None) -> SystemRun:
    label = " ".join([system, *(f"{k}={v}" for k, v in (params or {}).items())])
    frame = pd.DataFrame(
        {m: [v * (1 - 0.1 * i) for v in values] for i, m in enumerate(METRICS)}, index=pd.Index(QIDS, name="qid")
    )
    return SystemRun(system, f"run-{label}", label, f"job-{label}", 0, frame, label=label, params=params or {})


def _runs(systems: list[SystemRun]) -> dict[str, Run]:
    good = {
        q: {doc: 2.0 for doc in judged if judged[doc] > 0} | {"d11": 1.0} for q, judged in load_beir(TOY).qrels.items()
    }
    bad = {q: {"d11": 2.0, "d5": 1.0, **{doc: 0.5 for doc in judged}} for q, judged in load_beir(TOY).qrels.items()}
    return {s.run_id: Run(s.system, bad if s.system == "bm25" else good) for s in systems}


def test_report_fits_1280_px_with_verdict_contents_and_wins_table(tmp_path) -> None:
    from playwright.sync_api import sync_playwright

    long = "fusion.rrf.k"
    systems = [
        _system("bm25", [0.2, 0.3, 0.1, 0.5, 0.4, 0.3]),
        _system("dense", [0.3, 0.2, 0.4, 0.4, 0.1, 0.3]),
        *[
            _system("hybrid", [0.9 - k / 1000, 0.8, 0.7, 0.9, 0.6, 0.8], {long: str(k), "retriever.bm25.k1": "0.9"})
            for k in (1, 10, 60, 200)
        ],
    ]
    assert numeric_params(systems) == [long]  # k1 does not vary: not an axis
    comparison = compare_systems(systems, list(METRICS), systems[0], list(QIDS), resamples=200)
    verdict = verdicts(comparison)[0]
    assert re.fullmatch(
        r"hybrid fusion\.rrf\.k=1 \S+ best on ndcg@10: 0\.\d{4}, \+0\.\d{4} over bm25, "
        r"p = 0\.\d{3} \(paired t-test, Holm\)",
        verdict,
    ), verdict
    write_comparison(
        comparison, tmp_path, "toy (6 queries): a sweep", load_beir(TOY), _runs(systems), config_text="x: " + "y" * 400
    )
    with sync_playwright() as playwright:
        browser = launch(playwright)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.goto((tmp_path / REPORT_FILE).as_uri())
            assert page.evaluate("document.scrollingElement.scrollWidth") <= 1280
            assert verdict in page.locator("#verdict + *").inner_text()
            contents = page.locator("nav").inner_text()
            for heading in (
                "Verdict",
                "Systems and metrics",
                "Effect size and power",
                "Plot",
                "Slices",
                "Wins and losses",
                "Config",
            ):
                assert heading in contents
            power = page.locator("#power ~ table").first.inner_text()
            rows = comparison.table[~comparison.table["baseline"]]
            assert (
                power.count("underpowered: |Δ|") == int(rows["underpowered"].sum()) >= 1
            )  # dense vs bm25 (6 queries) is one
            assert power.count("detected: p") == int((rows["p_ttest_holm"] <= 0.05).sum()) >= 1
            assert "no slices in this dataset" in page.content()
            summary = page.locator("summary").filter(has_text="hybrid fusion.rrf.k=60").first
            summary.click()
            wins = page.locator("details[open] table.cases").first
            assert (
                "how do plants make glucose from sunlight" in wins.inner_text() or "where is ATP" in wins.inner_text()
            )
            assert wins.locator("th").all_inner_texts()[:1] == ["query"]
            assert page.evaluate("document.scrollingElement.scrollWidth") <= 1280
        finally:
            browser.close()
