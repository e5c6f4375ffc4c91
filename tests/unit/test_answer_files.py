"""Gold-answer and prediction files for ``ragtrack eval --answers/--predictions``: the accepted formats,
and one line naming file, line and problem for every defect (exit 2, no traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ragtrack.pipeline.commands.answer_files import load_gold_answers, load_predictions
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.configuration.config import datasets_dir

GOLD = {"q1": ["Denver Broncos"], "q2": ["Santa Clara", "Levi's Stadium"], "q3": []}


def test_formats(tmp_path: Path) -> None:
    jsonl = tmp_path / "gold.jsonl"
    jsonl.write_text(
        '{"_id": "q1", "text": "?", "answers": ["Denver Broncos"]}\n\n{"id": "q2", "answers": ["Santa Clara", "Levi\'s Stadium"]}\n'
        '{"query_id": "q3"}\n'
    )
    squad = tmp_path / "gold.json"
    squad.write_text(
        json.dumps(
            {
                "version": "1.1",
                "data": [
                    {
                        "title": "t",
                        "paragraphs": [
                            {
                                "context": "c",
                                "qas": [
                                    {
                                        "id": "q1",
                                        "question": "?",
                                        "answers": [{"text": "Denver Broncos", "answer_start": 0}],
                                    },
                                    {
                                        "id": "q2",
                                        "question": "?",
                                        "answers": [
                                            {"text": "Santa Clara", "answer_start": 0},
                                            {"text": "Levi's Stadium", "answer_start": 0},
                                        ],
                                    },
                                    {"id": "q3", "question": "?", "answers": []},
                                ],
                            }
                        ],
                    }
                ],
            }
        )
    )
    assert load_gold_answers(jsonl) == load_gold_answers(squad) == GOLD
    assert len(load_gold_answers(datasets_dir() / "xquad_en" / "xquad.en.json")) == 1190
    (tmp_path / "pred.json").write_text('{"q1": "Broncos", "q2": ""}')
    (tmp_path / "pred.jsonl").write_text('{"id": "q1", "answer": "Broncos"}\n{"query_id": "q2", "prediction": ""}\n')
    assert (
        load_predictions(tmp_path / "pred.json", set(GOLD))
        == load_predictions(tmp_path / "pred.jsonl", set(GOLD))
        == {"q1": "Broncos", "q2": ""}
    )


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "p.jsonl",
            '{"id": "q1", "answer": "a"}\n{"id": "q1", "answer": "b"}\n',
            "p.jsonl:2: duplicate prediction for question 'q1' (first on line 1)",
        ),
        (
            "p.json",
            '{\n"q1": "a",\n"q2": "b",\n"q1": "c"\n}',
            "p.json:4: duplicate prediction for question 'q1' (first on line 2)",
        ),
        (
            "p.jsonl",
            '{"id": "q1", "answer": "a"}\n\n{"id": "q9", "answer": "b"}\n',
            "p.jsonl:3: question 'q9' is not in the gold answers",
        ),
        ("p.json", '{"q1": "a",\n "q9": "b"}', "p.json:2: question 'q9' is not in the gold answers"),
        ("p.jsonl", '{"id": "q1", "text": "a"}\n', "p.jsonl:1: missing field 'answer' or 'prediction'"),
        ("p.jsonl", '{"qid": "q1", "answer": "a"}\n', "p.jsonl:1: missing field 'id' or 'query_id'"),
        (
            "p.jsonl",
            '{"id": "q1", "answer": ["a"]}\n',
            "p.jsonl:1: the prediction for question 'q1' must be a string, got list",
        ),
        ("p.jsonl", '{"id": 1, "answer": "a"}\n', "p.jsonl:1: a question id must be a non-empty string, got 1"),
        ("p.jsonl", '{"id": "q1", "answer": "a"\n', "p.jsonl:1: malformed JSON: Expecting ',' delimiter"),
        ("p.jsonl", '["q1", "a"]\n', "p.jsonl:1: expected a JSON object, got list"),
        ("p.json", '["q1", "a"]', "p.json: SQuAD predictions are one JSON object {question id: answer}"),
        ("p.json", '{"q1": "a",\n\n "q2": }', "p.json:3: malformed JSON: Expecting value (column 8)"),
    ],
)
def test_bad_predictions(tmp_path: Path, name: str, text: str, message: str, capsys) -> None:
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps({"_id": qid, "answers": answers}) + "\n" for qid, answers in GOLD.items()))
    (tmp_path / name).write_text(text)
    assert cli_main(["eval", "--answers", str(gold), "--predictions", str(tmp_path / name)]) == 2
    error = capsys.readouterr().err
    assert error.startswith("ragtrack: error: ") and error.count("\n") == 1
    assert error.removeprefix("ragtrack: error: ").removeprefix(str(tmp_path) + "/").startswith(message)


@pytest.mark.parametrize(
    ("name", "text", "message"),
    [
        (
            "g.jsonl",
            '{"_id": "q1", "answers": ["a"]}\n{"_id": "q1", "answers": ["b"]}\n',
            "g.jsonl:2: duplicate question id 'q1' (first on line 1)",
        ),
        (
            "g.jsonl",
            '{"_id": "q1", "answers": "a"}\n',
            "g.jsonl:1: 'answers' of question 'q1' must be a list of strings",
        ),
        ("g.jsonl", '{"_id": "q1", "text": "no answers here"}\n', "g.jsonl: no gold answers"),
        (
            "g.json",
            '{"data": [{"paragraphs": [{"qas": [{"id": "q1", "answers": [{"text": "a"}]},\n {"id": "q1", "answers": []}]}]}]}',
            "g.json:2: duplicate question id 'q1'",
        ),
        ("g.json", '{"data": [{"title": "no paragraphs"}]}', "g.json: a SQuAD dataset file needs"),
    ],
)
def test_bad_gold_files(tmp_path: Path, name: str, text: str, message: str, capsys) -> None:
    (tmp_path / name).write_text(text)
    (tmp_path / "p.json").write_text("{}")
    assert cli_main(["eval", "--answers", str(tmp_path / name), "--predictions", str(tmp_path / "p.json")]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.removeprefix("ragtrack: error: ").removeprefix(
        str(tmp_path) + "/"
    ).startswith(message)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--answers", "g.jsonl"],
        ["--predictions", "p.json"],
        ["q.tsv", "--answers", "g.jsonl", "--predictions", "p.json"],
        [],
    ],
)
def test_answers_and_run_files_do_not_mix(arguments: list[str], capsys) -> None:
    assert cli_main(["eval", *arguments]) == 2
    assert "ragtrack eval --answers GOLD --predictions PRED" in capsys.readouterr().err
