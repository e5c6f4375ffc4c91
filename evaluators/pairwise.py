"""Pairwise LLM judge: which of two systems' answers to the same question is better, with position
swapping to cancel position bias.

For each query and pair of systems (a, b) the judge is asked twice, once with a's answer as ANSWER A
and b's as ANSWER B, once the other way round. A verdict (``A``, ``B`` or ``tie``) counts +1 for the
system in the preferred position, -1 for the other, 0 for a tie; a query's outcome for a is the sign of
the sum of both orders: a *win* when a is preferred in both orders or in one with a tie in the other,
a *loss* likewise for b, and a *tie* otherwise - so a judge that always picks the same position
gives ties only (MT-Bench's treatment of inconsistent verdicts; Zheng et al., NeurIPS 2023). Identical
answers (after collapsing white space) are a tie without asking.

Reported per pair: ``win_rate``, ``tie_rate`` and ``loss_rate`` of a against b over the judged queries,
each with a 95% Wilson score interval (scipy's ``binomtest(...).proportion_ci(method="wilson")``);
``position_consistency`` (share of judged queries whose two verdicts name the same system, or both tie)
and ``first_position_rate`` (share of non-tie verdicts that chose ANSWER A: 0.5 for an unbiased judge).
Queries whose request or reply fails are left out and counted in ``failed`` with the first error.

It compares systems, so it scores no single run: the experiment calls :meth:`PairwiseJudge.compare`
once every system has answered (``conf/evaluator/pairwise_judge.yaml``). ``human_labels`` (people's
verdicts, ``evaluators.human_labels``) adds the judge's agreement with them (``pipeline.execution.agreement``).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Annotated, Any

from pydantic import Field

from ragtrack.core.errors import RagtrackError
from ragtrack.core.files import json_text, write_atomically
from ragtrack.core.llm import ChatClient, check_template, json_objects, last_match
from ragtrack.core.settings import ChatSettings, InputPath, SystemName, Text, validated
from ragtrack.evaluators.base import EvaluatorSettings, SystemComparer
from ragtrack.evaluators.human_labels import OUTCOMES, read_human_labels
from ragtrack.evaluators.judge import load_rubric

log = logging.getLogger(__name__)

RATES = ("win_rate", "tie_rate", "loss_rate")
_VERDICT_WORDS = {"a": "A", "b": "B", "tie": "tie", "draw": "tie", "equal": "tie", "neither": "tie", "both": "tie"}
_VERDICT_LINE = re.compile(
    r"\b(?:winner|verdict|better|answer)\b[*_\s]*[:=\-]\s*[*_\[\"']*\s*(A|B|tie|draw|equal)\b", re.IGNORECASE
)
_BRACKETED = re.compile(r"\[\[\s*(A|B|tie|C)\s*\]\]", re.IGNORECASE)


def parse_verdict(reply: str) -> str:
    """``"A"``, ``"B"`` or ``"tie"`` from a judge's reply: the last JSON ``{"winner": ...}``, else the last
    ``[[A]]``, else the last line ``Winner: B``, else the bare word; ``ValueError`` otherwise."""
    text = reply.strip()
    for found in reversed(json_objects(text)):  # the last: its own verdict, after any it quotes
        value = next((v for k, v in found.items() if str(k).lower() in ("winner", "verdict", "better")), None)
        if isinstance(value, str) and value.strip().lower() in _VERDICT_WORDS:
            return _VERDICT_WORDS[value.strip().lower()]
    for pattern in (_BRACKETED, _VERDICT_LINE):
        match = last_match(pattern, text)
        if match:
            word = match.group(1).lower()
            return "tie" if word == "c" else _VERDICT_WORDS[word]
    bare = text.strip(" .\"'*`").lower()
    if bare in _VERDICT_WORDS:
        return _VERDICT_WORDS[bare]
    raise ValueError(f"no verdict (A, B or tie) in the reply {' '.join(text.split())[:80]!r}")


def wilson(successes: int, trials: int) -> tuple[float, float]:
    """95% Wilson score interval of a proportion (NaN without trials)."""
    if trials == 0:
        return float("nan"), float("nan")
    from scipy.stats import binomtest

    interval = binomtest(successes, trials).proportion_ci(confidence_level=0.95, method="wilson")
    return float(interval.low), float(interval.high)


class PairwiseJudgeSettings(EvaluatorSettings, ChatSettings, extra="forbid"):
    """An LLM judge comparing two systems' answers."""

    parameters: dict[str, Any] = {"temperature": 0.0, "max_tokens": 128}
    system_prompt: str | None = "You are an impartial judge of answers to reading-comprehension questions."

    baseline: SystemName | None = None
    pairs: (
        list[
            Annotated[
                list[SystemName],
                Field(min_length=2, max_length=2, description="a pair [first, second] of system names"),
            ]
        ]
        | None
    ) = None
    rubric: Text = "correctness"
    output_dir: Text | None = None
    human_labels: InputPath | None = Field(
        None,
        description="a .jsonl or .tsv file of people's verdicts (qid, pair, label win/tie/loss): "
        "the judge's agreement with them and PPI-corrected rates",
    )


