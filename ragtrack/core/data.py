"""Load and validate BEIR-layout datasets (and TREC qrels), with a content hash.

Layout: ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``, optional ``answers`` and ``metadata`` object), ``qrels/<split>.tsv`` (``query-id corpus-id score``, header
optional) or a TREC qrels file (``qid 0 docid rel``). Every defect raises :class:`InputError` naming the
file and line. Decisions: blank lines (spaces and tabs only) are not records and are skipped; a BOM
and CRLF line endings are accepted; documents with an empty title *and* text are rejected, as are
empty query texts; ids and texts must be valid Unicode text and ids may not contain whitespace (a TREC
run could not represent them; ``fields.py`` has the rules for ids, grades and columns); qrels may not
name unknown queries or documents or repeat a (query, document) pair; grades must be ASCII integers
(negative grades count as non-relevant and, in bpref, as unjudged, as in trec_eval); the BEIR header ``query-id corpus-id score``
is allowed only as the first non-blank line of a qrels file. Only queries judged in the split are run.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Container, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragtrack.core import columnar
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.fields import BEIR_HEADER, check_id, check_text, parse_grade, split_columns
from ragtrack.core.files import open_bytes, read_lines
from ragtrack.core.strings import JoinedTexts, Strings, StringsBuilder

log = logging.getLogger(__name__)

Qrels = dict[str, dict[str, int]]


@dataclass(frozen=True)
class Corpus:
    """Documents in file order; ``hash`` is the sha256 of the corpus content. ``ids``, ``titles`` and
    ``texts`` are compact columns (:class:`~ragtrack.core.strings.Strings`: one UTF-8 buffer each),
    read like lists of strings; lists given to the constructor are converted."""

    ids: Sequence[str]
    titles: Sequence[str]
    texts: Sequence[str]
    hash: str

    def __post_init__(self) -> None:
        for name in ("ids", "titles", "texts"):
            object.__setattr__(self, name, Strings(getattr(self, name)))
        if not len(self.ids) == len(self.titles) == len(self.texts):
            raise ValueError(f"corpus columns differ in length: {len(self.ids)} ids, {len(self.titles)} titles, {len(self.texts)} texts")

    def __len__(self) -> int:
        return len(self.ids)

    def full_texts(self) -> Sequence[str]:
        """Title and text joined by a space, as BEIR feeds them to BM25 and dense encoders (computed
        as read: indexing gives a ``str``, slicing a list)."""
        return JoinedTexts(self.titles, self.texts)

    def id_array(self) -> np.ndarray:
        """The ids as a numpy object array (for indexing by position)."""
        return np.fromiter(self.ids, dtype=object, count=len(self.ids))

    def texts_of(self, ids: Iterable[str], reader: str, full: bool = True) -> dict[str, str]:
        """The texts of ``ids`` by id: title and text joined (:meth:`full_texts`), or the text alone
        (``full=False``). An id the corpus lacks (a run file may rank one) is a one-line error naming
        ``reader``, what needs the text."""
        wanted = set(ids)
        column = self.full_texts() if full else self.texts
        texts = {doc: column[position] for position, doc in enumerate(self.ids) if doc in wanted}
        if len(texts) < len(wanted):
            missing = sorted(wanted - texts.keys())
            raise RagtrackError(f"{reader}: no text for {len(missing)} of its documents, which are not in the corpus (e.g. {missing[0]!r})")
        return texts


@dataclass(frozen=True)
class Dataset:
    """A corpus with the queries and judgments of one split."""

    name: str
    corpus: Corpus
    queries: dict[str, str]
    qrels: Qrels
    answers: dict[str, list[str]] = field(default_factory=dict)
    hash: str = ""
    metadata: dict[str, dict] = field(default_factory=dict)  # a query's ``metadata`` object (queries.jsonl), where given
    qrels_path: Path | None = None  # the judgments' file, for errors that name a line of it

    def num_judged_relevant(self, threshold: int = 1) -> int:
        return sum(any(g >= threshold for g in docs.values()) for docs in self.qrels.values())


def _read_jsonl(path: Path, digest: "hashlib._Hash | None") -> Iterator[tuple[int, dict]]:
    for number, text in read_lines(path, digest):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", number) from None
        except RecursionError:
            raise InputError(path, "malformed JSON: nesting too deep", number) from None
        if not isinstance(record, dict):
            raise InputError(path, f"expected a JSON object, got {type(record).__name__}", number)
        yield number, record


def _string_field(record: dict, key: str, path: Path, line: int, required: bool) -> str:
    if key not in record:
        if required:
            raise InputError(path, f"missing field '{key}'", line)
        return ""
    value = record[key]
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        raise InputError(path, f"field '{key}' must be a string, got {type(value).__name__}", line)
    return check_text(value, path, line, f"field '{key}'")


def load_corpus(path: Path) -> Corpus:
    """Read a BEIR ``corpus.jsonl(.gz)`` into compact columns."""
    digest = hashlib.sha256()
    ids, titles, texts = StringsBuilder(), StringsBuilder(), StringsBuilder()
    seen: set[str] = set()
    for number, record in _read_jsonl(path, digest):
        doc_id = check_id(record.get("_id"), path, number) if "_id" in record else None
        if doc_id is None:
            raise InputError(path, "missing field '_id'", number)
        text = _string_field(record, "text", path, number, required=True)
        title = _string_field(record, "title", path, number, required=False)
        if not text.strip() and not title.strip():
            raise InputError(path, f"document {doc_id!r} has an empty title and text", number)
        if doc_id in seen:
            raise InputError(path, f"duplicate document id {doc_id!r} (first on line {_first_line(path, doc_id)})", number)
        seen.add(doc_id)
        ids.append(doc_id)
        titles.append(title)
        texts.append(text)
    if not seen:
        raise InputError(path, "corpus is empty")
    return Corpus(ids=Strings.from_builder(ids), titles=Strings.from_builder(titles), texts=Strings.from_builder(texts),
                  hash=digest.hexdigest())


def _first_line(path: Path, doc_id: str) -> int:
    """The line of the first document with id ``doc_id`` (read again: only a duplicate needs it)."""
    return next(number for number, record in _read_jsonl(path, None) if record.get("_id") == doc_id)


def load_queries(path: Path) -> tuple[dict[str, str], dict[str, list[str]], str, dict[str, dict]]:
    """Read ``queries.jsonl``: returns texts, answers (where given), the content hash and the
    ``metadata`` objects (where given; BEIR's optional per-query field)."""
    digest = hashlib.sha256()
    queries: dict[str, str] = {}
    answers: dict[str, list[str]] = {}
    metadata: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for number, record in _read_jsonl(path, digest):
        if "_id" not in record:
            raise InputError(path, "missing field '_id'", number)
        qid = check_id(record["_id"], path, number)
        text = _string_field(record, "text", path, number, required=True)
        if not text.strip():
            raise InputError(path, f"query {qid!r} has an empty text", number)
        if qid in first_line:
            raise InputError(path, f"duplicate query id {qid!r} (first on line {first_line[qid]})", number)
        first_line[qid] = number
        queries[qid] = text
        if "answers" in record:
            gold = record["answers"]
            if not isinstance(gold, list) or not all(isinstance(a, str) for a in gold):
                raise InputError(path, f"'answers' of query {qid!r} must be a list of strings", number)
            for answer in gold:
                check_text(answer, path, number, f"an answer of query {qid!r}")
            answers[qid] = gold
        if "metadata" in record:
            if not isinstance(record["metadata"], dict):
                raise InputError(path, f"'metadata' of query {qid!r} must be a JSON object, got {type(record['metadata']).__name__}", number)
            metadata[qid] = record["metadata"]
    if not queries:
        raise InputError(path, "no queries")
    return queries, answers, digest.hexdigest(), metadata


def load_qrels(path: Path) -> tuple[Qrels, str]:
    """Read BEIR qrels (``query-id corpus-id score``, tab-separated, the header optional and only as
    the first non-blank line) or TREC qrels (``qid iteration docid rel``); columns are separated by
    spaces and tabs; returns the judgments and the content hash. Large files are read by the columnar
    reader; whatever it declines, the line reader reads (and names the line of any defect)."""
    path = Path(path)
    fast = columnar.read_qrels(path)
    if fast is None:
        return load_qrels_lines(path)
    qids, doc_ids, grades, data = fast
    qrels: Qrels = {}
    for qid, doc_id, grade in zip(qids, doc_ids, grades):
        qrels.setdefault(qid, {})[doc_id] = grade
    return qrels, hashlib.sha256(data).hexdigest()


def load_qrels_lines(path: Path) -> tuple[Qrels, str]:
    """:func:`load_qrels` line by line: the reference, with the line number of every defect."""
    digest = hashlib.sha256()
    qrels: Qrels = {}
    for index, (number, text) in enumerate(read_lines(path, digest)):
        columns = split_columns(text, tab_separated=True)
        if columns == BEIR_HEADER:
            if index:
                raise InputError(path, "the header 'query-id corpus-id score' is allowed only as the first non-blank line", number)
            continue
        if len(columns) == 3:
            qid, doc_id, grade = columns
        elif len(columns) == 4:
            qid, _, doc_id, grade = columns
        else:
            raise InputError(path, f"expected 3 (BEIR) or 4 (TREC) columns, got {len(columns)}", number)
        value = parse_grade(grade, path, number)
        check_id(qid, path, number, "query id")
        check_id(doc_id, path, number, "document id")
        judged = qrels.setdefault(qid, {})
        if doc_id in judged:
            raise InputError(path, f"duplicate judgment for query {qid!r} and document {doc_id!r}", number)
        judged[doc_id] = value
    if not qrels:
        raise InputError(path, "no judgments")
    return qrels, digest.hexdigest()


def _find_qrels_line(path: Path, needle: str) -> int | None:
    with open_bytes(path) as handle:
        for number, raw in enumerate(handle, start=1):
            if needle in split_columns(raw.decode("utf-8", "replace").rstrip("\r\n"), tab_separated=True):
                return number
    return None


def _corpus_path(folder: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (folder / name).exists():
            return folder / name
    raise InputError(folder / "corpus.jsonl", "file not found (nor corpus.jsonl.gz)")


def load_beir(path: str | Path, split: str = "test", name: str | None = None, qrels_file: str | None = None,
              check_documents: bool = True) -> Dataset:
    """Load a BEIR folder: corpus, the queries judged in ``split`` and their qrels. Judged query ids
    must be in queries.jsonl; judged document ids must be in the corpus unless ``check_documents`` is
    false (the experiment checks them itself against what it indexes: documents, or chunks of them,
    :func:`check_judged_documents`)."""
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(folder, "dataset folder not found")
    qrels_path = Path(qrels_file) if qrels_file else folder / "qrels" / f"{split}.tsv"
    corpus = load_corpus(_corpus_path(folder))
    all_queries, all_answers, queries_hash, all_metadata = load_queries(folder / "queries.jsonl")
    qrels, qrels_hash = load_qrels(qrels_path)
    for qid in qrels:
        if qid not in all_queries:
            raise InputError(qrels_path, f"unknown query id {qid!r} (not in queries.jsonl)", _find_qrels_line(qrels_path, qid))
    queries = {qid: text for qid, text in all_queries.items() if qid in qrels}
    answers = {qid: gold for qid, gold in all_answers.items() if qid in qrels}
    metadata = {qid: values for qid, values in all_metadata.items() if qid in qrels}
    combined = hashlib.sha256(f"{corpus.hash}:{queries_hash}:{qrels_hash}".encode()).hexdigest()
    dataset = Dataset(name=name or folder.name, corpus=corpus, queries=queries, qrels=qrels, answers=answers, hash=combined,
                      qrels_path=qrels_path, metadata=metadata)
    if check_documents:
        check_judged_documents(dataset, set(corpus.ids))
    unjudged = len(queries) - dataset.num_judged_relevant()
    log.info(
        "dataset %s/%s: %d documents, %d queries, %d judgments%s%s",
        dataset.name, split, len(corpus), len(queries), sum(map(len, qrels.values())),
        f" ({unjudged} queries without a relevant document are run but not averaged)" if unjudged else "",
        f"; {len(all_queries) - len(queries)} queries without judgments in this split are not run" if len(all_queries) > len(queries) else "",
    )
    return dataset


def check_judged_documents(dataset: Dataset, known: Container[str]) -> None:
    """Every document id the judgments name is in ``known`` (the corpus ids, or document and chunk ids
    of a chunked corpus); else an :class:`InputError` naming the qrels line."""
    for judged in dataset.qrels.values():
        for doc_id in judged:
            if doc_id not in known:
                line = _find_qrels_line(dataset.qrels_path, doc_id) if dataset.qrels_path else None
                raise InputError(dataset.qrels_path or "qrels", f"unknown document id {doc_id!r} (not in the corpus)", line)
