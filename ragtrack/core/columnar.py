"""The fast path for large TREC run and qrels files: Arrow's CSV reader, then the rules of
``fields.py`` applied to whole columns.

The line reader (``read_lines`` with ``runs.read_trec_lines`` and ``data.load_qrels_lines``) is the
reference. This reader returns a result only when it is certain the line reader would return the same
one: one separator throughout, no NUL byte, no lone carriage return, every id free of whitespace and
every grade or score matching the same regular expression as there (checked with
``pyarrow.compute``), no duplicate pair. In every other case it returns ``None`` and the caller reads
the file line by line, which either accepts it (a run separated by tabs, say) or raises the exact
one-line error with its line number. A file that is not a regular file fails here already, with the
same message.

pyarrow is imported when these functions run, so importing ``ragtrack.core`` stays cheap.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import TYPE_CHECKING

from ragtrack.core.fields import BEIR_HEADER, GRADE, SCORE, WHITESPACE
from ragtrack.core.files import read_bytes

if TYPE_CHECKING:
    import numpy as np
    import pyarrow as pa

def _table(data: bytes, names: list[str], delimiter: str) -> "pa.Table | None":
    """All columns as strings, or ``None`` when Arrow cannot split every line into ``names``."""
    import pyarrow as pa
    from pyarrow import csv

    try:
        return csv.read_csv(
            pa.py_buffer(data),
            read_options=csv.ReadOptions(column_names=names),
            parse_options=csv.ParseOptions(delimiter=delimiter, quote_char=False, double_quote=False, escape_char=False,
                                           newlines_in_values=False, ignore_empty_lines=True),
            convert_options=csv.ConvertOptions(column_types=dict.fromkeys(names, pa.string()), strings_can_be_null=False),
        )
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None  # a line with another column count, invalid UTF-8, a line longer than a block ...


# Arrays cross between Arrow and numpy through their buffers: pyarrow's own conversions (``pa.array``,
# ``to_numpy``, ``take`` with a numpy index) import pandas, which would cost ``ragtrack eval`` 0.3 s.
NUMPY_TYPES = {"int32": "int32", "int64": "int64", "double": "float64"}


def to_numpy(array: "pa.Array | pa.ChunkedArray", missing: int = -1) -> "np.ndarray":
    """A numeric Arrow array as a numpy array, read from its buffers; nulls become ``missing``."""
    import numpy as np
    import pyarrow as pa

    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    validity, data = array.buffers()[:2]
    values = np.frombuffer(data, dtype=NUMPY_TYPES[str(array.type)], count=len(array), offset=array.offset * array.type.bit_width // 8)
    if array.null_count:
        bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")[array.offset:array.offset + len(array)]
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
        return pa.LargeStringArray.from_buffers(len(encoded), pa.py_buffer(offsets), pa.py_buffer(b"".join(encoded))).cast(pa.string())
    return pa.StringArray.from_buffers(len(encoded), pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded)))


def _load(path: Path) -> bytes | None:
    """The file's bytes if nothing in them needs the line reader's judgment; opening errors raise."""
    try:
        data = read_bytes(path)
    except (EOFError, gzip.BadGzipFile, zlib.error, OSError):
        return None
    if b"\x00" in data or b"\r" in data and data.count(b"\r") != data.count(b"\r\n"):
        return None  # NUL bytes (and UTF-16), or a lone CR that Arrow would take for a line break
    return data


def _ids_are_clean(ascii_only: bool, *columns: "pa.ChunkedArray") -> bool:
    """No empty id and no whitespace in any id (``fields.check_id``'s rules; UTF-8 is Arrow's check).
    In an ASCII file, "printable and no space" is the cheaper equal test."""
    import pyarrow.compute as pc

    def clean(column: "pa.ChunkedArray") -> bool:
        if ascii_only:
            return bool(pc.all(pc.ascii_is_printable(column)).as_py()) and not pc.any(pc.match_substring(column, " ")).as_py()
        return not pc.any(pc.match_substring_regex(column, WHITESPACE)).as_py()

    return all(pc.min(pc.binary_length(column)).as_py() > 0 and clean(column) for column in columns)


def _all_match(column: "pa.ChunkedArray", pattern: str) -> bool:
    import pyarrow.compute as pc

    return bool(pc.all(pc.match_substring_regex(column, f"^(?:{pattern})$")).as_py())


def _pairs_are_unique(qids: "pa.ChunkedArray", docids: "pa.ChunkedArray") -> bool:
    import numpy as np
    import pyarrow.compute as pc

    queries = pc.dictionary_encode(qids).combine_chunks()
    documents = pc.dictionary_encode(docids).combine_chunks()
    keys = to_numpy(queries.indices).astype(np.int64) * len(documents.dictionary) + to_numpy(documents.indices)
    keys.sort()
    return not (keys[1:] == keys[:-1]).any()


def read_run(path: Path) -> "tuple[pa.ChunkedArray, pa.ChunkedArray, object] | None":
    """(query ids, document ids, float64 scores as a numpy array) of a TREC run in file order, or ``None``."""
    import pyarrow as pa
    import pyarrow.compute as pc

    data = _load(path)
    table = None if data is None else _table(data, ["qid", "q0", "docid", "rank", "score", "tag"], " ")
    if table is None or table.num_rows == 0:
        return None
    qids, docids, scores = table["qid"], table["docid"], table["score"]
    if not (_ids_are_clean(data.isascii(), *table.columns) and _all_match(scores, SCORE.pattern)):
        return None
    values = pc.cast(scores, pa.float64())
    if not pc.all(pc.is_finite(values)).as_py() or not _pairs_are_unique(qids, docids):
        return None
    return qids, docids, to_numpy(values)


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
    table = _table(data, names, "\t" if tabs else " ")
    if table is None or table.num_rows == 0:
        return None
    if tabs and list(table.slice(0, 1).to_pylist()[0].values()) == BEIR_HEADER:
        table = table.slice(1)
    grades = table["grade"]
    if table.num_rows == 0 or not _ids_are_clean(data.isascii(), *(table[name] for name in names[:-1])) or not _all_match(grades, GRADE.pattern):
        return None
    try:
        values = pc.cast(grades, pa.int64())
    except pa.ArrowInvalid:
        return None  # out of the 64-bit range
    if not _pairs_are_unique(table["qid"], table["docid"]):
        return None
    return table["qid"].to_pylist(), table["docid"].to_pylist(), values.to_pylist(), data
