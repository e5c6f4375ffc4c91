"""Dataset providers: where a job's corpus, queries and judgments come from. A job's ``dataset`` block
names one by ``type`` (entry-point group ``ragtrack.datasets``; built in: ``beir``, ``trec``, ``irds``),
and everything downstream sees only the :class:`~ragtrack.core.data.Dataset` it returns.

- ``beir``: a folder in BEIR layout (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``).
- ``trec``: a corpus (BEIR ``corpus.jsonl`` or MS MARCO-style ``docid<TAB>text`` tsv), TREC topics (tsv or
  the classic ``<top>`` format) and a TREC qrels file, each read as strictly as the BEIR files.
- ``irds``: any `ir_datasets <https://ir-datasets.com>`_ id (``beir/scifact/test``,
  ``msmarco-passage/trec-dl-2019/judged``), downloaded and cached by ir_datasets itself; documents stream
  into the compact corpus columns, never a Python object per document kept.
- ``frames``: pandas DataFrames given in Python (:func:`dataset_from_frames`,
  ``ragtrack.run_experiment(dataset=...)``), validated like files; a config can name it, not load it.
"""

from __future__ import annotations

import contextlib
import hashlib
import numbers
import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator

from ragtrack.core.data import (
    Corpus,
    CorpusBuilder,
    Dataset,
    Judged,
    Qrels,
    Sources,
    assemble,
    load_beir,
    load_corpus,
    load_qrels,
    load_topics,
    load_tsv_corpus,
)
from ragtrack.core.errors import InputError, RagtrackError, did_you_mean
from ragtrack.core.fields import check_id, check_text, parse_grade
from ragtrack.core.progress import Progress
from ragtrack.core.settings import MAX_NAME_LENGTH, ComponentSettings, InputPath, Text, validated

if TYPE_CHECKING:
    import pandas as pd

DATASET_NAME = (
    f"a dataset name (no / or \\ or control characters, not . or ..; at most {MAX_NAME_LENGTH} characters: it names folders "
    "and the MLflow experiment), or null: named after its source"
)


class DatasetSettings(ComponentSettings):
    """Keys of every dataset: ``name`` (the MLflow experiment is ``ragtrack-<name>``; the shipped YAMLs
    derive it from the path or id) and the query attributes to slice metrics by (docs/slices.md)."""

    name: Annotated[str, Field(pattern=r"^[^/\\\x00-\x1f]+$", max_length=MAX_NAME_LENGTH)] | None = Field(
        None, description=DATASET_NAME
    )
    slices_file: InputPath | None = None
    slice_metadata: list[Text] = []

    @field_validator("name")
    @classmethod
    def _not_a_parent(cls, name: str | None) -> str | None:
        if name in (".", ".."):
            raise ValueError(DATASET_NAME)
        return name


class DatasetProvider(ABC):
    """Reads one dataset from its validated settings (``settings_schema``, beside each provider)."""

    settings_schema: type[DatasetSettings] = DatasetSettings
    kind = "dataset"

    def __init__(self, **values: Any):
        self.settings = validated(self.settings_schema, values, f"dataset ({self.kind})")

    @abstractmethod
    def load(self, check_documents: bool = True) -> Dataset:
        """The dataset; judged documents must be in the corpus unless ``check_documents`` is false (the
        experiment checks them against what it indexes, chunks included)."""


class BeirSettings(DatasetSettings, extra="forbid"):
    path: InputPath
    split: Text = "test"
    qrels_file: InputPath | None = Field(None, description="a TREC or BEIR qrels file instead of qrels/<split>.tsv")


class BeirDataset(DatasetProvider):
    """A folder in BEIR layout (:func:`ragtrack.core.data.load_beir`)."""

    settings_schema = BeirSettings
    kind = "beir"

    def load(self, check_documents: bool = True) -> Dataset:
        s = self.settings
        return load_beir(s.path, split=s.split, name=s.name, qrels_file=s.qrels_file, check_documents=check_documents)


