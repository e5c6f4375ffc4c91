"""Load and validate BEIR-layout datasets (and TREC qrels), with a content hash.

Layout: ``corpus.jsonl`` or ``corpus.jsonl.gz`` (``_id``, ``title``, ``text``), ``queries.jsonl``
(``_id``, ``text``, optional ``answers`` and ``metadata`` object), ``qrels/<split>.tsv`` (``query-id corpus-id score``, header
optional) or a TREC qrels file (``qid 0 docid rel``). Every defect raises :class:`InputError` naming the
file and line. Decisions: blank lines (spaces and tabs only) are not records and are skipped; a BOM
and CRLF line endings are accepted; documents with an empty title *and* text are rejected, as are
empty query texts; ids and texts must be valid Unicode text and ids may not contain whitespace (a TREC
run could not represent them; ``fields.py`` has the rules for ids, grades and columns); qrels may not
name unknown queries or documents or repeat a (query, document) pair; a repeated document id is
looked for once the corpus is read, so another defect of the file is reported first; grades must be ASCII integers
(negative grades count as non-relevant and, in bpref, as unjudged, as in trec_eval); a header (the BEIR
qrels header ``query-id corpus-id score``, ``docid<TAB>text`` in a tsv corpus, ``qid<TAB>query`` in tsv
topics: ``fields.is_header``) is allowed only as the first non-blank line. Only queries judged in the
split are run.
"""

from __future__ import annotations

import hashlib
import html
import logging
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ragtrack.core import columnar
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.fields import (
    CORPUS_HEADER,
    QRELS_HEADER,
    TOPICS_HEADER,
    check_id,
    check_text,
    is_header,
    parse_grade,
    parse_score,
    split_columns,
)
from ragtrack.core.files import open_bytes, read_json_objects, read_lines
from ragtrack.core.strings import JoinedTexts, Strings, StringsBuilder
from ragtrack.core.words import counted

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
            raise ValueError(
                f"corpus columns differ in length: {len(self.ids)} ids, {len(self.titles)} titles, {len(self.texts)} texts"
            )

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
            raise RagtrackError(
                f"{reader}: no text for {len(missing)} of its documents, which are not in the corpus (e.g. {missing[0]!r})"
            )
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
    metadata: dict[str, dict] = field(
        default_factory=dict
    )  # a query's ``metadata`` object (queries.jsonl), where given
    qrels_path: Path | None = None  # the judgments' file, for errors that name a line of it
    queries_path: Path | None = None  # the queries' file (likewise)
    source: str = ""  # where it was read, for people: ``beir:/data/nfcorpus``, ``irds:beir/scifact/test``
    hashes: dict[str, str] = field(
        default_factory=dict
    )  # sha256 of the documents, queries and qrels (``hash`` covers all three)
    qrels_places: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # per judgment where it is, when not in a file (frames: ``qrels DataFrame row 3``)

    def num_judged_relevant(self, threshold: int = 1) -> int:
        return sum(any(g >= threshold for g in docs.values()) for docs in self.qrels.values())


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


