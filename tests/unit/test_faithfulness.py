"""LLM-free faithfulness (evaluators/faithfulness.py): K-Precision and Recall equal Adlakha et al.'s
definitions (their instruct-qa code's logic, written out below) on random answers and passages;
sentence support on hand-checked cases; settings are checked."""

from __future__ import annotations

import random
import re
import string
from collections import Counter

import pytest

from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.base import EvalInput
from ragtrack.evaluators.faithfulness import FaithfulnessEvaluator, k_precision, sentence_support


def reference_tokens(text: str) -> list[str]:
    """instruct-qa's ``Metric._get_tokens``: lower-case, drop punctuation, then articles, split."""
    if not text:
        return []
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    return " ".join(re.sub(r"\b(a|an|the)\b", " ", text).split()).split()


def reference_k_precision(answer: str, passages: list[str]) -> float:
    """instruct-qa ``KPrecision``: the passages joined with spaces; an empty answer scores 0."""
    predicted, knowledge = reference_tokens(answer), reference_tokens(" ".join(passages))
    common = sum((Counter(knowledge) & Counter(predicted)).values())
    return common / len(predicted) if predicted and common else 0.0


def reference_recall(answer: str, golds: list[str]) -> float:
    """instruct-qa ``Recall``, best gold: an empty gold scores 1."""
    scores = []
    for gold in golds:
        expected, predicted = reference_tokens(gold), reference_tokens(answer)
        common = sum((Counter(expected) & Counter(predicted)).values())
        scores.append(1.0 if not expected else common / len(expected))
    return max(scores)


WORDS = [
    "the",
    "a",
    "Cat",
    "cat",
    "sat",
    "on",
    "mat",
    "Paris",
    "1889",
    "tower",
    "iron",
    "built",
    "by",
    "Eiffel",
    "!",
    ".",
    ",",
    "e-mail",
]


def _data(answers: dict[str, str], golds: dict[str, list[str]], passages: dict[str, list[str]]) -> EvalInput:
    ids = [f"{qid}-{n}" for qid, texts in passages.items() for n in range(len(texts))]
    corpus = Corpus(ids=ids, titles=[""] * len(ids), texts=[t for texts in passages.values() for t in texts], hash="x")
    run = Run("r", {qid: {f"{qid}-{n}": float(-n) for n in range(len(texts))} for qid, texts in passages.items()})
    return EvalInput(
        qrels={}, run=run, queries={q: "?" for q in golds}, answers=golds, generated=answers, corpus=corpus
    )


def test_k_precision_and_recall_equal_adlakha_et_al() -> None:
    rng = random.Random(2)
    answers, golds, passages = {}, {}, {}
    for q in range(500):
        qid = f"q{q}"
        passages[qid] = [" ".join(rng.choices(WORDS, k=rng.randint(1, 15))) for _ in range(rng.randint(1, 5))]
        golds[qid] = [" ".join(rng.choices(WORDS, k=rng.randint(0, 4))) for _ in range(rng.randint(1, 2))]
        answers[qid] = " ".join(rng.choices(WORDS, k=rng.randint(0, 8)))
    table = FaithfulnessEvaluator(metrics=["k_precision", "answer_recall"], top_k=3).evaluate(
        _data(answers, golds, passages)
    )
    for qid in answers:
        assert table.loc[qid, "k_precision"] == pytest.approx(
            reference_k_precision(answers[qid], passages[qid][:3]), abs=1e-12
        )
        assert table.loc[qid, "answer_recall"] == pytest.approx(reference_recall(answers[qid], golds[qid]), abs=1e-12)
    assert (
        table["k_precision"].between(0.01, 0.99).sum() > 100 and table["answer_recall"].between(0.01, 0.99).sum() > 50
    )


def test_hand_checked_cases() -> None:
    passages = ["The Eiffel Tower is made of iron.", "It was built in 1889 in Paris."]
    # answer tokens: eiffel tower was built in 1889 by gustave eiffel (9); found in the passages joined:
    # eiffel, tower, was, built, in, 1889 (6; "eiffel" only once in the passages) -> 6/9
    assert k_precision("The Eiffel Tower was built in 1889 by Gustave Eiffel.", passages) == pytest.approx(
        6 / 9, abs=1e-12
    )
    assert k_precision("", passages) == 0.0
    # sentences: "It was built in 1889." (5 tokens, all in passage 2: supported);
    # "Gustave Eiffel designed it." (4 tokens; passage 1 has eiffel, passage 2 has it: 1/4 each: not supported)
    answer = "It was built in 1889. Gustave Eiffel designed it."
    assert sentence_support(answer, passages, 0.5) == 0.5
    assert sentence_support(answer, passages, 0.25) == 1.0  # 1/4 >= 0.25
    assert sentence_support("...", passages, 0.5) == 0.0 and sentence_support(answer, [], 0.5) == 0.0
    # tokens of two passages do not add up: "iron tower 1889 Paris" is half in each passage -> supported at 0.5 only
    assert sentence_support("Iron tower, 1889 Paris.", passages, 0.5) == 1.0
    assert sentence_support("Iron tower, 1889 Paris.", passages, 0.6) == 0.0


def test_the_evaluator_reads_the_top_k_passages() -> None:
    data = _data({"q": "built in 1889"}, {"q": ["1889"]}, {"q": ["nothing here", "It was built in 1889."]})
    top1 = FaithfulnessEvaluator(top_k=1).evaluate(data).loc["q"].to_dict()
    top2 = FaithfulnessEvaluator(top_k=2, support_threshold=1.0).evaluate(data).loc["q"].to_dict()
    assert top1 == {"k_precision": 0.0, "answer_recall": 1.0, "sentence_support": 0.0}
    assert top2 == {"k_precision": 1.0, "answer_recall": 1.0, "sentence_support": 1.0}


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"top_k": 0}, "^faithfulness evaluator: top_k: 0 is not allowed: input should be greater than or equal to 1$"),
        (
            {"support_threshold": 1.5},
            "^faithfulness evaluator: support_threshold: 1.5 is not allowed: input should be less than or equal to 1$",
        ),
        (
            {"support_threshold": "half"},
            "^faithfulness evaluator: support_threshold: 'half' is not allowed: input should be a valid number$",
        ),
        ({"top_n": 3}, "^faithfulness evaluator: top_n: no such key$"),
        ({"metrics": ["k_recall"]}, "faithfulness evaluator: unknown metrics \\['k_recall'\\]"),
    ],
)
def test_bad_settings_fail_in_one_line(settings: dict, message: str) -> None:
    with pytest.raises(RagtrackError, match=message):
        FaithfulnessEvaluator(**settings)


def test_citing_changes_no_faithfulness_metric() -> None:
    """docs/answers.md: the answer metrics take citation markers out, so citing changes none of them;
    k_precision and sentence_support counted the marker's number as an unsupported token (and a marker
    after the full stop as a sentence of its own)."""
    passages = {"q": ["The Denver Broncos won Super Bowl 50.", "Carolina lost."]}
    scores = [
        FaithfulnessEvaluator(top_k=2)
        .evaluate(_data({"q": answer}, {"q": ["Denver Broncos"]}, passages))
        .loc["q"]
        .to_dict()
        for answer in ("The Denver Broncos won. Carolina lost.", "The Denver Broncos won [1]. Carolina lost. [2]")
    ]
    assert scores[0] == scores[1] == {"k_precision": 1.0, "answer_recall": 1.0, "sentence_support": 1.0}
