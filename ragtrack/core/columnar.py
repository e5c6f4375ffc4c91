"""The fast path for large TREC run and qrels files: Arrow's CSV reader, then the rules of
``fields.py`` checked on whole columns.

The line reader (``read_lines`` with ``runs.read_trec_lines`` and ``data.load_qrels_lines``) is the
reference. This reader returns a result only when it is certain the line reader would return the same
one, and ``None`` otherwise; the caller then reads the file line by line, which either accepts it (a
run separated by tabs, say) or raises the exact one-line error with its line number. A file that is
not a regular file fails here already, with the same message.

A run is accepted when every line is six non-empty columns separated by single spaces (no comment
line and no seventh column, which the line reader handles; no tab, no NUL byte, no lone carriage
return), no distinct id contains whitespace, every score is a finite number in ``fields.SCORE``'s syntax (Arrow parses the scores: its syntax is ``SCORE`` plus the spellings of
nan and infinity, which the finiteness check rejects; tests/unit/test_strict_parsing.py checks it on
random strings) and no (query, document) pair appears twice. The ids are dictionary-encoded once: the
duplicate check and the judged-document lookup work on the integer codes.

pyarrow is imported when these functions run, so importing ``ragtrack.core`` stays cheap; the callers
leave files under 256 KiB (:func:`is_small`) to the line reader, which reads them before Arrow would be
imported.
"""

from __future__ import annotations

import gzip
import re
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.core.fields import GRADE, QRELS_HEADER, WHITESPACE, is_header
from ragtrack.core.files import read_bytes

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa


def _table(
    data: bytes, names: list[str], delimiter: str, types: "dict[str, pa.DataType] | None" = None
) -> "pa.Table | None":
    """The columns (strings unless ``types`` says otherwise), or ``None`` when Arrow cannot split every
    line into ``names`` or convert a value. Strings are checked to be UTF-8 unless the data is ASCII."""
    import pyarrow as pa
    from pyarrow import csv

    try:
        return csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=names, use_threads=False),
            parse_options=csv.ParseOptions(
                delimiter=delimiter,
                quote_char=False,
                double_quote=False,
                escape_char=False,
                newlines_in_values=False,
                ignore_empty_lines=True,
            ),
            convert_options=csv.ConvertOptions(
                column_types=dict.fromkeys(names, pa.string()) | (types or {}),
                null_values=[],
                strings_can_be_null=False,
                check_utf8=not data.isascii(),
            ),
            memory_pool=pa.system_memory_pool(),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a line with another column count, invalid UTF-8, a line longer than a block, a value that is no number ...


# Arrays cross between Arrow and numpy through their buffers: pyarrow's own conversions (``pa.array``,
# ``to_numpy``, ``take`` with a numpy index) import pandas, which would cost ``ragtrack eval`` 0.3 s.
NUMPY_TYPES = {"int32": "int32", "int64": "int64", "double": "float64"}


def to_numpy(array: "pa.Array | pa.ChunkedArray", missing: int = -1) -> "np.ndarray":
    """A numeric Arrow array as a numpy array, read from its buffers; nulls become ``missing``."""
    import numpy as np
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):  # the chunks' values joined by numpy (no Arrow allocation)
        parts = [to_numpy(chunk, missing) for chunk in array.chunks] or [
            np.zeros(0, dtype=NUMPY_TYPES[str(array.type)])
        ]
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    validity, data = array.buffers()[:2]
    values = np.frombuffer(
        data, dtype=NUMPY_TYPES[str(array.type)], count=len(array), offset=array.offset * array.type.bit_width // 8
    )
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[
            array.offset : array.offset + len(array)
        ]
        values = np.where(bits.astype(bool), values, missing)
    return values


def from_numpy(values: "np.ndarray") -> "pa.Array":
    """A 1-d int64 or float64 numpy array as an Arrow array."""
    import numpy as np
    import pyarrow as pa

    values = np.ascontiguousarray(values)
    kind = {"int64": pa.int64(), "float64": pa.float64()}[values.dtype.name]
    return pa.Array.from_buffers(kind, len(values), [None, pa.py_buffer(values)])


def string_array(values: list[str]) -> "pa.Array":
    """An Arrow string array from Python strings, built from its buffers."""
    import numpy as np
    import pyarrow as pa

    encoded = [value.encode("utf-8") for value in values]
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum([len(item) for item in encoded], out=offsets[1:])
    if offsets[-1] >= 2**31:
        return pa.LargeStringArray.from_buffers(
            len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))
        ).cast(pa.string())
    return pa.StringArray.from_buffers(
        len(encoded), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))
    )


COMMENT = re.compile(rb"(?:^|\n)[ \t]*#")  # a line whose first non-blank character is '#'


def _load(path: Path) -> bytes | None:
    """The file's bytes if nothing in them needs the line reader's judgment; opening errors raise."""
    try:
        data = read_bytes(path)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
        return None
    if b"\x00" in data or b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return None  # NUL bytes (and UTF-16), or a lone CR that Arrow would take for a line break
    if b"#" in data and COMMENT.search(data):
        return None  # a comment line, which the line readers skip
    return data


