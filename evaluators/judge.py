"""LLM-as-judge: an OpenAI-compatible chat model grades each generated answer on a 1-5 rubric.

Criteria (metric ``judge_<criterion>``): ``correctness`` (agrees with the gold answers), ``faithfulness``
(supported by the retrieved passages), ``relevance`` (addresses the question) - the rubric is the
prompt in ``conf/evaluator/llm_judge.yaml`` (fields ``{question}``, ``{context}``, ``{gold_answers}``,
``{answer}``). In the spirit of Zheng et al., "Judging LLM-as-a-Judge with MT-Bench and Chatbot
Arena", NeurIPS 2023, and the RAGAS faithfulness idea (Es et al., 2023).

Replies are parsed leniently: a JSON object (also inside a code fence or surrounding prose) with one
number per criterion and an optional ``rationale``; otherwise text lines such as ``Correctness: 4`` or
``faithfulness = 5/5``; a bare ``Score: 4`` is accepted when only one criterion is asked. A score must
be a number from 1 to 5. Queries whose request or reply fails (and queries without an answer) are left
out of the means and reported: a warning with the count, and ``judge.jsonl`` (per query: scores,
rationale, error) in the system's output folder, which is logged to MLflow with the system's run.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ragtrack.evaluators.base import EvalInput, Evaluator
from ragtrack.core.llm import ChatClient, check_template, numbered_passages, retrieved_passages
from ragtrack.core.files import write_atomically

log = logging.getLogger(__name__)

CRITERIA = {
    "correctness": "LLM judge, 1-5: the answer agrees with the gold answers",
    "faithfulness": "LLM judge, 1-5: the answer is supported by the retrieved passages",
    "relevance": "LLM judge, 1-5: the answer addresses the question",
}
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.DOTALL | re.IGNORECASE)
_OBJECT = re.compile(r"\{.*\}", re.DOTALL)
_RATIONALE_KEYS = ("rationale", "reason", "reasoning", "explanation", "justification")


def _score(value: object, criterion: str) -> float:
    text = str(value).strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*(?:/\s*5)?", text)
    if isinstance(value, bool) or match is None:
        raise ValueError(f"non-numeric {criterion} score {text[:40]!r}")
    score = float(match.group(1))
    if not 1 <= score <= 5:
        raise ValueError(f"{criterion} score {score:g} is outside 1-5")
    return score


def _json_object(reply: str) -> dict | None:
    for candidate in [*_FENCE.findall(reply), reply, *_OBJECT.findall(reply)]:
        try:
            parsed = json.loads(candidate.strip())
        except ValueError:
            continue
        if isinstance(parsed, dict):
            return {str(k).strip().lower(): v for k, v in parsed.items()}
    return None


def parse_judgement(reply: str, criteria: Sequence[str]) -> tuple[dict[str, float], str]:
    """Scores by criterion and the rationale from a judge's reply; ``ValueError`` says what is wrong."""
    found = _json_object(reply)
    if found is not None:
        nested = found.get("scores")
        scores_source = {str(k).lower(): v for k, v in nested.items()} if isinstance(nested, dict) else found
        if len(criteria) == 1 and criteria[0] not in scores_source and "score" in scores_source:
            scores_source = {criteria[0]: scores_source["score"]}
        missing = [c for c in criteria if c not in scores_source]
        if missing:
            raise ValueError(f"JSON reply has no {', '.join(missing)} score")
        rationale = next((str(found[k]) for k in _RATIONALE_KEYS if k in found), "")
        return {c: _score(scores_source[c], c) for c in criteria}, rationale
    scores = {}
    for criterion in criteria:
        labels = f"{criterion}|score" if len(criteria) == 1 else criterion
        match = re.search(rf"\b(?:{labels})\b[*_\s]*(?:score)?[*_\s]*[:=\-]\s*[*_]*\s*([^\s*_,;]+)", reply, re.IGNORECASE)
        if match is None:
            raise ValueError(f"no {criterion} score in the reply {' '.join(reply.split())[:80]!r}")
        scores[criterion] = _score(match.group(1).rstrip("."), criterion)
    rationale = re.search(rf"\b(?:{'|'.join(_RATIONALE_KEYS)})\b\s*[:=]\s*(.+)", reply, re.IGNORECASE | re.DOTALL)
    return scores, rationale.group(1).strip() if rationale else ""


class LLMJudge(Evaluator):
    """Grades generated answers with a chat model (module docstring); needs generated answers."""

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {f"judge_{name}": description for name, description in CRITERIA.items()}

    def __init__(self, prompt: str, metrics: Sequence[str] | None = None, top_k: int = 3, output_dir: str | None = None, **client):
        """``client``: the :class:`ChatClient` settings (``base_url``, ``model``, ``api_key_env``, ...)."""
        super().__init__(metrics)
        self._require_known_metrics("llm_judge")
        self.criteria = [m.removeprefix("judge_") for m in self.metrics]
        check_template(prompt, {"question", "context", "gold_answers", "answer"}, "llm_judge")
        self.prompt, self.top_k, self.output_dir = prompt, int(top_k), output_dir
        self.client = ChatClient(**client)

    def applies_to(self, data: EvalInput) -> bool:
        return any(answer.strip() for answer in data.generated.values()) and data.corpus is not None

    def counted(self, data: EvalInput, per_query: pd.DataFrame) -> pd.Series:
        return per_query.notna().all(axis=1)

    def evaluate(self, data: EvalInput) -> pd.DataFrame:
        qids = list(data.queries)
        answered = [qid for qid in qids if data.generated.get(qid, "").strip()]
        passages = retrieved_passages(data.context, data.corpus, answered, self.top_k)
        prompts = {qid: self.prompt.format(question=data.queries[qid], context=numbered_passages(passages[qid]),
                                           gold_answers=json.dumps(data.answers.get(qid, []), ensure_ascii=False),
                                           answer=data.generated[qid]) for qid in answered}
        replies, errors = self.client.complete_all(prompts, label=f"judge {data.run.name}")
        errors |= {qid: "no generated answer" for qid in qids if qid not in prompts}
        table = pd.DataFrame(np.nan, index=pd.Index(qids, name="qid"), columns=self.metrics, dtype=float)
        records = []
        for qid in qids:
            record = {"qid": qid, **{c: None for c in self.criteria}, "rationale": "", "error": errors.get(qid, "")}
            if qid in replies:
                try:
                    scores, record["rationale"] = parse_judgement(replies[qid], self.criteria)
                except ValueError as exc:
                    record["error"] = f"unparseable reply: {exc}"
                else:
                    record |= scores
                    table.loc[qid, self.metrics] = [scores[c] for c in self.criteria]
            records.append(record)
        failed = sum(1 for r in records if r["error"])
        if failed:
            log.warning("llm_judge %s: %d of %d queries not judged (left out of the means)", data.run.name, failed, len(qids))
        if self.output_dir:
            lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
            write_atomically(Path(self.output_dir) / "systems" / data.run.name / "judge.jsonl", lines)
        return table
