"""A run made elsewhere as a system: ``retriever=[run_file] retriever.run_file.path=a.trec``.

The file is a TREC run (``qid Q0 docid rank score tag``, gzip when its name ends in ``.gz``), read by
the reader ``ragtrack eval`` uses (:func:`ragtrack.core.runs.read_trec`) when the stage is made, so a
defect stops the job in one line ``file:line: problem`` before anything runs. trec_eval's semantics:

- scores decide the order (score descending, equal scores by document id descending); the rank
  column is ignored;
- each query's ranking is cut at the job's ``depth``, as every system's is;
- queries of the file that the dataset does not have are ignored, with a warning;
- queries of the dataset that the file does not have retrieve nothing and score 0;
- documents that the corpus does not have are kept and count as not relevant, with a warning; they
  have no text, so a reranker, generator or passage metric that reads them stops in one line.

The stage's identity is the sha256 of the file's bytes, never its path or time: an edited file makes
a new system (what reads it runs again), a copy elsewhere is the same one.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path

from ragtrack.core.cache import Cache
from ragtrack.core.checksums import file_sha256
from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run, read_trec
from ragtrack.core.settings import InputPath, SystemName, validated
from ragtrack.core.stages import StageContext, StageOutput
from ragtrack.retrievers.base import Retriever, RetrieverSettings

log = logging.getLogger(__name__)


class RunFileSettings(RetrieverSettings, extra="forbid"):
    """``path``: the TREC run file (a relative path is read from the folder ragtrack runs in);
    ``system``: the system's name (default: the config key, ``run_file``)."""

    path: InputPath
    system: SystemName | None = None


class RunFileRetriever(Retriever):
    """The run of a TREC file as a system; ``values`` are :class:`RunFileSettings`."""

    settings_schema = RunFileSettings
    searches_texts = False

    def __init__(self, name: str = "run_file", **values):
        settings = validated(self.settings_schema, values, f"run file {name!r}")
        super().__init__(settings.system or name)
        self.path = Path(settings.path).expanduser()
        self.run = read_trec(self.path, name=self.name)
        self.sha256 = file_sha256(self.path)

    def index_settings(self) -> dict:
        return {"sha256": self.sha256}

    def index(self, corpus: Corpus, cache: Cache) -> None:
        """Nothing to build: the run was read when the stage was made."""

    def search(self, queries: dict[str, str], depth: int) -> Run:
        return Run.from_rankings(
            self.name, {qid: self.run.ranking(qid)[:depth] for qid in queries if qid in self.run.scores}
        )

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        """The file's run on the dataset's queries, cut at ``depth``; the queries and documents that the
        dataset does not have are counted (efficiency figures ``unknown_queries``, ``unknown_documents``)
        and named in a warning."""
        if context.judged_corpus.hash != context.dataset.corpus.hash:  # chunks are searched, documents judged
            raise RagtrackError(
                f"{self.name}: a run file ranks the judged documents, but this job retrieves their chunks "
                "(chunking with judgments per document): run it with chunking=none"
            )
        output = super().produce(inputs, context)
        unknown_queries = [qid for qid in self.run.scores if qid not in context.dataset.queries]
        known = set(context.judged_corpus.ids)
        unknown_documents = sorted(
            {doc for _, ranked in output.run.rankings() for doc, _ in ranked if doc not in known}
        )
        if unknown_queries:
            log.warning(
                "%s: queries of %s that the dataset does not have: %d (e.g. %r); ignored, as trec_eval ignores them",
                self.name,
                self.path,
                len(unknown_queries),
                unknown_queries[0],
            )
        if unknown_documents:
            log.warning(
                "%s: documents of its run that the corpus does not have: %d (e.g. %r); they count as not relevant, as in "
                "trec_eval, and have no text for a reranker or generator to read",
                self.name,
                len(unknown_documents),
                unknown_documents[0],
            )
        return replace(
            output,
            efficiency=output.efficiency
            | {"unknown_queries": float(len(unknown_queries)), "unknown_documents": float(len(unknown_documents))},
        )
