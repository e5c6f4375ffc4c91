"""The rules for the values in input files: columns, ids, grades and scores, trec_eval's way.

Both readers use these rules: the line-by-line one (``data.py``, ``runs.py``) and the columnar one
(``columnar.py``). The columnar reader applies the same regular expressions to whole columns, except
for scores, which Arrow parses in the same syntax (see ``columnar.py``).

- **Columns** are separated by runs of spaces and tabs (trec_eval's ``[ \\t]``); a qrels line that
  holds a tab is split at tabs only (BEIR's TSV), so an id with a space in it is an error rather than
  an extra column. Other whitespace stays inside a column, and the id check rejects it.
- **Ids** are non-empty, contain no whitespace (:data:`WHITESPACE`: every character that Python's
  ``str.isspace`` accepts, since a TREC file could not hold them) and are valid Unicode text: no lone
  surrogates, which a JSON ``\\ud800`` escape can produce.
- **Grades** are ASCII integers (:data:`GRADE`): an optional sign and the digits 0-9, in the range of a
  64-bit integer. ``1.0``, ``1_0``, ``١`` and ``１`` are errors, although Python's ``int()`` accepts
  the last three.
- **Headers**: a first line whose every column is a column name its position may have (in any letter
  case: :data:`QRELS_HEADER`, :data:`CORPUS_HEADER`, :data:`TOPICS_HEADER`) is a header, not a record
  (:func:`is_header`); the same line anywhere else is an error. A line with one cell that is no such
  name (a document ``id<TAB>some text``) is a record.
- **Scores** are ASCII decimal numbers (:data:`SCORE`): sign, digits, one decimal point, an exponent.
  ``nan``, ``inf``, ``1_0`` and non-ASCII digits are errors, as is a number too large for a float.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence
from pathlib import Path

from ragtrack.core.errors import InputError

COLUMN_SEPARATOR = re.compile(r"[ \t]+")
GRADE = re.compile(r"[+-]?[0-9]+")
SCORE = re.compile(r"[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
NON_FINITE = re.compile(r"[+-]?(?:nan|inf|infinity)", re.IGNORECASE)
# Exactly the characters for which str.isspace() is true (tests/unit/test_strict_parsing.py checks it),
# as a class of literal characters, which Python's re and Arrow's RE2 read the same way.
WHITESPACE = "[\t-\r\x1c- \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"  # literal characters
GRADE_RANGE = (-(2**63), 2**63 - 1)
# Header lines: per column the names it may have (lower case). BEIR's qrels header is exactly query-id corpus-id score.
DOCUMENT_ID = frozenset({"id", "_id", "docid", "doc_id", "doc-id", "docno", "pid", "corpus-id", "corpus_id"})
QUERY_ID = frozenset({"id", "_id", "qid", "query_id", "query-id", "queryid", "topic", "topic_id", "topicid", "num"})
TEXT = frozenset({"text", "body", "contents", "content", "passage"})
QUERY_TEXT = frozenset({"query", "text", "title", "question", "description"})
QRELS_HEADER = (frozenset({"query-id"}), frozenset({"corpus-id"}), frozenset({"score"}))
CORPUS_HEADER = {2: (DOCUMENT_ID, TEXT), 3: (DOCUMENT_ID, frozenset({"title"}), TEXT)}  # by the number of columns
TOPICS_HEADER = (QUERY_ID, QUERY_TEXT)


def split_columns(text: str, tab_separated: bool = False) -> list[str]:
    """The columns of one line: separated by runs of spaces and tabs, outer spaces and tabs ignored;
    with ``tab_separated`` (qrels), a line holding a tab is split at each tab instead."""
    text = text.strip(" \t")
    if tab_separated and "\t" in text:
        return [column.strip(" ") for column in text.split("\t")]
    return COLUMN_SEPARATOR.split(text)


def is_header(columns: Sequence[str], names: Sequence[Collection[str]]) -> bool:
    """Whether a line's ``columns`` are a header: one per entry of ``names``, each one of the names its
    position may have, in any letter case (``DocID<TAB>Text``)."""
    return len(columns) == len(names) and all(column.strip().lower() in known for column, known in zip(columns, names))


def check_text(value: str, path: str | Path, line: int | None, what: str) -> str:
    """``value`` unchanged if it is valid Unicode text (no lone surrogates), else an :class:`InputError`."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InputError(
                path,
                f"{what} is not valid Unicode text (lone surrogate \\u{ord(value[exc.start]):04x} at character {exc.start})",
                line,
            ) from None
    return value


def check_id(value: object, path: str | Path, line: int | None, key: str = "_id") -> str:
    """A non-empty id without whitespace that is valid Unicode text, else an :class:`InputError`."""
    if not isinstance(value, str) or not value:
        raise InputError(path, f"'{key}' must be a non-empty string, got {value!r}", line)
    check_text(value, path, line, f"{key} {value!r}")
    if any(ch.isspace() for ch in value):
        raise InputError(path, f"id {value!r} contains whitespace, which TREC files cannot represent", line)
    return value


def parse_grade(text: str, path: str | Path, line: int | None) -> int:
    """A relevance grade: an ASCII integer in the 64-bit range."""
    if not GRADE.fullmatch(text):
        raise InputError(path, f"relevance grade {text!r} is not an integer", line)
    value = int(text)
    if not GRADE_RANGE[0] <= value <= GRADE_RANGE[1]:
        raise InputError(path, f"relevance grade {text!r} is out of range (a 64-bit integer)", line)
    return value


def parse_score(text: str, path: str | Path, line: int | None) -> float:
    """A score: an ASCII decimal number that is finite as a float."""
    if not SCORE.fullmatch(text):
        raise InputError(
            path, f"score {text!r} is {'not finite' if NON_FINITE.fullmatch(text) else 'not a number'}", line
        )
    value = float(text)
    if not math.isfinite(value):
        raise InputError(path, f"score {text!r} is not finite", line)
    return value
