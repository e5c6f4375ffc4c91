"""Answer generation from each system's retrieved passages: the ``ragtrack.generators`` plugins.

A generator gets, per query, the question and the texts of the system's top-``top_k`` passages (in
ranking order) and returns an answer per query; queries it could not answer are in ``failures``
(query id -> reason) and get the empty answer, so answer metrics score them 0. A generator may
abstain: with ``no_answer`` set (e.g. ``unanswerable``), an answer equal to it after normalization
(:func:`ragtrack.core.llm.is_abstention`) is an abstention, answered as exactly ``no_answer``. Built-ins:

- ``none``: no generation (retrieval-only runs; answer metrics that need an answer are skipped);
- ``extractive``: offline, no model - see :class:`ExtractiveGenerator`;
- ``openai``: any OpenAI-compatible chat-completions endpoint through :class:`ChatClient`.

:func:`answer_questions` is what the experiment calls once per system: it hands the passages over,
adds ``question``, ``gold_answers``, ``generated_answer`` and ``generation_error`` to the per-query table
and writes ``generation.json`` (failure count and the failed queries) into the system's output folder.
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from ragtrack.core.data import Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text, write_atomically
from ragtrack.core.llm import ChatClient, check_template, is_abstention, numbered_passages, retrieved_passages
from ragtrack.core.runs import Run
from ragtrack.core.settings import (
    ChatSettings,
    ComponentSettings,
    Count,
    Flag,
    Fraction,
    Text,
    TokenizerSettings,
    validated,
)
from ragtrack.core.text import Tokenizer

if TYPE_CHECKING:
    import pandas as pd

log = logging.getLogger(__name__)


class GeneratorSettings(ComponentSettings):
    """A generator plugin's common keys."""


class NoGeneratorSettings(GeneratorSettings, extra="forbid"):
    """No answers: retrieval only."""


class ExtractiveSettings(GeneratorSettings, extra="forbid"):
    """Extractive answers from the top passages."""

    top_k: Count = 1
    unit: Literal["span", "sentence"] = "span"
    tokenizer: TokenizerSettings = TokenizerSettings()
    no_answer: Text | None = "unanswerable"
    abstain_below: Fraction = 0.0
    cite: Flag = False


class OpenAISettings(GeneratorSettings, ChatSettings, extra="forbid"):
    """Answers from an OpenAI-compatible chat endpoint."""

    top_k: Count = 3
    no_answer: Text | None = "unanswerable"
    parameters: dict[str, Any] = {"temperature": 0.0, "max_tokens": 64}
    system_prompt: str | None = (
        "You answer questions from the given passages with a short phrase, as in reading-comprehension datasets."
    )


class Generator(ABC):
    """``generate(queries, contexts)`` -> answer per query id; unanswerable queries go to ``failures``."""

    settings_schema = GeneratorSettings

    top_k: int = 0  # passages per query handed to generate()
    no_answer: str | None = None  # the answer that abstains (None: the generator never abstains)

    def __init__(self) -> None:
        self.failures: dict[str, str] = {}

    @abstractmethod
    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        """Answers by query id; ``contexts[qid]`` are the passage texts, best first."""


class NoGenerator(Generator):
    """Generates nothing: retrieval-only runs stay as fast as before."""

    settings_schema = NoGeneratorSettings

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        return {}


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WORD = re.compile(r"\S+")
_CLAUSE_END = (",", ";", ":")
_EDGE_PUNCTUATION = "\"'()[]{},.;:!?"