class TrecSettings(DatasetSettings, extra="forbid"):
    corpus: InputPath = Field(
        description="corpus.jsonl(.gz) as in BEIR, or docid<TAB>text (or docid<TAB>title<TAB>text) lines"
    )
    topics: InputPath = Field(description="qid<TAB>text lines, or classic TREC <top> blocks")
    qrels: InputPath = Field(description="a TREC qrels file (qid 0 docid grade), or BEIR's qrels tsv")
    query_field: Literal["title", "description", "narrative"] = "title"


class TrecDataset(DatasetProvider):
    """A corpus, TREC topics and TREC qrels, each a file (gzip if the name ends in ``.gz``)."""

    settings_schema = TrecSettings
    kind = "trec"

    def load(self, check_documents: bool = True) -> Dataset:
        s = self.settings
        corpus_path, topics_path, qrels_path = Path(s.corpus), Path(s.topics), Path(s.qrels)
        jsonl = corpus_path.name.endswith((".jsonl", ".jsonl.gz"))
        corpus = load_corpus(corpus_path) if jsonl else load_tsv_corpus(corpus_path)
        queries, queries_hash = load_topics(topics_path, s.query_field)
        qrels, qrels_hash = load_qrels(qrels_path)
        return assemble(
            Sources(s.name or topics_path.name.partition(".")[0], f"trec:{topics_path}", topics_path, qrels_path),
            corpus,
            Judged(queries, qrels, queries_hash, qrels_hash),
            check_documents=check_documents,
        )


class IrdsSettings(DatasetSettings, extra="forbid"):
    id: Text = Field(description="an ir_datasets id with queries and qrels, e.g. beir/scifact/test")
    fields: list[Text] | None = Field(
        None,
        description="document fields forming the text (the first of several is the title); "
        "null: title and text where the documents have both, else text",
    )
    query_field: Text | None = Field(
        None, description="the query field (title, description, ... for TREC topics); null: text, else title"
    )
    home: InputPath | None = Field(
        None, description="ir_datasets' download and cache folder; null: its own ($IR_DATASETS_HOME or ~/.ir_datasets)"
    )


