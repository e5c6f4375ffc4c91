"""Chunking, a stage of its own: split documents into passages, retrieve passages, evaluate documents.

The experiment runs it after the dataset has loaded: :func:`plan_chunks` chunks the corpus, checks the
judged ids against documents and chunks, and returns the :class:`ChunkPlan` the later stages follow.
Chunkers are plugins (entry-point group ``ragtrack.chunkers``, config group ``chunking``, chosen by
``type``; ``size`` and ``overlap`` are in the chunker's units, an overlap below 1 is a fraction of ``size``):

- ``none``: whole documents (the default; nothing here is used).
- ``tokens``: windows of ``size`` tokens of the encoder's own tokenizer (the Hugging Face tokenizer of
  ``model``, by default the configured encoder's model, loaded from local files). Without a model
  (the ``hashing`` encoder has none) its tokens are the lexical tokenizer's words (logged).
  A chunk of ``size`` tokens plus the model's special tokens (and a repeated title) may exceed the
  model's ``max_seq_length`` by a few tokens, which the encoder truncates.
- ``sentences``: windows of ``size`` sentences. Sentences end at ``.``, ``!`` or ``?`` (plus closing
  quotes or brackets) followed by whitespace and an upper-case letter, digit or opening quote, or at a
  blank line. Abbreviations such as "Dr. Smith" are split too; no model or download is needed.
- ``chars``: at most ``size`` characters, ending at the last whitespace inside the window when there is
  one; the next chunk starts ``overlap`` characters before the previous end, moved forward to a word
  start when that falls inside a word, so consecutive chunks share at most ``overlap`` characters.

Windows over units start every ``size - overlap`` units, so consecutive chunks share exactly
``overlap`` units, and stop with the first window that reaches the end of the text. Chunk texts are
slices of the original text. With ``repeat_title`` (default, as DPR's Wikipedia passages) every chunk
of a document carries the document's title and its text is chunked; otherwise "title text" is chunked
and chunks have no title. A document without any unit becomes one chunk holding its whole text.

Chunk ``n`` (0-based) of document ``d`` has id ``d#n``; the chunked corpus has its own content hash
(corpus hash + chunker settings), so every index and embedding cache key includes the chunker.

Evaluation (:class:`ChunkPlan`): runs over chunks become document runs by max-passage (Dai & Callan,
SIGIR 2019): the best-ranked chunk of each document stands for it (first occurrence wins, its score
is the document's score), so no document appears twice and no metric can exceed its bound. Chunks
are retrieved ``oversample`` times deeper than ``depth`` so that about ``depth`` distinct documents
remain. Judgments naming chunk ids are evaluated on the chunk runs directly. Fusion (RRF) fuses the
runs at the level that is evaluated: document runs for document judgments (as MaxP-style hybrid
systems do; a document matched by BM25 in one passage and by the dense model in another gets both
votes), chunk runs for chunk judgments. Generators read chunk texts through :meth:`ChunkPlan.passages`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from pydantic import Field, Strict, ValidationInfo, field_validator

from ragtrack.core.data import Corpus, Dataset, Qrels, check_judged_documents
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.models import model_fingerprint, resolve_model
from ragtrack.core.runs import Run
from ragtrack.core.settings import ComponentSettings, Count, Flag, Text, validated
from ragtrack.core.text import Tokenizer
from ragtrack.core.words import counted

log = logging.getLogger(__name__)

Span = tuple[int, int]


def resolve_overlap(size: int, overlap: float) -> int:
    """Overlap in units: an integer as given, a value in (0, 1) as that fraction of ``size``."""
    units = round(overlap * size) if 0 < overlap < 1 else int(overlap)
    if size < 1 or not 0 <= units < size:
        raise RagtrackError(f"chunking needs size >= 1 and 0 <= overlap < size, got size={size}, overlap={overlap}")
    return units


def windows(count: int, size: int, overlap: int) -> list[Span]:
    """Unit index ranges [a, b) of ``size`` units every ``size - overlap`` units, up to the first
    window that reaches ``count``."""
    found = []
    for start in range(0, count, size - overlap):
        found.append((start, min(start + size, count)))
        if start + size >= count:
            break
    return found


Overlap = Annotated[
    float, Strict(), Field(ge=0, description="an integer >= 0 below size, or a fraction of size in (0, 1)")
]


class ChunkerSettings(ComponentSettings):
    """A chunker plugin's common keys."""

    oversample: Count = 1


