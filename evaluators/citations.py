"""Citation quality of generated answers: does each cited passage support its sentence, and does each
sentence carry citations that support it. Definitions of ALCE (Gao et al., "Enabling Large Language
Models to Generate Text with Citations", EMNLP 2023, and its ``eval.py``).

A generator cites passages by their numbers in ``{context}`` (``[1] text``, ``[2] text``, ... - the
top-``top_k`` of the ranking it read): ``[1]``, ``[1, 3]`` or ``[1][3]``. The answer is split into
sentences (at line breaks, and after ``.!?`` plus any citation markers right after them, followed by
white space); a sentence's statement is its text without the markers, and a sentence whose statement
has no word token (SQuAD-normalized) is dropped. A sentence's citations C are its distinct numbers,
the first ``max_citations`` of them (ALCE's ``at_most_citations``, default 3). φ(P, s) says whether the
passages P, joined, support the statement s.

- ``citation_recall`` = |{s : C_s ≠ ∅, every number in range, φ(C_s, s)}| / |sentences|: the share
  of sentences fully supported by their citations (a sentence without citations scores 0; each
  sentence counts as needing support, as in ALCE).
- ``citation_precision`` = Σ_s Σ_{c ∈ C_s} prec(c, s) / Σ_s |C_s| over the sentences whose numbers
  are all in range; prec(c, s) = 1 when φ(C_s, s) holds and c is not *irrelevant*, where c is
  irrelevant when φ({c}, s) fails while φ(C_s \\ {c}, s) holds (with one citation: prec = φ(C_s, s)).
  An answer without citations scores 0, as in ALCE's code.

A sentence citing a number outside 1..(passages shown) is unsupported and its citations do not enter
the precision's denominator (ALCE's code). Two ways to decide φ (``mode``):

- ``lexical`` (no model): φ(P, s) = |tokens(s) ∩ tokens(P)| / |tokens(s)| ≥ ``support_threshold``,
  the token overlap of the ``faithfulness`` evaluator's ``sentence_support``; an entailment-free
  baseline: shared words, not meaning.
- ``llm``: an OpenAI-compatible chat model answers yes or no to ``prompt`` (``{question}``,
  ``{passages}``: the cited passages with their numbers, ``{statement}``). The checks are asked in up
  to three rounds (joint, then single passages of multi-cited supported sentences, then the rest
  without one), so no check ALCE would skip is sent.

Answers that abstain (equal to ``no_answer``) or have no sentence are not applicable (NaN). A query
whose request fails or whose reply is neither yes nor no is left out of the means and reported: a
warning with the count and the first error, and ``citations.jsonl`` (per query: the statements, their
citations and support, both scores, the error) in the system's output folder.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Literal

import numpy as np
from pydantic import Field, Strict, field_validator, model_validator

from ragtrack.core.errors import RagtrackError
from ragtrack.core.llm import (
    CITATION_MARKER,
    NOT_SENT,
    ChatClient,
    check_template,
    is_abstention,
    json_objects,
    last_match,
    retrieved_passages,
    without_citations,
)
from ragtrack.core.settings import LOCAL_ENDPOINT, ChatSettings, Count, HttpURL, Text, validated
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings
from ragtrack.evaluators.faithfulness import covered, tokens
from ragtrack.evaluators.replies import read_replies, report

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack metrics` lists this without pandas

PROMPT_FIELDS = {"question", "passages", "statement"}
_SENTENCE = re.compile(r"\S.*?(?:[.!?]+(?:\s*\[\s*\d+(?:\s*,\s*\d+)*\s*\])*(?=\s|$)|$)")

Check = tuple[tuple[int, ...], str]  # (passage numbers, statement): does the join of those passages support it?


@dataclass(frozen=True)
class Statement:
    """One sentence of an answer: its text without citation markers, its citations (distinct, at most
    ``max_citations``) and whether it cites a number outside the passages shown."""

    text: str
    citations: tuple[int, ...]
    out_of_range: bool = False


def cited_statements(answer: str, passages: int, max_citations: int = 3) -> list[Statement]:
    """The answer's sentences with their citations (module docstring); ``passages``: how many were shown."""
    found = []
    for line in answer.splitlines():
        for sentence in _SENTENCE.findall(line):
            numbers = [int(n) for marker in CITATION_MARKER.findall(sentence) for n in re.findall(r"\d+", marker)]
            text = " ".join(without_citations(sentence).split())
            if tokens(text):
                cited = tuple(dict.fromkeys(numbers))
                found.append(Statement(text, cited[:max_citations], any(not 1 <= n <= passages for n in cited)))
    return found


@dataclass
class Outcome:
    """ALCE's scores of one answer and, per statement, whether its citations support it and which of
    its citations count as precise."""

    recall: float
    precision: float
    details: list[dict]


