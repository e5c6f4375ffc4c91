"""bench/scale.py's measuring parts: a child's announced stages sampled, and the BM25 side-by-side table."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def scale():
    sys.path.insert(0, str(BENCH))  # the bench scripts import their shared `machine` module
    spec = importlib.util.spec_from_file_location("bench_scale", BENCH / "scale.py")
    module = sys.modules["bench_scale"] = importlib.util.module_from_spec(spec)  # dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(BENCH))
        for name in ("bench_scale", "machine"):
            sys.modules.pop(name, None)


def test_measured_reads_the_stages_a_child_announces(scale, tmp_path: Path) -> None:
    child = (
        "import time\n"
        "print('[bench] first ...', flush=True); time.sleep(0.2); print('[bench] first done in 0.2 s', flush=True)\n"
        "print('[bench] second done in 1.5 s', flush=True)\n"  # announced only when done: its own seconds
        "print('RESULT {}', flush=True)\n"
    )
    stages, whole, log = scale.measured([sys.executable, "-c", child], tmp_path)
    assert [name for name, _ in stages] == ["first", "second"]
    assert 0.15 < stages[0][1].seconds < whole.seconds
    assert stages[1][1].seconds == pytest.approx(1.5, abs=0.1)
    assert 0 < stages[0][1].anon <= stages[0][1].peak and 0 < whole.anon <= whole.peak
    assert log[-1] == "RESULT {}\n"


def test_side_table_gives_queries_per_second_and_ratios(scale) -> None:
    measure = scale.Measure
    stages = {
        "ragtrack: load corpus": measure(1.0, 1.0, 400.0),
        "ragtrack: index": measure(10.0, 9.0, 1000.0, 700.0),
        "bm25s: index": measure(20.0, 19.0, 2000.0),
    }
    seconds = {"ragtrack": (2.0, 1.0), "bm25s numpy": (4.0, 2.0), "bm25s numba": (1.0, 1.0)}
    for system, (one, two) in seconds.items():
        stages[f"{system}, 1 thread: search"] = measure(one, one, 0.0)
        stages[f"{system}, 2 threads: search"] = measure(two, 2 * two, 0.0)
    figures = {"queries": 200, "recall@10": {f"{system}, 1 thread": 0.5 for system in seconds}}
    text = scale.side_table(stages, figures)
    assert "| ragtrack | 10.0 / 9.0 / 1,000 (700) | 100.00 (2.0) | 200.00 (2.0) | 2.00 | 0.500 |" in text
    assert "| bm25s numpy | 20.0 / 19.0 / 2,000 |" in text  # no anonymous peak sampled
    assert "(The corpus loaded, before any build: 400 MB.)" in text
    assert (
        "- ragtrack ÷ bm25s numpy: 2.00 on 1 thread each; ragtrack on 2 threads ÷ bm25s numpy on 1: 4.00; 2.00 on 2 threads each"
        in text
    )
    assert "- ragtrack ÷ bm25s numba: 0.50 on 1 thread each" in text
    alone = scale.side_table({name: m for name, m in stages.items() if not name.startswith("bm25s")}, figures)
    assert "bm25s" not in alone and "| ragtrack |" in alone
