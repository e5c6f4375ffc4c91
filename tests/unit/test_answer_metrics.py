"""Answer metrics: F1/EM equal the official SQuAD v1.1 logic; ROUGE, BLEU, BERTScore and context recall
on hand-checked cases; the evaluators apply only when there is something to score."""

from __future__ import annotations

import collections
import json
import random
import re
import string
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.answer import (
    AnswerEvaluator,
    BertScoreEvaluator,
    ContextRecallEvaluator,
    best_over_golds,
    exact_match,
    token_f1,
)
from ragtrack.evaluators.base import EvalInput
from ragtrack.pipeline.configuration.config import datasets_dir

XQUAD = datasets_dir() / "xquad_en"


# --- the official SQuAD v1.1 evaluate script's logic, written out independently -------------------
def squad_normalize(s):
    def remove_articles(text):
        return re.sub(r"\b(a|an|the)\b", " ", text)

    def white_space_fix(text):
        return " ".join(text.split())

    def remove_punc(text):
        exclude = set(string.punctuation)
        return "".join(ch for ch in text if ch not in exclude)

    return white_space_fix(remove_articles(remove_punc(s.lower())))


def squad_f1(prediction, ground_truth):
    prediction_tokens = squad_normalize(prediction).split()
    ground_truth_tokens = squad_normalize(ground_truth).split()
    common = collections.Counter(prediction_tokens) & collections.Counter(ground_truth_tokens)
    num_same = sum(common.values())
    if num_same == 0:
        return 0
    precision = 1.0 * num_same / len(prediction_tokens)
    recall = 1.0 * num_same / len(ground_truth_tokens)
    return (2 * precision * recall) / (precision + recall)


def squad_em(prediction, ground_truth):
    return squad_normalize(prediction) == squad_normalize(ground_truth)


def squad_max(metric_fn, prediction, ground_truths):
    return max(metric_fn(prediction, gt) for gt in ground_truths)


# ----------------------------------------------------------------------------------------------------

PIECES = [
    "the",
    "The",
    "a",
    "An",
    "an",
    "theory",
    "another",
    "cat",
    "Cat",
    "cats",
    "1,000",
    "42",
    "U.S.",
    "e-mail",
    "(x)",
    "naïve",
    "Ωmega",
    "don't",
    "  ",
    "\t",
    "\n",
    "...",
    "!",
    "the.",
    ".a",
    "réSumé",
    "Straße",
    "ÉCOLE",
    "_",
    "a-the",
    "ǅ",
]


def random_text(rng: random.Random) -> str:
    pieces = rng.choices(PIECES + [rng.choice(string.printable) for _ in range(5)], k=rng.randint(0, 8))
    return "".join(p + rng.choice(["", " ", "  ", "\t"]) for p in pieces)


