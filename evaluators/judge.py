"""LLM-as-judge: an OpenAI-compatible chat model grades each generated answer on YAML rubrics.

A rubric (``evaluators/rubrics/<name>.yaml``, or a user's file by path) has a ``name`` (metric
``judge_<name>``), a ``description`` (the question the judge answers), a ``scale`` (integer score ->
meaning, e.g. 1-5) and optional ``examples`` (``question``, ``context``, ``gold_answers``, ``answer``,
``score``, ``rationale``). Built-ins: correctness (agrees with the gold answers), faithfulness (supported
by the retrieved passages), relevance (addresses the question), coherence, fluency, completeness and
conciseness. One request per query grades every chosen rubric: the ``prompt`` of
``conf/evaluator/llm_judge.yaml`` gets ``{rubrics}`` (each rubric with its scale and examples),
``{reply_format}`` (the JSON the judge answers with), ``{question}``, ``{context}``, ``{gold_answers}``
and ``{answer}``. In the spirit of Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and Chatbot
Arena", NeurIPS 2023, and the RAGAS faithfulness idea (Es et al., 2023).

Replies are parsed leniently: a JSON object (also inside a code fence or surrounding prose) with one
number per criterion and an optional ``rationale``; otherwise text lines such as ``Correctness: 4`` or
``faithfulness = 5/5``; a bare ``Score: 4`` is accepted when only one criterion is asked. Where a reply
states a score more than once (it quotes the answer's own ``Correctness: 5`` before its verdict), the last
one is the judge's. A score must be a number on the rubric's scale. Queries whose request or reply fails (and queries without an answer) are left
out of the means and reported: a warning with the count and the first error, and ``judge.jsonl`` (per query: scores,
rationale, error) in the system's output folder, which is logged to MLflow with the system's run.
``human_labels`` (a file of people's labels, ``evaluators.human_labels``) adds the judge's agreement with
them and its PPI-corrected mean (``pipeline.execution.agreement``).
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np
from pydantic import Field

from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.files import json_text, read_yaml, write_atomically
from ragtrack.core.llm import (
    ChatClient,
    check_template,
    json_objects,
    last_match,
    numbered_passages,
    retrieved_passages,
)
from ragtrack.core.settings import ChatSettings, Count, InputPath, NameOrPath, Text, validated
from ragtrack.evaluators.base import EvalInput, Evaluator, EvaluatorSettings
from ragtrack.evaluators.human_labels import read_human_labels

if TYPE_CHECKING:
    import pandas as pd  # imported where a table is built: `ragtrack metrics` lists this without pandas

log = logging.getLogger(__name__)

RUBRICS_DIR = Path(__file__).parent / "rubrics"
BUILT_IN_RUBRICS = ("correctness", "faithfulness", "relevance", "coherence", "fluency", "completeness", "conciseness")
DEFAULT_RUBRICS = ("correctness", "faithfulness", "relevance")
EXAMPLE_FIELDS = ("question", "context", "gold_answers", "answer", "score", "rationale")


@dataclass(frozen=True)
class Rubric:
    """One judging criterion: ``judge_<name>`` scores on ``scale`` (score -> meaning)."""

    name: str
    description: str
    scale: dict[int, str]
    examples: list[dict] = field(default_factory=list)

    @property
    def bounds(self) -> tuple[int, int]:
        return min(self.scale), max(self.scale)

    def render(self) -> str:
        """The rubric as prompt text: description, the scale's meanings, then the examples."""
        low, high = self.bounds
        lines = [
            f"{self.name} ({low}-{high}): {self.description}",
            *(f"  {score} = {meaning}" for score, meaning in sorted(self.scale.items())),
        ]
        for example in self.examples:
            shown = "; ".join(
                f"{key.upper().replace('_', ' ')}: {json.dumps(example[key], ensure_ascii=False) if key == 'gold_answers' else example[key]}"
                for key in ("question", "context", "gold_answers", "answer")
                if key in example
            )
            because = f" ({example['rationale']})" if example.get("rationale") else ""
            lines.append(f"  example: {shown} -> {self.name} {example['score']}{because}")
        return "\n".join(lines)


def load_rubric(spec: str) -> Rubric:
    """A built-in rubric by name (``correctness``) or a rubric YAML file by path; :class:`InputError`
    names the file and what is wrong."""
    if spec in BUILT_IN_RUBRICS:
        return _built_in_rubric(spec)
    if not (spec.endswith((".yaml", ".yml")) or "/" in spec):
        raise RagtrackError(
            f"llm_judge: unknown rubric {spec!r}; built-in: {', '.join(BUILT_IN_RUBRICS)}, or give a YAML file's path"
        )
    return _read_rubric(Path(spec).expanduser())


@functools.cache
def _built_in_rubric(name: str) -> Rubric:
    """Read once per process: the built-ins are package data (every metric lookup lists them)."""
    return _read_rubric(RUBRICS_DIR / f"{name}.yaml")


def _read_rubric(path: Path) -> Rubric:
    return _checked_rubric(read_yaml(path, "rubric file"), path)


