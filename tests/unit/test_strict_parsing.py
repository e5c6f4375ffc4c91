"""Strict, trec_eval-compatible parsing: hostile corpus, queries, qrels and run files each give one exact
line (file, line, problem); the columnar reader agrees with the line reader on every case; the
columnar ``ragtrack eval`` path equals the dict path and pytrec_eval."""

from __future__ import annotations

import gzip
import os
import re
from pathlib import Path

import numpy as np
import pytest
import pytrec_eval

from ragtrack.core import columnar
from ragtrack.core.data import load_corpus, load_qrels, load_qrels_lines, load_queries
from ragtrack.core.errors import InputError
from ragtrack.core.fields import WHITESPACE
from ragtrack.core.runs import Run, RunColumns, read_run_columns, read_trec, read_trec_lines
from ragtrack.evaluators.ranking import ranking_values, score_ranking
from ragtrack.pipeline.commands.cli import main as cli_main

RUN = b"q1 Q0 d1 1 0.5 t\n"
SURROGATE = "lone surrogate \\ud800 at character 1"

# name -> (file kind, content or a special file, line, problem)
CASES = {
    # corpus.jsonl
    "corpus id with a lone surrogate": (
        "corpus",
        b'{"_id": "d\\ud800", "text": "x"}\n',
        1,
        f"_id 'd\\ud800' is not valid Unicode text ({SURROGATE})",
    ),
    "corpus text with a lone surrogate": (
        "corpus",
        b'{"_id": "d1", "text": "x\\udfff"}\n',
        1,
        "field 'text' is not valid Unicode text (lone surrogate \\udfff at character 1)",
    ),
    "corpus id with an ideographic space": (
        "corpus",
        b'{"_id": "d\\u30001", "text": "x"}\n',
        1,
        "id 'd\\u30001' contains whitespace, which TREC files cannot represent",
    ),
    "corpus line of a no-break space": ("corpus", "\u00a0\n".encode(), 1, "malformed JSON: Expecting value (column 1)"),
    "corpus invalid UTF-8 in the id": ("corpus", b'{"_id": "d\xc3", "text": "x"}\n', 1, "not valid UTF-8 (byte 10)"),
    "corpus FIFO": ("corpus", "fifo", None, "not a regular file (a FIFO)"),
    "corpus directory": ("corpus", "directory", None, "not a regular file (a directory)"),
    "corpus symlink loop": ("corpus", "loop", None, "symbolic link loop"),
    "corpus broken symlink": ("corpus", "dangling", None, "broken symbolic link"),
    "corpus gzip without .gz": (
        "corpus",
        gzip.compress(b'{"_id": "d1", "text": "x"}\n'),
        None,
        "gzip-compressed, but its name does not end in .gz",
    ),
    # queries.jsonl
    "query id with a lone surrogate": (
        "queries",
        b'{"_id": "q\\ud800", "text": "x"}\n',
        1,
        f"_id 'q\\ud800' is not valid Unicode text ({SURROGATE})",
    ),
    "answer with a lone surrogate": (
        "queries",
        b'{"_id": "q1", "text": "x", "answers": ["a\\ud800"]}\n',
        1,
        f"an answer of query 'q1' is not valid Unicode text ({SURROGATE})",
    ),
    "queries character device": ("queries", "device", None, "not a regular file (a character device)"),
    # qrels (BEIR tsv and TREC)
    "grade with an underscore": ("qrels", b"q1\td1\t1_0\n", 1, "relevance grade '1_0' is not an integer"),
    "grade in Arabic-Indic digits": (
        "qrels",
        "q1\td1\t\u0661\n".encode(),
        1,
        "relevance grade '\u0661' is not an integer",
    ),
    "grade in fullwidth digits": (
        "qrels",
        "q1 0 d1 \uff11\n".encode(),
        1,
        "relevance grade '\uff11' is not an integer",
    ),
    "grade as a superscript": ("qrels", "q1\td1\t\u00b2\n".encode(), 1, "relevance grade '\u00b2' is not an integer"),
    "float grade on the first line": (
        "qrels",
        b"q1\td1\t1.0\nq1\td2\t1\n",
        1,
        "relevance grade '1.0' is not an integer",
    ),
    "float grade on a later line": ("qrels", b"q1\td1\t1\nq1\td2\t2.0\n", 2, "relevance grade '2.0' is not an integer"),
    "grade beyond 64 bits": (
        "qrels",
        b"q1\td1\t99999999999999999999\n",
        1,
        "relevance grade '99999999999999999999' is out of range (a 64-bit integer)",
    ),
    "header after a judgment": (
        "qrels",
        b"q1\td1\t1\nquery-id\tcorpus-id\tscore\n",
        2,
        "the header 'query-id corpus-id score' is allowed only as the first non-blank line",
    ),
    "header with another column name": (
        "qrels",
        b"query-id\tcorpus-id\tgrade\nq1\td1\t1\n",
        1,
        "relevance grade 'grade' is not an integer",
    ),
    "header in capitals after a judgment": (
        "qrels",
        b"q1\td1\t1\nQuery-ID\tCorpus-ID\tScore\n",
        2,
        "the header 'Query-ID Corpus-ID Score' is allowed only as the first non-blank line",
    ),
    "qrels gzip without .gz": (
        "qrels",
        gzip.compress(b"q1\td1\t1\n"),
        None,
        "gzip-compressed, but its name does not end in .gz",
    ),
    "qrels id with a space in a TSV": (
        "qrels",
        b"q 1\td1\t1\n",
        1,
        "id 'q 1' contains whitespace, which TREC files cannot represent",
    ),
    "qrels id with a no-break space": (
        "qrels",
        "q1\u00a0 0 d1 1\n".encode(),
        1,
        "id 'q1\\xa0' contains whitespace, which TREC files cannot represent",
    ),
    "qrels FIFO": ("qrels", "fifo", None, "not a regular file (a FIFO)"),
    # TREC run files
    "score with an underscore": ("run", b"q1 Q0 d1 1 1_0 t\n", 1, "score '1_0' is not a number"),
    "score in Arabic-Indic digits": (
        "run",
        "q1 Q0 d1 1 \u0661.\u0665 t\n".encode(),
        1,
        "score '\u0661.\u0665' is not a number",
    ),
    "score in fullwidth digits": ("run", "q1 Q0 d1 1 \uff10.5 t\n".encode(), 1, "score '\uff10.5' is not a number"),
    "score inf": ("run", RUN + b"q1 Q0 d2 2 -inf t\n", 2, "score '-inf' is not finite"),
    "score NaN": ("run", b"q1 Q0 d1 1 NaN t\n", 1, "score 'NaN' is not finite"),
    "score that overflows": ("run", b"q1 Q0 d1 1 1e999 t\n", 1, "score '1e999' is not finite"),
    "score in hexadecimal": ("run", b"q1 Q0 d1 1 0x1p3 t\n", 1, "score '0x1p3' is not a number"),
    "run id with an ideographic space": (
        "run",
        "q1 Q0 d\u30001 1 0.5 t\n".encode(),
        1,
        "id 'd\\u30001' contains whitespace, which TREC files cannot represent",
    ),
    "run id with a control separator": (
        "run",
        b"q1 Q0 d\x1f1 1 0.5 t\n",
        1,
        "id 'd\\x1f1' contains whitespace, which TREC files cannot represent",
    ),
    "run invalid UTF-8": ("run", RUN + b"q1 Q0 d\xff 2 0.4 t\n", 2, "not valid UTF-8 (byte 7)"),
    "run with two spaces in a row": (
        "run",
        RUN + b"q1  d2 2 0.4 t\n",
        2,
        "expected 6 columns 'qid Q0 docid rank score tag', got 5",
    ),
    "run line starting with a space": (
        "run",
        RUN + b" q1 Q0 d2 2 0.4\n",
        2,
        "expected 6 columns 'qid Q0 docid rank score tag', got 5",
    ),
    "run line ending with a space": (
        "run",
        RUN + b"q1 Q0 d2 2 0.4 \n",
        2,
        "expected 6 columns 'qid Q0 docid rank score tag', got 5",
    ),
    "run duplicate in a grouped file": (
        "run",
        RUN + b"q1 Q0 d2 2 0.4 t\nq2 Q0 d1 1 0.5 t\nq2 Q0 d3 2 0.3 t\nq2 Q0 d1 3 0.2 t\n",
        5,
        "document 'd1' appears twice for query 'q2'",
    ),
    "run duplicate far apart": (
        "run",
        RUN + b"q2 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n",
        3,
        "document 'd1' appears twice for query 'q1'",
    ),
    "run lone carriage return": (
        "run",
        b"q1 Q0 d1 1 0.5 t\rq1 Q0 d2 2 0.4 t\n",
        1,
        "expected 6 columns 'qid Q0 docid rank score tag', got 11",
    ),
    "run duplicate after a tab-separated line": (
        "run",
        b"q1\tQ0\td1\t1\t0.5\tt\nq1 Q0 d1 2 0.4 t\n",
        2,
        "document 'd1' appears twice for query 'q1'",
    ),
    "run FIFO": ("run", "fifo", None, "not a regular file (a FIFO)"),
    "run gzip without .gz": (
        "run",
        gzip.compress(RUN * 100),
        None,
        "gzip-compressed, but its name does not end in .gz",
    ),
    "run symlink loop": ("run", "loop", None, "symbolic link loop"),
    "run directory": ("run", "directory", None, "not a regular file (a directory)"),
}


