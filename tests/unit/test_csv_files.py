"""CSV cells that a spreadsheet would run as formulas are escaped (OWASP's leading ``'``), numbers are
not, and reading the file back gives every text as it was."""

from __future__ import annotations

import csv
import math
from io import StringIO

import pandas as pd

from ragtrack.pipeline.records.csv_files import FORMULA_STARTS, csv_text, read_csv

HOSTILE = [
    "=1+1",
    "+33 6 12",
    "-5",
    "@SUM(A1)",
    "\tcmd",
    "\r=2",
    "'quoted",
    "''twice",
    "NA",
    "null",
    "007",
    "two\rlines\r\n",
    '=HYPERLINK("http://x","y")',
]


def _table() -> pd.DataFrame:
    return pd.DataFrame(
        {
            "system": ["bm25"] * len(HOSTILE),
            "qid": HOSTILE,
            "generated_answer": list(reversed(HOSTILE)),
            "ndcg@10": [-0.5, 0.0, math.nan, 1.0, 0.25, -1e-300, 0.1 + 0.2, 1.0, 0.5, 0.5, 0.5, 0.5, 0.5],
        }
    )


def test_no_cell_starts_like_a_formula_and_numbers_stay_numbers() -> None:
    text = csv_text(_table())
    rows = list(csv.reader(StringIO(text, newline="")))
    assert all(not cell.startswith(FORMULA_STARTS) for row in rows for cell in row[:3])
    assert [row[1] for row in rows[1:5]] == ["'=1+1", "'+33 6 12", "'-5", "'@SUM(A1)"] and rows[7][1] == "''quoted"
    assert [row[3] for row in rows[1:3]] == ["-0.5", "0.0"] and rows[6][3] == "-1e-300" and rows[3][3] == ""


def test_every_text_reads_back_exactly() -> None:
    table = _table()
    again = read_csv(StringIO(csv_text(table)), dtype={"qid": str})
    assert again["qid"].tolist() == HOSTILE and again["generated_answer"].tolist() == list(reversed(HOSTILE))
    assert again["ndcg@10"].dtype == float and again["ndcg@10"].equals(table["ndcg@10"])


def test_an_index_and_column_names_are_escaped_too() -> None:
    table = pd.DataFrame({"=bm25": [-0.5], "dense": [0.5]}, index=pd.Index(["-metric"], name="metric"))
    text = csv_text(table, index=True)
    assert text.splitlines() == ["metric,'=bm25,dense", "'-metric,-0.5,0.5"]
    again = read_csv(StringIO(text)).set_index("metric")
    assert again.index.tolist() == ["-metric"] and again.columns.tolist() == ["=bm25", "dense"]