class PairwiseJudge(SystemComparer):
    """Judges pairs of systems' answers with position swapping (module docstring)."""

    settings_schema = PairwiseJudgeSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "pairwise_win_rate": "pairwise LLM judge: share of queries where the first system's answer wins (both orders asked)",
            "pairwise_tie_rate": "pairwise LLM judge: share of ties (incl. verdicts that flip with the order)",
            "pairwise_loss_rate": "pairwise LLM judge: share of queries where the second system's answer wins",
        }

    def __init__(self, **values):
        """``values``: :class:`PairwiseJudgeSettings`. ``pairs``: ``[[a, b], ...]``; without them
        ``baseline`` (default: the first system that answers) against each other system. ``rubric``: a
        built-in name or YAML path; its description is ``{rubric}``. ``metrics``: the figures reported
        (default: all). ``human_labels``: a labels file (``evaluators.human_labels``), read here."""
        settings = validated(self.settings_schema, values, "pairwise_judge")
        super().__init__(list(settings.metrics or self.provides()))
        check_template(
            settings.prompt, {"question", "gold_answers", "answer_a", "answer_b", "rubric"}, "pairwise_judge"
        )
        self.prompt, self.criterion = settings.prompt, load_rubric(str(settings.rubric))
        self.baseline, self.output_dir = settings.baseline, settings.output_dir
        self.pairs = [tuple(map(str, pair)) for pair in settings.pairs or []]
        self.human_labels = (
            read_human_labels(settings.human_labels, {self.criterion.name: OUTCOMES}, "pair")
            if settings.human_labels
            else None
        )
        if any(pair[0] == pair[1] for pair in self.pairs):
            raise RagtrackError(
                f"pairwise_judge: pairs must be [first, second] of two different systems, got {[list(p) for p in self.pairs]}"
            )
        self.client = ChatClient(**settings.client_settings())

    def pairs_of(self, systems: Sequence[str]) -> list[tuple[str, str]]:
        """The pairs to judge among the systems that produced answers."""
        chosen = self.pairs or [
            (self.baseline or systems[0], other) for other in systems if other != (self.baseline or systems[0])
        ]
        unknown = sorted({name for pair in chosen for name in pair} - set(systems))
        if unknown:
            raise RagtrackError(
                f"pairwise_judge: systems {unknown} produced no answers; systems with answers: {', '.join(systems)}"
            )
        return chosen

    def compare(
        self, answers: Mapping[str, Mapping[str, str]], queries: Mapping[str, str], golds: Mapping[str, list[str]]
    ) -> dict[str, dict]:
        """Summary by pair (``"a vs b"``) of ``answers`` (system -> query id -> answer); writes
        ``pairwise.jsonl`` (one record per pair and query) to ``output_dir``."""
        return self.judge(answers, queries, golds)[0]

    def judge(
        self, answers: Mapping[str, Mapping[str, str]], queries: Mapping[str, str], golds: Mapping[str, list[str]]
    ) -> tuple[dict[str, dict], list[dict]]:
        """:meth:`compare`'s summaries and the records of ``pairwise.jsonl`` (``pair``, ``qid``, verdicts,
        ``outcome``: win / tie / loss of the first system, None where not judged)."""
        if len(answers) < 2:
            log.warning("pairwise_judge: fewer than two systems produced answers; nothing to compare")
            return {}, []
        summaries, records = {}, []
        for first, second in self.pairs_of(list(answers)):
            summary, pair_records = self._compare_pair(first, second, answers[first], answers[second], queries, golds)
            summaries[f"{first} vs {second}"] = summary
            records += pair_records
        if self.output_dir:
            write_atomically(
                Path(self.output_dir) / "pairwise.jsonl",
                "".join(json_text(r, ensure_ascii=False) + "\n" for r in records),
            )
        return summaries, records

    def _compare_pair(
        self,
        first: str,
        second: str,
        answers_a: Mapping[str, str],
        answers_b: Mapping[str, str],
        queries: Mapping[str, str],
        golds: Mapping[str, list[str]],
    ) -> tuple[dict, list[dict]]:
        same = {
            qid
            for qid in queries
            if " ".join(answers_a.get(qid, "").split()) == " ".join(answers_b.get(qid, "").split())
        }
        prompts = {}
        for qid in (q for q in queries if q not in same):
            a, b = answers_a.get(qid, "").strip() or "(no answer)", answers_b.get(qid, "").strip() or "(no answer)"
            fields = {
                "question": queries[qid],
                "gold_answers": json.dumps(golds.get(qid, []), ensure_ascii=False),
                "rubric": self.criterion.description,
            }
            prompts[(qid, "ab")] = self.prompt.format(**fields, answer_a=a, answer_b=b)
            prompts[(qid, "ba")] = self.prompt.format(**fields, answer_a=b, answer_b=a)
        replies, errors = self.client.complete_all(prompts, label=f"pairwise {first} vs {second}")
        records = []
        for qid in queries:
            record = {
                "pair": f"{first} vs {second}",
                "qid": qid,
                "order_ab": None,
                "order_ba": None,
                "outcome": None,
                "error": "",
            }
            if qid in same:
                record["outcome"] = "tie"
            else:
                try:
                    record["order_ab"], record["order_ba"] = (
                        self._verdict(replies, errors, (qid, order)) for order in ("ab", "ba")
                    )
                except ValueError as exc:
                    record["error"] = str(exc)
                else:
                    preference = {"A": 1, "tie": 0, "B": -1}
                    total = preference[record["order_ab"]] - preference[record["order_ba"]]
                    record["outcome"] = "win" if total > 0 else "loss" if total < 0 else "tie"
            records.append(record)
        return self._summary(records, first, second), records

    @staticmethod
    def _verdict(replies: Mapping, errors: Mapping, key: tuple[str, str]) -> str:
        if key in errors:
            raise ValueError(f"order {key[1]}: {errors[key]}")
        try:
            return parse_verdict(replies[key])
        except ValueError as exc:
            raise ValueError(f"order {key[1]}: unparseable reply: {exc}") from None

    @staticmethod
    def _summary(records: list[dict], first: str, second: str) -> dict:
        judged = [r for r in records if r["outcome"] is not None]
        asked = [r for r in judged if r["order_ab"] is not None]
        n = len(judged)
        counts = {
            "win_rate": sum(r["outcome"] == "win" for r in judged),
            "tie_rate": sum(r["outcome"] == "tie" for r in judged),
            "loss_rate": sum(r["outcome"] == "loss" for r in judged),
        }
        summary: dict = {
            "first": first,
            "second": second,
            "judged": n,
            "wins": counts["win_rate"],
            "ties": counts["tie_rate"],
            "losses": counts["loss_rate"],
        }
        for rate, count in counts.items():
            low, high = wilson(count, n)
            summary |= {rate: count / n if n else float("nan"), f"{rate}_ci_low": low, f"{rate}_ci_high": high}
        consistent = sum(r["order_ab"] == {"A": "B", "B": "A", "tie": "tie"}[r["order_ba"]] for r in asked)
        decided = [v for r in asked for v in (r["order_ab"], r["order_ba"]) if v != "tie"]
        summary["position_consistency"] = consistent / len(asked) if asked else float("nan")
        summary["first_position_rate"] = sum(v == "A" for v in decided) / len(decided) if decided else float("nan")
        failed = [r for r in records if r["error"]]
        summary["failed"] = len(failed)
        summary["first_error"] = f"{failed[0]['qid']}: {failed[0]['error']}" if failed else ""
        if failed:
            log.warning(
                "pairwise_judge %s vs %s: %d of %d queries not judged; first: %s",
                first,
                second,
                len(failed),
                len(records),
                summary["first_error"],
            )
        return summary
