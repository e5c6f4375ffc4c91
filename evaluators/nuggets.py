"""Nugget evaluation of generated answers, as in the TREC 2024 RAG Track's AutoNuggetizer (Pradeep et
al., "Initial Nugget Evaluation Results for the TREC 2024 RAG Track with the AutoNuggetizer Framework",
arXiv:2411.09607, 2024).

1. **Create.** For each query with a generated answer (a query no system answered sends nothing), the texts (title and text) of its relevant documents - qrels grade
   ≥ ``relevance_threshold``, best grade first then by id, at most ``max_passages``, each cut to
   ``max_words`` words - go to the chat model ``passages_per_request`` at a time; each request updates
   the nugget list so far (at most ``max_nuggets`` short facts, the most important first), as the
   AutoNuggetizer iterates over windows of segments.
2. **Label importance.** The model labels each nugget ``vital`` or ``okay``, ``nuggets_per_request``
   nuggets per request.
3. **Assign.** For each system's answer, the model labels each nugget ``support``, ``partial_support``
   or ``not_support`` (``nuggets_per_request`` nuggets per request).

The nuggets are written to ``nuggets.jsonl`` in the job's output folder, one JSON object per line:
``{"qid": ..., "text": ..., "importance": "vital" | "okay"}``. Edit it and pass it back as
``nuggets_file``: creation is then skipped (no request is sent for steps 1 and 2). Replies are also
in the chat client's cache, so a rerun sends nothing.

Scores of one answer (the paper's nugget scores; s_i = 1 for support, 0.5 for partial_support, 0 for
not_support; the strict variants count support only):

- ``nugget_all`` = Σ_i s_i / |N| over all nuggets N of the query (the paper's A);
- ``nugget_all_strict`` = |{i : support}| / |N| (A_strict);
- ``nugget_vital`` = Σ_{i ∈ V} s_i / |V| over the vital nuggets V (V);
- ``nugget_vital_strict`` = |{i ∈ V : support}| / |V| (V_strict).

A system's score is the mean over queries. An answer whose query has no vital nugget scores 0 on the
two vital scores (and an empty nugget list 0 on all four), counted in the means, as the track's scorer
computes them (castorini/nuggetizer ``calculate_nugget_scores``). A query whose nuggets could not
be made (no relevant document, a failed request, an unreadable reply), or whose assignment failed, or
without an answer, is left out of the means and reported: a warning with the count and the first
error, and ``nugget_scores.jsonl`` (per query: each nugget with its importance and assignment, the
scores, the error) in the system's output folder.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import Field, field_validator

from ragtrack.core.data import Corpus
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import read_json_objects, read_yaml, write_atomically
from ragtrack.core.llm import NOT_SENT, ChatClient, check_template, numbered_passages
from ragtrack.core.settings import ChatSettings, Count, InputPath, NonNegativeInt, Text, validated
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings
from ragtrack.evaluators.replies import read_replies, report, string_list

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack metrics` lists this without pandas

log = logging.getLogger(__name__)

PROMPTS_FILE = Path(__file__).parent / "prompts" / "nuggets.yaml"
PROMPT_FIELDS = {
    "create": {"question", "passages", "nuggets", "max_nuggets"},
    "importance": {"question", "nuggets", "count"},
    "assign": {"question", "answer", "nuggets", "count"},
}
PROMPT_NEEDS = {"create": {"passages", "nuggets"}, "importance": {"nuggets"}, "assign": {"answer", "nuggets"}}
NUGGETS_FILE = "nuggets.jsonl"
IMPORTANCE = ("vital", "okay")
SUPPORT = {"support": 1.0, "partial_support": 0.5, "not_support": 0.0}
_IMPORTANCE_WORDS = {"vital": "vital", "okay": "okay", "ok": "okay"}
_SUPPORT_WORDS = {
    "support": "support",
    "supported": "support",
    "full_support": "support",
    "fully_supported": "support",
    "partial_support": "partial_support",
    "partial": "partial_support",
    "partially_supported": "partial_support",
    "partial_supported": "partial_support",
    "not_support": "not_support",
    "not_supported": "not_support",
    "no_support": "not_support",
    "unsupported": "not_support",
    "none": "not_support",
}


@dataclass(frozen=True)
class Nugget:
    """One fact a good answer to a query contains; ``importance``: ``vital`` or ``okay``."""

    text: str
    importance: str


def nugget_scores(importance: Sequence[str], assignment: Sequence[str]) -> dict[str, float]:
    """The four TREC RAG 2024 scores of one answer (module docstring) from each nugget's importance and
    assignment; a score over no nugget (no vital one, or none at all) is 0, as the nuggetizer's."""
    value = np.array([SUPPORT[a] for a in assignment], dtype=float)
    strict = (value == 1.0).astype(float)
    vital = np.array([i == "vital" for i in importance], dtype=bool)
    return {
        "nugget_all": _mean_or_zero(value),
        "nugget_all_strict": _mean_or_zero(strict),
        "nugget_vital": _mean_or_zero(value[vital]),
        "nugget_vital_strict": _mean_or_zero(strict[vital]),
    }


