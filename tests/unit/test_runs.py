"""Run type and TREC I/O: trec_eval order (score desc, docid desc), full precision, bad files."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrack.core.errors import InputError
from ragtrack.core.runs import Run, RunColumns, rank_documents, read_run_columns, read_trec, write_trec


def test_ties_are_broken_by_document_id_descending() -> None:
    assert rank_documents({"a": 1.0, "c": 1.0, "b": 2.0, "d": 0.5}) == [("b", 2.0), ("c", 1.0), ("a", 1.0), ("d", 0.5)]


def test_round_trip_keeps_full_precision_and_rewrites_ranks(tmp_path: Path) -> None:
    run = Run("sys", {"q1": {"d1": 0.1 + 0.2, "d2": 1 / 3, "d3": 1 / 3}, "q2": {"x": -1e-300}})
    path = write_trec(run, tmp_path / "out" / "run.trec")
    lines = path.read_text().splitlines()
    assert lines[0] == "q1 Q0 d3 1 0.3333333333333333 sys"
    assert lines[1] == "q1 Q0 d2 2 0.3333333333333333 sys"
    assert lines[2] == "q1 Q0 d1 3 0.30000000000000004 sys"
    assert read_trec(path).scores == run.scores
    assert not list(path.parent.glob(".*"))  # no temp file left behind


def test_reading_ignores_the_rank_column(tmp_path: Path) -> None:
    path = tmp_path / "r.trec"
    path.write_text("q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.9 t\n")
    assert read_trec(path).ranking("q1") == [("b", 0.9), ("a", 0.5)]


def test_truncation_keeps_the_top_documents() -> None:
    run = Run("s", {"q": {"a": 3.0, "b": 2.0, "c": 1.0}})
    assert run.truncated(2).scores == {"q": {"a": 3.0, "b": 2.0}}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("q1 Q0 d1 1 0.5\n", "r.trec:1: expected 6 columns 'qid Q0 docid rank score tag', got 5"),
        ("q1 Q0 d1 1 high t\n", "r.trec:1: score 'high' is not a number"),
        ("q1 Q0 d1 1 nan t\n", "r.trec:1: score 'nan' is not finite"),
        ("q1 Q0 d1 1 1 t\nq1 Q0 d1 2 0.5 t\n", "r.trec:2: document 'd1' appears twice for query 'q1'"),
    ],
)
def test_bad_run_files(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.trec"
    path.write_text(content)
    with pytest.raises(InputError) as raised:
        read_trec(path)
    assert str(raised.value) == f"{tmp_path}/{message}"


@pytest.mark.parametrize(
    "lines",
    [
        ["b 2.0", "c 1.0", "a 1.0", "d 0.5"],  # trec_eval order already
        ["a 1.0", "d 0.5", "c 1.0", "b 2.0"],  # any order: sorted first
    ],
)
def test_judged_positions_of_a_run_file_follow_trec_eval_order(tmp_path: Path, lines: list[str]) -> None:
    """Ranks by score descending, ties by document id descending (c before a); a judged document that
    was not retrieved (zz) and a judged query absent from the run (x) have no position."""
    path = tmp_path / "r.trec"
    path.write_text(
        "".join(f"q Q0 {line.split()[0]} 0 {line.split()[1]} t\n" for line in lines) + "other Q0 a 1 9.0 t\n"
    )
    columns = read_run_columns(path)
    retrieved, rows, grades, positions = columns.judged_positions(
        ["q", "x"], {"q": {"a": 1, "c": 2, "d": 0, "zz": 1}, "x": {"a": 1}}
    )
    assert retrieved.tolist() == [4, 0]
    assert sorted(zip(rows.tolist(), grades.tolist(), positions.tolist())) == [(0, 0, 3), (0, 1, 2), (0, 2, 1)]
    assert (
        columns.to_run("r").scores == read_trec(path).scores == RunColumns.from_run(read_trec(path)).to_run("r").scores
    )