def alce_scores(statements: Sequence[Statement], known: Mapping[Check, bool]) -> tuple[Outcome | None, set[Check]]:
    """ALCE citation recall and precision of one answer from the support checks in ``known``; when a
    check the definition needs is not there yet, ``(None, the checks missing)`` - ask them, then call
    again (at most three rounds: each round's checks depend on the previous round's answers)."""
    missing: set[Check] = set()
    supported_sentences, precise_total, citations_total, details = 0, 0, 0, []
    for statement in statements:
        cited, text = statement.citations, statement.text
        detail = {
            "statement": text,
            "citations": list(cited),
            "out_of_range": statement.out_of_range,
            "supported": False,
            "precise": [],
        }
        details.append(detail)
        if not cited or statement.out_of_range:
            continue
        citations_total += len(cited)
        joint = known.get((cited, text))
        if joint is None:
            missing.add((cited, text))
            continue
        detail["supported"] = joint
        supported_sentences += joint
        if not joint:
            continue
        for citation in cited:
            if len(cited) > 1:
                alone = known.get(((citation,), text))
                rest = tuple(c for c in cited if c != citation)
                if alone is None or (not alone and (rest, text) not in known):
                    missing.add(((citation,), text) if alone is None else (rest, text))
                    continue
                if not alone and known[(rest, text)]:
                    continue  # irrelevant: it does not support the statement, the others do without it
            detail["precise"].append(citation)
            precise_total += 1
    if missing:
        return None, missing
    precision = precise_total / citations_total if citations_total else 0.0
    return Outcome(supported_sentences / len(statements), precision, details), set()


_YES = {"yes", "true", "supported", "support", "entailed", "1"}
_NO = {"no", "false", "unsupported", "not_supported", "not_support", "not", "0"}
_VERDICT = re.compile(r"\b(?:supported|support|answer|verdict|label)\b[*_\s]*[:=]\s*[*_\"']*\s*(\w+)", re.IGNORECASE)


def parse_support(reply: str) -> bool:
    """A yes/no verdict: the last JSON ``{"supported": true}`` (or ``"yes"``), else the last line
    ``Supported: no``, else a reply starting with yes / no (true, false, supported, not supported); ``ValueError`` otherwise."""
    text = reply.strip()
    for found in reversed(json_objects(text)):  # the last: its own verdict, after any it quotes
        value = next(
            (v for k, v in found.items() if str(k).lower() in ("supported", "support", "answer", "verdict", "label")),
            None,
        )
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and _word(value) in _YES | _NO:
            return _word(value) in _YES
    line = last_match(_VERDICT, text)
    first = _word(line.group(1) if line else text)
    if first == "not" and re.match(r"\W*not\s+support", text, re.IGNORECASE):
        return False
    if first in _YES | _NO:
        return first in _YES
    raise ValueError(f"no yes/no verdict in the reply {' '.join(text.split())[:80]!r}")


def _word(text: str) -> str:
    words = re.findall(r"[a-z0-9_]+", text.strip().lower().replace("not supported", "not_supported"))
    return words[0] if words else ""


SUPPORT_PROMPT = """\
Do the PASSAGES support the STATEMENT? A statement is supported when everything it says follows
from the passages; it is not supported when any part of it is missing from them or contradicts them.

QUESTION: {question}
PASSAGES:
{passages}

STATEMENT: {statement}

Reply with one word: yes or no."""  # llm mode: the chat model's question per statement and passages


class CitationSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    """Citation recall and precision (ALCE), judged lexically or by a chat model; the endpoint's keys
    (``base_url``, ``model``, ``prompt``, ...) serve ``llm`` mode only."""

    mode: Literal["lexical", "llm"] = "lexical"
    base_url: HttpURL | None = LOCAL_ENDPOINT
    model: Text | None = None
    prompt: Text | None = SUPPORT_PROMPT
    top_k: Count = 3
    max_citations: Count = 3
    support_threshold: Annotated[float, Strict(), Field(gt=0, le=1)] = 0.5
    no_answer: Text | None = None
    output_dir: Text | None = None
    parameters: dict[str, Any] = {"temperature": 0.0, "max_tokens": 8}
    system_prompt: str | None = "You check whether passages support a statement."

    @field_validator("prompt")
    @classmethod
    def _fields_known(cls, prompt: str | None) -> str | None:
        try:
            check_template(prompt or "", PROMPT_FIELDS, "citations")
        except RagtrackError as exc:
            raise ValueError(str(exc)) from None
        return prompt

    @model_validator(mode="after")
    def _endpoint_for_llm_mode(self) -> "CitationSettings":
        if self.mode != "llm":
            return self
        missing = [key for key in ("base_url", "model") if not getattr(self, key)]
        if missing:
            raise ValueError(f"llm mode needs {' and '.join(missing)}: give evaluator.citations.{missing[0]}")
        if not all(f"{{{name}}}" in (self.prompt or "") for name in ("passages", "statement")):
            raise ValueError("llm mode needs a prompt that shows {passages} and {statement}")
        return self