class IrdsDataset(DatasetProvider):
    """Any ir_datasets id, through its public API (``ir_datasets.load``); ir_datasets downloads (checking
    its hashes) and caches the files in its own home."""

    settings_schema = IrdsSettings
    kind = "irds"

    def load(self, check_documents: bool = True) -> Dataset:
        s = self.settings
        with self._home():
            source = self._source()
            corpus = self._corpus(source)
            queries, queries_hash = self._queries(source)
            qrels, qrels_hash = self._qrels(source)
        label = f"ir_datasets {s.id}"
        return assemble(
            Sources(s.name or s.id.replace("/", "-"), f"irds:{s.id}", f"{label} queries", f"{label} qrels"),
            corpus,
            Judged(queries, qrels, queries_hash, qrels_hash),
            check_documents=check_documents,
        )

    @contextlib.contextmanager
    def _home(self) -> Iterator[None]:
        """``IR_DATASETS_HOME`` set to ``home`` while ir_datasets reads (it reads the variable at each use)."""
        if self.settings.home is None:
            yield
            return
        previous = os.environ.get("IR_DATASETS_HOME")
        os.environ["IR_DATASETS_HOME"] = str(Path(self.settings.home).expanduser().resolve())
        try:
            yield
        finally:
            if previous is None:
                os.environ.pop("IR_DATASETS_HOME", None)
            else:
                os.environ["IR_DATASETS_HOME"] = previous

    def _source(self) -> Any:
        try:
            import ir_datasets
        except ImportError:
            raise RagtrackError("dataset=irds needs the ir_datasets package: pip install ir_datasets") from None
        try:
            source = ir_datasets.load(self.settings.id)
        except KeyError:
            known = list(ir_datasets.registry)
            raise RagtrackError(
                f"dataset.id: {self.settings.id!r} is not an ir_datasets id{did_you_mean(self.settings.id, known)}"
                " (ir_datasets lists them: https://ir-datasets.com)"
            ) from None
        missing = [part for part in ("docs", "queries", "qrels") if not getattr(source, f"has_{part}")()]
        if missing:
            raise RagtrackError(
                f"dataset.id: ir_datasets {self.settings.id!r} has no {' and no '.join(missing)}; "
                "name a split that has queries and qrels, e.g. beir/scifact/test"
            )
        return source

    def _fields(self, available: tuple[str, ...], chosen: list[str] | None, default: list[str], key: str) -> list[str]:
        fields = chosen or default
        for name in fields:
            if name not in available:
                raise RagtrackError(
                    f"dataset.{key}: {name!r} is not a field of ir_datasets {self.settings.id!r}; "
                    f"its fields: {', '.join(available)}{did_you_mean(name, available)}"
                )
        return fields

    def _corpus(self, source: Any) -> Corpus:
        available = source.docs_cls()._fields
        default = ["title", "text"] if {"title", "text"} <= set(available) else ["text"]
        fields = self._fields(available, self.settings.fields, default, "fields")
        where = f"ir_datasets {self.settings.id} documents"
        corpus = CorpusBuilder(records_hash=True)
        with (
            _reading(self.settings.id, "documents"),
            Progress(f"{self.settings.id}: read documents", source.docs_count() or 0, "docs") as progress,
        ):
            for number, doc in enumerate(source.docs_iter(), start=1):
                doc_id = check_id(doc.doc_id, where, number, "doc_id")
                values = [_text_field(doc, name, where, number) for name in fields]
                title, text = (values[0], " ".join(v for v in values[1:] if v)) if len(values) > 1 else ("", values[0])
                corpus.add(doc_id, title, text, where, number)
                progress.update()
        return corpus.corpus(where)

    def _queries(self, source: Any) -> tuple[dict[str, str], str]:
        available = source.queries_cls()._fields
        default = ["text"] if "text" in available else ["title"]
        chosen = [self.settings.query_field] if self.settings.query_field else None
        (field_name,) = self._fields(available, chosen, default, "query_field")
        where = f"ir_datasets {self.settings.id} queries"
        digest, queries = hashlib.sha256(), {}
        with _reading(self.settings.id, "queries"):
            for number, query in enumerate(source.queries_iter(), start=1):
                qid = check_id(query.query_id, where, number, "query_id")
                text = _text_field(query, field_name, where, number)
                if not text.strip():
                    raise InputError(where, f"query {qid!r} has an empty {field_name}", number)
                if qid in queries:
                    raise InputError(where, f"duplicate query id {qid!r}", number)
                queries[qid] = text
                digest.update(f"{qid}\t{text}\n".encode())
        return queries, digest.hexdigest()

    def _qrels(self, source: Any) -> tuple[Qrels, str]:
        where = f"ir_datasets {self.settings.id} qrels"
        digest, qrels = hashlib.sha256(), {}
        with _reading(self.settings.id, "qrels"):
            for number, qrel in enumerate(source.qrels_iter(), start=1):
                qid = check_id(qrel.query_id, where, number, "query_id")
                doc_id = check_id(qrel.doc_id, where, number, "doc_id")
                if not isinstance(qrel.relevance, int):
                    raise InputError(where, f"relevance {qrel.relevance!r} is not an integer", number)
                judged = qrels.setdefault(qid, {})
                if doc_id in judged:
                    raise InputError(where, f"duplicate judgment for query {qid!r} and document {doc_id!r}", number)
                judged[doc_id] = qrel.relevance
                digest.update(f"{qid}\t{doc_id}\t{qrel.relevance}\n".encode())
        if not qrels:
            raise InputError(where, "no judgments")
        return qrels, digest.hexdigest()


def _text_field(record: Any, name: str, where: str, number: int) -> str:
    value = getattr(record, name)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise InputError(where, f"field {name!r} is {type(value).__name__}, not text: choose text fields", number)
    return check_text(value, where, number, f"field {name!r}")


@contextlib.contextmanager
def _reading(dataset_id: str, part: str) -> Iterator[None]:
    """ir_datasets' own failures (a download without network, a hash mismatch) as one line."""
    try:
        yield
    except (InputError, RagtrackError):
        raise
    except Exception as exc:  # ir_datasets raises many kinds; the user needs the first line of any
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise RagtrackError(f"ir_datasets {dataset_id!r}: cannot read its {part}: {detail}") from exc


# ----------------------------------------------------------------------------- DataFrames