def _checked_rubric(loaded: object, path: Path) -> Rubric:
    if not isinstance(loaded, dict):
        raise InputError(path, "a rubric is a mapping with name, description, scale and examples")
    unknown = set(loaded) - {"name", "description", "scale", "examples"}
    if unknown:
        raise InputError(path, f"unknown rubric keys {sorted(unknown)}; allowed: name, description, scale, examples")
    name, description, scale = loaded.get("name"), loaded.get("description"), loaded.get("scale")
    if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise InputError(
            path, f"'name' must be lower-case letters, digits and _ (it names the metric judge_<name>), got {name!r}"
        )
    if not isinstance(description, str) or not description.strip():
        raise InputError(path, "'description' must be a non-empty string")
    if (
        not isinstance(scale, dict)
        or len(scale) < 2
        or not all(isinstance(k, int) and not isinstance(k, bool) and isinstance(v, str) for k, v in scale.items())
    ):
        raise InputError(
            path,
            "'scale' must map at least two integer scores to their meaning (text: quote yes, no, on, off), e.g. {1: wrong, 5: right}",
        )
    examples = loaded.get("examples") or []
    if not isinstance(examples, list):
        raise InputError(path, "'examples' must be a list")
    for number, example in enumerate(examples, start=1):
        if not isinstance(example, dict) or "answer" not in example or "score" not in example:
            raise InputError(path, f"example {number} needs at least 'answer' and 'score'")
        if set(example) - set(EXAMPLE_FIELDS):
            raise InputError(
                path,
                f"example {number} has unknown keys {sorted(set(example) - set(EXAMPLE_FIELDS))}; allowed: {', '.join(EXAMPLE_FIELDS)}",
            )
        if example["score"] not in scale:
            raise InputError(path, f"example {number}: score {example['score']!r} is not on the scale {sorted(scale)}")
    return Rubric(name, description.strip(), dict(scale), examples)


def reply_format(rubrics: Sequence[Rubric]) -> str:
    """The JSON object the judge is asked to reply with: one score per rubric and a rationale."""
    scores = ", ".join(f'"{r.name}": <{r.bounds[0]}-{r.bounds[1]}>' for r in rubrics)
    return f'{{{scores}, "rationale": "<one sentence>"}}'


_RATIONALE_KEYS = ("rationale", "reason", "reasoning", "explanation", "justification")


def _score(value: object, criterion: str, bounds: tuple[int, int] = (1, 5)) -> float:
    text = str(value).strip()
    match = re.fullmatch(rf"(\d+(?:\.\d+)?)\s*(?:/\s*{bounds[1]})?", text)
    if isinstance(value, bool) or match is None:
        raise ValueError(f"non-numeric {criterion} score {text[:40]!r}")
    score = float(match.group(1))
    if not bounds[0] <= score <= bounds[1]:
        raise ValueError(f"{criterion} score {score:g} is outside {bounds[0]}-{bounds[1]}")
    return score


def _json_object(reply: str, criteria: Sequence[str]) -> dict | None:
    """The last JSON object of the reply that names a criterion (or holds ``scores`` or ``score``), keys
    lower-cased: the judge's own verdict, after any it quotes."""
    for found in reversed(json_objects(reply)):
        lowered = {str(k).strip().lower(): v for k, v in found.items()}
        if lowered.keys() & {*criteria, "scores", "score"}:
            return lowered
    return None


def parse_judgement(
    reply: str, criteria: Sequence[str], bounds: dict[str, tuple[int, int]] | None = None
) -> tuple[dict[str, float], str]:
    """Scores by criterion and the rationale from a judge's reply; ``bounds``: each criterion's scale
    (default 1-5); ``ValueError`` says what is wrong."""
    bounds = {c: (bounds or {}).get(c, (1, 5)) for c in criteria}
    found = _json_object(reply, criteria)
    if found is not None:
        nested = found.get("scores")
        scores_source = {str(k).lower(): v for k, v in nested.items()} if isinstance(nested, dict) else found
        if len(criteria) == 1 and criteria[0] not in scores_source and "score" in scores_source:
            scores_source = {criteria[0]: scores_source["score"]}
        missing = [c for c in criteria if c not in scores_source]
        if missing:
            raise ValueError(f"JSON reply has no {', '.join(missing)} score")
        rationale = next((str(found[k]) for k in _RATIONALE_KEYS if k in found), "")
        return {c: _score(scores_source[c], c, bounds[c]) for c in criteria}, rationale
    scores = {}
    for criterion in criteria:
        labels = f"{criterion}|score" if len(criteria) == 1 else criterion
        match = last_match(
            re.compile(rf"\b(?:{labels})\b[*_\s]*(?:score)?[*_\s]*[:=\-]\s*[*_]*\s*([^\s*_,;]+)", re.IGNORECASE), reply
        )
        if match is None:
            raise ValueError(f"no {criterion} score in the reply {' '.join(reply.split())[:80]!r}")
        scores[criterion] = _score(match.group(1).rstrip("."), criterion, bounds[criterion])
    rationale = re.search(rf"\b(?:{'|'.join(_RATIONALE_KEYS)})\b\s*[:=]\s*(.+)", reply, re.IGNORECASE | re.DOTALL)
    return scores, rationale.group(1).strip() if rationale else ""


class JudgeSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    """An LLM judge with rubrics."""

    parameters: dict[str, Any] = {"temperature": 0.0, "max_tokens": 256}
    system_prompt: str | None = "You are a strict grader of answers to reading-comprehension questions."

    rubrics: Annotated[list[NameOrPath], Field(min_length=1)] | None = None
    top_k: Count = 3
    output_dir: Text | None = None
    human_labels: InputPath | None = Field(
        None,
        description="a .jsonl or .tsv file of people's labels (qid, system, criterion, label): "
        "the judge's agreement with them and the PPI-corrected mean",
    )


class LLMJudge(Evaluator):
    """Grades generated answers with a chat model on rubrics (module docstring); needs generated answers."""

    settings_schema = JudgeSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {f"judge_{name}": f"LLM judge, {load_rubric(name).description}" for name in BUILT_IN_RUBRICS}

    def __init__(self, **values):
        """``values``: :class:`JudgeSettings`. ``rubrics``: built-in names or YAML paths (default: the
        ``judge_<name>`` of ``metrics``, else correctness, faithfulness, relevance); ``human_labels``: a
        labels file (``evaluators.human_labels``), read here, so a defect stops the job before any work;
        the chat keys (``base_url``, ``model``, ``api_key_env``, ...) are the :class:`ChatClient`'s."""
        settings = validated(self.settings_schema, values, "llm_judge")
        metrics = settings.metrics or []
        specs = list(settings.rubrics or [m.removeprefix("judge_") for m in metrics] or DEFAULT_RUBRICS)
        self.rubrics = [load_rubric(str(spec)) for spec in specs]
        names = [r.name for r in self.rubrics]
        if len(set(names)) < len(names):
            raise RagtrackError(f"llm_judge: two rubrics share a name: {names}")
        super().__init__([f"judge_{name}" for name in names])
        unknown = [m for m in metrics if m not in self.metrics]
        if unknown:
            raise RagtrackError(f"llm_judge: metrics {unknown} have no rubric; rubrics give {', '.join(self.metrics)}")
        self.criteria = names
        check_template(
            settings.prompt, {"question", "context", "gold_answers", "answer", "rubrics", "reply_format"}, "llm_judge"
        )
        self.prompt, self.top_k, self.output_dir = settings.prompt, settings.top_k, settings.output_dir
        self.human_labels = (
            read_human_labels(settings.human_labels, {r.name: sorted(r.scale) for r in self.rubrics}, "system")
            if settings.human_labels
            else None
        )
        self.client = ChatClient(**settings.client_settings())

    def applies_to(self, data: EvalInput) -> bool:
        return (
            bool(data.generated) and data.corpus is not None
        )  # answers were asked for: blank where none came (generation failed)

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        return per_query.notna().all(axis=1)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        import pandas as pd

        qids = list(data.queries)
        answered = [qid for qid in qids if data.generated.get(qid, "").strip()]
        passages = retrieved_passages(data.context, data.corpus, answered, self.top_k)
        rubrics, format_ = "\n\n".join(r.render() for r in self.rubrics), reply_format(self.rubrics)
        prompts = {
            qid: self.prompt.format(
                question=data.queries[qid],
                context=numbered_passages(passages[qid]),
                gold_answers=json.dumps(data.answers.get(qid, []), ensure_ascii=False),
                answer=data.generated[qid],
                rubrics=rubrics,
                reply_format=format_,
            )
            for qid in answered
        }
        replies, errors = self.client.complete_all(prompts, label=f"judge {data.run.name}")
        errors |= {qid: "no generated answer" for qid in qids if qid not in prompts}
        bounds = {r.name: r.bounds for r in self.rubrics}
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        records = []
        for qid in qids:
            record = {"qid": qid, **{c: None for c in self.criteria}, "rationale": "", "error": errors.get(qid, "")}
            if qid in replies:
                try:
                    scores, record["rationale"] = parse_judgement(replies[qid], self.criteria, bounds)
                except ValueError as exc:
                    record["error"] = f"unparseable reply: {exc}"
                else:
                    record |= scores
                    table.loc[qid, self.metrics] = [scores[c] for c in self.criteria]
            records.append(record)
        failed = [r for r in records if r["error"]]
        if failed:
            log.warning(
                "llm_judge %s: %d of %d queries not judged (left out of the means); first: %s: %s",
                data.run.name,
                len(failed),
                len(qids),
                failed[0]["qid"],
                failed[0]["error"],
            )
        if self.output_dir:
            lines = "".join(json_text(r, ensure_ascii=False) + "\n" for r in records)
            write_atomically(Path(self.output_dir) / "systems" / data.run.name / "judge.jsonl", lines)
        return table