class CorpusBuilder:
    """A corpus read document by document into compact columns, with the checks every reader makes: a
    title or a text, no id twice, at least one document. ``first_place(doc_id)`` says where a repeated
    id was first (``line 3``), looked up only then; ``records_hash``: hash the documents as added
    (readers of files hash their bytes instead). Repeated ids are looked for once every document is
    read (:func:`first_repeat`, with 16 bytes per document rather than a set of every id), so a defect
    on a later line is reported before them."""

    def __init__(self, first_place: Callable[[str], str] | None = None, records_hash: bool = False):
        self.first_place = first_place
        self.ids, self.titles, self.texts = StringsBuilder(), StringsBuilder(), StringsBuilder()
        self.keys, self.lines = array("q"), array("q")  # per document: hash of its id, its line (-1: none)
        self.wheres: list[
            tuple[int, str | Path]
        ] = []  # (position, where) of each document whose where differs from the one before
        self.digest = hashlib.sha256() if records_hash else None

    def add(self, doc_id: str, title: str, text: str, where: str | Path, line: int | None = None) -> None:
        if not text.strip() and not title.strip():
            raise InputError(where, f"document {doc_id!r} has an empty title and text", line)
        if not self.wheres or where is not self.wheres[-1][1] and where != self.wheres[-1][1]:
            self.wheres.append((len(self.keys), where))
        self.keys.append(hash(doc_id))
        self.lines.append(-1 if line is None else line)
        if self.digest is not None:
            self.digest.update(f"{doc_id}\t{title}\t{text}\n".encode())
        self.ids.append(doc_id)
        self.titles.append(title)
        self.texts.append(text)

    def corpus(self, where: str | Path, content_hash: str | None = None) -> Corpus:
        """The corpus, hashed by ``content_hash`` (a file's) or by its records."""
        if not self.keys:
            raise InputError(where, "corpus is empty")
        ids = Strings.from_builder(self.ids)
        repeat = first_repeat(np.frombuffer(self.keys, dtype=np.int64), ids)
        if repeat is not None:
            doc_id, line = ids[repeat], self.lines[repeat]
            first = f" (first on {self.first_place(doc_id)})" if self.first_place else ""
            raise InputError(
                self.wheres[bisect_right(self.wheres, repeat, key=lambda entry: entry[0]) - 1][1],
                f"duplicate document id {doc_id!r}{first}",
                None if line < 0 else line,
            )
        return Corpus(
            ids=ids,
            titles=Strings.from_builder(self.titles),
            texts=Strings.from_builder(self.texts),
            hash=content_hash or self.digest.hexdigest(),
        )


def first_repeat(keys: np.ndarray, ids: Sequence[str]) -> int | None:
    """The first position whose id an earlier position holds, or ``None``. ``keys[i]`` is a hash of
    ``ids[i]``: one sort finds the keys that occur more than once, and only the positions holding
    those are compared by id, in order (equal ids have equal keys; different ids rarely do)."""
    ordered = np.sort(keys)
    repeated = ordered[1:][ordered[1:] == ordered[:-1]]
    seen = set()
    for position in np.flatnonzero(np.isin(keys, repeated)).tolist():
        if ids[position] in seen:
            return position
        seen.add(ids[position])
    return None


def load_corpus(path: Path) -> Corpus:
    """Read a BEIR ``corpus.jsonl(.gz)`` into compact columns."""
    digest = hashlib.sha256()
    corpus = CorpusBuilder(lambda doc_id: f"line {_first_line(path, doc_id)}")
    for number, record in read_json_objects(path, digest):
        doc_id = check_id(record.get("_id"), path, number) if "_id" in record else None
        if doc_id is None:
            raise InputError(path, "missing field '_id'", number)
        text = _string_field(record, "text", path, number, required=True)
        corpus.add(doc_id, _string_field(record, "title", path, number, required=False), text, path, number)
    return corpus.corpus(path, digest.hexdigest())


def _first_line(path: Path, doc_id: str) -> int:
    """The line of the first document with id ``doc_id`` (read again: only a duplicate needs it)."""
    return next(number for number, record in read_json_objects(path, None) if record.get("_id") == doc_id)


def load_queries(path: Path) -> tuple[dict[str, str], dict[str, list[str]], str, dict[str, dict]]:
    """Read ``queries.jsonl``: returns texts, answers (where given), the content hash and the
    ``metadata`` objects (where given; BEIR's optional per-query field)."""
    digest = hashlib.sha256()
    queries: dict[str, str] = {}
    answers: dict[str, list[str]] = {}
    metadata: dict[str, dict] = {}
    first_line: dict[str, int] = {}
    for number, record in read_json_objects(path, digest):
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
                raise InputError(
                    path,
                    f"'metadata' of query {qid!r} must be a JSON object, got {type(record['metadata']).__name__}",
                    number,
                )
            metadata[qid] = record["metadata"]
    if not queries:
        raise InputError(path, "no queries")
    return queries, answers, digest.hexdigest(), metadata


