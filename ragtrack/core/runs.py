"""The Run type (per query, documents with scores) and TREC run I/O.

Ranking order is trec_eval's: score descending, ties broken by document id *descending* (trec_eval
sorts equal scores with ``strcmp(b, a)``); the rank column of a file is ignored when read. Runs are
written in that order with 1-based ranks and full-precision scores, so a file's ranks are the
evaluated ones. :class:`RunColumns` holds a run read from a file as columns (what ``ragtrack eval``
scores without building a dict per query).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragtrack.core import columnar
from ragtrack.core.errors import InputError
from ragtrack.core.fields import check_id, parse_score, split_columns
from ragtrack.core.files import open_regular, read_bytes, read_lines, write_atomically

if TYPE_CHECKING:
    import numpy as np

SCORE_THEN_ID = operator.itemgetter(1, 0)


def rank_documents(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    """Documents of one query in trec_eval order: (-score, document id descending), i.e. descending
    (score, document id) pairs (ids are unique, so no two keys tie)."""
    return sorted(scores.items(), key=SCORE_THEN_ID, reverse=True)


@dataclass
class Run:
    """Retrieval results of one system: ``scores[qid][docid] = score`` (higher is better).

    A run is not changed once built: each query's ranking is sorted once and kept, since fusion,
    evaluation, output files and the jobs of a multirun all read the same rankings."""

    name: str
    scores: dict[str, dict[str, float]] = field(default_factory=dict)
    _ranked: dict[str, list[tuple[str, float]]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.scores)

    def ranking(self, qid: str) -> list[tuple[str, float]]:
        ranked = self._ranked.get(qid)
        if ranked is None:
            ranked = self._ranked[qid] = rank_documents(self.scores.get(qid, {}))
        return ranked

    def rankings(self) -> Iterator[tuple[str, list[tuple[str, float]]]]:
        for qid in self.scores:
            yield qid, self.ranking(qid)

    def truncated(self, depth: int) -> "Run":
        return Run.from_rankings(self.name, {qid: ranked[:depth] for qid, ranked in self.rankings()})

    @classmethod
    def from_rankings(cls, name: str, rankings: Mapping[str, list[tuple[str, float]]]) -> "Run":
        """A run from lists already in trec_eval order (as ``ranking`` returns them), kept as its rankings."""
        run = cls(name, {qid: dict(ranked) for qid, ranked in rankings.items()})
        run._ranked.update(rankings)
        return run


def trec_text(run: Run, tag: str | None = None) -> str:
    """``qid Q0 docid rank score tag`` lines of ``run`` in trec_eval order, full-precision scores."""
    tag = tag or run.name
    return "".join(
        f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n"
        for qid, ranked in run.rankings()
        for rank, (doc_id, score) in enumerate(ranked, start=1)
    )


def write_trec(run: Run, path: str | Path, tag: str | None = None) -> Path:
    """Write the run as a TREC file atomically."""
    return write_atomically(path, trec_text(run, tag))


def _first_index(
    descending: "np.ndarray", lo: "np.ndarray", hi: "np.ndarray", found: Callable[["np.ndarray"], "np.ndarray"]
) -> "np.ndarray":
    """Per entry, the first index in ``[lo, hi)`` whose value satisfies ``found`` (``hi`` if none):
    a binary search, side by side for every entry, in ranges where ``found`` turns true only once
    (ranges of ``descending`` that do not increase). ``found`` gets the values at the entries' current
    midpoints."""
    import numpy as np

    lo, hi = lo.copy(), hi.copy()
    while (active := lo < hi).any():
        middle = (lo + hi) // 2
        hit = found(descending[np.where(active, middle, 0)])
        lo = np.where(active & ~hit, middle + 1, lo)
        hi = np.where(active & hit, middle, hi)
    return lo


@dataclass(frozen=True)
class RunColumns:
    """A run as columns, one entry per line in file order. The ids are dictionary-encoded: ``queries``
    and ``documents`` hold the distinct ids (Arrow string arrays, in order of first appearance), and
    ``query_codes`` and ``document_codes`` hold per line the index of its id there; ``scores`` are
    float64. Read by :func:`read_run_columns`."""

    queries: Any
    query_codes: "np.ndarray"
    documents: Any
    document_codes: "np.ndarray"
    scores: "np.ndarray"

    @classmethod
    def from_run(cls, run: Run) -> "RunColumns":
        import numpy as np

        documents: dict[str, int] = {}
        document_codes = [
            documents.setdefault(doc_id, len(documents)) for docs in run.scores.values() for doc_id in docs
        ]
        sizes = [len(docs) for docs in run.scores.values()]
        return cls(
            columnar.string_array(list(run.scores)),
            np.repeat(np.arange(len(sizes), dtype=np.int32), sizes),
            columnar.string_array(list(documents)),
            np.array(document_codes, dtype=np.int32),
            np.array([score for docs in run.scores.values() for score in docs.values()], dtype=float),
        )

    def to_run(self, name: str) -> Run:
        """The :class:`Run` (queries in order of first appearance, documents in file order)."""
        import numpy as np

        order = np.argsort(self.query_codes, kind="stable")
        sizes = np.bincount(self.query_codes, minlength=len(self.queries))
        ends = np.cumsum(sizes)
        doc_ids = self.documents.take(columnar.from_numpy(self.document_codes[order].astype(np.int64))).to_pylist()
        scores = self.scores[order].tolist()
        return Run(
            name,
            {
                qid: dict(zip(doc_ids[a:b], scores[a:b]))
                for qid, a, b in zip(self.queries.to_pylist(), ends - sizes, ends)
            },
        )

    def _in_ranked_order(self) -> "tuple[np.ndarray, np.ndarray, np.ndarray]":
        """Query codes, document codes and scores of the lines grouped by query and sorted by descending
        score within each query. A file is usually in that order already, which one pass checks (the
        codes count queries in order of first appearance, so a file is grouped exactly when its codes
        never decrease); otherwise one ``lexsort`` orders it."""
        import numpy as np

        codes, scores = self.query_codes, self.scores
        if np.all((codes[1:] > codes[:-1]) | ((codes[1:] == codes[:-1]) & (scores[1:] <= scores[:-1]))):
            return codes, self.document_codes, scores
        order = np.lexsort((-scores, codes))
        return codes[order], self.document_codes[order], scores[order]

    def _judgments(
        self, qids: list[str], qrels: Mapping[str, Mapping[str, int]], row_codes: "np.ndarray"
    ) -> "tuple[np.ndarray, ...]":
        """The judgments of queries and documents in the run, sorted by their key query code *
        |documents| + document code: (keys, rows in ``qids``, grades). The run's distinct documents
        are looked up among the judged ones (the smaller hash table)."""
        import numpy as np
        import pyarrow.compute as pc

        judged = [
            (row, doc_id, grade)
            for row, qid in enumerate(qids)
            if row_codes[row] >= 0
            for doc_id, grade in qrels[qid].items()
        ]
        rows = np.array([row for row, _, _ in judged], dtype=np.int64)
        grades = np.array([grade for _, _, grade in judged], dtype=np.int64)
        judged_docs: dict[str, int] = {}
        entries = np.array(
            [judged_docs.setdefault(doc_id, len(judged_docs)) for _, doc_id, _ in judged], dtype=np.int64
        )
        in_judged = columnar.to_numpy(pc.index_in(self.documents, value_set=columnar.string_array(list(judged_docs))))
        code_of_judged = np.full(len(judged_docs), -1, dtype=np.int64)
        code_of_judged[in_judged[in_judged >= 0]] = np.flatnonzero(in_judged >= 0)
        doc_codes = code_of_judged[entries]
        retrieved = doc_codes >= 0
        keys = row_codes[rows[retrieved]] * len(self.documents) + doc_codes[retrieved]
        by_key = np.argsort(keys)
        return keys[by_key], rows[retrieved][by_key], grades[retrieved][by_key]

    def judged_positions(self, qids: list[str], qrels: Mapping[str, Mapping[str, int]]) -> "tuple[np.ndarray, ...]":
        """Where the judged documents sit in trec_eval order, for the ranking metrics' grade matrix:
        per query of ``qids`` the number of documents retrieved; per judged document that was
        retrieved its query's row in ``qids``, its grade and its 0-based rank (the documents scored
        higher plus the tied ones with a larger id, as ``rank_documents`` orders them).

        The lines are taken in ranked order (:meth:`_in_ranked_order`) and the judged ones found by
        their integer (query code, document code) keys. A judged line's rank is then the start of its
        run of equal scores minus the start of its query; a binary search finds both for all judged
        lines at once, and only the lines of a tie compare their ids."""
        import numpy as np

        query_code = {qid: code for code, qid in enumerate(self.queries.to_pylist())}
        row_codes = np.array([query_code.get(qid, -1) for qid in qids], dtype=np.int64)
        sizes = np.bincount(self.query_codes, minlength=len(self.queries))
        retrieved = np.where(row_codes >= 0, sizes[row_codes], 0)
        keys, rows, grades = self._judgments(qids, qrels, row_codes)

        codes, document_codes, scores = self._in_ranked_order()
        is_judged = np.zeros(len(self.documents), dtype=bool)
        is_judged[keys % len(self.documents)] = True  # the keys' document codes
        lines = np.flatnonzero(is_judged[document_codes])  # lines of a document judged for some query
        line_keys = codes[lines].astype(np.int64) * len(self.documents) + document_codes[lines]
        entry = np.minimum(np.searchsorted(keys, line_keys), len(keys) - 1)  # no judged line: no key either
        hit = keys[entry] == line_keys
        lines, entry = lines[hit], entry[hit]

        ends = np.cumsum(sizes)
        first, last = (
            (ends - sizes)[codes[lines]],
            ends[codes[lines]],
        )  # each judged line's query, as lines [first, last)
        values = scores[lines]
        start = _first_index(
            scores, first, lines, lambda score: score <= values
        )  # the run of scores equal to the line's
        end = _first_index(scores, lines + 1, last, lambda score: score < values)
        positions = start - first
        tied = np.flatnonzero(end - start > 1)
        if len(tied):  # count the tied documents with a larger id, comparing the ids as strings
            lengths = (end - start)[tied]
            members = np.repeat(start[tied] - np.cumsum(lengths) + lengths, lengths) + np.arange(
                lengths.sum()
            )  # the lines of each tie
            owners = np.repeat(np.arange(len(tied)), lengths)
            names = self.documents.take(columnar.from_numpy(document_codes[members].astype(np.int64))).to_pylist()
            own = self.documents.take(columnar.from_numpy(document_codes[lines[tied]].astype(np.int64))).to_pylist()
            larger = np.fromiter(
                (name > own[owner] for name, owner in zip(names, owners)), dtype=bool, count=len(names)
            )
            positions[tied] += np.bincount(owners[larger], minlength=len(tied))
        return retrieved, rows[entry], grades[entry], positions


def read_run_columns(path: str | Path) -> RunColumns:
    """A TREC run file as :class:`RunColumns`: the columnar reader, or the line reader where it declines."""
    path = Path(path)
    fast = columnar.read_run(path)
    return RunColumns(*fast) if fast else RunColumns.from_run(read_trec_lines(path))


def read_run_scores(path: str | Path) -> Mapping[str, Mapping[str, float]] | RunColumns:
    """A run file as the ranking metrics read it: columns (:func:`read_run_columns`), or for a small
    file its scores per query from the line reader, with no Arrow to import."""
    path = Path(path)
    return read_trec_lines(path).scores if columnar.is_small(path) else read_run_columns(path)


def read_trec(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file (gzip if it ends in ``.gz``); scores decide the order (the rank column is
    ignored, as in trec_eval; so are comment lines and columns after the sixth, as trec_eval 10 reads
    them: :func:`run_lines`). Encoding, NUL bytes and line length are checked as for every input;
    columns, ids and scores follow ``fields.py`` (scores: ASCII decimal numbers, finite). Large files
    are read by the columnar reader; small ones, and whatever it declines, the line reader reads."""
    path = Path(path)
    fast = None if columnar.is_small(path) else columnar.read_run(path)
    return RunColumns(*fast).to_run(name or path.stem) if fast else read_trec_lines(path, name)