class NoChunkingSettings(ComponentSettings, extra="forbid"):
    """No chunking: documents are indexed whole."""


class WindowSettings(ChunkerSettings, extra="forbid", validate_default=True):
    """Sentence or character windows."""

    size: Count
    overlap: Overlap = 0
    repeat_title: Flag = True
    oversample: Count = 5

    @field_validator("overlap")
    @classmethod
    def _below_size(cls, overlap: float, info: ValidationInfo) -> float:
        size = info.data.get("size")
        if size is not None and not (0 < overlap < 1) and not (overlap == int(overlap) and overlap < size):
            raise ValueError(f"an integer below size ({size}), or a fraction of size in (0, 1)")
        return overlap


class SentenceWindowSettings(WindowSettings, extra="forbid"):
    """Windows of 4 sentences; neighbours share one."""

    size: Count = 4
    overlap: Overlap = 1


class CharWindowSettings(WindowSettings, extra="forbid"):
    """Windows of 600 characters, cut at whitespace; neighbours share 100."""

    size: Count = 600
    overlap: Overlap = 100


class TokenWindowSettings(WindowSettings, extra="forbid"):
    """Windows of 128 tokens (of a model's tokenizer, or words of the lexical tokenizer)."""

    size: Count = 128
    model: Text | None = None


class Chunker(ABC):
    """Splits texts into chunk spans (character offsets into each text); ``values`` are its
    ``settings_schema`` (validated here, defaults there)."""

    settings_schema: type[WindowSettings] = WindowSettings
    method = ""

    def __init__(self, **values):
        self.options = validated(self.settings_schema, values, f"{self.method or type(self).__name__} chunker")
        self.size = self.options.size
        self.overlap = resolve_overlap(self.size, self.options.overlap)
        self.repeat_title = self.options.repeat_title
        self.oversample = self.options.oversample  # chunks searched per document wanted: not a chunk setting

    def settings(self) -> dict:
        """Everything that changes the chunks (enters the chunked corpus hash)."""
        return {"method": self.method, "size": self.size, "overlap": self.overlap, "repeat_title": self.repeat_title}

    @abstractmethod
    def spans(self, texts: Sequence[str]) -> list[list[Span]]:
        """Chunk spans of every text."""

    def chunk(self, corpus: Corpus) -> "ChunkedCorpus":
        """The corpus of chunks (see module docstring), ids ``<docid>#<n>``."""
        sources = corpus.texts if self.repeat_title else corpus.full_texts()
        ids, titles, texts, parents, positions = [], [], [], [], []
        for doc_id, title, text, spans in zip(corpus.ids, corpus.titles, sources, self.spans(sources)):
            for position, (start, end) in enumerate(spans or [(0, len(text))]):
                ids.append(f"{doc_id}#{position}")
                titles.append(title if self.repeat_title else "")
                texts.append(text[start:end])
                parents.append(doc_id)
                positions.append(position)
        digest = hashlib.sha256(f"{corpus.hash}:{json.dumps(self.settings(), sort_keys=True)}".encode()).hexdigest()
        chunks = Corpus(ids=ids, titles=titles, texts=texts, hash=digest)
        log.info(
            "chunking %s: %s -> %s", self.settings(), counted(len(corpus), "document"), counted(len(chunks), "chunk")
        )
        return ChunkedCorpus(chunks, parents, positions, corpus, self.settings())


class UnitChunker(Chunker):
    """Windows over units (tokens, words or sentences) given by :meth:`units`."""

    @abstractmethod
    def units(self, texts: Sequence[str]) -> list[list[Span]]:
        """Character spans of every unit of every text."""

    def spans(self, texts: Sequence[str]) -> list[list[Span]]:
        return [
            [(units[a][0], units[b - 1][1]) for a, b in windows(len(units), self.size, self.overlap)]
            for units in self.units(texts)
        ]


