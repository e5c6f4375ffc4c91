"""What the LLM-judged evaluators share after the requests: lenient reading of list replies, the
replies handed out in order with each query's first failure kept, and the
report of queries that could not be scored (a warning with the count and the first error, and one
JSON line per query in the system's output folder).

A query whose request failed or whose reply could not be read is never scored 0: its metrics are
NaN, so it is left out of the means, and its ``error`` says why.
"""

from __future__ import annotations

import ast
import json
import logging
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from ragtrack.core.files import json_text, write_atomically

log = logging.getLogger(__name__)

_WHOLE_LIST = re.compile(r"\[.*\]", re.DOTALL)
_FLAT_LIST = re.compile(r"\[[^\[\]]*\]")


def string_list(reply: str) -> list[str]:
    """The list of strings in a reply: JSON (``["a", "b"]``) or a Python literal (``['a', 'b']``),
    alone, in a code fence or inside prose (there, the last list: the model's own, after any it
    quotes); ``ValueError`` says what is wrong."""
    text = reply.strip()
    for candidate in [text, *_WHOLE_LIST.findall(text), *reversed(_FLAT_LIST.findall(text))]:
        for read in (json.loads, ast.literal_eval):
            try:
                found = read(candidate)
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                continue
            if isinstance(found, list) and all(isinstance(item, str) for item in found):
                return found
    raise ValueError(f"no list of strings in the reply {' '.join(text.split())[:80]!r}")


def read_replies(
    asked: Mapping[tuple, tuple],
    replies: Mapping[tuple, str],
    failures: Mapping[tuple, str],
    accept: Callable[[tuple, str], None],
) -> dict[str, str]:
    """Hand each reply to ``accept(item, reply)`` in the order of ``asked`` (request key: a tuple whose
    first element is the query id, so that its tokens count for that query -> item whose first element
    is the query id); returns errors by query id: a query's first failed request, or
    ``unparseable reply: ...`` when ``accept`` raises ``ValueError``; its later replies are skipped."""
    errors: dict[str, str] = {}
    for key, item in asked.items():
        qid = item[0]
        if qid in errors:
            continue
        if key in failures:
            errors[qid] = failures[key]
            continue
        try:
            accept(item, replies[key])
        except ValueError as exc:
            errors[qid] = f"unparseable reply: {exc}"
    return errors


def report(evaluator: str, system: str, records: Sequence[dict], output_dir: str | None, file_name: str) -> None:
    """Warn about the records with an ``error`` (count and first) and write every record as one JSON
    line to ``<output_dir>/systems/<system>/<file_name>`` (when ``output_dir`` is set)."""
    failed = [r for r in records if r["error"]]
    if failed:
        log.warning(
            "%s %s: %d of %d queries not scored (left out of the means); first: %s: %s",
            evaluator,
            system,
            len(failed),
            len(records),
            failed[0]["qid"],
            failed[0]["error"],
        )
    if output_dir:
        lines = "".join(json_text(r, ensure_ascii=False) + "\n" for r in records)
        write_atomically(Path(output_dir) / "systems" / system / file_name, lines)
