"""People's labels of what a judge rated, read strictly: the input of judge agreement (``evaluators.agreement``).

One label per line, as JSON lines (``.jsonl``) or a tab-separated file with a header (``.tsv``), either
optionally gzipped (``.gz``). Fields:

- ``qid``: the query;
- ``system`` (``llm_judge``): the system whose answer was labelled, as in ``systems/<system>/judge.jsonl``;
  or ``pair`` (``pairwise_judge``): ``"<first> vs <second>"`` as in ``pairwise.jsonl`` (the other order is
  accepted: its ``win`` and ``loss`` swap);
- ``criterion``: the rubric's name (``correctness``); may be left out when the judge has one rubric;
- ``label``: an integer on that rubric's scale (``llm_judge``), or ``win``, ``tie`` or ``loss`` of the
  pair's first system (``pairwise_judge``);
- optional ``answer`` (``llm_judge``): the answer text that was labelled; a label whose system now
  answers differently (white space collapsed) is left out and counted as stale;
- optional ``note``: free text, ignored.

Every defect is an :class:`~ragtrack.core.errors.InputError` ``file:line: problem``: a line that is not
a JSON object, a missing or unknown field, an unknown criterion, a label off the scale, the same
(qid, item, criterion) twice. Query ids and systems the job does not have are the caller's to count.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from ragtrack.core.errors import InputError, did_you_mean
from ragtrack.core.fields import GRADE, check_id, check_text
from ragtrack.core.files import read_json_objects, read_lines

Item = Literal["system", "pair"]
PAIR_SEPARATOR = " vs "
OUTCOMES = ("win", "tie", "loss")  # the categories of a pairwise label, of the pair's first system


@dataclass(frozen=True)
class HumanLabel:
    qid: str
    item: str  # a system, or a pair "first vs second"
    criterion: str
    label: int | str  # a score on the rubric's scale, or win / tie / loss
    line: int
    answer: str | None = None


@dataclass(frozen=True)
class HumanLabels:
    path: Path
    item: Item
    labels: list[HumanLabel]


def split_pair(pair: str) -> tuple[str, str]:
    """``"a vs b"`` -> ``("a", "b")``; ``ValueError`` unless it holds two non-empty names."""
    first, separator, second = pair.partition(PAIR_SEPARATOR)
    if not separator or not first.strip() or not second.strip() or PAIR_SEPARATOR in second:
        raise ValueError(f"pair {pair!r} must be '<first> vs <second>'")
    return first.strip(), second.strip()


def _fields(item: Item) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(required, optional) fields of a label line."""
    return ("qid", item, "label"), ("criterion", "note", *(("answer",) if item == "system" else ()))


def read_human_labels(path: str | Path, scales: Mapping[str, Sequence[int] | Sequence[str]], item: Item) -> HumanLabels:
    """The labels of ``path`` (format in the module docstring); ``scales``: criterion -> its categories."""
    path = Path(path).expanduser()
    kind = path.name.removesuffix(".gz").rpartition(".")[2]
    if kind not in ("jsonl", "tsv"):
        raise InputError(path, "human labels must be a .jsonl or .tsv file (optionally .gz)")
    rows = read_json_objects(path) if kind == "jsonl" else _tsv_rows(path, item)
    labels, first_line = [], {}
    for number, row in rows:
        label = _checked(row, path, number, scales, item)
        key = (label.qid, tuple(sorted(split_pair(label.item))) if item == "pair" else label.item, label.criterion)
        if key in first_line:
            raise InputError(
                path,
                f"a second label for query {label.qid!r}, {item} {label.item!r}, criterion {label.criterion!r} "
                f"(first on line {first_line[key]}); give one label per item",
                number,
            )
        first_line[key] = number
        labels.append(label)
    if not labels:
        raise InputError(path, "no labels in the file")
    return HumanLabels(path, item, labels)


def _tsv_rows(path: Path, item: Item):
    lines = read_lines(path)
    header = next(lines, None)
    if header is None:
        raise InputError(path, "empty file; expected a header line of tab-separated field names")
    number, text = header
    names = [name.strip(" ") for name in text.split("\t")]
    required, optional = _fields(item)
    if len(set(names)) < len(names) or not set(required) <= set(names):
        raise InputError(
            path,
            f"the header must name each of {', '.join(required)} once (and may name {', '.join(optional)}), "
            f"tab-separated; got {text!r}",
            number,
        )
    for number, text in lines:
        cells = text.split("\t")
        if len(cells) != len(names):
            raise InputError(path, f"expected {len(names)} tab-separated columns, got {len(cells)}", number)
        yield number, {name: cell.strip(" ") for name, cell in zip(names, cells)}


def _checked(row: dict, path: Path, number: int, scales: Mapping[str, Sequence], item: Item) -> HumanLabel:
    required, optional = _fields(item)
    unknown = sorted(set(row) - set(required) - set(optional))
    if unknown:
        raise InputError(
            path,
            f"unknown field {unknown[0]!r}; a label has {', '.join(required)} and optionally {', '.join(optional)}"
            f"{did_you_mean(unknown[0], [*required, *optional])}",
            number,
        )
    missing = [name for name in required if name not in row]
    if missing:
        raise InputError(path, f"missing field {missing[0]!r}", number)
    qid = check_id(row["qid"], path, number, "qid")
    name = row[item]
    if not isinstance(name, str) or not name.strip():
        raise InputError(path, f"{item!r} must be a non-empty string, got {name!r}", number)
    check_text(name, path, number, item)
    if item == "pair":
        try:
            name = PAIR_SEPARATOR.join(split_pair(name))
        except ValueError as exc:
            raise InputError(path, str(exc), number) from None
    criterion = row.get("criterion")
    if criterion is None or criterion == "":
        if len(scales) > 1:
            raise InputError(
                path, f"missing field 'criterion': the judge has several rubrics ({', '.join(scales)})", number
            )
        criterion = next(iter(scales))
    if not isinstance(criterion, str):
        raise InputError(
            path,
            f"'criterion' must be a rubric's name, got {criterion!r}; the judge's rubrics: {', '.join(map(str, scales))}",
            number,
        )
    if criterion not in scales:
        raise InputError(
            path,
            f"unknown criterion {criterion!r}; the judge's rubrics: {', '.join(map(str, scales))}"
            f"{did_you_mean(str(criterion), list(scales))}",
            number,
        )
    label = _label(row["label"], scales[criterion], path, number, criterion)
    answer = row.get("answer")
    if answer is not None and not isinstance(answer, str):
        raise InputError(path, f"'answer' must be a string, got {answer!r}", number)
    note = row.get("note")
    if note is not None and not isinstance(note, str):
        raise InputError(path, f"'note' must be a string, got {note!r}", number)
    return HumanLabel(qid, name, criterion, label, number, answer)


def _label(value: object, scale: Sequence, path: Path, number: int, criterion: str) -> int | str:
    """``value`` as one of ``scale``'s categories: integers (``4`` or ``"4"``: ASCII digits, as a TSV cell
    holds them), or words (win / tie / loss, any case)."""
    if all(isinstance(category, str) for category in scale):
        word = value.strip().lower() if isinstance(value, str) else None
        if word not in scale:
            raise InputError(path, f"label {value!r} is not one of {', '.join(scale)}", number)
        return word
    if isinstance(value, str) and GRADE.fullmatch(value.strip()):
        value = int(value.strip())
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(path, f"label {value!r} is not an integer on the {criterion} scale {sorted(scale)}", number)
    if value not in scale:
        raise InputError(path, f"label {value} is outside the {criterion} scale {sorted(scale)}", number)
    return value
