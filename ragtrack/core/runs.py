"""The Run type (per query, documents with scores) and TREC run I/O.

Ranking order is trec_eval's: score descending, ties broken by document id *descending* (trec_eval
sorts equal scores with ``strcmp(b, a)``); the rank column of a file is ignored when read. Runs are
written in that order with 1-based ranks and full-precision scores, so a file's ranks are the
evaluated ones. :class:`RunColumns` holds a run read from a file as columns (what ``ragtrack eval``
scores without building a dict per query).
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ragtrack.core import columnar
from ragtrack.core.errors import InputError
from ragtrack.core.fields import check_id, parse_score, split_columns
from ragtrack.core.files import read_lines, write_atomically

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
    return "".join(f"{qid} Q0 {doc_id} {rank} {float(score)!r} {tag}\n"
                   for qid, ranked in run.rankings() for rank, (doc_id, score) in enumerate(ranked, start=1))


def write_trec(run: Run, path: str | Path, tag: str | None = None) -> Path:
    """Write the run as a TREC file atomically."""
    return write_atomically(path, trec_text(run, tag))


@dataclass(frozen=True)
class RunColumns:
    """A run as columns, one entry per line in file order: query ids and document ids (Arrow string
    arrays) and scores (float64). Read by :func:`read_run_columns`."""

    qids: Any
    docids: Any
    scores: "np.ndarray"

    @classmethod
    def from_run(cls, run: Run) -> "RunColumns":
        import numpy as np
        import pyarrow as pa

        pairs = [(qid, doc_id, score) for qid, docs in run.scores.items() for doc_id, score in docs.items()]
        qids, doc_ids, scores = zip(*pairs) if pairs else ((), (), ())
        return cls(pa.chunked_array([columnar.string_array(qids)]),
                   pa.chunked_array([columnar.string_array(doc_ids)]), np.array(scores, dtype=float))

    def _grouped(self) -> "tuple[list[str], np.ndarray, np.ndarray]":
        """Query ids in order of first appearance, the lines grouped by query (file order within a
        query) and the start of each query's group in that order (one more entry: the end)."""
        import numpy as np
        import pyarrow.compute as pc

        codes = pc.dictionary_encode(self.qids).combine_chunks()
        indices = columnar.to_numpy(codes.indices)
        order = np.argsort(indices, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(indices, minlength=len(codes.dictionary)))])
        return codes.dictionary.to_pylist(), order, starts

    def to_run(self, name: str) -> Run:
        """The :class:`Run` (queries in order of first appearance, documents in file order)."""
        qids, order, starts = self._grouped()
        doc_ids = self.docids.take(columnar.from_numpy(order)).to_pylist()
        scores = self.scores[order].tolist()
        return Run(name, {qid: dict(zip(doc_ids[a:b], scores[a:b])) for qid, a, b in zip(qids, starts[:-1], starts[1:])})

    def judged_positions(self, qids: list[str], qrels: Mapping[str, Mapping[str, int]]) -> "tuple[np.ndarray, ...]":
        """Where the judged documents sit in trec_eval order, for the ranking metrics' grade matrix:
        per query of ``qids`` the number of documents retrieved; per judged document that was
        retrieved its query's row in ``qids``, its grade and its 0-based rank (the documents scored
        higher plus the tied ones with a larger id, as ``rank_documents`` orders them)."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        rows = columnar.to_numpy(pc.index_in(self.qids, value_set=columnar.string_array(qids)))
        retrieved = np.bincount(rows[rows >= 0], minlength=len(qids))
        judged_keys = [f"{qid}\t{doc_id}" for qid in qids for doc_id in qrels[qid]]
        judged_rows = np.repeat(np.arange(len(qids)), [len(qrels[qid]) for qid in qids])
        judged_grades = np.fromiter((g for qid in qids for g in qrels[qid].values()), dtype=np.int64, count=len(judged_keys))
        entry = pc.index_in(pc.binary_join_element_wise(self.qids, self.docids, columnar.string_array(["\t"])[0]), value_set=columnar.string_array(judged_keys))
        entries = columnar.to_numpy(entry)
        hit_lines = np.flatnonzero(entries >= 0)
        hit_entries = entries[hit_lines]
        lines = np.flatnonzero(rows >= 0)
        lines = lines[np.argsort(rows[lines], kind="stable")]  # grouped by row
        starts = np.concatenate([[0], np.cumsum(retrieved)])
        hit_rows, positions = judged_rows[hit_entries], np.zeros(len(hit_lines), dtype=np.int64)
        by_row = np.argsort(hit_rows, kind="stable")
        docids = self.docids.combine_chunks()  # one array: a take from it costs microseconds
        for group in np.split(by_row, np.flatnonzero(np.diff(hit_rows[by_row])) + 1) if len(by_row) else ():
            segment = lines[starts[hit_rows[group[0]]]:starts[hit_rows[group[0]] + 1]]
            scores = self.scores[segment]
            values = self.scores[hit_lines[group]]
            positions[group] = np.count_nonzero(scores > values[:, None], axis=1)  # a few judged documents: compare, not sort
            for i in np.flatnonzero(np.count_nonzero(scores == values[:, None], axis=1) > 1):
                tied = segment[scores == values[i]]
                doc_id = docids[int(hit_lines[group[i]])].as_py()
                positions[group[i]] += sum(other > doc_id for other in docids.take(columnar.from_numpy(tied)).to_pylist())
        return retrieved, hit_rows, judged_grades[hit_entries], positions


def read_run_columns(path: str | Path) -> RunColumns:
    """A TREC run file as :class:`RunColumns`: the columnar reader, or the line reader where it declines."""
    path = Path(path)
    fast = columnar.read_run(path)
    return RunColumns(*fast) if fast else RunColumns.from_run(read_trec_lines(path))


def read_trec(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file (gzip if it ends in ``.gz``); scores decide the order (the rank column is
    ignored, as in trec_eval). Encoding, NUL bytes and line length are checked as for every input;
    columns, ids and scores follow ``fields.py`` (scores: ASCII decimal numbers, finite). Large files
    are read by the columnar reader; whatever it declines, the line reader reads."""
    path = Path(path)
    fast = columnar.read_run(path)
    return RunColumns(*fast).to_run(name or path.stem) if fast else read_trec_lines(path, name)


def read_trec_lines(path: Path, name: str | None = None) -> Run:
    """:func:`read_trec` line by line: the reference, with the line number of every defect."""
    scores: dict[str, dict[str, float]] = {}
    for number, text in read_lines(path):
        columns = split_columns(text)
        if len(columns) != 6:
            raise InputError(path, f"expected 6 columns 'qid Q0 docid rank score tag', got {len(columns)}", number)
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