def load_tsv_corpus(path: Path) -> Corpus:
    """Read a corpus as tab-separated ``docid<TAB>text`` or ``docid<TAB>title<TAB>text`` lines (MS MARCO's
    ``collection.tsv`` layout), gzip if the name ends in ``.gz``; a header line (``docid<TAB>text``,
    :data:`~ragtrack.core.fields.CORPUS_HEADER`) is skipped."""
    digest = hashlib.sha256()
    header = 0  # the header's line, if any
    corpus = CorpusBuilder(
        lambda doc_id: (
            f"line {next(n for n, text in read_lines(path) if n > header and text.split(chr(9), 1)[0].strip(' ') == doc_id)}"
        )
    )
    for index, (number, line) in enumerate(read_lines(path, digest)):
        columns = line.split("\t")
        if len(columns) not in (2, 3):
            raise InputError(
                path,
                f"expected 2 (docid, text) or 3 (docid, title, text) tab-separated columns, got {len(columns)}",
                number,
            )
        if _is_header(path, index, number, columns, CORPUS_HEADER[len(columns)], "document"):
            header = number
            continue
        doc_id = check_id(columns[0].strip(" "), path, number, "document id")
        title, text = (columns[1], columns[2]) if len(columns) == 3 else ("", columns[1])
        check_text(title, path, number, "the title")
        corpus.add(doc_id, title, check_text(text, path, number, "the text"), path, number)
    return corpus.corpus(path, digest.hexdigest())


TOPIC_FIELDS = ("title", "description", "narrative")
TOPIC_TAG = re.compile(r"<(num|title|desc|narr)>|</top>", re.IGNORECASE)
TOPIC_LABELS = {
    "num": re.compile(r"^\s*Number:\s*", re.IGNORECASE),
    "desc": re.compile(r"^\s*Description:\s*", re.IGNORECASE),
    "narr": re.compile(r"^\s*Narrative:\s*", re.IGNORECASE),
    "title": re.compile(r"^\s*(?:Topic:)?\s*", re.IGNORECASE),
}
MARKUP = re.compile(r"</?[A-Za-z][^<>]*>")  # </title>, <i>, <br/>: markup, not query text


def _topic_field(text: str, label: re.Pattern) -> str:
    """A field's text without its markup (closing tags such as ``</title>``, inline tags such as
    ``<i>``), its label (``Number:``) and entities (``&amp;`` is ``&``), single-spaced."""
    return " ".join(html.unescape(label.sub("", MARKUP.sub("", text))).split())


def load_topics(path: Path, field_name: str = "title") -> tuple[dict[str, str], str]:
    """Read TREC topics: ``qid<TAB>text`` lines (MS MARCO, TREC DL), or the classic SGML-like format
    (``<top> <num> Number: 301 <title> ... <desc> Description: ... <narr> Narrative: ... </top>``), whose
    ``field_name`` (``title``, ``description`` or ``narrative``) is the query, its markup (closing tags,
    ``<i>``) removed and its entities (``&amp;``) decoded; returns texts and hash.
    Tab-separated topics have one text, their title: another ``field_name`` is an error, and a header
    line (``qid<TAB>query``, :data:`~ragtrack.core.fields.TOPICS_HEADER`) is skipped."""
    digest = hashlib.sha256()
    lines = list(read_lines(path, digest))
    if not lines:
        raise InputError(path, "no topics")
    classic = lines[0][1].lstrip().lower().startswith("<top>")
    if not classic and field_name != "title":
        raise InputError(
            path,
            f"qid<TAB>text topics have no {field_name} field, only one text: set dataset.query_field=title "
            "(description and narrative are fields of <top> topics)",
        )
    parsed = _classic_topics(path, lines, field_name) if classic else _tsv_topics(path, lines)
    queries: dict[str, str] = {}
    first_line: dict[str, int] = {}
    for number, qid, text in parsed:
        check_id(qid, path, number, "topic id")
        check_text(text, path, number, f"the text of topic {qid!r}")
        if not text.strip():
            raise InputError(path, f"topic {qid!r} has an empty {field_name if classic else 'text'}", number)
        if qid in first_line:
            raise InputError(path, f"duplicate topic id {qid!r} (first on line {first_line[qid]})", number)
        first_line[qid] = number
        queries[qid] = text
    return queries, digest.hexdigest()