class ExtractiveGenerator(Generator):
    """Offline extractive reader: the best-matching sentence of the top-k passages, or a span of it.

    1. Split each of the top-``top_k`` passages into sentences (after ``.!?`` followed by white space
       and an upper-case letter, digit or opening quote/bracket).
    2. Score each sentence by the summed idf of the distinct question terms it contains (terms: the
       BM25 tokenizer's stemmed words without stopwords; idf = ln(1 + N/df) over all sentences handed
       over in the call); ties go to the better-ranked passage, then the earlier sentence.
    3. ``unit: sentence`` answers that sentence. ``unit: span`` answers the part of it that does not
       repeat the question: the sentence is cut into runs of words that are not question terms (a run
       also ends after a word ending in ``, ; :``). If the question asks for a number (how many/much/
       long/..., when, what year/percentage/...) or a name (who, whom, whose, where, which person/...),
       each stretch of numbers (digits or number words) or capitalized words inside a run is a
       candidate too. Stopwords and punctuation are trimmed from the edges; the winner is a stretch of
       the asked-for kind if any, then the candidate nearest to a question term, then the longer, then
       the earlier. If every word is a question term the whole sentence is answered.
    4. It abstains (answers ``no_answer``) when the best sentence covers less than ``abstain_below`` of
       the question's idf: coverage = sum of idf of the question terms in the sentence / sum of idf of
       all question terms (terms absent from every sentence count with the largest idf, ln(1 + N)). The
       default 0 never abstains.
    5. ``cite: true`` appends the number of the passage the answer comes from, as in ``{context}``:
       ``Denver Broncos [1]`` (for the ``citations`` evaluator; the answer and faithfulness metrics take markers out, so they score the same).

    On XQuAD-en given the *gold* passage (top_k=1): span F1 0.280 / EM 0.153, sentence F1 0.161 / EM 0.
    A heuristic baseline that needs no model, not a reader: plug in ``openai`` for real answers.
    """

    settings_schema = ExtractiveSettings

    def __init__(self, **values):
        super().__init__()
        settings = validated(self.settings_schema, values, "extractive generator")
        if settings.abstain_below > 0 and not settings.no_answer:
            raise RagtrackError(
                f"extractive generator: abstain_below {settings.abstain_below!r} needs no_answer (the answer that abstains)"
            )
        self.top_k, self.unit, self.no_answer, self.abstain_below = (
            settings.top_k,
            settings.unit,
            settings.no_answer,
            settings.abstain_below,
        )
        self.cite = settings.cite
        self.tokenize = Tokenizer(**settings.tokenizer.model_dump())

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        self.failures = {}
        numbered = {
            qid: [
                (number, s)
                for number, passage in enumerate(contexts.get(qid, [])[: self.top_k], start=1)
                for s in _SENTENCE_END.split(passage)
                if s.strip()
            ]
            for qid in queries
        }
        sentences = {qid: [s for _, s in found] for qid, found in numbered.items()}
        unique = list(dict.fromkeys(s for found in sentences.values() for s in found))
        terms = dict(zip(unique, map(set, self.tokenize(unique))))
        frequency = Counter(t for words in terms.values() for t in words)
        idf = {t: math.log(1 + len(unique) / df) for t, df in frequency.items()}
        answers = {}
        for qid, question in queries.items():
            if not sentences[qid]:
                self.failures[qid] = "no retrieved passage"
                continue
            asked = set(self.tokenize([question])[0])
            position, best = max(
                enumerate(sentences[qid]),
                key=lambda item: (math.fsum(idf.get(t, 0.0) for t in asked & terms[item[1]]), -item[0]),
            )  # fsum: the sum of a set's terms, exact whatever the set's (hash seed's) order
            unseen = math.log(1 + len(unique))  # the idf of a term in no sentence (df -> 1)
            covered = math.fsum(idf.get(t, 0.0) for t in asked & terms[best]) / (
                math.fsum(idf.get(t, unseen) for t in asked) or 1.0
            )
            if covered < self.abstain_below:
                answers[qid] = self.no_answer
                continue
            answers[qid] = best.strip() if self.unit == "sentence" else self._span(best, question, asked)
            if self.cite:
                answers[qid] += f" [{numbered[qid][position][0]}]"
        return answers

    def _span(self, sentence: str, question: str, asked: set[str]) -> str:
        words = _WORD.findall(sentence)
        marked = [bool(asked & set(tokens)) for tokens in self.tokenize(words)]
        hits = [i for i, is_question in enumerate(marked) if is_question]
        runs = _question_free_runs(words, marked)
        wanted = _expected_type(question)
        typed = _stretches(words, runs, wanted) if wanted else []
        candidates = []
        for is_typed, piece in [*((False, run) for run in runs), *((True, stretch) for stretch in typed)]:
            while piece and self._is_filler(words[piece[0]]):
                piece = piece[1:]
            while piece and self._is_filler(words[piece[-1]]):
                piece = piece[:-1]
            if piece:
                distance = min((abs(i - h) for i in piece for h in hits), default=0)
                candidates.append((not is_typed, distance, -len(piece), piece[0], piece))
        if not candidates:
            return sentence.strip()
        chosen = min(candidates)[-1]
        return " ".join(words[chosen[0] : chosen[-1] + 1]).strip(_EDGE_PUNCTUATION)

    @staticmethod
    def _is_filler(word: str) -> bool:
        bare = word.strip(_EDGE_PUNCTUATION).lower()
        return not bare or bare in _english_stopwords()