class TokenChunker(UnitChunker):
    """Tokens of the Hugging Face tokenizer of ``model`` (a name or path), or words of the lexical tokenizer without one."""

    settings_schema = TokenWindowSettings
    method = "tokens"

    def __init__(self, **values):
        super().__init__(**values)
        model = self.options.model
        self.model_path = resolve_model(model) if model else None
        self.model_fingerprint = model_fingerprint(self.model_path) if self.model_path else None
        self._tokenizer = None
        if self.model_path is None:
            self._words = re.compile(Tokenizer().pattern)
            log.info(
                "tokens chunker: the encoder has no subword tokenizer; counting words (%s) instead", self._words.pattern
            )

    def settings(self) -> dict:
        unit = {"tokenizer": self.model_fingerprint} if self.model_path else {"words": self._words.pattern}
        return super().settings() | unit

    def units(self, texts: Sequence[str]) -> list[list[Span]]:
        if self.model_path is None:
            return [[match.span() for match in self._words.finditer(text)] for text in texts]
        if self._tokenizer is None:
            from transformers import AutoTokenizer

            try:
                self._tokenizer = AutoTokenizer.from_pretrained(self.model_path, local_files_only=True)
            except (OSError, ValueError) as exc:
                raise RagtrackError(
                    f"cannot load the tokenizer of {self.model_path!r}: {str(exc).splitlines()[0]}"
                ) from None
        encoded = self._tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True, verbose=False)
        return [[(int(s), int(e)) for s, e in offsets] for offsets in encoded["offset_mapping"]]


SENTENCE_END = re.compile(r"""[.!?]+["'”’)\]]*(?=\s+["'“‘(\[]?[A-Z0-9])|\n\s*\n""")


def sentence_spans(text: str) -> list[Span]:
    """Sentences of ``text`` (rule in the module docstring), without surrounding whitespace."""
    spans, start = [], 0
    for match in [*SENTENCE_END.finditer(text), None]:
        end = match.end() if match else len(text)
        piece = text[start:end]
        if piece.strip():
            left = start + len(piece) - len(piece.lstrip())
            spans.append((left, start + len(piece.rstrip())))
        start = end
    return spans


class SentenceChunker(UnitChunker):
    settings_schema = SentenceWindowSettings
    method = "sentences"

    def units(self, texts: Sequence[str]) -> list[list[Span]]:
        return [sentence_spans(text) for text in texts]


class CharChunker(Chunker):
    settings_schema = CharWindowSettings
    method = "chars"

    def spans(self, texts: Sequence[str]) -> list[list[Span]]:
        return [self.char_spans(text) for text in texts]

    def char_spans(self, text: str) -> list[Span]:
        spans, length = [], len(text)
        start = _skip_space(text, 0)
        while start < length:
            end = min(start + self.size, length)
            if end < length and not text[end].isspace():  # inside a word: end at the last whitespace, if any
                end = next((i for i in range(end - 1, start, -1) if text[i].isspace()), end)
            stripped = len(text[start:end].rstrip()) + start
            spans.append((start, stripped))
            if end >= length:
                break
            following = max(stripped - self.overlap, start + 1)
            if 0 < following < stripped and not text[following - 1].isspace():  # inside a word: next word start
                following = next((i + 1 for i in range(following, stripped) if text[i].isspace()), stripped)
            start = _skip_space(text, following)
        return spans


def _skip_space(text: str, position: int) -> int:
    while position < len(text) and text[position].isspace():
        position += 1
    return position


@dataclass(frozen=True)
class ChunkedCorpus:
    """Chunks as a :class:`Corpus` (ids ``<docid>#<n>``) with each chunk's parent document and position."""

    corpus: Corpus
    parents: list[str]
    positions: list[int]
    documents: Corpus
    settings: dict

    def parent_of(self) -> dict[str, str]:
        return dict(zip(self.corpus.ids, self.parents))


def max_passage(run: Run, parent_of: Mapping[str, str], depth: int | None = None) -> Run:
    """Document run from a chunk run: each document scores as its best-ranked chunk (first occurrence
    in trec_eval order wins), cut at ``depth`` documents."""
    documents: dict[str, dict[str, float]] = {}
    for qid, ranked in run.rankings():
        best: dict[str, float] = {}
        for chunk_id, score in ranked:
            best.setdefault(parent_of[chunk_id], score)
            if depth is not None and len(best) >= depth:
                break
        documents[qid] = best
    return Run(run.name, documents)