def _mean_or_zero(values: np.ndarray) -> float:
    return float(values.mean()) if len(values) else 0.0


def load_prompts(path: str | None = None) -> dict[str, str]:
    """The three prompt templates (``create``, ``importance``, ``assign``) from a YAML file (default: the
    shipped one); :class:`InputError` names the file and what is wrong."""
    return _read_prompts(str(Path(path).expanduser()) if path else str(PROMPTS_FILE))


@functools.cache
def _read_prompts(path: str) -> dict[str, str]:
    where = Path(path)
    loaded = read_yaml(where, "nugget prompts file")
    if not isinstance(loaded, dict) or set(loaded) != set(PROMPT_FIELDS):
        found = sorted(map(str, loaded)) if isinstance(loaded, dict) else type(loaded).__name__
        raise InputError(
            where, f"nugget prompts are a mapping with exactly the keys create, importance, assign; found {found}"
        )
    for step, fields in PROMPT_FIELDS.items():
        template = loaded[step]
        if not isinstance(template, str) or not template.strip():
            raise InputError(where, f"{step!r} must be a non-empty text")
        try:
            check_template(template, fields, f"nugget prompt {step!r}")
        except RagtrackError as exc:
            raise InputError(where, str(exc)) from None
        named = {name for _, name, _, _ in string.Formatter().parse(template) if name}
        if PROMPT_NEEDS[step] - named:
            raise InputError(
                where,
                f"the {step!r} prompt must show {', '.join('{' + n + '}' for n in sorted(PROMPT_NEEDS[step] - named))}",
            )
    return dict(loaded)


def read_nuggets(path: str | Path) -> dict[str, list[Nugget]]:
    """Nuggets by query id from a JSON-lines file (``{"qid", "text", "importance"}`` per line), in file
    order; the first defect raises :class:`InputError` naming the file and line."""
    path = Path(path).expanduser()
    found: dict[str, list[Nugget]] = {}
    seen: dict[tuple[str, str], int] = {}
    for number, item in read_json_objects(path):
        if set(item) != {"qid", "text", "importance"}:
            wrong = sorted(set(item) - {"qid", "text", "importance"})
            problem = (
                f"unknown keys {wrong}"
                if wrong
                else f"missing {', '.join(sorted({'qid', 'text', 'importance'} - set(item)))}"
            )
            raise InputError(path, f"{problem}; a nugget has exactly qid, text and importance", number)
        qid, text, importance = item["qid"], item["text"], item["importance"]
        if not isinstance(qid, str) or not qid.strip():
            raise InputError(path, f"qid must be a non-empty string (quote numbers), got {qid!r}", number)
        if not isinstance(text, str) or not text.strip():
            raise InputError(path, f"text must be a non-empty string, got {text!r}", number)
        if importance not in IMPORTANCE:
            raise InputError(path, f"importance must be 'vital' or 'okay', got {importance!r}", number)
        text = " ".join(text.split())
        if (qid, text) in seen:
            raise InputError(path, f"duplicate nugget for query {qid!r} (first on line {seen[qid, text]})", number)
        seen[qid, text] = number
        found.setdefault(qid, []).append(Nugget(text, importance))
    if not found:
        raise InputError(path, "no nuggets: one JSON object per line with qid, text and importance")
    return found


