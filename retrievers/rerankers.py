"""Rerankers: a stage that re-scores the top ``depth`` documents of one input system.

The reranked run keeps the input's depth: the input's top ``depth`` documents are ordered by the
reranker's scores (ties by document id, as every run), and the documents below them follow in their
input order with scores below every reranked one. A reranker reads each document's text as the dense
retriever sees it (title and text joined, ``Corpus.full_texts``) and the original query text.
"""

from __future__ import annotations

import functools
import logging
import re
import string
import time
from abc import abstractmethod
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import model_validator

from ragtrack.core.errors import RagtrackError
from ragtrack.core.llm import ChatClient, chat_clients, check_template, json_objects, last_match, numbered_passages
from ragtrack.core.models import missing_model, model_fingerprint, quiet_model_loading
from ragtrack.core.pairs import Pair, PairScores
from ragtrack.core.progress import Progress
from ragtrack.core.runs import Run
from ragtrack.core.secrets import without_credentials
from ragtrack.core.settings import ChatSettings, Count, NameOrPath, StageSettings, Text
from ragtrack.core.stages import SingleInputStage, StageContext, StageOutput, cached_run, chain_key
from ragtrack.retrievers.encoders import torch_device

log = logging.getLogger(__name__)


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


class Reranker(SingleInputStage):
    """Re-scores the top ``depth`` documents of the system ``input`` for each query; makes the system
    ``system``. Built from its validated settings (``settings_schema``, a :class:`RerankerSettings`);
    subclasses implement :meth:`rerank_scores` and :meth:`scorer_identity`."""

    kind = "reranker"
    settings_schema: type[RerankerSettings] = RerankerSettings

    def __init__(self, name: str | None = None, **values):
        super().__init__(name, **values)
        self.depth, self.batch_size = self.settings.depth, self.settings.batch_size

    @abstractmethod
    def scorer_identity(self) -> dict:
        """What changes a (query, document) score: the model and its settings (not the depth)."""

    @abstractmethod
    def rerank_scores(
        self,
        heads: Mapping[str, list[str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        context: StageContext,
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        """New scores for each query's ``heads[qid]`` (document ids, input order) given the query
        texts and the document texts by id; returns the scores by query and efficiency figures."""

    def identity(self) -> dict:
        return {"depth": self.depth, **self.scorer_identity()}

    def produce(self, inputs: Mapping[str, StageOutput], context: StageContext) -> StageOutput:
        upstream = inputs[self.input]
        key = chain_key(self, inputs, context)

        def compute() -> tuple[Run, dict[str, float], dict[str, float]]:
            started = time.perf_counter()
            heads = {qid: [doc for doc, _ in ranked[: self.depth]] for qid, ranked in upstream.run.rankings()}
            texts = context.judged_corpus.texts_of(
                (doc for docs in heads.values() for doc in docs), f"{self.name} (reranking {self.input})"
            )
            scores, efficiency = self.rerank_scores(heads, context.dataset.queries, texts, context)
            run = reranked(upstream.run, scores, self.depth)
            seconds = time.perf_counter() - started
            share = seconds / max(len(heads), 1)
            return Run(self.name, run.scores), {**efficiency, "rerank_seconds": seconds}, {qid: share for qid in heads}

        run, efficiency, latency_ms = cached_run(context, key, self.name, compute, chat_clients(self))
        latency_ms = {
            qid: upstream.latency_ms.get(qid, 0.0) + ms for qid, ms in latency_ms.items()
        }  # the chain's time per query
        return StageOutput(
            run,
            context.passages(run, {self.input: upstream.passage_run}),
            key,
            self,
            efficiency,
            latency_ms,
            upstream.approximate,
        )


# ----------------------------------------------------------------------------- cross-encoder
class CrossEncoderSettings(RerankerSettings):
    """``model``: a Hugging Face cross-encoder by name or a local folder; ``max_length``: tokens per
    pair (default: the model's); ``device``: ``auto`` (a GPU where torch sees one, else the CPU),
    ``cpu``, ``cuda``, ``cuda:N``."""

    model: NameOrPath = "cross-encoder/ms-marco-MiniLM-L-6-v2"
    max_length: Count | None = None
    device: Text = "auto"


class CrossEncoderReranker(Reranker):
    """Scores each (query, document) pair with a sentence-transformers ``CrossEncoder``: the model's
    raw output (for a one-label model its logit, whatever activation the model's config names).

    Pairs already in the scorer's :class:`~ragtrack.core.pairs.PairScores` are not scored again (a
    depth sweep scores only the new ones); the rest go in batches of pairs of one token length, in a
    canonical order, each stored as it is done. Every batch has ``batch_size`` rows (a last one is
    filled up with copies of its first pair) and no padding, so a pair is always scored in a batch of
    the same shape: its score, and so the run file, does not depend on which other pairs were scored
    with it, that is on what the store held before (a depth-5 store topped up to depth 10 gives a fresh
    depth-10 run's bytes; padded batches differ in the last bits). The model is loaded only when a
    pair needs scoring."""

    settings_schema = CrossEncoderSettings
    _model = None  # loaded on first use

    @property
    def location(self) -> str:
        """The model's local folder, or its Hugging Face name."""
        folder = Path(self.settings.model).expanduser()
        return str(folder) if folder.is_dir() else self.settings.model

    def problems(self) -> dict[str, str]:
        reason = missing_model(self.location)
        return (
            {
                "model": f"{self.settings.model!r} is not allowed: {reason}; offline, give the path of a local model folder"
            }
            if reason
            else {}
        )

    def scorer_identity(self) -> dict:
        return {
            "class": f"{type(self).__module__}.{type(self).__qualname__}",
            "weights": model_fingerprint(self.location),
            "max_length": self.settings.max_length,
            "batches": f"{self.batch_size} rows of one length",
        }  # the shape a score was computed in

    def rerank_scores(
        self,
        heads: Mapping[str, list[str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        context: StageContext,
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        store = PairScores(context.cache, self.scorer_identity())
        pairs = list(dict.fromkeys((queries[qid], texts[doc]) for qid, docs in heads.items() for doc in docs))
        known = store.lookup(pairs)
        missing = [pair for pair in pairs if pair not in known]
        started = time.perf_counter()
        known |= self._score(missing, store)
        efficiency = {
            "pairs_scored": float(len(missing)),
            "pairs_from_cache": float(len(pairs) - len(missing)),
            "score_seconds": time.perf_counter() - started,
            "on_gpu": float(self._model is not None and self._model.device.type == "cuda"),
        }
        return {qid: {doc: known[queries[qid], texts[doc]] for doc in docs} for qid, docs in heads.items()}, efficiency

    def _score(self, pairs: list[Pair], store: PairScores) -> dict[Pair, float]:
        """Scores of ``pairs`` in full batches of one token length (class docstring), each stored once done."""
        if not pairs:
            return {}
        from torch.nn import Identity

        model = self._load()
        by_length: dict[int, list[Pair]] = {}
        for start in range(0, len(pairs), 1024):  # the model's own preprocessing: the lengths it will see
            chunk = pairs[start : start + 1024]
            for pair, length in zip(chunk, model.preprocess(chunk)["attention_mask"].sum(dim=1).tolist()):
                by_length.setdefault(length, []).append(pair)
        scores = {}
        with Progress(f"{self.name}: score", len(pairs), "pairs") as progress:
            for length in sorted(by_length, reverse=True):
                same = sorted(by_length[length])
                for start in range(0, len(same), self.batch_size):
                    batch = same[start : start + self.batch_size]
                    full = batch + [batch[0]] * (self.batch_size - len(batch))
                    raw = model.predict(
                        full,
                        batch_size=self.batch_size,
                        activation_fn=Identity(),
                        show_progress_bar=False,
                        convert_to_numpy=True,
                    )
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
                model = CrossEncoder(
                    self.location, device=torch_device(self.settings.device), max_length=self.settings.max_length
                )
            except Exception as exc:
                reason = " ".join(str(exc).split())[:200]
                raise RagtrackError(
                    f"{setting}: cannot load {self.settings.model!r} ({type(exc).__name__}: {reason}); "
                    "offline, give the path of a local model folder"
                ) from None
            if model.num_labels != 1:
                raise RagtrackError(
                    f"{setting}: {self.settings.model!r} gives {model.num_labels} scores per pair; "
                    "a reranker needs a one-label cross-encoder"
                )
            self._model = model
        return self._model


# ----------------------------------------------------------------------------- LLM
PROMPTS_FILE = Path(__file__).parent / "rerank_prompts.yaml"
PROMPT_FIELDS = {"pointwise": {"query", "document"}, "listwise": {"query", "count", "passages"}}


@functools.cache
def built_in_prompts() -> dict[str, str]:
    """The prompt of each mode, from ``rerank_prompts.yaml`` (package data)."""
    import yaml

    return yaml.safe_load(PROMPTS_FILE.read_text(encoding="utf-8"))


class LLMRerankerSettings(RerankerSettings, ChatSettings):
    """A chat model on an OpenAI-compatible endpoint (the :class:`ChatSettings` keys). ``mode``:
    ``pointwise`` (a grade 0-3 per pair) or ``listwise`` (RankGPT windows of ``window`` passages,
    ``step`` apart, from the bottom up); ``prompt``: null for the mode's built-in one
    (``retrievers/rerank_prompts.yaml``); ``max_words``: words of each document shown (null: all);
    ``cache_dir``: null for the job's cache."""

    mode: Literal["pointwise", "listwise"] = "listwise"
    window: Count = 20
    step: Count = 10
    max_words: Count | None = 300
    parameters: dict[str, Any] = {"temperature": 0.0}
    prompt: Text | None = None

    @property
    def template(self) -> str:
        return self.prompt or built_in_prompts()[self.mode]

    @model_validator(mode="after")
    def _usable(self) -> "LLMRerankerSettings":
        if self.mode == "listwise" and self.step >= self.window:
            raise ValueError(
                f"listwise windows must overlap (step < window), got window {self.window}, step {self.step}"
            )
        try:
            check_template(self.template, PROMPT_FIELDS[self.mode], f"{self.mode} reranker")
        except RagtrackError as exc:
            raise ValueError(str(exc)) from None
        missing = (
            PROMPT_FIELDS[self.mode] - {"count"} - {name for _, name, _, _ in string.Formatter().parse(self.template)}
        )
        if missing:
            raise ValueError(
                f"the {self.mode} prompt must show {', '.join('{' + name + '}' for name in sorted(missing))}"
            )
        return self


def sliding_windows(count: int, window: int, step: int) -> list[tuple[int, int]]:
    """RankGPT's windows over ``count`` ranked passages, bottom first: ``[count - window, count)``,
    then ``step`` higher each time, the last one moved down to start at the top so that every window
    holds ``min(window, count)`` passages and the top ones are compared too."""
    if count < 2:
        return []
    windows, end = [], count
    while not windows or windows[-1][0] > 0:
        start = max(end - window, 0)
        windows.append((start, min(start + window, count)))
        end -= step
    return windows


_RANKING = re.compile(r"\[\d+\](?:\s*>\s*\[\d+\])+")


def parse_permutation(reply: str, count: int) -> list[int] | None:
    """Positions (0-based) in the order of a reply such as ``[3] > [1] > [2]``: its last such chain (the
    model's own ranking, after passages it quotes), else every bracketed number, else bare numbers;
    repeated and out-of-range numbers are ignored and the missing positions follow in their prior
    order; ``None`` when no number from 1 to ``count`` is found."""
    chain = last_match(_RANKING, reply)
    named = re.findall(r"\[(\d+)\]", chain.group(0) if chain else reply) or re.findall(r"\d+", reply)
    chosen = dict.fromkeys(int(number) - 1 for number in named if 1 <= int(number) <= count)
    return [*chosen, *(position for position in range(count) if position not in chosen)] if chosen else None


_SCALE = re.compile(r"\(\s*\d+\s*(?:-|–|to)\s*\d+\s*\)|\d+\s*(?:-|–|to)\s*\d+|(?:/|\bout of|\bof)\s*\d+", re.IGNORECASE)
_GRADE = re.compile(r"(?<![\d.])([0-3])(?!\.?\d)")
_LABELLED_GRADE = re.compile(
    r"\b(?:grade|score|relevance|rating)\b[*_\s]*[:=]\s*[*_\"']*\s*([0-3])(?!\.?\d)", re.IGNORECASE
)


def parse_grade(reply: str) -> int | None:
    """The model's grade 0-3: JSON ``{"grade": 2}``, else the last labelled one (``Grade (0-3): 3``,
    ``Relevance: 2``), else the stand-alone digit 0-3 of the reply (``2``, ``3.``) once scales such as
    ``0-3`` and ``/3`` are set aside; ``None`` when there is none or several that disagree."""
    for found in reversed(json_objects(reply)):
        value = next((v for k, v in found.items() if str(k).lower() in ("grade", "score", "relevance")), None)
        if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 3:
            return value
    text = _SCALE.sub(" ", reply)
    labelled = last_match(_LABELLED_GRADE, text)
    if labelled:
        return int(labelled.group(1))
    grades = set(_GRADE.findall(text))
    return int(grades.pop()) if len(grades) == 1 else None


def in_order(documents: list[str]) -> dict[str, float]:
    """Scores that rank ``documents`` as listed: ``-position / len(documents)``, in (-1, 0]."""
    return {doc: -position / len(documents) for position, doc in enumerate(documents)}


class LLMReranker(Reranker):
    """Reranks with a chat model (:class:`~ragtrack.core.llm.ChatClient`: retries, concurrency and a
    reply cache under ``cache_dir/chat/``, so a rerun sends nothing).

    ``pointwise``: one prompt per (query, document) asks for a grade 0-3; score = grade − (r − 1)/n
    for the document at input rank r of n, so equal grades keep their input order. ``listwise``:
    RankGPT (Sun et al., "Is ChatGPT Good at Search?", EMNLP 2023): windows of the current ranking
    from the bottom up (:func:`sliding_windows`), each reordered by the model's reply
    (:func:`parse_permutation`); score = −(r − 1)/n at final rank r. A query with a failed request or
    an unparsable reply keeps its input order (counted as ``failed_queries`` and ``unparsed_queries``,
    and one warning)."""

    settings_schema = LLMRerankerSettings

    def __init__(self, name: str | None = None, **values):
        super().__init__(name, **values)
        self.client = ChatClient(**self.settings.client_settings())

    def max_chat_calls(self, queries: int, depth: int) -> int:
        """pointwise: a prompt per document of the top ``depth``; listwise: one per window."""
        shown = min(self.depth, depth)
        settings = self.settings
        return queries * (
            shown if settings.mode == "pointwise" else len(sliding_windows(shown, settings.window, settings.step))
        )

    def scorer_identity(self) -> dict:
        settings = self.settings
        return {
            "model": settings.model,
            "base_url": without_credentials(settings.base_url),
            "mode": settings.mode,
            "window": settings.window,
            "step": settings.step,
            "parameters": settings.parameters,
            "prompt": settings.template,
            "system_prompt": settings.system_prompt,
            "max_words": settings.max_words,
        }

    def rerank_scores(
        self,
        heads: Mapping[str, list[str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        context: StageContext,
    ) -> tuple[dict[str, dict[str, float]], dict[str, float]]:
        settings, client = self.settings, self.client
        client.cache_dir = settings.cache_dir or str(context.cache.root)
        sent_before = client.requests_sent
        shown = {
            doc: " ".join(text.split()[: settings.max_words]) if settings.max_words else text
            for doc, text in texts.items()
        }
        rerank = self._pointwise if settings.mode == "pointwise" else self._listwise
        scores, problems, prompts = rerank(client, heads, queries, shown)
        for qid in problems:
            scores[qid] = in_order(heads[qid])
        failed = sum(kind == "failed" for kind, _ in problems.values())
        if problems:
            qid, (kind, detail) = next(iter(problems.items()))
            log.warning(
                "%s: %d of %d queries keep their input order: %d failed requests, %d unparsable replies; first: query %s, %s: %s",
                self.name,
                len(problems),
                len(heads),
                failed,
                len(problems) - failed,
                qid,
                kind,
                " ".join(detail.split())[:200],
            )
        return scores, {
            "prompts": float(prompts),
            "chat_requests": float(client.requests_sent - sent_before),
            "failed_queries": float(failed),
            "unparsed_queries": float(len(problems) - failed),
        }

    def _pointwise(
        self, client: ChatClient, heads: Mapping[str, list[str]], queries: Mapping[str, str], shown: Mapping[str, str]
    ):
        """Scores by query, problems by query (kind, detail) and the number of prompts."""
        template = self.settings.template
        prompts = {
            (qid, doc): template.format(query=queries[qid], document=shown[doc])
            for qid, docs in heads.items()
            for doc in docs
        }
        replies, failures = client.complete_all(prompts, label=f"{self.name}: grade")
        scores, problems = {}, {}
        for qid, docs in heads.items():
            grades = {doc: parse_grade(replies[qid, doc]) for doc in docs if (qid, doc) in replies}
            failure = next(((qid, doc) for doc in docs if (qid, doc) in failures), None)
            unparsed = next((doc for doc, grade in grades.items() if grade is None), None)
            if failure:
                problems[qid] = ("failed", failures[failure])
            elif unparsed is not None:
                problems[qid] = ("unparsed", replies[qid, unparsed])
            else:
                scores[qid] = {doc: grades[doc] + tie_break for doc, tie_break in in_order(docs).items()}
        return scores, problems, len(prompts)

    def _listwise(
        self, client: ChatClient, heads: Mapping[str, list[str]], queries: Mapping[str, str], shown: Mapping[str, str]
    ):
        """Scores by query, problems by query (kind, detail) and the number of prompts: the windows of
        every query at once, one round per window position."""
        settings = self.settings
        rankings = {qid: list(docs) for qid, docs in heads.items()}
        windows = {qid: sliding_windows(len(docs), settings.window, settings.step) for qid, docs in heads.items()}
        problems, sent = {}, 0
        for round_ in range(max(map(len, windows.values()), default=0)):
            due = {qid: spans[round_] for qid, spans in windows.items() if round_ < len(spans) and qid not in problems}
            prompts = {
                qid: settings.template.format(
                    query=queries[qid],
                    count=end - start,
                    passages=numbered_passages([shown[doc] for doc in rankings[qid][start:end]]),
                )
                for qid, (start, end) in due.items()
            }
            replies, failures = client.complete_all(prompts, label=f"{self.name}: window {round_ + 1}")
            sent += len(prompts)
            for qid, (start, end) in due.items():
                permutation = parse_permutation(replies[qid], end - start) if qid in replies else None
                if qid in failures:
                    problems[qid] = ("failed", failures[qid])
                elif permutation is None:
                    problems[qid] = ("unparsed", replies[qid])
                else:
                    window = rankings[qid][start:end]
                    rankings[qid][start:end] = [window[position] for position in permutation]
        return {qid: in_order(ranking) for qid, ranking in rankings.items()}, problems, sent