class CitationEvaluator(Evaluator):
    """ALCE citation recall and precision of generated answers (module docstring)."""

    settings_schema = CitationSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "citation_recall": "share of answer sentences whose citations support them (ALCE, Gao et al. 2023)",
            "citation_precision": "share of citations that support their sentence and are not irrelevant (ALCE, Gao et al. 2023)",
        }

    def __init__(self, **values):
        """Built from its validated settings (:class:`CitationSettings`); a chat client in ``llm`` mode only."""
        settings = validated(self.settings_schema, values, "citations evaluator")
        super().__init__(settings.metrics)
        self._require_known_metrics("citations evaluator")
        self.prompt, self.mode, self.top_k, self.max_citations = (
            settings.prompt,
            settings.mode,
            settings.top_k,
            settings.max_citations,
        )
        self.support_threshold, self.no_answer, self.output_dir = (
            settings.support_threshold,
            settings.no_answer,
            settings.output_dir,
        )
        self.client = ChatClient(**settings.client_settings()) if settings.mode == "llm" else None
        self._followups = (
            0  # a dry run: the most checks the last evaluate would have asked after the replies it did not get
        )

    def unsent_followups(self) -> int:
        return self._followups

    def applies_to(self, data: EvalInput) -> bool:
        return (
            bool(data.generated) and data.corpus is not None
        )  # answers were asked for: blank where none came (generation failed)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        import pandas as pd

        qids = list(data.queries)
        records = {
            qid: {
                "qid": qid,
                "citation_recall": None,
                "citation_precision": None,
                "statements": [],
                "skipped": "",
                "error": "",
            }
            for qid in qids
        }
        answered = [qid for qid in qids if data.generated.get(qid, "").strip()]
        passages = retrieved_passages(data.context, data.corpus, answered, self.top_k, full=True)
        statements = {}
        for qid in qids:
            answer = data.generated.get(qid, "")
            if qid not in passages:
                records[qid]["error"] = "no generated answer"
            elif is_abstention(answer, self.no_answer):
                records[qid]["skipped"] = "abstained"
            elif not (found := cited_statements(answer, len(passages[qid]), self.max_citations)):
                records[qid]["skipped"] = "no sentence"
            else:
                statements[qid] = found
        known: dict[str, dict[Check, bool]] = {qid: {} for qid in statements}
        self._followups, found_statements = 0, dict(statements)
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        while statements:
            pending = {}
            for qid, found in statements.items():
                outcome, missing = alce_scores(found, known[qid])
                if outcome is None:
                    pending[qid] = missing
                    continue
                records[qid] |= {
                    "citation_recall": outcome.recall,
                    "citation_precision": outcome.precision,
                    "statements": outcome.details,
                }
                table.loc[qid, self.metrics] = [records[qid][m] for m in self.metrics]
            statements = {qid: statements[qid] for qid in pending}
            if not pending:
                break
            answers, errors = self._supports(pending, passages, data.queries, data.run.name)
            for qid, error in errors.items():
                records[qid]["error"] = error
                del statements[qid]
                if (
                    error == NOT_SENT
                ):  # a dry run: at most a single-passage and a leave-one-out check per citation follow
                    self._followups += sum(
                        2 * len(s.citations)
                        for s in found_statements[qid]
                        if len(s.citations) > 1 and not s.out_of_range
                    )
            for qid in statements:
                known[qid] |= answers[qid]
        report("citations", data.run.name, list(records.values()), self.output_dir, "citations.jsonl")
        return table

    def _supports(
        self,
        pending: Mapping[str, set[Check]],
        passages: Mapping[str, list[str]],
        questions: Mapping[str, str],
        system: str,
    ) -> tuple[dict[str, dict[Check, bool]], dict[str, str]]:
        """φ for each query's pending checks, and the first error of each query whose checks failed."""

        def shown(qid: str, numbers: tuple[int, ...], numbered: bool) -> str:
            return "\n".join(f"[{n}] {passages[qid][n - 1]}" if numbered else passages[qid][n - 1] for n in numbers)

        found: dict[str, dict[Check, bool]] = {qid: {} for qid in pending}
        if self.client is None:
            for qid, checks in pending.items():
                for numbers, text in sorted(checks):
                    found[qid][(numbers, text)] = (
                        covered(tokens(text), tokens(shown(qid, numbers, False))) >= self.support_threshold
                    )
            return found, {}
        asked = {(qid, i): (qid, check) for qid, checks in pending.items() for i, check in enumerate(sorted(checks))}
        prompts = {
            key: self.prompt.format(
                question=questions.get(qid, ""), passages=shown(qid, check[0], True), statement=check[1]
            )
            for key, (qid, check) in asked.items()
        }
        replies, failures = self.client.complete_all(prompts, label=f"citations {system}")

        def accept(item: tuple[str, Check], reply: str) -> None:
            found[item[0]][item[1]] = parse_support(reply)

        return found, read_replies(asked, replies, failures, accept)
