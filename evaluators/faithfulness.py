"""LLM-free faithfulness: how much of a generated answer is found in the passages it was given, by
token overlap (no model, no endpoint). Tokens are SQuAD-normalized (``answer.normalize_answer``);
overlaps count tokens as multisets, like SQuAD F1. The passages are the top-``top_k`` of the ranking a
generator reads (``EvalInput.context``), ``top_k`` being the generator's.

- ``k_precision`` (Adlakha et al. 2023, "Evaluating Correctness and Faithfulness of
  Instruction-Following Models for Question Answering", K-Precision; their code joins the passages
  into one text): |answer tokens ∩ passage tokens| / |answer tokens|; an empty answer scores 0.
- ``answer_recall`` (the same paper's Recall): |gold tokens ∩ answer tokens| / |gold tokens|, the best
  gold; a gold with no tokens left after normalization scores 1, as in their code.
- ``sentence_support``: the share of the answer's sentences (split after ``.!?`` and white space; a
  sentence without tokens is skipped) that some single passage supports, i.e. covers at least
  ``support_threshold`` of the sentence's tokens: max_p |sentence ∩ p| / |sentence| ≥ threshold
  (default 0.5); an answer without sentences scores 0.

Citation markers (``[1]``, ``[2, 3]``) are taken out of an answer first, as for the answer metrics.
Queries without gold answers are left out of the means, as for every answer metric.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from typing import Annotated

import numpy as np
from pydantic import Field, Strict

from ragtrack.core.llm import retrieved_passages, without_citations
from ragtrack.core.settings import Count, validated
from ragtrack.evaluators.answer import GoldAnswerEvaluator, normalize_answer
from ragtrack.evaluators.base import EvalInput, EvaluatorSettings

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def tokens(text: str) -> Counter:
    """The SQuAD-normalized tokens of ``text`` as a multiset."""
    return Counter(normalize_answer(text).split())


def covered(part: Counter, whole: Counter) -> float:
    """|part ∩ whole| / |part| over multisets; 0 for an empty part."""
    size = sum(part.values())
    return sum((part & whole).values()) / size if size else 0.0


def k_precision(answer: str, passages: Sequence[str]) -> float:
    """Adlakha et al.'s K-Precision: the share of the answer's tokens found in the passages (joined)."""
    return covered(tokens(answer), tokens(" ".join(passages)))


def answer_recall(answer: str, gold: str) -> float:
    """Adlakha et al.'s Recall: the share of the gold answer's tokens found in the answer (1 for an empty gold)."""
    expected = tokens(gold)
    return covered(expected, tokens(answer)) if expected else 1.0


def sentence_support(answer: str, passages: Sequence[str], threshold: float) -> float:
    """The share of the answer's sentences that one passage covers to at least ``threshold`` of their tokens."""
    sentences = [found for found in map(tokens, _SENTENCE_END.split(answer)) if found]
    if not sentences:
        return 0.0
    bags = [tokens(p) for p in passages]
    return sum(max((covered(s, bag) for bag in bags), default=0.0) >= threshold for s in sentences) / len(sentences)


class FaithfulnessSettings(EvaluatorSettings, extra="forbid"):
    """Lexical faithfulness of answers to the retrieved passages."""

    top_k: Count = 3
    support_threshold: Annotated[float, Strict(), Field(gt=0, le=1)] = 0.5


class FaithfulnessEvaluator(GoldAnswerEvaluator):
    """Knowledge precision, answer recall and sentence support by token overlap (module docstring)."""

    settings_schema = FaithfulnessSettings

    @classmethod
    def provides(cls) -> dict[str, str]:
        return {
            "k_precision": "share of answer tokens found in the top-k passages (Adlakha et al. 2023)",
            "answer_recall": "share of gold-answer tokens found in the answer, best gold (Adlakha et al. 2023)",
            "sentence_support": "share of answer sentences a single top-k passage covers to >= support_threshold",
        }

    def __init__(self, **values):
        settings = validated(self.settings_schema, values, "faithfulness evaluator")
        super().__init__(settings.metrics)
        self._require_known_metrics("faithfulness evaluator")
        self.top_k, self.support_threshold = settings.top_k, settings.support_threshold

    def applies_to(self, data: EvalInput) -> bool:
        return super().applies_to(data) and (data.corpus is not None or self.metrics == ["answer_recall"])

    def score(self, data: EvalInput, qids: list[str]) -> np.ndarray:
        retrieved = (
            retrieved_passages(data.context, data.corpus, qids, self.top_k, full=True)
            if data.corpus is not None
            else {}
        )
        rows = []
        for qid in qids:
            answer = without_citations(data.generated.get(qid, ""))  # as the answer metrics: citing changes no score
            passages = retrieved.get(qid, [])
            values = {}
            if "k_precision" in self.metrics:
                values["k_precision"] = k_precision(answer, passages)
            if "answer_recall" in self.metrics:
                values["answer_recall"] = max(answer_recall(answer, gold) for gold in data.answers[qid])
            if "sentence_support" in self.metrics:
                values["sentence_support"] = sentence_support(answer, passages, self.support_threshold)
            rows.append([values[m] for m in self.metrics])
        return np.asarray(rows, dtype=float)