def nuggets_text(nuggets: Mapping[str, Sequence[Nugget]]) -> str:
    """The nuggets file (:func:`read_nuggets` reads it back)."""
    return "".join(
        json.dumps({"qid": qid, "text": n.text, "importance": n.importance}, ensure_ascii=False) + "\n"
        for qid, found in nuggets.items()
        for n in found
    )


def _labels(reply: str, count: int, words: Mapping[str, str]) -> list[str]:
    """``count`` labels from a reply, each one of ``words`` (normalized: lower case, _ for spaces)."""
    labels = [words.get(re.sub(r"[\s\-]+", "_", label.strip().lower())) for label in string_list(reply)]
    if len(labels) != count:
        raise ValueError(f"{len(labels)} labels for {count} nuggets")
    if None in labels:
        wrong = string_list(reply)[labels.index(None)]
        raise ValueError(f"unknown label {wrong!r}; expected one of {', '.join(sorted(set(words.values())))}")
    return labels


class NuggetSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    """Nugget creation and assignment with a chat model (TREC RAG 2024 AutoNuggetizer)."""

    prompt: None = Field(None, description="not used: the nugget prompts are in `prompts`")
    prompts: InputPath | None = Field(
        None, description="a nugget prompts YAML file (create, importance, assign), or null for the shipped one"
    )
    nuggets_file: InputPath | None = Field(
        None, description="a nuggets JSON-lines file (qid, text, importance): skips creation"
    )
    relevance_threshold: NonNegativeInt = 1
    max_passages: Count = 20
    max_words: Count = 400
    passages_per_request: Count = 10
    max_nuggets: Count = 30
    nuggets_per_request: Count = 10
    output_dir: Text | None = None
    parameters: dict[str, Any] = {"temperature": 0.0, "max_tokens": 1024}
    system_prompt: str | None = "You are a careful assessor of answers to questions."

    @field_validator("prompt", mode="before")
    @classmethod
    def _no_prompt(cls, value: object) -> None:
        if value is not None:
            raise ValueError("'prompt' is not used; give a prompts YAML file as 'prompts'")
        return value