class FramesDataset(DatasetProvider):
    """The ``type`` a job records for a dataset given as DataFrames: it lives only in the Python process
    that gave it, so loading it from a config (``ragtrack reproduce``) is one line saying so."""

    kind = "frames"

    def load(self, check_documents: bool = True) -> Dataset:
        raise RagtrackError(
            f"dataset {self.settings.name or ''!r} was given as DataFrames (ragtrack.run_experiment(dataset=...)): "
            "it cannot be read from a config; pass the DataFrames again"
        )


FRAME_COLUMNS = {
    "corpus": ("docid", "text"),
    "queries": ("qid", "text"),
    "qrels": ("qid", "docid", "grade"),
    "answers": ("qid", "answer"),
}


def dataset_from_frames(
    corpus: pd.DataFrame,
    queries: pd.DataFrame,
    qrels: pd.DataFrame,
    answers: pd.DataFrame | None = None,
    name: str = "frames",
    check_documents: bool = True,
) -> Dataset:
    """A :class:`Dataset` from DataFrames, checked as the files are (ids without whitespace, texts, integer
    grades, no duplicates, judged queries and documents known); every problem is one line naming the
    DataFrame, the row (its index label) and the column:

    - ``corpus``: ``docid``, ``text`` and optionally ``title``;
    - ``queries``: ``qid``, ``text``; any other column is the query's metadata (``dataset.slice_metadata``);
    - ``qrels``: ``qid``, ``docid``, ``grade`` (integers: a float, even ``1.0``, is an error, as in a file);
    - ``answers`` (optional): ``qid``, ``answer``, one row per gold answer.

    The hashes are sha256 over the rows as read, so the same frames give the same dataset hash. The
    dataset keeps each judgment's row (``qrels_places``), so the job's own check of the judged documents
    names the row too."""
    validated(DatasetSettings, {"name": name}, "dataset_from_frames")
    _columns(corpus, "corpus", optional=("title",))
    builder = CorpusBuilder(
        lambda doc_id: f"row {corpus.index.tolist()[(corpus['docid'] == doc_id).to_numpy().argmax()]!r}",
        records_hash=True,
    )
    title_column = corpus["title"] if "title" in corpus.columns else [""] * len(corpus)
    for label, doc_id, title, text in zip(corpus.index, corpus["docid"], title_column, corpus["text"]):
        where = f"corpus DataFrame row {label!r}"
        doc_id = _frame_id(doc_id, where, "docid")
        builder.add(
            doc_id,
            _frame_text(title, where, "title", optional=True),
            _frame_text(text, where, "text", optional=True),
            where,
        )
    documents = builder.corpus("corpus DataFrame")
    all_queries, metadata, queries_hash = _frame_queries(queries)
    judged, qrels_hash, places = _frame_qrels(qrels)
    gold = _frame_answers(answers, all_queries) if answers is not None else {}
    return assemble(
        Sources(name, f"frames:{name}", "queries DataFrame", "qrels DataFrame"),
        documents,
        Judged(all_queries, judged, queries_hash, qrels_hash, gold, metadata, places),
        check_documents=check_documents,
    )


def _columns(frame: Any, label: str, optional: tuple[str, ...] = ()) -> None:
    import pandas as pd

    if not isinstance(frame, pd.DataFrame):
        raise TypeError(
            f"{label}: a pandas DataFrame with columns {', '.join(FRAME_COLUMNS[label])}, got {type(frame).__name__}"
        )
    absent = [c for c in FRAME_COLUMNS[label] if c not in frame.columns]
    if absent:
        raise RagtrackError(
            f"{label} DataFrame: missing column{'s' if len(absent) > 1 else ''} {', '.join(absent)} "
            f"(needs {', '.join(FRAME_COLUMNS[label])}{', optional ' + ', '.join(optional) if optional else ''})"
        )


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)  # None or NaN, pandas' missing values


def _not_text(value: Any, where: str, column: str) -> RagtrackError:
    return RagtrackError(
        f"{where}: {column} is {'missing' if _absent(value) else f'a {type(value).__name__} ({value!r}), not text'}"
    )


def _frame_id(value: Any, where: str, column: str) -> str:
    if not isinstance(value, str):
        raise _not_text(value, where, column)
    try:
        return check_id(value, where, None, column)
    except InputError as exc:
        raise RagtrackError(str(exc)) from None