def _tsv_topics(path: Path, lines: list[tuple[int, str]]) -> Iterator[tuple[int, str, str]]:
    for index, (number, line) in enumerate(lines):
        qid, tab, text = line.partition("\t")
        if not tab:
            raise InputError(path, "expected 'qid<TAB>text' (or a <top> block)", number)
        if not _is_header(path, index, number, [qid, text], TOPICS_HEADER, "topic"):
            yield number, qid.strip(" "), text.strip()


def _is_header(
    path: Path, index: int, number: int, columns: list[str], names: tuple, record: str | None = None
) -> bool:
    """Whether line ``number``, the ``index``-th non-blank one, is a header to skip (its ``columns`` are
    column ``names``: :func:`~ragtrack.core.fields.is_header`). A header is allowed only as the first
    non-blank line; the same line later is an error. ``record``: what the file's lines are, for the log
    line that says a header was skipped (files that seldom have one)."""
    if not is_header(columns, names):
        return False
    line = " ".join(column.strip() for column in columns)
    if index:
        raise InputError(path, f"the header {line!r} is allowed only as the first non-blank line", number)
    if record:
        log.info("%s:%d: skipped the header line %r (column names, not a %s)", path, number, line, record)
    return True


def _classic_topics(path: Path, lines: list[tuple[int, str]], field_name: str) -> Iterator[tuple[int, str, str]]:
    """The topics of a classic TREC topics file: one ``(line of <top>, number, field text)`` per topic."""
    tag_of = {"title": "title", "description": "desc", "narrative": "narr"}
    wanted, start, fields, current = tag_of[field_name], 0, {}, None
    for number, line in lines:
        stripped = line.strip()
        if stripped.lower() == "<top>":
            if current is not None or fields:
                raise InputError(path, "<top> inside a topic (a missing </top>?)", number)
            start, fields, current = number, {}, None
            continue
        if not start:
            raise InputError(path, f"text outside a <top> block: {stripped[:40]!r}", number)
        position = 0
        for match in TOPIC_TAG.finditer(line):
            if current is not None:
                fields[current] = f"{fields.get(current, '')} {line[position : match.start()]}"
            if match.group(0).lower() == "</top>":
                if "num" not in fields:
                    raise InputError(path, "topic without <num>", number)
                qid = _topic_field(fields["num"], TOPIC_LABELS["num"])
                if wanted not in fields:
                    raise InputError(path, f"topic {qid!r} has no <{wanted}> field", start)
                yield start, qid, _topic_field(fields[wanted], TOPIC_LABELS[wanted])
                start, fields, current = 0, {}, None
                break
            current = match.group(1).lower()
            fields[current] = ""
            position = match.end()
        else:
            if current is not None:
                fields[current] = f"{fields.get(current, '')} {line[position:]}"
    if start:
        raise InputError(path, f"the topic opened on line {start} has no </top>")


def load_qrels(path: Path) -> tuple[Qrels, str]:
    """Read BEIR qrels (``query-id corpus-id score``, tab-separated, the header optional and only as
    the first non-blank line) or TREC qrels (``qid iteration docid rel``); columns are separated by
    spaces and tabs; a line starting with ``#`` is a comment (as trec_eval 10 reads qrels); returns the
    judgments and the content hash. Large files are read by the columnar reader; small ones, and whatever
    it declines, the line reader reads (and names the line of any defect)."""
    path = Path(path)
    fast = None if columnar.is_small(path) else columnar.read_qrels(path)
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
    for index, (number, text) in enumerate(line for line in read_lines(path, digest) if not line[1].startswith("#")):
        columns = split_columns(text, tab_separated=True)
        if _is_header(path, index, number, columns, QRELS_HEADER):
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