def test_f1_and_em_equal_official_squad_on_random_pairs() -> None:
    rng = random.Random(7)
    for _ in range(5000):
        prediction = random_text(rng)
        golds = [random_text(rng) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.3:  # many near matches, not only disjoint strings
            golds.append(prediction.upper() if rng.random() < 0.5 else prediction + " the")
        assert best_over_golds(token_f1, prediction, golds) == pytest.approx(
            squad_max(squad_f1, prediction, golds), abs=1e-12
        )
        assert best_over_golds(exact_match, prediction, golds) == float(squad_max(squad_em, prediction, golds))


def test_f1_and_em_equal_official_squad_on_every_xquad_answer() -> None:
    records = [json.loads(line) for line in (XQUAD / "qa.jsonl").read_text(encoding="utf-8").splitlines()]
    corpus = {
        d["_id"]: d["text"] for d in map(json.loads, (XQUAD / "corpus.jsonl").read_text(encoding="utf-8").splitlines())
    }
    rng = random.Random(3)
    for record in records:
        golds = record["answers"]
        passage = corpus[record["passage_ids"][0]]
        start = record["answer_starts"][0]
        predictions = [
            golds[0],
            golds[0].lower() + ".",
            record["question"],
            passage[max(0, start - 30) : start + len(golds[0]) + 30],
            rng.choice(records)["answers"][0],
            "",
        ]
        for prediction in predictions:
            assert best_over_golds(token_f1, prediction, golds) == pytest.approx(
                squad_max(squad_f1, prediction, golds), abs=1e-12
            )
            assert best_over_golds(exact_match, prediction, golds) == float(squad_max(squad_em, prediction, golds))


def test_hand_computed_values() -> None:
    # "the cat sat" -> [cat, sat]; "a cat sat down" -> [cat, sat, down]: P = 2/2, R = 2/3, F1 = 0.8
    assert token_f1("The cat sat.", "a cat sat down") == pytest.approx(0.8)
    assert exact_match("The Cat!", "cat") == 1.0
    assert token_f1("", "") == 0.0 and exact_match("", "") == 1.0  # the official script's edge cases


def _data(generated: dict, answers: dict, run: Run | None = None, corpus=None) -> EvalInput:
    queries = {qid: f"question {qid}" for qid in answers}
    return EvalInput(
        qrels={}, run=run or Run("system"), queries=queries, answers=answers, generated=generated, corpus=corpus
    )


def test_rouge_and_bleu_on_hand_cases() -> None:
    evaluator = AnswerEvaluator()
    data = _data(
        {"q1": "Denver Broncos", "q2": "blue whale", "q3": "the old mill", "q4": ""},
        {"q1": ["Denver Broncos"], "q2": ["red car"], "q3": ["a new mill", "old mills"], "q4": ["x"], "q5": []},
    )
    table = evaluator.evaluate(data)
    assert table.loc["q1"].tolist() == [1.0] * 6
    assert table.loc["q2"].tolist() == [0.0] * 6
    # q3 against "old mills" (stemmed: old mill): unigrams P = 2/3, R = 1 -> 0.8; bigram "old mill": P = 1/2, R = 1 -> 2/3;
    # LCS 2 -> 0.8. SQuAD F1: [old, mill] vs [old, mills] or [new, mill] share one token -> 0.5.
    assert table.loc["q3", ["rouge1", "rouge2", "rougeL"]].tolist() == pytest.approx([0.8, 2 / 3, 0.8])
    assert table.loc["q3", "answer_f1"] == pytest.approx(0.5)
    assert table.loc["q4"].tolist() == [0.0] * 6  # a failed generation scores 0
    assert np.isnan(table.loc["q5"]).all() and not evaluator.counted(data, table)["q5"]


def test_answer_metrics_ignore_citation_markers() -> None:
    """A cited answer ("Denver Broncos [1]." or "... [2, 3]") scores as the same answer without its
    markers (ALCE's remove_citations), on every answer metric, for random answers from XQuAD's golds."""
    rng = random.Random(7)
    golds = [
        answer
        for line in (XQUAD / "queries.jsonl").read_text().splitlines()[:60]
        for answer in json.loads(line)["answers"][:1]
    ]
    plain = {f"q{i}": rng.choice(golds) + rng.choice(["", ".", " in 1998."]) for i in range(40)}
    cited = {
        qid: re.sub(
            r"([.]?)$", lambda m: f" [{rng.randint(1, 3)}]" + rng.choice(["", "[2, 3]"]) + m.group(1), text, count=1
        )
        for qid, text in plain.items()
    }
    answers = {qid: [rng.choice(golds)] for qid in plain}
    assert all("[" in text for text in cited.values())
    evaluator = AnswerEvaluator()
    assert evaluator.evaluate(_data(cited, answers)).equals(evaluator.evaluate(_data(plain, answers)))


def test_evaluators_apply_only_with_answers() -> None:
    assert not AnswerEvaluator().applies_to(_data({}, {"q1": ["x"]}))
    assert not AnswerEvaluator().applies_to(_data({"q1": "x"}, {}))
    assert ContextRecallEvaluator().applies_to(_data({}, {"q1": ["x"]}, corpus=load_beir(XQUAD).corpus))
    assert not ContextRecallEvaluator().applies_to(_data({}, {"q1": ["x"]}))
    with pytest.raises(RagtrackError, match="unknown metrics"):
        AnswerEvaluator(["answer_f2"])
    with pytest.raises(
        RagtrackError,
        match="'context_recall@zero': the cutoff must be a positive integer in ASCII digits, e.g. context_recall@10",
    ):
        ContextRecallEvaluator(["context_recall@zero"])


def test_context_recall_finds_gold_in_top_k(toy_path: Path) -> None:
    dataset = load_beir(XQUAD)
    qid = "56beb4343aeaaa14008c925b"  # "308", in Super_Bowl_50_0
    run = Run("s", {qid: {"Super_Bowl_50_3": 3.0, "Super_Bowl_50_2": 2.0, "Super_Bowl_50_0": 1.0}})
    data = EvalInput(
        qrels=dataset.qrels, run=run, queries={qid: dataset.queries[qid]}, answers={qid: ["308"]}, corpus=dataset.corpus
    )
    table = ContextRecallEvaluator(["context_recall@1", "context_recall@3"]).evaluate(data)
    assert table.loc[qid].tolist() == [0.0, 1.0]
    no_match = EvalInput(
        qrels={}, run=run, queries={qid: "q"}, answers={qid: ["30"]}, corpus=dataset.corpus
    )  # word boundaries
    assert ContextRecallEvaluator(["context_recall@3"]).evaluate(no_match).loc[qid, "context_recall@3"] == 0.0


def test_bertscore_with_the_shipped_minilm() -> None:
    evaluator = BertScoreEvaluator()
    data = _data(
        {"q1": "Denver Broncos", "q2": "a bowl of soup", "q3": ""},
        {"q1": ["Denver Broncos"], "q2": ["the Carolina Panthers", "Carolina"], "q3": ["x"]},
    )
    table = evaluator.evaluate(data)
    assert table.loc["q1"].tolist() == pytest.approx([1.0, 1.0, 1.0], abs=1e-5)
    assert 0 < table.loc["q2", "bertscore_f1"] < 0.95
    precision, recall, f1 = table.loc["q2", ["bertscore_precision", "bertscore_recall", "bertscore_f1"]]
    assert f1 == pytest.approx(2 * precision * recall / (precision + recall))
    assert table.loc["q3"].tolist() == [0.0, 0.0, 0.0]
    tokens = evaluator.embed(["Denver Broncos"])[0]  # one unit vector per word piece, [CLS]/[SEP] dropped
    assert tokens.shape == (len(evaluator._load()[0].tokenize("Denver Broncos")), 384)
    assert np.linalg.norm(tokens, axis=1) == pytest.approx(1.0, abs=1e-5)