@pytest.fixture(autouse=True)
def columnar_reader_for_small_files(monkeypatch: pytest.MonkeyPatch) -> None:
    """The readers leave files under 256 KiB to the line reader; here every file goes to the columnar
    reader first, so that its answers are checked against the line reader's on these small files."""
    monkeypatch.setattr(columnar, "SMALL_FILE_BYTES", 0)


READERS = {"corpus": load_corpus, "queries": lambda path: load_queries(path)[:3], "qrels": load_qrels, "run": read_trec}
LINE_READERS = {"qrels": load_qrels_lines, "run": read_trec_lines}  # the references of the columnar reader
NAMES = {"corpus": "corpus.jsonl", "queries": "queries.jsonl", "qrels": "qrels.tsv", "run": "run.trec"}


def hostile_file(folder: Path, kind: str, content: bytes | str) -> Path:
    path = folder / NAMES[kind]
    if content == "fifo":
        os.mkfifo(path)
    elif content == "directory":
        path.mkdir()
    elif content == "loop":
        path.symlink_to(folder / "other")
        (folder / "other").symlink_to(path)
    elif content == "dangling":
        path.symlink_to(folder / "missing")
    elif content == "device":
        path.symlink_to("/dev/null")
    else:
        path.write_bytes(content)
    return path


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_file_gives_one_exact_line(tmp_path: Path, case: str) -> None:
    kind, content, line, problem = CASES[case]
    path = hostile_file(tmp_path, kind, content)
    readers = [READERS[kind]] + ([LINE_READERS[kind]] if kind in LINE_READERS else [])
    for reader in readers:
        with pytest.raises(InputError) as caught:
            reader(path)
        assert str(caught.value) == (f"{path}:{line}: {problem}" if line else f"{path}: {problem}")