def load_qrels_groups(path: Path) -> dict[str, dict[str, Qrels]]:
    """trec_eval's ``qrels_jg`` format: ``qid group docid rel`` lines, the second column naming a judgment
    group (one assessor's judgments); ``#`` lines are comments. Per query, per group, its judgments."""
    path = Path(path)
    groups: dict[str, dict[str, Qrels]] = {}
    for number, text in read_lines(path):
        if text.startswith("#"):
            continue
        columns = split_columns(text)
        if len(columns) != 4:
            raise InputError(path, f"expected 4 columns 'qid group docid rel', got {len(columns)}", number)
        qid, group, doc_id, grade = columns
        value = parse_grade(grade, path, number)
        check_id(qid, path, number, "query id")
        check_id(doc_id, path, number, "document id")
        judged = groups.setdefault(qid, {}).setdefault(group, {})
        if doc_id in judged:
            raise InputError(
                path, f"duplicate judgment for query {qid!r}, group {group!r} and document {doc_id!r}", number
            )
        judged[doc_id] = value
    if not groups:
        raise InputError(path, "no judgments")
    return groups


def load_preferences(path: Path, qrels_form: bool = False) -> dict[str, list[tuple[str, str, str, float]]]:
    """trec_eval's preference judgments: ``qid group subgroup docid level`` lines (``-R prefs``), or qrels
    lines ``qid group docid level`` read as one subgroup per group (``-R qrels_prefs``); ``#`` lines
    are comments. Per query, its (group, subgroup, document id, level) entries."""
    path = Path(path)
    width, form = (4, "'qid group docid level'") if qrels_form else (5, "'qid group subgroup docid level'")
    preferences: dict[str, list[tuple[str, str, str, float]]] = {}
    for number, text in read_lines(path):
        if text.startswith("#"):
            continue
        columns = split_columns(text)
        if len(columns) != width:
            raise InputError(path, f"expected {width} columns {form}, got {len(columns)}", number)
        qid, group, *subgroup, doc_id, level = columns
        check_id(qid, path, number, "query id")
        check_id(doc_id, path, number, "document id")
        preferences.setdefault(qid, []).append(
            (group, subgroup[0] if subgroup else "0", doc_id, parse_score(level, path, number))
        )
    if not preferences:
        raise InputError(path, "no judgments")
    return preferences


def _judgment_place(
    qrels: Path | str, places: dict[str, dict[str, str]], qid: str, doc_id: str | None = None
) -> tuple[Path | str, int | None]:
    """Where an error about the judgments of query ``qid`` (about document ``doc_id``, where given) points:
    the qrels file and the first line naming that id in its column, or the judgment's place in
    ``places`` (a DataFrame's row), else the judgments' label (``ir_datasets ... qrels``)."""
    if isinstance(qrels, Path):
        needle, column = (
            (qid, 0) if doc_id is None else (doc_id, -2)
        )  # the document id is the last column but one (BEIR and TREC)
        with open_bytes(qrels) as handle:
            for number, raw in enumerate(handle, start=1):
                columns = split_columns(raw.decode("utf-8", "replace").rstrip("\r\n"), tab_separated=True)
                if len(columns) > 2 and columns[column] == needle:
                    return qrels, number
        return qrels, None
    if qid in places:
        return places[qid][doc_id] if doc_id is not None else next(iter(places[qid].values())), None
    return qrels, None


def _corpus_path(folder: Path) -> Path:
    for name in ("corpus.jsonl", "corpus.jsonl.gz"):
        if (folder / name).exists():
            return folder / name
    raise InputError(folder / "corpus.jsonl", "file not found (nor corpus.jsonl.gz)")


def load_beir(
    path: str | Path,
    split: str = "test",
    name: str | None = None,
    qrels_file: str | None = None,
    check_documents: bool = True,
) -> Dataset:
    """Load a BEIR folder: corpus, the queries judged in ``split`` and their qrels. Judged query ids
    must be in queries.jsonl; judged document ids must be in the corpus unless ``check_documents`` is
    false (the experiment checks them itself against what it indexes: documents, or chunks of them,
    :func:`check_judged_documents`)."""
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InputError(
            folder,
            "a file, not a folder: a BEIR dataset is the folder that holds corpus.jsonl, queries.jsonl and qrels/",
        )
    if not folder.is_dir():
        raise InputError(folder, "dataset folder not found")
    qrels_path = Path(qrels_file) if qrels_file else folder / "qrels" / f"{split}.tsv"
    corpus = load_corpus(_corpus_path(folder))
    queries, answers, queries_hash, metadata = load_queries(folder / "queries.jsonl")
    qrels, qrels_hash = load_qrels(qrels_path)
    return assemble(
        Sources(name or folder.name, f"beir:{folder}", folder / "queries.jsonl", qrels_path),
        corpus,
        Judged(queries, qrels, queries_hash, qrels_hash, answers, metadata),
        split,
        check_documents,
    )