class NuggetEvaluator(Evaluator):
    """Nugget recall of generated answers, TREC RAG 2024 style (module docstring)."""

    settings_schema = NuggetSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "nugget_all": "mean nugget support over all nuggets, partial = 0.5 (TREC RAG 2024 A, Pradeep et al. 2024)",
            "nugget_all_strict": "share of all nuggets fully supported by the answer (TREC RAG 2024 A_strict)",
            "nugget_vital": "mean nugget support over the vital nuggets, partial = 0.5 (TREC RAG 2024 V)",
            "nugget_vital_strict": "share of the vital nuggets fully supported by the answer (TREC RAG 2024 V_strict)",
        }

    def __init__(self, **values):
        """``values``: :class:`NuggetSettings` (the chat keys, ``base_url``, ``model``, ..., are the
        :class:`ChatClient`'s; ``prompt`` is not used: the templates come from ``prompts``)."""
        settings = validated(self.settings_schema, values, "nuggets evaluator")
        super().__init__(settings.metrics)
        self._require_known_metrics("nuggets evaluator")
        self.prompts = load_prompts(settings.prompts)
        self.relevance_threshold, self.max_passages, self.max_words = (
            settings.relevance_threshold,
            settings.max_passages,
            settings.max_words,
        )
        self.passages_per_request, self.max_nuggets, self.nuggets_per_request = (
            settings.passages_per_request,
            settings.max_nuggets,
            settings.nuggets_per_request,
        )
        self.output_dir, self.nuggets_file = settings.output_dir, settings.nuggets_file
        self.client = ChatClient(**settings.client_settings())
        self.nuggets: dict[str, list[Nugget]] = read_nuggets(settings.nuggets_file) if settings.nuggets_file else {}
        self.creation_errors: dict[str, str] = {}
        self._given_used = False
        self._awaiting: set[str] = set()  # a dry run's queries whose nuggets wait on replies it did not send
        self._followups = 0  # the most requests the last evaluate would have sent after those replies

    def unsent_followups(self) -> int:
        return self._followups

    def applies_to(self, data: EvalInput) -> bool:
        return bool(data.generated) and (
            bool(self.nuggets_file) or data.corpus is not None
        )  # blank where no answer came

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        import pandas as pd

        qids = list(data.queries)
        self._followups = 0
        if self.nuggets_file:
            self._use_given(data)
        else:
            with_answer = [
                qid for qid in qids if data.generated.get(qid, "").strip()
            ]  # no answer, nothing to score: no nuggets asked for
            self._create(
                data, [qid for qid in with_answer if qid not in self.nuggets and qid not in self.creation_errors]
            )
        records = {qid: {"qid": qid, "nuggets": [], **{m: None for m in self.metrics}, "error": ""} for qid in qids}
        for qid in qids:
            nuggets = self.nuggets.get(qid, [])
            records[qid]["nuggets"] = [
                {"text": n.text, "importance": n.importance, "assignment": None} for n in nuggets
            ]
            if not data.generated.get(qid, "").strip():
                records[qid]["error"] = "no generated answer"
            elif not nuggets:
                records[qid]["error"] = (
                    f"no nuggets: {self.creation_errors.get(qid) or f'the query is not in {self.nuggets_file}'}"
                )
        answered = [qid for qid in qids if not records[qid]["error"]]
        per_answer = -(
            -self.max_nuggets // self.nuggets_per_request
        )  # assignment requests of at most max_nuggets nuggets
        self._followups += per_answer * sum(1 for qid in self._awaiting if data.generated.get(qid, "").strip())
        assigned, errors = self._ask(
            self.prompts["assign"],
            {qid: self.nuggets[qid] for qid in answered},
            _SUPPORT_WORDS,
            f"nuggets: assign {data.run.name}",
            data.queries,
            data.generated,
        )
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        for qid in answered:
            if qid in errors:
                records[qid]["error"] = errors[qid]
                continue
            for shown, label in zip(records[qid]["nuggets"], assigned[qid]):
                shown["assignment"] = label
            scores = nugget_scores([n.importance for n in self.nuggets[qid]], assigned[qid])
            records[qid] |= {m: scores[m] for m in self.metrics}
            table.loc[qid, self.metrics] = [scores[m] for m in self.metrics]
        report("nuggets", data.run.name, list(records.values()), self.output_dir, "nugget_scores.jsonl")
        return table

    def _use_given(self, data: EvalInput) -> None:
        """Once: copy the given nuggets into the output folder (the run keeps what it was scored with)
        and warn about queries of the file that the dataset lacks."""
        if self._given_used:
            return
        self._given_used = True
        if self.output_dir:
            write_atomically(Path(self.output_dir) / NUGGETS_FILE, nuggets_text(self.nuggets))
        unknown = [qid for qid in self.nuggets if qid not in data.queries]
        if unknown:
            log.warning(
                "nuggets: %d of the %d queries in %s are not in the dataset (e.g. %r); their nuggets are not used",
                len(unknown),
                len(self.nuggets),
                self.nuggets_file,
                unknown[0],
            )

    def _create(self, data: EvalInput, qids: list[str]) -> None:
        """Steps 1 and 2 for ``qids``: nuggets (or the reason there are none) by query, and the nuggets
        file in the output folder."""
        if not qids:
            return
        relevant = {
            qid: sorted(
                (doc for doc, grade in data.qrels.get(qid, {}).items() if grade >= self.relevance_threshold),
                key=lambda doc: (-data.qrels[qid][doc], doc),
            )[: self.max_passages]
            for qid in qids
        }
        texts = (
            _texts_of(data.corpus, {doc for docs in relevant.values() for doc in docs})
            if data.corpus is not None
            else {}
        )
        windows = {}
        for qid in qids:
            passages = [" ".join(texts[doc].split()[: self.max_words]) for doc in relevant[qid] if doc in texts]
            if not relevant[qid]:
                self.creation_errors[qid] = (
                    f"no relevant document (grade >= {self.relevance_threshold}) in the judgments"
                )
            elif not passages:
                self.creation_errors[qid] = (
                    f"none of its {len(relevant[qid])} relevant documents is in the evaluated corpus"
                )
            else:
                windows[qid] = [
                    passages[i : i + self.passages_per_request]
                    for i in range(0, len(passages), self.passages_per_request)
                ]
        current: dict[str, list[str]] = {qid: [] for qid in windows}
        for step in range(max(map(len, windows.values()), default=0)):
            asked = [qid for qid in current if step < len(windows[qid])]
            prompts = {
                qid: self.prompts["create"].format(
                    question=data.queries[qid],
                    passages=numbered_passages(windows[qid][step]),
                    nuggets=json.dumps(current[qid], ensure_ascii=False),
                    max_nuggets=self.max_nuggets,
                )
                for qid in asked
            }
            replies, failures = self.client.complete_all(prompts, label=f"nuggets: create ({step + 1})")
            for qid in asked:
                try:
                    if qid in failures:
                        raise ValueError(failures[qid])
                    found = dict.fromkeys(" ".join(text.split()) for text in string_list(replies[qid]))
                    current[qid] = [text for text in found if text][: self.max_nuggets]
                except ValueError as exc:
                    self.creation_errors[qid] = (
                        f"creation: {exc}" if qid in failures else f"creation: unparseable reply: {exc}"
                    )
                    del current[qid]
                    if failures.get(qid) == NOT_SENT:  # a dry run: the later windows and the importance requests follow
                        self._awaiting.add(qid)
                        self._followups += (
                            len(windows[qid]) - step - 1 + -(-self.max_nuggets // self.nuggets_per_request)
                        )
        for qid in [q for q in current if not current[q]]:
            self.creation_errors[qid] = "creation: the model proposed no nugget"
            del current[qid]
        labelled, errors = self._ask(
            self.prompts["importance"], current, _IMPORTANCE_WORDS, "nuggets: importance", data.queries
        )
        self.creation_errors |= {qid: f"importance: {error}" for qid, error in errors.items()}
        self._awaiting |= {qid for qid, error in errors.items() if error == NOT_SENT}
        self.nuggets |= {
            qid: [Nugget(text, label) for text, label in zip(current[qid], labelled[qid])]
            for qid in current
            if qid not in errors
        }
        failed = [qid for qid in qids if qid in self.creation_errors]
        if failed:
            log.warning(
                "nuggets: no nuggets for %d of %d queries; first: %s: %s",
                len(failed),
                len(qids),
                failed[0],
                self.creation_errors[failed[0]],
            )
        if self.output_dir:
            write_atomically(Path(self.output_dir) / NUGGETS_FILE, nuggets_text(self.nuggets))

    def _ask(
        self,
        template: str,
        nuggets: Mapping[str, Sequence[Nugget | str]],
        words: Mapping[str, str],
        label: str,
        questions: Mapping[str, str],
        answers: Mapping[str, str] | None = None,
    ) -> tuple[dict[str, list[str]], dict[str, str]]:
        """One label per nugget by query, asked ``nuggets_per_request`` nuggets at a time, and the first
        error of each query whose labels could not all be had."""
        asked = {}
        for qid, found in nuggets.items():
            texts = [n.text if isinstance(n, Nugget) else n for n in found]
            for start in range(0, len(texts), self.nuggets_per_request):
                window = texts[start : start + self.nuggets_per_request]
                fields = {
                    "question": questions[qid],
                    "nuggets": json.dumps(window, ensure_ascii=False),
                    "count": len(window),
                }
                asked[qid, start] = (
                    qid,
                    len(window),
                    template.format(**fields, **({"answer": answers[qid]} if answers else {})),
                )
        replies, failures = (
            self.client.complete_all({key: prompt for key, (_, _, prompt) in asked.items()}, label=label)
            if asked
            else ({}, {})
        )
        labels: dict[str, list[str]] = {qid: [] for qid in nuggets}

        def accept(item: tuple[str, int, str], reply: str) -> None:  # in nugget order within each query
            labels[item[0]] += _labels(reply, item[1], words)

        return labels, read_replies(asked, replies, failures, accept)


def _texts_of(corpus: Corpus, wanted: set[str]) -> dict[str, str]:
    """The full texts (title and text) of the ``wanted`` ids the corpus has; ids it lacks are left out
    (the documents of a chunked corpus judged per document are not among its chunks)."""
    column = corpus.full_texts()
    return {doc: column[position] for position, doc in enumerate(corpus.ids) if doc in wanted}