def test_there_are_at_least_25_cases_over_every_kind_of_file() -> None:
    assert len(CASES) >= 25 and {kind for kind, *_ in CASES.values()} == set(READERS)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_permission_denied_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_bytes(RUN)
    path.chmod(0)
    with pytest.raises(InputError, match=r"run.trec: permission denied$"):
        read_trec(path)


def test_whitespace_class_is_exactly_str_isspace() -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    characters = [chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000]
    expected = [c.isspace() for c in characters]
    assert [bool(re.fullmatch(WHITESPACE, c)) for c in characters] == expected
    assert pc.match_substring_regex(pa.array(characters), WHITESPACE).to_pylist() == expected


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\nquery-id\tcorpus-id\tscore\nq1\td1\t1\n", {"q1": {"d1": 1}}),  # the header after a blank first line
        (b"query-id\tcorpus-id\tscore\r\nq1\td1\t-2\r\n", {"q1": {"d1": -2}}),
        (b"Query-ID\tCorpus-ID\tSCORE\nq1\td1\t1\n", {"q1": {"d1": 1}}),  # the header in any letter case
        (b"q1 0 d1 +3\nq1\t0\td2\t0\n", {"q1": {"d1": 3, "d2": 0}}),  # TREC, spaces or tabs
        (b"\xef\xbb\xbfq1\td1\t1\n\n  \nq2\td1\t0\n", {"q1": {"d1": 1}, "q2": {"d1": 0}}),
    ],
)
def test_qrels_accepted_by_both_readers(tmp_path: Path, content: bytes, expected: dict) -> None:
    path = tmp_path / "qrels.tsv"
    path.write_bytes(content)
    assert load_qrels(path) == load_qrels_lines(path)
    assert load_qrels(path)[0] == expected