def encode(column: "pa.ChunkedArray") -> "tuple[pa.Array, np.ndarray]":
    """The distinct values of ``column`` in order of first appearance, and per entry the index of its
    value among them (Arrow's hash table, one pass)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    encoded = pc.dictionary_encode(column, memory_pool=pa.system_memory_pool())  # the chunks share one dictionary
    return encoded.chunk(0).dictionary, to_numpy(
        pa.chunked_array([chunk.indices for chunk in encoded.chunks], type=pa.int32())
    )


def _ids_are_clean(*distinct: "pa.Array") -> bool:
    """No empty id and no whitespace in any id (``fields.check_id``'s rules; UTF-8 is Arrow's check)."""
    import pyarrow.compute as pc

    return not any(pc.any(pc.match_substring_regex(ids, f"^$|{WHITESPACE}")).as_py() for ids in distinct)


def _no_empty_field(*columns: "pa.ChunkedArray") -> bool:
    """Every value is non-empty: with single spaces as separators, an empty field means two spaces in a
    row, or a space at the start or end of a line, where the line reader sees one column less."""
    import pyarrow.compute as pc

    return all(pc.min(pc.binary_length(column)).as_py() > 0 for column in columns)


def _pairs_are_unique(query_codes: "np.ndarray", document_codes: "np.ndarray", documents: int) -> bool:
    """No (query, document) pair twice. A file grouped by query (its codes, numbered in order of first
    appearance, never decrease) sorts each query's document codes as one row of a matrix, padded with
    distinct negative numbers (several times faster than one sort of all lines); any other file sorts
    the pairs as the integers query code * ``documents`` + document code."""
    import numpy as np

    sizes = np.bincount(query_codes)
    width = int(sizes.max())
    if width * len(sizes) <= 2 * len(query_codes) and not (query_codes[1:] < query_codes[:-1]).any():
        rows = np.tile(np.arange(-1, -1 - width, -1, dtype=np.int32), (len(sizes), 1))
        rows[query_codes, np.arange(len(query_codes)) - (np.cumsum(sizes) - sizes)[query_codes]] = document_codes
        rows.sort(axis=1)
        return not (rows[:, 1:] == rows[:, :-1]).any()
    keys = query_codes.astype(np.int64) * documents + document_codes
    keys.sort()
    return not (keys[1:] == keys[:-1]).any()


def _encoded_ids(table: "pa.Table") -> "tuple[pa.Array, np.ndarray, pa.Array, np.ndarray] | None":
    """(distinct query ids, per line the index of its query id, distinct document ids, per line the
    index of its document id), or ``None`` when an id breaks the rules or a pair appears twice."""
    queries, query_codes = encode(table["qid"])
    documents, document_codes = encode(table["docid"])
    if not (_ids_are_clean(queries, documents) and _pairs_are_unique(query_codes, document_codes, len(documents))):
        return None
    return queries, query_codes, documents, document_codes


RUN_COLUMNS = ["qid", "q0", "docid", "rank", "score", "tag"]


SMALL_FILE_BYTES = 256 * 1024  # the callers leave smaller files to the line reader: no Arrow to import (~0.1 s)


def is_small(path: Path) -> bool:
    """Whether ``path`` is a regular file below :data:`SMALL_FILE_BYTES` on disk, which the line reader
    reads before Arrow could be imported (``load_qrels``, ``read_trec`` and ``read_run_scores`` do so)."""
    try:
        return path.stat().st_size < SMALL_FILE_BYTES and path.is_file()
    except OSError:
        return False  # the readers say what is wrong


def read_run(path: Path) -> "tuple[pa.Array, np.ndarray, pa.Array, np.ndarray, np.ndarray] | None":
    """A TREC run as (distinct query ids, per line the index of its query id, distinct document ids,
    per line the index of its document id, float64 scores), lines in file order; or ``None``."""
    import numpy as np
    import pyarrow as pa

    data = _load(path)
    table = (
        None if data is None or b"\t" in data else _table(data, RUN_COLUMNS, " ", {"score": pa.float64()})
    )  # a tab: the line reader splits there
    if table is None or table.num_rows == 0 or not _no_empty_field(table["q0"], table["rank"], table["tag"]):
        return None
    scores = to_numpy(table["score"])
    if not np.isfinite(scores).all():
        return None
    ids = _encoded_ids(table)
    return None if ids is None else (*ids, scores)


def read_qrels(path: Path) -> "tuple[list[str], list[str], list[int], bytes] | None":
    """(query ids, document ids, grades, the file's bytes) of BEIR (tab-separated) or TREC (space-separated)
    qrels in file order, or ``None``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = _load(path)
    if data is None:
        return None
    tabs = b"\t" in data.lstrip(b"\r\n").split(b"\n", 1)[0]  # the first non-empty line decides the separator
    names = ["qid", "docid", "grade"] if tabs else ["qid", "iteration", "docid", "grade"]
    table = None if not tabs and b"\t" in data else _table(data, names, "\t" if tabs else " ")
    if table is None or table.num_rows == 0:
        return None
    if tabs and is_header(list(table.slice(0, 1).to_pylist()[0].values()), QRELS_HEADER):
        table = table.slice(1)
    grades = table["grade"]
    if (
        table.num_rows == 0
        or not _no_empty_field(*table.columns)
        or not pc.all(pc.match_substring_regex(grades, f"^(?:{GRADE.pattern})$")).as_py()
    ):
        return None
    try:
        values = pc.cast(grades, pa.int64())
    except pa.ArrowInvalid:
        return None  # out of the 64-bit range
    if _encoded_ids(table) is None:
        return None
    return table["qid"].to_pylist(), table["docid"].to_pylist(), values.to_pylist(), data