@dataclass(frozen=True)
class Sources:
    """Where a dataset comes from: its name, a source string for people (``beir:/data/nfcorpus``,
    ``irds:beir/scifact/test``) and the files of its queries and judgments, where they are files (errors
    then name their lines), else labels (``irds beir/scifact/test qrels``)."""

    name: str
    source: str
    queries: Path | str
    qrels: Path | str


@dataclass(frozen=True)
class Judged:
    """A dataset's queries (all of them, judged or not), judgments and their content hashes."""

    queries: dict[str, str]
    qrels: Qrels
    queries_hash: str
    qrels_hash: str
    answers: dict[str, list[str]] = field(default_factory=dict)
    metadata: dict[str, dict] = field(default_factory=dict)
    places: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # per judgment where it is, when not in a file (``qrels DataFrame row 3``)


def assemble(
    sources: Sources, corpus: Corpus, judged: Judged, split: str = "", check_documents: bool = True
) -> Dataset:
    """A :class:`Dataset` of the queries judged in ``judged.qrels`` (every provider ends here): a judged
    query must be among the queries and, unless ``check_documents`` is false, a judged document in the
    corpus; the dataset's hash covers documents, queries and judgments."""
    all_queries = judged.queries
    for qid in judged.qrels:
        if qid not in all_queries:
            where, line = _judgment_place(sources.qrels, judged.places, qid)
            raise InputError(where, f"unknown query id {qid!r} (not in {_label(sources.queries)})", line)
    keep = judged.qrels.keys()
    hashes = {"documents": corpus.hash, "queries": judged.queries_hash, "qrels": judged.qrels_hash}
    dataset = Dataset(
        name=sources.name,
        corpus=corpus,
        queries={q: t for q, t in all_queries.items() if q in keep},
        qrels=judged.qrels,
        answers={q: a for q, a in judged.answers.items() if q in keep},
        metadata={q: m for q, m in judged.metadata.items() if q in keep},
        hash=hashlib.sha256(":".join(hashes.values()).encode()).hexdigest(),
        hashes=hashes,
        source=sources.source,
        queries_path=sources.queries if isinstance(sources.queries, Path) else None,
        qrels_path=sources.qrels if isinstance(sources.qrels, Path) else None,
        qrels_places=judged.places,
    )
    if check_documents:
        check_judged_documents(dataset, corpus.ids)
    queries = dataset.queries
    unjudged = len(queries) - dataset.num_judged_relevant()
    log.info(
        "dataset %s%s: %s, %s, %s%s%s",
        dataset.name,
        f"/{split}" if split else "",
        counted(len(corpus), "document"),
        counted(len(queries), "query"),
        counted(sum(map(len, judged.qrels.values())), "judgment"),
        f" ({counted(unjudged, 'query')} without a relevant document: run, not averaged)" if unjudged else "",
        f"; {counted(len(all_queries) - len(queries), 'query')} without judgments in this split: not run"
        if len(all_queries) > len(queries)
        else "",
    )
    return dataset


def _label(source: Path | str) -> str:
    return source.name if isinstance(source, Path) else str(source)


def check_judged_documents(dataset: Dataset, *known: Iterable[str]) -> None:
    """Every document id the judgments name is in one of ``known`` (the corpus ids, or document and
    chunk ids of a chunked corpus), which are read once and never gathered into a set; else an
    :class:`InputError` naming the qrels line (or DataFrame row) of the first unknown id."""
    missing = {doc_id for judged in dataset.qrels.values() for doc_id in judged}.difference(*known)
    for qid, judged in dataset.qrels.items():
        for doc_id in judged:
            if doc_id in missing:
                where, line = _judgment_place(
                    dataset.qrels_path or f"{dataset.source} qrels", dataset.qrels_places, qid, doc_id
                )
                raise InputError(where, f"unknown document id {doc_id!r} (not in the corpus)", line)