@pytest.mark.parametrize(
    "content",
    [
        b"q1 Q0 d1 1 +.5e-3 t\nq1 Q0 d2 2 -7 t\nq2 Q0 d1 1 5. t\n",
        b"q1\tQ0\td1\t1\t0.5\tt\n  q1  Q0 d2 2 0.25 t  \n",  # tabs and runs of spaces: the line reader's case
        b"\xef\xbb\xbfq1 Q0 d1 1 0.5 t\r\nq1 Q0 d2 2 0.25 t\r\n",
    ],
)
def test_runs_accepted_by_both_readers(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run.trec"
    path.write_bytes(content)
    assert read_trec(path).scores == read_trec_lines(path).scores
    assert read_run_columns(path).to_run("r").scores == read_trec_lines(path).scores


def test_columnar_reader_declines_what_it_cannot_vouch_for(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_bytes(b"q1\tQ0\td1\t1\t0.5\tt\n")
    assert columnar.read_run(path) is None  # tabs: the line reader decides
    path.write_bytes(b"q1 Q0 d1 1 0.5 t\nq2 Q0 d1 1 0.25 t\n")
    queries, query_codes, documents, document_codes, scores = columnar.read_run(path)
    assert queries.to_pylist() == ["q1", "q2"] and query_codes.tolist() == [0, 1]
    assert documents.to_pylist() == ["d1"] and document_codes.tolist() == [0, 0] and scores.tolist() == [0.5, 0.25]


def test_arrow_score_syntax_is_fields_score_or_non_finite() -> None:
    """The columnar reader lets Arrow parse the scores: whatever Arrow takes as a finite number must match
    ``fields.SCORE`` and equal Python's ``float``; whatever ``SCORE`` matches Arrow must take (else
    fast files would go to the line reader). Checked on 5,000 random strings of number characters."""
    import pyarrow as pa

    from ragtrack.core.fields import SCORE

    rng = np.random.default_rng(0)
    numeric = list("0123456789+-.eE") + ["1e308", "9" * 30]
    wide = numeric + list("_xXpPnNaAiIfFtTyY,\u0661\uff11") + ["inf", "nan", "infinity"]
    strings = sorted(
        {"".join(rng.choice(alphabet, rng.integers(1, 8))) for alphabet in (numeric, wide) for _ in range(2_500)}
    )
    assert sum(bool(SCORE.fullmatch(text)) for text in strings) > 500
    for text in strings:  # one table per string: a string Arrow refuses fails its whole table
        table = columnar._table(f"x {text}\n".encode(), ["x", "score"], " ", {"score": pa.float64()})
        arrow = None if table is None else table["score"][0].as_py()
        if SCORE.fullmatch(text):
            assert arrow == float(text) or not np.isfinite(float(text)), text
        else:
            assert arrow is None or not np.isfinite(arrow), text


def random_case(seed: int, queries: int = 40, depth: int = 60) -> tuple[dict, dict]:
    """Graded qrels and a run with many score ties (scores rounded to 0.1)."""
    rng = np.random.default_rng(seed)
    qrels, run = {}, {}
    for q in range(queries):
        docs = [f"d{n}" for n in rng.choice(500, depth, replace=False)]
        run[f"q{q}"] = dict(zip(docs, np.round(rng.random(depth), 1).tolist()))
        judged = list(rng.choice(docs, rng.integers(1, 10), replace=False)) + [f"d{n}" for n in rng.choice(500, 3)]
        qrels[f"q{q}"] = {doc: int(rng.integers(-1, 4)) for doc in judged}
    qrels["unretrieved"] = {"d1": 2}
    return qrels, run


@pytest.mark.parametrize("seed", range(3))
def test_columnar_scoring_equals_the_dict_path_and_pytrec_eval(seed: int) -> None:
    qrels, run = random_case(seed)
    metrics = ["ndcg@10", "map", "recall@20", "p@5", "mrr", "r-precision", "ndcg_exp@10", "err@10", "auc"]
    columns = RunColumns.from_run(read_trec_run(run))
    _, values = ranking_values(columns, qrels, metrics)
    table = score_ranking(run, qrels, metrics)[0]
    for metric in metrics:
        assert values[metric].tolist() == table[metric].tolist(), metric
    reference = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "map", "P.5", "recip_rank"}).evaluate(run)
    for metric, trec in (("ndcg@10", "ndcg_cut_10"), ("map", "map"), ("p@5", "P_5"), ("mrr", "recip_rank")):
        ours = dict(zip(table.index, values[metric]))
        assert max(abs(ours[q] - reference[q][trec]) for q in reference) < 1e-9


