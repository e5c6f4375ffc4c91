"""The answer-metric variants on their sources' worked examples and against an independent
implementation on random answers: ROUGE precision/recall/F against rouge-score scoring each gold on its
own, BLEU's clipped n-gram precisions and brevity penalty against sacreBLEU's reported ``precisions``
and ``bp``, token-set F1 against the official SQuAD F1 where the two must agree; plus context
precision with answer containment as relevance."""

from __future__ import annotations

import random

import pytest
import sacrebleu
from rouge_score.rouge_scorer import RougeScorer

from ragtrack.core.data import Corpus
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.evaluators.answer import STOP_WORDS, AnswerEvaluator, ContextRecallEvaluator, tokenset_f1
from ragtrack.evaluators.base import EvalInput
from tests.unit.test_answer_metrics import squad_f1

ROUGE = [f"{name}{part}" for name in ("rouge1", "rouge2", "rougeL") for part in ("", "_precision", "_recall")]
BLEU_PARTS = ["bleu_p1", "bleu_p2", "bleu_p3", "bleu_p4", "bleu_bp"]
WORDS = [
    "the",
    "cat",
    "cats",
    "sat",
    "on",
    "mat",
    "mats",
    "dog",
    "ran",
    "running",
    "Paris",
    "paris",
    "1889",
    "3.5",
    "U.S.",
    "e-mail",
    "don't",
    "a",
    "big",
    "red",
    ",",
    ".",
    "!",
    "(",
    ")",
    "naïve",
    "it's",
]


def score(metrics: list[str], answers: dict[str, str], golds: dict[str, list[str]]) -> dict[str, dict[str, float]]:
    data = EvalInput(qrels={}, run=Run("r"), queries={q: "" for q in golds}, answers=golds, generated=answers)
    return AnswerEvaluator(metrics).evaluate(data).to_dict(orient="index")


def random_sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(WORDS, k=rng.randint(0, 12)))


def random_answers(seed: int, queries: int) -> tuple[dict[str, str], dict[str, list[str]]]:
    rng = random.Random(seed)
    answers, golds = {}, {}
    for q in range(queries):
        golds[f"q{q}"] = [random_sentence(rng) or "cat" for _ in range(rng.randint(1, 3))]
        answers[f"q{q}"] = golds[f"q{q}"][0] if rng.random() < 0.1 else random_sentence(rng)
    return answers, golds


def test_tokenset_f1_on_its_worked_example() -> None:
    # Gold "it was designed by Gustave Eiffel for the World Fair of 1889" (11 SQuAD tokens, 5 stop words)
    # and an answer of 11 tokens sharing 10 of them: SQuAD F1 = 2·10/(11 + 11) = 0.909. Without stop words,
    # as sets: answer {designed gustave eiffel 1889 world fair paris}, gold the same minus paris:
    # P = 6/7, R = 6/6, F1 = 12/13 = 0.923.
    gold, answer = (
        "it was designed by Gustave Eiffel for the World Fair of 1889",
        "It was designed by Gustave Eiffel for the 1889 World Fair, Paris.",
    )
    values = score(["answer_f1", "answer_f1_tokenset"], {"q": answer}, {"q": [gold]})["q"]
    assert (round(values["answer_f1"], 3), round(values["answer_f1_tokenset"], 3)) == (0.909, 0.923)
    assert tokenset_f1("the the cat cat", "cat") == 1.0  # a set: repeats do not count
    assert tokenset_f1("it is", "it is") == 0.0  # nothing left after the stop words
    assert {"dont", "its", "youre", "shouldve"} <= STOP_WORDS and "the" not in STOP_WORDS  # normalized like the tokens


def test_tokenset_f1_equals_squad_f1_without_stop_words_and_repeats() -> None:
    rng = random.Random(3)
    content = [w for w in WORDS if w.lower().strip(".,!()") not in STOP_WORDS | {"a", "the", ""}]
    for _ in range(2000):
        answer, gold = (
            " ".join(rng.sample(content, rng.randint(0, 8))),
            " ".join(rng.sample(content, rng.randint(1, 8))),
        )
        tokens = [w for text in (answer, gold) for w in text.lower().split()]
        if len({w.strip(".,!()") for w in tokens}) != len(
            tokens
        ):  # paris/Paris, cat/cat. would repeat after normalization
            continue
        assert tokenset_f1(answer, gold) == pytest.approx(squad_f1(answer, gold), abs=1e-12)


def test_rouge_precision_recall_on_lin_s_example() -> None:
    # Lin (2004), ROUGE-L: reference "police killed the gunman", candidate "the gunman kill police":
    # LCS "the gunman" -> P = R = F = 2/4. ROUGE-2: bigrams shared: (the gunman) -> P = R = 1/3.
    # (With rouge-score's Porter stemmer "killed" is "kill"; neither LCS nor bigrams change.)
    values = score(ROUGE, {"q": "the gunman kill police"}, {"q": ["police killed the gunman"]})["q"]
    assert values == pytest.approx(
        {
            "rougeL": 0.5,
            "rougeL_precision": 0.5,
            "rougeL_recall": 0.5,
            "rouge1": 1.0,
            "rouge1_precision": 1.0,
            "rouge1_recall": 1.0,
            "rouge2": 1 / 3,
            "rouge2_precision": 1 / 3,
            "rouge2_recall": 1 / 3,
        },
        abs=1e-12,
    )
    short = score(["rouge1_precision", "rouge1_recall"], {"q": "the gunman"}, {"q": ["police killed the gunman"]})["q"]
    assert short == pytest.approx({"rouge1_precision": 1.0, "rouge1_recall": 0.5}, abs=1e-12)


