"""The CSV files ragtrack writes (per_query.csv, comparison.csv, robustness.csv, ``ragtrack compare
--format csv``) and reads back (``ragtrack compare`` reads per_query.csv).

Query ids, texts and run names come from users and from datasets, so a cell such as ``=HYPERLINK(...)``
would run as a formula where a spreadsheet opens the file. A text cell (a value that is a ``str``, a
column name or an index label) that starts with ``= + - @``, a tab or a carriage return is escaped as
OWASP advises, with a leading ``'``; so is a text cell that starts with ``'``, so that :func:`read_csv`
strips exactly one ``'`` from every text cell that has one and gives back the text as it was. Numbers
are written as numbers, never escaped: ``-0.5`` in a metric column stays ``-0.5``.

Lines end in CRLF, as RFC 4180 has them: Python's csv writer quotes a cell holding a carriage return
only when the line ending has one, and an unquoted one (an answer with Windows line breaks) would cut
the row in two.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")
ESCAPE = "'"


def escape(cell):
    """``cell`` with a leading ``'`` if it is text that starts like a formula or with ``'``."""
    return ESCAPE + cell if isinstance(cell, str) and cell.startswith((*FORMULA_STARTS, ESCAPE)) else cell


def unescape(cell):
    """The text :func:`escape` was given."""
    return cell[1:] if isinstance(cell, str) and cell.startswith(ESCAPE) else cell


def _texts(table: pd.DataFrame, change) -> pd.DataFrame:
    """``table`` with ``change`` applied to its column names, text index labels and text cells."""
    table = table.rename(columns=change)
    if pd.api.types.is_object_dtype(table.index) or pd.api.types.is_string_dtype(table.index):
        table.index = table.index.map(change)
    table.index.names = [change(name) for name in table.index.names]
    for column in table.select_dtypes(include=["object", "string"]).columns:
        table[column] = table[column].map(change)
    return table


def csv_text(table: pd.DataFrame, index: bool = False, **options) -> str:
    """``table.to_csv`` (``options`` are its own) with every text cell escaped, CRLF line endings."""
    return _texts(table, escape).to_csv(index=index, lineterminator="\r\n", **options)


def read_csv(source: str | Path, **options) -> pd.DataFrame:
    """A CSV file written by :func:`csv_text`, its text cells as they were: only empty cells are missing
    values (an id ``NA`` stays text); ``options`` are ``pd.read_csv``'s (``dtype`` by written column name)."""
    return _texts(pd.read_csv(source, keep_default_na=False, na_values=[""], **options), unescape)