@pytest.mark.parametrize("layout", ["ranked", "shuffled", "reversed within queries"])
def test_run_file_read_as_columns_scores_as_the_dict_path(tmp_path: Path, layout: str) -> None:
    """A run file in trec_eval order takes the fast path of ``judged_positions``; shuffled lines (queries
    interleaved) and queries in ascending score order are sorted first. Ties (scores rounded to 0.1,
    0.0 against -0.0) are broken by document id descending in every layout."""
    qrels, run = random_case(11)
    run["q0"] |= {"zero": 0.0, "negative-zero": -0.0, "d-minus": -0.0}
    qrels["q0"] |= {"zero": 1, "negative-zero": 2, "d-minus": 3}
    lines = [(qid, doc, score) for qid, ranked in Run("r", run).rankings() for doc, score in ranked]
    if layout == "shuffled":
        lines = [lines[i] for i in np.random.default_rng(0).permutation(len(lines))]
    elif layout == "reversed within queries":
        lines = [line for qid in run for line in reversed([line for line in lines if line[0] == qid])]
    path = tmp_path / "run.trec"
    path.write_text("".join(f"{qid} Q0 {doc} 0 {score!r} t\n" for qid, doc, score in lines))
    columns = read_run_columns(path)
    assert columnar.read_run(path) is not None  # the columnar reader took it
    metrics = ["ndcg@10", "map", "recall@20", "p@5", "mrr", "r-precision", "ndcg_exp@10", "err@10", "auc"]
    _, values = ranking_values(columns, qrels, metrics)
    table = score_ranking(run, qrels, metrics)[0]
    for metric in metrics:
        assert values[metric].tolist() == table[metric].tolist(), metric
    assert columns.to_run("r").scores == run


def read_trec_run(scores: dict):
    from ragtrack.core.runs import Run

    return Run("r", scores)


def test_eval_command_on_files_equals_the_python_api(tmp_path: Path, capsys) -> None:
    import json

    from ragtrack.pipeline.commands.api import evaluate

    qrels, run = random_case(7)
    (tmp_path / "qrels.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t{g}\n" for q, docs in qrels.items() for d, g in docs.items())
    )
    (tmp_path / "run.trec").write_text(
        "".join(f"{q} Q0 {d} 0 {s!r} t\n" for q, docs in run.items() for d, s in docs.items())
    )
    assert (
        cli_main(
            [
                "eval",
                str(tmp_path / "qrels.tsv"),
                str(tmp_path / "run.trec"),
                "-m",
                "ndcg@10",
                "-m",
                "map",
                "--json",
                "--per-query",
            ]
        )
        == 0
    )
    printed = json.loads(capsys.readouterr().out)
    expected = evaluate(qrels, run, ["ndcg@10", "map"]).to_dict(per_query=True)
    assert printed == json.loads(json.dumps(expected))


CLI_CASES = [
    "float grade on the first line",
    "grade in Arabic-Indic digits",
    "score with an underscore",
    "run FIFO",
    "run symlink loop",
    "run invalid UTF-8",
    "qrels FIFO",
]


@pytest.mark.parametrize("case", CLI_CASES)
def test_eval_command_exit_2_one_line_no_traceback(tmp_path: Path, case: str) -> None:
    import subprocess
    import sys

    kind, content, line, problem = CASES[case]
    qrels, run = tmp_path / "qrels.tsv", tmp_path / "run.trec"
    qrels.write_bytes(b"q1\td1\t1\n")
    run.write_bytes(RUN)
    for path in (qrels, run):
        if path.name == NAMES[kind]:
            path.unlink()
            hostile_file(tmp_path, kind, content)
    result = subprocess.run(
        [sys.executable, "-m", "ragtrack", "eval", str(qrels), str(run)], capture_output=True, text=True, timeout=120
    )
    where = f"{tmp_path / NAMES[kind]}:{line}" if line else str(tmp_path / NAMES[kind])
    assert result.returncode == 2
    assert result.stderr == f"ragtrack: error: {where}: {problem}\n"
    assert result.stdout == "" and "Traceback" not in result.stderr
