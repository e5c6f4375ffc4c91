"""The Run type (per query, documents with scores) and TREC run I/O.

Ranking order is trec_eval's: score descending, ties broken by document id *descending* (trec_eval
sorts equal scores with ``strcmp(b, a)``); the rank column of a file is ignored when read. Runs are
written in that order with 1-based ranks and full-precision scores, so a file's ranks are the
evaluated ones.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ragtrack.core.errors import InputError
from ragtrack.core.fields import check_id, parse_score, split_columns
from ragtrack.core.files import read_lines, write_atomically

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


def read_trec(path: str | Path, name: str | None = None) -> Run:
    """Read a TREC run file (gzip if it ends in ``.gz``); scores decide the order (the rank column is
    ignored, as in trec_eval). Encoding, NUL bytes and line length are checked as for every input;
    columns, ids and scores follow ``fields.py`` (scores: ASCII decimal numbers, finite)."""
    path = Path(path)
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