def judgment_level(qrels: Qrels, chunked: ChunkedCorpus, qrels_path: Path) -> str:
    """``document`` when every judged id is a document id, ``chunk`` when every one is a chunk id."""
    judged = {doc_id for docs in qrels.values() for doc_id in docs}
    documents, chunks = set(chunked.documents.ids), set(chunked.corpus.ids)
    if judged <= documents:
        return "document"
    if judged <= chunks:
        return "chunk"
    raise InputError(
        qrels_path,
        f"judgments mix document ids (e.g. {min(judged & documents)!r}) and chunk ids "
        f"(e.g. {min(judged - documents)!r}); judge one level",
    )


class ChunkPlan:
    """How a job retrieves and evaluates: ``ChunkPlan(None)`` (no chunking) changes nothing."""

    def __init__(self, chunked: ChunkedCorpus | None = None, level: str = "document", oversample: int = 1):
        self.chunked, self.level, self.oversample = chunked, level, max(int(oversample), 1)
        self._parent_of = chunked.parent_of() if chunked else {}

    def corpus(self, documents: Corpus) -> Corpus:
        """What retrievers index."""
        return self.chunked.corpus if self.chunked else documents

    def judged_corpus(self, documents: Corpus) -> Corpus:
        """The texts of the ids that evaluated runs rank: the chunks when judged per chunk, else the documents."""
        return self.chunked.corpus if self.chunked and self.level == "chunk" else documents

    def search_depth(self, depth: int) -> int:
        return depth * self.oversample if self.chunked and self.level == "document" else depth

    def evaluated(self, run: Run, depth: int) -> Run:
        """The run at the judged level: max-passage documents, or the chunk run itself, cut at ``depth``."""
        if self.chunked and self.level == "document":
            return max_passage(run, self._parent_of, depth)
        return run.truncated(depth) if self.chunked else run

    def passages(self, evaluated: Run, chunk_runs: Mapping[str, Run]) -> Run:
        """The chunk run a generator reads for a system whose evaluated run is ``evaluated``: per
        document, the best-ranked chunk of it among ``chunk_runs`` (a retriever's own chunk run, or a
        fusion's members), with the document's score. Unchunked or chunk-level runs are returned as is."""
        if not self.chunked or self.level == "chunk":
            return evaluated
        best: dict[str, dict[str, tuple[int, str]]] = {}
        for run in chunk_runs.values():
            for qid, ranked in run.rankings():
                per_doc = best.setdefault(qid, {})
                for rank, (chunk_id, _) in enumerate(ranked):
                    parent = self._parent_of[chunk_id]
                    if parent not in per_doc or rank < per_doc[parent][0]:
                        per_doc[parent] = (rank, chunk_id)
        return Run(
            evaluated.name,
            {
                qid: {best[qid][doc_id][1]: score for doc_id, score in ranked.items()}
                for qid, ranked in evaluated.scores.items()
            },
        )

    def params(self) -> dict:
        """The chunker settings, logged with each system's parameters (they change its index)."""
        settings = self.chunked.settings if self.chunked else {"method": "none"}
        return {f"chunking.{key}": value for key, value in settings.items()} | (
            {"chunking.oversample": self.oversample, "chunking.judged": self.level} if self.chunked else {}
        )

    def stats(self, documents: Corpus) -> dict[str, float]:
        """Indexed units (chunks; documents without chunking), logged with each system's efficiency."""
        return {"chunks": float(len(self.corpus(documents)))}


def plan_chunks(dataset: Dataset, chunker: Chunker | None, oversample: int = 1) -> ChunkPlan:
    """The stage: chunk the dataset's corpus (``None``: no chunking), check that every judged id is a
    document (or, when chunked, a chunk) and decide the judged level."""
    if chunker is None:
        check_judged_documents(dataset, dataset.corpus.ids)
        return ChunkPlan()
    chunked = chunker.chunk(dataset.corpus)
    check_judged_documents(dataset, chunked.documents.ids, chunked.corpus.ids)
    level = judgment_level(dataset.qrels, chunked, dataset.qrels_path or Path("qrels"))
    log.info(
        "judgments are %s-level%s",
        level,
        "; chunk runs become document runs by max-passage" if level == "document" else "",
    )
    return ChunkPlan(chunked, level, oversample)