def test_rouge_equals_rouge_score_gold_by_gold() -> None:
    answers, golds = random_answers(11, 400)
    ours = score(ROUGE, answers, golds)
    scorer = RougeScorer(["rouge1", "rouge2", "rougeL"], use_stemmer=True)
    differ = 0
    for qid, answer in answers.items():
        per_gold = [scorer.score(gold, answer) for gold in golds[qid]]
        for name in ("rouge1", "rouge2", "rougeL"):
            best = max(per_gold, key=lambda scores: scores[name].fmeasure)[name]  # first gold on a tie, as score_multi
            assert (ours[qid][f"{name}_precision"], ours[qid][f"{name}_recall"], ours[qid][name]) == pytest.approx(
                (best.precision, best.recall, best.fmeasure), abs=1e-12
            )
        differ += ours[qid]["rouge1_precision"] != ours[qid]["rouge1_recall"]
    assert differ > 200  # precision and recall are really different numbers


def test_bleu_parts_on_papineni_s_example() -> None:
    # Papineni et al. (2002), modified unigram precision: candidate "the the the the the the the",
    # references "the cat is on the mat" / "there is a cat on the mat": "the" is clipped to 2 -> 2/7;
    # no bigram "the the" in a reference -> p2 = 0; c = 7, closest reference length r = 7 -> BP = 1.
    values = score(
        BLEU_PARTS, {"q": "the the the the the the the"}, {"q": ["the cat is on the mat", "there is a cat on the mat"]}
    )["q"]
    assert values == pytest.approx(
        {"bleu_p1": 2 / 7, "bleu_p2": 0.0, "bleu_p3": 0.0, "bleu_p4": 0.0, "bleu_bp": 1.0}, abs=1e-12
    )
    # "the cat" against the same references: p1 = p2 = 1; c = 2, closest r = 6 -> BP = exp(1 - 6/2) = e^-2.
    values = score(BLEU_PARTS, {"q": "the cat"}, {"q": ["the cat is on the mat", "there is a cat on the mat"]})["q"]
    assert values == pytest.approx(
        {"bleu_p1": 1.0, "bleu_p2": 1.0, "bleu_p3": 0.0, "bleu_p4": 0.0, "bleu_bp": 0.1353352832366127}, abs=1e-12
    )


def test_bleu_parts_equal_sacrebleu() -> None:
    answers, golds = random_answers(5, 600)
    ours = score(BLEU_PARTS, answers, golds)
    for qid, answer in answers.items():
        reference = sacrebleu.sentence_bleu(answer, golds[qid], smooth_method="none")
        expected = [p / 100 for p in reference.precisions] + [reference.bp]
        assert [ours[qid][name] for name in BLEU_PARTS] == pytest.approx(expected, abs=1e-12), (answer, golds[qid])
    assert sum(0 < ours[q]["bleu_p2"] < 1 for q in ours) > 50 and sum(0 < ours[q]["bleu_bp"] < 1 for q in ours) > 100


def test_context_precision_with_answer_containment() -> None:
    # Passages p1..p4 ranked in that order; p2 and p4 contain the gold "Eiffel Tower":
    # context_precision_answer@4 = (1/2 + 2/4) / 2 = 1/2; @2 = (1/2) / 1 = 1/2; @1 = 0 (none relevant).
    corpus = Corpus(
        ids=["p1", "p2", "p3", "p4"],
        titles=["", "", "", ""],
        texts=["A bridge.", "The Eiffel Tower, in Paris.", "Nothing here.", "eiffel tower!"],
        hash="x",
    )
    data = EvalInput(
        qrels={},
        run=Run("r", {"q": {"p1": 4.0, "p2": 3.0, "p3": 2.0, "p4": 1.0}}),
        queries={"q": "?"},
        answers={"q": ["Eiffel Tower"]},
        corpus=corpus,
    )
    metrics = [
        "context_precision_answer@1",
        "context_precision_answer@2",
        "context_precision_answer@4",
        "context_recall@1",
        "context_recall@2",
    ]
    values = ContextRecallEvaluator(metrics).evaluate(data).loc["q"].to_dict()
    assert values == {
        "context_precision_answer@1": 0.0,
        "context_precision_answer@2": 0.5,
        "context_precision_answer@4": 0.5,
        "context_recall@1": 0.0,
        "context_recall@2": 1.0,
    }
    with pytest.raises(
        RagtrackError, match="cutoff must be a positive integer in ASCII digits; did you mean 'context_recall@5'"
    ):
        ContextRecallEvaluator(["context_recall@５"])
    with pytest.raises(RagtrackError, match="must look like context_recall@5"):
        ContextRecallEvaluator(["context_recal@5"])