@functools.cache
def _english_stopwords() -> frozenset[str]:
    """bm25s' English stop words, imported when first needed (bm25s brings numba and scipy)."""
    from bm25s.stopwords import STOPWORDS_EN

    return frozenset(STOPWORDS_EN)


def _question_free_runs(words: list[str], marked: list[bool]) -> list[list[int]]:
    """Indices of the runs of words that are not question terms; a run also ends after ``, ; :``."""
    runs, current = [], []
    for i, word in enumerate(words):
        if not marked[i]:
            current.append(i)
        if marked[i] or word.endswith(_CLAUSE_END):
            runs.append(current)
            current = []
    return [run for run in [*runs, current] if run]


def _stretches(words: list[str], runs: list[list[int]], wanted) -> list[list[int]]:
    """Maximal stretches of consecutive words of the asked-for kind inside each run."""
    found = []
    for run in runs:
        stretch: list[int] = []
        for i in run:
            if wanted(words[i].strip(_EDGE_PUNCTUATION)):
                stretch.append(i)
            elif stretch:
                found.append(stretch)
                stretch = []
        if stretch:
            found.append(stretch)
    return found


_NUMBER_WORDS = frozenset(
    "one two three four five six seven eight nine ten eleven twelve twenty thirty forty fifty "
    "hundred thousand million billion trillion half dozen".split()
)
_NUMBER_QUESTION = re.compile(
    r"^\s*(how (many|much|long|old|far|large|big|tall|often)|when|what (year|percentage|decade|century|date))\b", re.I
)
_NAME_QUESTION = re.compile(r"^\s*(who|whom|whose|where|which (person|team|company|country|city))\b", re.I)


def _is_number(word: str) -> bool:
    return any(ch.isdigit() for ch in word) or word.lower() in _NUMBER_WORDS


def _is_name(word: str) -> bool:
    return word[:1].isupper()


def _expected_type(question: str):
    """A test for words of the answer type a question asks for: numbers (how many, when, what year)
    or capitalized names (who, where); ``None`` when the question does not say."""
    if _NUMBER_QUESTION.search(question):
        return _is_number
    if _NAME_QUESTION.search(question):
        return _is_name
    return None


class OpenAIGenerator(Generator):
    """Answers with an OpenAI-compatible chat model; ``prompt`` has ``{question}`` and ``{context}``;
    the other settings (``base_url``, ``model``, ``api_key_env``, ...) are :class:`ChatClient`'s."""

    settings_schema = OpenAISettings

    def __init__(self, **values):
        """``no_answer``: the reply that abstains, given to the prompt as ``{no_answer}``."""
        super().__init__()
        settings = validated(self.settings_schema, values, "openai generator")
        check_template(settings.prompt, {"question", "context", "no_answer"}, "openai generator")
        if "{no_answer}" in settings.prompt and not settings.no_answer:
            raise RagtrackError("openai generator: the prompt uses {no_answer} but no_answer is not set")
        self.prompt, self.top_k, self.no_answer = settings.prompt, settings.top_k, settings.no_answer
        self.client = ChatClient(**settings.client_settings())

    def generate(self, queries: Mapping[str, str], contexts: Mapping[str, list[str]]) -> dict[str, str]:
        prompts = {
            qid: self.prompt.format(
                question=question,
                context=numbered_passages(contexts.get(qid, [])[: self.top_k]),
                no_answer=self.no_answer,
            )
            for qid, question in queries.items()
        }
        replies, self.failures = self.client.complete_all(prompts, label="generate")
        return {
            qid: self.no_answer if is_abstention(reply, self.no_answer) else reply.strip()
            for qid, reply in replies.items()
        }