def run_lines(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line number, its first six columns) of each result line, as trec_eval 10 reads a run: a line
    whose first non-blank character is ``#`` is a comment, and columns after the sixth are ignored
    (get_trec_results.c); fewer than six is an error naming the line, and so is more than six on a line
    holding other whitespace than spaces and tabs (a lone carriage return joins two lines there)."""
    for number, text in read_lines(path):
        columns = split_columns(text)
        if columns[0].startswith("#"):
            continue
        if len(columns) < 6 or len(columns) > 6 and any(ch.isspace() for ch in text.replace(" ", "").replace("\t", "")):
            raise InputError(path, f"expected 6 columns 'qid Q0 docid rank score tag', got {len(columns)}", number)
        yield number, columns[:6]


def _last_tag(data: bytes, whole: bool) -> str | None:
    """The sixth field of the last line of ``data`` that is no comment; ``None`` when ``data`` is the tail
    of a file (not ``whole``) and holds no such line in full."""
    end = len(data)
    while end > 0:
        start = data.rfind(b"\n", 0, end) + 1
        if start == 0 and not whole:
            return None  # the line may begin before the tail
        fields = data[start:end].split()
        if fields and not fields[0].startswith(b"#"):
            return fields[5].decode("utf-8")
        end = start - 1
    return None


def run_tag(path: str | Path, tail_bytes: int = 1 << 16) -> str:
    """The tag (sixth column) of the last result line of a run file that reads without error: the
    ``runid`` trec_eval prints. An uncompressed file is read from its last ``tail_bytes`` (the whole
    file where they hold no whole result line)."""
    path = Path(path)
    if path.suffix != ".gz":
        with open_regular(path) as handle:
            size = handle.seek(0, 2)
            handle.seek(max(size - tail_bytes, 0))
            tag = _last_tag(handle.read(), size <= tail_bytes)
        if tag is not None:
            return tag
    return _last_tag(read_bytes(path), True) or ""


def read_trec_lines(path: Path, name: str | None = None) -> Run:
    """:func:`read_trec` line by line: the reference, with the line number of every defect."""
    scores: dict[str, dict[str, float]] = {}
    for number, columns in run_lines(path):
        qid, _, doc_id, _, score_text, _ = columns
        score = parse_score(score_text, path, number)
        check_id(qid, path, number, "query id")
        check_id(doc_id, path, number, "document id")
        ranked = scores.setdefault(qid, {})
        if doc_id in ranked:
            raise InputError(path, f"document {doc_id!r} appears twice for query {qid!r}", number)
        ranked[doc_id] = score
    if not scores:
        raise InputError(path, "no results: the run file is empty")
    return Run(name or path.stem, scores)