def _frame_text(value: Any, where: str, column: str, optional: bool = False) -> str:
    if optional and _absent(value):
        return ""
    if not isinstance(value, str):
        raise _not_text(value, where, column)
    try:
        return check_text(value, where, None, column)
    except InputError as exc:
        raise RagtrackError(str(exc)) from None


def _frame_queries(queries: pd.DataFrame) -> tuple[dict[str, str], dict[str, dict], str]:
    _columns(queries, "queries", optional=("metadata columns",))
    extra = [c for c in queries.columns if c not in ("qid", "text")]
    texts, metadata, first, digest = {}, {}, {}, hashlib.sha256()
    for label, row in zip(queries.index, queries[["qid", "text", *extra]].itertuples(index=False, name=None)):
        where = f"queries DataFrame row {label!r}"
        qid, text = _frame_id(row[0], where, "qid"), _frame_text(row[1], where, "text")
        if not text.strip():
            raise RagtrackError(f"{where}: query {qid!r} has an empty text")
        if qid in first:
            raise RagtrackError(f"{where}: duplicate query id {qid!r} (first in row {first[qid]!r})")
        first[qid], texts[qid] = label, text
        values = {column: value.item() if hasattr(value, "item") else value for column, value in zip(extra, row[2:])}
        if values:
            metadata[qid] = values
        digest.update(f"{qid}\t{text}\n".encode())
    if not texts:
        raise RagtrackError("queries DataFrame: no queries")
    return texts, metadata, digest.hexdigest()


def _frame_qrels(qrels: pd.DataFrame) -> tuple[Qrels, str, dict[str, dict[str, str]]]:
    """The judgments, their hash and per judgment its row (``qrels DataFrame row 3``, for later errors).
    Grades are integers, as in files: a float (``1.0``) is an error, as ``1.0`` is on a qrels line."""
    _columns(qrels, "qrels")
    judged: Qrels = {}
    places: dict[str, dict[str, str]] = {}
    digest = hashlib.sha256()
    for label, qid, doc_id, grade in zip(qrels.index, qrels["qid"], qrels["docid"], qrels["grade"]):
        where = f"qrels DataFrame row {label!r}"
        qid, doc_id = _frame_id(qid, where, "qid"), _frame_id(doc_id, where, "docid")
        if problem := grade_problem(grade):
            raise RagtrackError(f"{where}: {problem}")
        value = parse_grade(str(grade), where, None)  # within 64 bits, as in files
        grades = judged.setdefault(qid, {})
        if doc_id in grades:
            raise RagtrackError(f"{where}: duplicate judgment for query {qid!r} and document {doc_id!r}")
        grades[doc_id] = value
        places.setdefault(qid, {})[doc_id] = where
        digest.update(f"{qid}\t{doc_id}\t{value}\n".encode())
    if not judged:
        raise RagtrackError("qrels DataFrame: no judgments")
    return judged, digest.hexdigest(), places


def grade_problem(grade: Any) -> str | None:
    """Why a DataFrame's ``grade`` is not a grade, or ``None`` for an integer (a bool is none). Grades are
    integers, as on a qrels line, where ``1.0`` is an error too: a whole float gets the fix, since pandas
    makes a column of integers float when it once held a missing value."""
    if isinstance(grade, numbers.Integral) and not isinstance(grade, bool):
        return None
    whole = isinstance(grade, float) and grade.is_integer()
    return f"grade {grade!r} is not an integer" + (
        " (a float column: .astype(int) makes its grades integers)" if whole else ""
    )


def _frame_answers(answers: pd.DataFrame, queries: dict[str, str]) -> dict[str, list[str]]:
    _columns(answers, "answers")
    gold: dict[str, list[str]] = {}
    for label, qid, answer in zip(answers.index, answers["qid"], answers["answer"]):
        where = f"answers DataFrame row {label!r}"
        qid = _frame_id(qid, where, "qid")
        if qid not in queries:
            raise RagtrackError(f"{where}: unknown query id {qid!r} (not in the queries DataFrame)")
        gold.setdefault(qid, []).append(_frame_text(answer, where, "answer"))
    return gold