@dataclass
class Answers:
    """One system's generated answers, the queries that failed and the no-answer string (if any)."""

    texts: dict[str, str]
    failures: dict[str, str]
    no_answer: str | None = None

    @property
    def efficiency(self) -> dict[str, float]:
        return {"generation_failures": float(len(self.failures))}

    def none_given(self) -> str:
        """Why no query has an answer ("" when one has): how many generations failed, how many answers
        came back empty."""
        if any(text.strip() for text in self.texts.values()):
            return ""
        empty = len(self.texts) - len(self.failures)
        return f"{len(self.failures)} of {len(self.texts)} generations failed" + (
            f", {empty} came back empty" if empty else ""
        )

    def annotate(self, per_query: pd.DataFrame, dataset: Dataset) -> pd.DataFrame:
        """The per-query table with question, gold answers (JSON list), answer and error in front, then
        ``answerable`` (1: gold answers, 0: an empty gold list, blank: not annotated; answer metrics count
        answerable queries only) and ``abstained`` (1 when the answer is the no-answer string)."""
        import pandas as pd

        qids = per_query.index
        text = pd.DataFrame(
            {
                "question": [dataset.queries.get(q, "") for q in qids],
                "gold_answers": [json.dumps(dataset.answers.get(q, []), ensure_ascii=False) for q in qids],
                "generated_answer": [self.texts.get(q, "") for q in qids],
                "generation_error": [self.failures.get(q, "") for q in qids],
                "answerable": pd.array(
                    [int(bool(dataset.answers[q])) if q in dataset.answers else None for q in qids], dtype="Int64"
                ),
                "abstained": [int(is_abstention(self.texts.get(q, ""), self.no_answer)) for q in qids],
            },
            index=qids,
        )
        return pd.concat([text, per_query], axis=1)


def answer_questions(generator: Generator | None, run: Run, dataset: Dataset, folder: Path) -> Answers | None:
    """Generate one system's answers from its run; ``None`` without a generator (``generator=none``).

    Writes ``folder/generation.json`` (``failed``, ``queries``, ``errors`` by query id) and logs a
    warning with the count when some queries failed; the sweep goes on either way.
    """
    if generator is None or isinstance(generator, NoGenerator):
        return None
    started = time.perf_counter()
    texts = generator.generate(
        dataset.queries, retrieved_passages(run, dataset.corpus, dataset.queries, generator.top_k)
    )
    answers = Answers(
        {qid: texts.get(qid, "") for qid in dataset.queries}, dict(generator.failures), generator.no_answer
    )
    folder.mkdir(parents=True, exist_ok=True)
    first_error = next((f"{qid}: {answers.failures[qid]}" for qid in dataset.queries if qid in answers.failures), "")
    report = {
        "system": run.name,
        "generator": type(generator).__name__,
        "queries": len(dataset.queries),
        "failed": len(answers.failures),
        "first_error": first_error,
        "seconds": time.perf_counter() - started,
        "errors": answers.failures,
    }
    write_atomically(folder / "generation.json", json_text(report, indent=2, ensure_ascii=False))
    if answers.failures:
        log.warning(
            "%s: answer generation failed for %d of %d queries (they score 0); first: %s; see %s",
            run.name,
            len(answers.failures),
            len(dataset.queries),
            first_error,
            folder / "generation.json",
        )
    return answers
