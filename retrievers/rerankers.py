"""Rerankers: a stage that re-scores the top ``depth`` documents of one input system.

The reranked run keeps the input's depth: the input's top ``depth`` documents are ordered by the
reranker's scores (ties by document id, as every run), and the documents below them follow in their
input order with scores below every reranked one. A reranker reads each document's text as the dense
retriever sees it (title and text joined, ``Corpus.full_texts``) and the original query text.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path

from ragtrack.core.errors import RagtrackError
from ragtrack.core.models import model_fingerprint, quiet_model_loading
from ragtrack.core.pairs import Pair, PairScores
from ragtrack.core.progress import Progress
from ragtrack.core.runs import Run
from ragtrack.core.settings import Count, StageSettings, Text
from ragtrack.core.stages import Stage, StageContext, StageOutput, cached_run, chain_key
from ragtrack.retrievers.encoders import torch_device


def reranked(run: Run, new_scores: Mapping[str, Mapping[str, float]], depth: int) -> Run:
    """``run`` with each query's top ``depth`` documents ordered by ``new_scores[qid]`` (one score per
    such document) and the rest after them in input order: the k-th document below gets the lowest
    reranked score minus k, so the run keeps every document of the input and its depth."""
    rankings = {}
    for qid, ranked in run.rankings():
        head, tail = ranked[:depth], ranked[depth:]
        scores = {doc: float(new_scores[qid][doc]) for doc, _ in head}
        lowest = min(scores.values(), default=0.0)
        scores |= {doc: lowest - position for position, (doc, _) in enumerate(tail, start=1)}
        rankings[qid] = scores
    return Run(run.name, rankings)


class RerankerSettings(StageSettings):
    """A reranker's common keys: ``depth`` input documents re-scored per query, ``batch_size`` pairs
    (or prompts) per model call."""

    depth: Count = 100
    batch_size: Count = 32


class Reranker(Stage):
    """Re-scores the top ``depth`` documents of the system ``input`` for each query; makes the system
    ``system``. Built from its validated settings (``settings_schema``, a :class:`RerankerSettings`);
    subclasses implement :meth:`rerank_scores` and :meth:`scorer_identity`."""

    kind = "reranker"
    settings_schema: type[RerankerSettings] = RerankerSettings

    def __init__(self, settings: RerankerSettings):
        super().__init__(settings.system or f"{settings.input}+{settings.type or 'reranker'}", [settings.input])
        self.settings = settings
        self.input, self.depth, self.batch_size = settings.input, settings.depth, settings.batch_size

    @abstractmethod
    def scorer_identity(self) -> dict:
        """What changes a (query, document) score: the model and its settings (not the depth)."""

    @abstractmethod
    def rerank_scores(self, heads: Mapping[str, list[str]], queries: Mapping[str, str], texts: Mapping[str, str],
                      context: StageContext) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """New scores for each query's ``heads[qid]`` (document ids, input order) given the query
        texts and the document texts by id; returns the scores by query and efficiency figures."""

    def identity(self) -> dict:
        return {"depth": self.depth, **self.scorer_identity()}

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        upstream = inputs[self.input]
        key = chain_key(self, inputs, context)

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            started = time.perf_counter()
            heads = {qid: [doc for doc, _ in ranked[:self.depth]] for qid, ranked in upstream.run.rankings()}
            wanted = {doc for docs in heads.values() for doc in docs}
            corpus = context.judged_corpus
            texts = {doc: text for doc, text in zip(corpus.ids, corpus.full_texts()) if doc in wanted}
            scores, efficiency = self.rerank_scores(heads, context.dataset.queries, texts, context)
            run = reranked(upstream.run, scores, self.depth)
            seconds = time.perf_counter() - started
            share = seconds / max(len(heads), 1)
            return Run(self.name, run.scores), {**efficiency, "rerank_seconds": seconds}, {qid: share for qid in heads}

        run, efficiency, latency_ms = cached_run(context, key, self.name, compute)
        latency_ms = {qid: upstream.latency_ms.get(qid, 0.0) + ms for qid, ms in latency_ms.items()}  # the chain's time per query
        return StageOutput(run, context.passages(run, {self.input: upstream.passage_run}), key, self, efficiency, latency_ms,
                           upstream.approximate)


# ----------------------------------------------------------------------------- cross-encoder
class CrossEncoderSettings(RerankerSettings):
    """``model``: a Hugging Face cross-encoder by name or a local folder; ``max_length``: tokens per
    pair (default: the model's); ``device``: ``auto`` (a GPU where torch sees one, else the CPU),
    ``cpu``, ``cuda``, ``cuda:N``."""

    model: Text = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    max_length: Count | None = None
    device: Text = "auto"


class CrossEncoderReranker(Reranker):
    """Scores each (query, document) pair with a sentence-transformers ``CrossEncoder``: the model's
    raw output (for a one-label model its logit, whatever activation the model's config names).

    Pairs already in the scorer's :class:`~ragtrack.core.pairs.PairScores` are not scored again (a
    depth sweep scores only the new ones); the rest go in batches of ``batch_size``, longest first,
    each stored as it is done. The model is loaded only when a pair needs scoring."""

    settings_schema = CrossEncoderSettings
    _model = None  # loaded on first use

    @property
    def location(self) -> str:
        """The model's local folder, or its Hugging Face name."""
        folder = Path(self.settings.model).expanduser()
        return str(folder) if folder.is_dir() else self.settings.model

    def scorer_identity(self) -> dict:
        return {"class": f"{type(self).__module__}.{type(self).__qualname__}", "weights": model_fingerprint(self.location),
                "max_length": self.settings.max_length}

    def rerank_scores(self, heads: Mapping[str, list[str]], queries: Mapping[str, str], texts: Mapping[str, str],
                      context: StageContext) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        store = PairScores(context.cache, self.scorer_identity())
        pairs = list(dict.fromkeys((queries[qid], texts[doc]) for qid, docs in heads.items() for doc in docs))
        known = store.lookup(pairs)
        missing = [pair for pair in pairs if pair not in known]
        started = time.perf_counter()
        known |= self._score(missing, store)
        efficiency = {"pairs_scored": float(len(missing)), "pairs_from_cache": float(len(pairs) - len(missing)),
                      "score_seconds": time.perf_counter() - started,
                      "on_gpu": float(self._model is not None and self._model.device.type == "cuda")}
        return {qid: {doc: known[queries[qid], texts[doc]] for doc in docs} for qid, docs in heads.items()}, efficiency

    def _score(self, pairs: list[Pair], store: PairScores) -> dict[Pair, float]:
        """Scores of ``pairs`` in batches longest first (less padding), each stored once done."""
        if not pairs:
            return {}
        from torch.nn import Identity

        model = self._load()
        longest_first = sorted(pairs, key=lambda pair: -len(pair[0]) - len(pair[1]))
        scores = {}
        with Progress(f"{self.name}: score", len(pairs), "pairs") as progress:
            for start in range(0, len(pairs), self.batch_size):
                batch = longest_first[start:start + self.batch_size]
                raw = model.predict(batch, batch_size=len(batch), activation_fn=Identity(), show_progress_bar=False, convert_to_numpy=True)
                batch_scores = {pair: float(score) for pair, score in zip(batch, raw)}
                store.store(batch_scores)
                scores |= batch_scores
                progress.update(len(batch))
        return scores

    def _load(self):
        """The model, loaded once; a model that cannot be loaded is one line naming the setting."""
        if self._model is None:
            from sentence_transformers import CrossEncoder

            setting = f"reranker.{self.settings.type or 'cross_encoder'}.model"
            quiet_model_loading()
            try:
                model = CrossEncoder(self.location, device=torch_device(self.settings.device), max_length=self.settings.max_length)
            except Exception as exc:
                reason = " ".join(str(exc).split())[:200]
                raise RagtrackError(f"{setting}: cannot load {self.settings.model!r} ({type(exc).__name__}: {reason}); "
                                    "offline, give the path of a local model folder") from None
            if model.num_labels != 1:
                raise RagtrackError(f"{setting}: {self.settings.model!r} gives {model.num_labels} scores per pair; "
                                    "a reranker needs a one-label cross-encoder")
            self._model = model
        return self._model
