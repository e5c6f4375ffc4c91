"""Gold answers and predictions made anywhere, read for ``ragtrack eval --answers/--predictions``.

Gold answers: JSON lines with an id (``_id``, ``id`` or ``query_id``) and ``answers`` (a list of
strings; a line without it is a question without gold answers, left out of the means) - the shipped
``queries.jsonl`` and ``qa.jsonl`` are such files - or a SQuAD dataset file (``.json``:
``data[].paragraphs[].qas[]`` with ``id`` and ``answers[].text``).
Predictions: SQuAD's ``{question id: answer}`` (``.json``) or JSON lines with ``id``/``query_id`` and
``answer``/``prediction``.
Every defect - malformed JSON, a missing or non-string field, a duplicate id, a prediction for a question
the gold file does not have - is an :class:`InputError` naming the file and, where known, the line.
"""

from __future__ import annotations

import json
from pathlib import Path

from ragtrack.core.errors import InputError
from ragtrack.core.files import read_json_objects, read_lines


def _numbered_lines(path: Path) -> list[str]:
    """The file's lines (index = line number - 1), blank ones kept empty so JSON errors point at the right line."""
    found = dict(read_lines(path))
    return [found.get(number, "") for number in range(1, max(found, default=0) + 1)]


def _field(record: dict, keys: tuple[str, ...], path: Path, line: int) -> object:
    """The value of the first of ``keys`` the record has."""
    for key in keys:
        if key in record:
            return record[key]
    raise InputError(path, f"missing field {' or '.join(repr(k) for k in keys)}", line)


def _question_id(value: object, path: Path, line: int | None) -> str:
    if not isinstance(value, str) or not value:
        raise InputError(path, f"a question id must be a non-empty string, got {value!r}", line)
    return value


class _Object(list):
    """A JSON object as its (key, value) pairs, in file order, duplicates kept."""


def _whole_json(path: Path) -> tuple[object, list[str]]:
    lines = _numbered_lines(path)
    try:
        return json.loads("\n".join(lines), object_pairs_hook=_Object), lines
    except json.JSONDecodeError as exc:
        raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", exc.lineno) from None
    except RecursionError:
        raise InputError(path, "malformed JSON: nesting too deep") from None


def _line_of(lines: list[str], key: str, occurrence: int) -> int | None:
    """The line of the ``occurrence``-th (1-based) ``"key":`` in a JSON file, if it can be found."""
    needle, seen = json.dumps(key), 0
    for number, text in enumerate(lines, start=1):
        seen += text.count(needle)
        if seen >= occurrence:
            return number
    return None


def load_gold_answers(path: str | Path) -> dict[str, list[str]]:
    """``{question id: [gold answers]}`` from JSON lines or a SQuAD dataset file (module docstring)."""
    path = Path(path)
    golds: dict[str, list[str]] = {}
    if path.suffix == ".json":
        return _squad_dataset(path)
    first_line: dict[str, int] = {}
    for number, record in read_json_objects(path):
        qid = _question_id(_field(record, ("_id", "id", "query_id"), path, number), path, number)
        if qid in first_line:
            raise InputError(path, f"duplicate question id {qid!r} (first on line {first_line[qid]})", number)
        first_line[qid] = number
        answers = record.get("answers", [])
        if not isinstance(answers, list) or not all(isinstance(a, str) for a in answers):
            raise InputError(path, f"'answers' of question {qid!r} must be a list of strings", number)
        golds[qid] = answers
    if not any(golds.values()):
        raise InputError(path, "no gold answers (a JSON lines file with 'answers' lists, or a SQuAD dataset .json)")
    return golds


def _squad_dataset(path: Path) -> dict[str, list[str]]:
    document, lines = _whole_json(path)
    shape = (
        'a SQuAD dataset file needs {"data": [{"paragraphs": [{"qas": [{"id": ..., "answers": [{"text": ...}]}]}]}]}'
    )
    try:
        if not isinstance(document, _Object):
            raise TypeError
        articles = dict(document)["data"]
        questions = [
            dict(qa)
            for article in articles
            for paragraph in dict(article)["paragraphs"]
            for qa in dict(paragraph)["qas"]
        ]
        pairs = [(qa["id"], [dict(answer)["text"] for answer in qa.get("answers", [])]) for qa in questions]
    except (TypeError, ValueError, KeyError):
        raise InputError(path, shape) from None
    golds: dict[str, list[str]] = {}
    for qid, answers in pairs:
        qid = _question_id(qid, path, None)
        if qid in golds:
            raise InputError(path, f"duplicate question id {qid!r}", _line_of(lines, qid, 2))
        if not all(isinstance(a, str) for a in answers):
            raise InputError(path, f"the answers of question {qid!r} must be strings", _line_of(lines, qid, 1))
        golds[qid] = answers
    if not any(golds.values()):
        raise InputError(path, "no gold answers")
    return golds


def prediction_problem(qid: str, answer: object) -> str | None:
    """Why ``answer`` cannot be the prediction for question ``qid`` (it is not a string), else None."""
    return (
        None
        if isinstance(answer, str)
        else f"the prediction for question {qid!r} must be a string, got {type(answer).__name__}"
    )


def load_predictions(path: str | Path, questions: set[str]) -> dict[str, str]:
    """``{question id: answer}`` from SQuAD's ``{id: answer}`` .json or JSON lines; every id must be
    one of ``questions`` (the gold file's) and appear once."""
    path = Path(path)
    if path.suffix == ".json":
        document, lines = _whole_json(path)
        if not isinstance(document, _Object):
            raise InputError(path, "SQuAD predictions are one JSON object {question id: answer}")
        entries = []
        seen: dict[str, int] = {}
        for qid, answer in document:
            seen[qid] = seen.get(qid, 0) + 1
            entries.append((_line_of(lines, qid, seen[qid]), qid, answer))
    else:
        entries = [
            (
                number,
                _field(record, ("id", "query_id"), path, number),
                _field(record, ("answer", "prediction"), path, number),
            )
            for number, record in read_json_objects(path)
        ]
    predictions: dict[str, str] = {}
    first_line: dict[str, int | None] = {}
    for line, qid, answer in entries:
        qid = _question_id(qid, path, line)
        if qid in first_line:
            first = f" (first on line {first_line[qid]})" if first_line[qid] else ""
            raise InputError(path, f"duplicate prediction for question {qid!r}{first}", line)
        first_line[qid] = line
        if problem := prediction_problem(qid, answer):
            raise InputError(path, problem, line)
        if qid not in questions:
            raise InputError(path, f"question {qid!r} is not in the gold answers", line)
        predictions[qid] = answer
    return predictions
