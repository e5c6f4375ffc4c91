"""Malformed input: every loader and the CLI reject it with one line naming file, line and problem
(exit code 2, no traceback) and write nothing; BOMs, CRLF and unjudged queries are accepted."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from ragtrack.core import files
from ragtrack.core.data import load_beir
from ragtrack.core.errors import InputError
from ragtrack.core.runs import read_trec
from ragtrack.pipeline.commands import api
from ragtrack.pipeline.commands.cli import main as cli_main
from tests.support import TOY, ragtrack

DOC = b'{"_id": "d1", "title": "t", "text": "x"}\n'
QUERY = b'{"_id": "q1", "text": "x"}\n'

# (file of the toy dataset to replace, its new bytes, expected line, expected problem)
DATASET_CASES = {
    "corpus malformed JSON": (
        "corpus.jsonl",
        DOC + b'{"_id": "d2", "text": \n',
        2,
        "malformed JSON: Expecting value (column 23)",
    ),
    "corpus deeply nested JSON": (
        "corpus.jsonl",
        DOC + b"[" * 100_000 + b"]" * 100_000 + b"\n",
        2,
        "malformed JSON: nesting too deep",
    ),
    "corpus JSON array": ("corpus.jsonl", b'["d1", "x"]\n', 1, "expected a JSON object, got list"),
    "corpus NUL byte": ("corpus.jsonl", DOC + b'{"_id": "d2", "text": "a\x00b"}\n', 2, "NUL byte in line"),
    "corpus Latin-1": (
        "corpus.jsonl",
        DOC + '{"_id": "d2", "text": "café"}\n'.encode("latin-1"),
        2,
        "not valid UTF-8 (byte 26)",
    ),
    "corpus UTF-16": (
        "corpus.jsonl",
        DOC.decode().encode("utf-16"),
        1,
        "UTF-16 text (byte-order mark): save the file as UTF-8",
    ),
    "corpus duplicate id": ("corpus.jsonl", DOC + b"\n" + DOC, 3, "duplicate document id 'd1' (first on line 1)"),
    "corpus id with space": (
        "corpus.jsonl",
        b'{"_id": "d 1", "text": "x"}\n',
        1,
        "id 'd 1' contains whitespace, which TREC files cannot represent",
    ),
    "corpus id with tab": (
        "corpus.jsonl",
        b'{"_id": "d\\t1", "text": "x"}\n',
        1,
        "id 'd\\t1' contains whitespace, which TREC files cannot represent",
    ),
    "corpus numeric id": ("corpus.jsonl", b'{"_id": 7, "text": "x"}\n', 1, "'_id' must be a non-empty string, got 7"),
    "corpus missing id": ("corpus.jsonl", b'{"text": "x"}\n', 1, "missing field '_id'"),
    "corpus empty document": (
        "corpus.jsonl",
        b'{"_id": "d1", "title": "", "text": "  "}\n',
        1,
        "document 'd1' has an empty title and text",
    ),
    "corpus text not a string": (
        "corpus.jsonl",
        b'{"_id": "d1", "text": ["x"]}\n',
        1,
        "field 'text' must be a string, got list",
    ),
    "corpus empty": ("corpus.jsonl", b"", None, "corpus is empty"),
    "corpus blank lines only": ("corpus.jsonl", b"\n \r\n\n", None, "corpus is empty"),
    "queries duplicate id": ("queries.jsonl", QUERY + QUERY, 2, "duplicate query id 'q1' (first on line 1)"),
    "queries empty text": ("queries.jsonl", b'{"_id": "q1", "text": " "}\n', 1, "query 'q1' has an empty text"),
    "queries bad answers": (
        "queries.jsonl",
        b'{"_id": "q1", "text": "x", "answers": "y"}\n',
        1,
        "'answers' of query 'q1' must be a list of strings",
    ),
    "queries none": ("queries.jsonl", b"\n", None, "no queries"),
    "qrels bad grade": (
        "qrels/test.tsv",
        b"query-id\tcorpus-id\tscore\nq1\td1\thigh\n",
        2,
        "relevance grade 'high' is not an integer",
    ),
    "qrels fractional grade": ("qrels/test.tsv", b"q1\td1\t1.5\n", 1, "relevance grade '1.5' is not an integer"),
    "qrels wrong columns": ("qrels/test.tsv", b"q1\td1\n", 1, "expected 3 (BEIR) or 4 (TREC) columns, got 2"),
    "qrels duplicate judgment": (
        "qrels/test.tsv",
        b"q1 0 d1 1\nq1 0 d1 2\n",
        2,
        "duplicate judgment for query 'q1' and document 'd1'",
    ),
    "qrels unknown query": (
        "qrels/test.tsv",
        b"q1\td1\t1\nq99\td1\t1\n",
        2,
        "unknown query id 'q99' (not in queries.jsonl)",
    ),
    "qrels unknown document": (
        "qrels/test.tsv",
        b"q1\td1\t1\nq1\td99\t1\n",
        2,
        "unknown document id 'd99' (not in the corpus)",
    ),
    "qrels empty": ("qrels/test.tsv", b"query-id\tcorpus-id\tscore\n", None, "no judgments"),
    "qrels query id with space": (
        "qrels/test.tsv",
        b"q 1\td1\t1\n",
        1,
        "id 'q 1' contains whitespace, which TREC files cannot represent",
    ),
}


def _dataset(tmp_path: Path, replace: str | None = None, content: bytes = b"") -> Path:
    folder = tmp_path / "dataset"
    shutil.copytree(TOY, folder)
    if replace:
        (folder / replace).write_bytes(content)
    return folder


@pytest.mark.parametrize("case", list(DATASET_CASES))
def test_malformed_dataset_file(tmp_path: Path, case: str) -> None:
    name, content, line, problem = DATASET_CASES[case]
    folder = _dataset(tmp_path, name, content)
    with pytest.raises(InputError) as caught:
        load_beir(folder)
    where = f"{folder / name}:{line}" if line else str(folder / name)
    assert str(caught.value) == f"{where}: {problem}"
    assert "\n" not in str(caught.value)


def test_huge_line_is_rejected_without_reading_it_whole(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4096)
    folder = _dataset(tmp_path, "corpus.jsonl", DOC + b'{"_id": "d2", "text": "' + b"x" * 10_000 + b'"}\n')
    with pytest.raises(InputError, match=r"corpus.jsonl:2: line longer than 4,096 bytes$"):
        load_beir(folder)


@pytest.mark.parametrize("name", ["run.trec.gz", "qrels.tsv.gz"])
def test_a_gzip_bomb_is_refused_at_the_line_cap_without_inflating_it(tmp_path: Path, name: str, monkeypatch) -> None:
    """25 KB that inflate to one line of 24 MB (the cap set at 4 MB): the line cap's error, with less than
    two caps of memory held (the columnar reader inflates block by block, as the line reader does)."""
    import tracemalloc

    from ragtrack.core.data import load_qrels

    monkeypatch.setattr(files, "MAX_LINE_BYTES", 4 * 2**20)
    path = tmp_path / name
    with gzip.open(path, "wb", compresslevel=9) as handle:
        handle.write(b"q1 Q0 d1 1 1.0 t\n" if name.startswith("run") else b"q1 0 d1 1\n")
        handle.write(b"x" * 24 * 2**20)
    tracemalloc.start()
    try:
        with pytest.raises(InputError, match=rf"{name}:2: line longer than 4,194,304 bytes$"):
            read_trec(path) if name.startswith("run") else load_qrels(path)
        assert tracemalloc.get_traced_memory()[1] < 2 * 4 * 2**20 + 2**21
    finally:
        tracemalloc.stop()


BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)


@pytest.mark.parametrize(
    "text, problem",
    [
        (BOMB, "its aliases expand to more than 1,000,000 values"),
        ("a: &a [1, *a]\n", "an alias refers to the node that holds it"),
        ("name: x\n" + "#" * (files.MAX_YAML_BYTES + 1), "larger than 16,777,216 bytes"),
    ],
)
def test_yaml_bombs_are_refused_wherever_ragtrack_reads_yaml_it_did_not_write(
    tmp_path: Path, capsys, text: str, problem: str
) -> None:
    """A rubric, a regressions file, a reference table and a --config-dir file: one line, nothing expanded."""
    from ragtrack.evaluators.judge import load_rubric
    from ragtrack.pipeline.analysis.reference import read_table
    from ragtrack.pipeline.commands.regress import load_conditions

    path = tmp_path / "conf" / "dataset" / "mine.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    for read in (load_rubric, load_conditions, read_table):
        with pytest.raises(InputError, match=problem):
            read(path) if read is not load_rubric else read(str(path))
    assert cli_main(["run", "--config-dir", str(tmp_path / "conf"), "dataset=mine"]) == 2
    assert capsys.readouterr().err == f"ragtrack: error: {path}: config file refused: {problem}\n"
    with pytest.raises(InputError, match=problem):  # the Python API's config_dir too
        api.run_experiment(["dataset=mine"], config_dir=tmp_path / "conf")


def test_truncated_and_fake_gzip_corpus(tmp_path: Path) -> None:
    folder = _dataset(tmp_path)
    (folder / "corpus.jsonl").unlink()
    whole = gzip.compress((TOY / "corpus.jsonl").read_bytes())
    (folder / "corpus.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    with pytest.raises(
        InputError, match=r"corpus.jsonl.gz: corrupt or truncated gzip after line \d+: Compressed file ended"
    ):
        load_beir(folder)
    (folder / "corpus.jsonl.gz").write_bytes((TOY / "corpus.jsonl").read_bytes())
    with pytest.raises(
        InputError, match=r"corpus.jsonl.gz: corrupt or truncated gzip at its start: Not a gzipped file"
    ):
        load_beir(folder)


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"/nowhere: dataset folder not found$"):
        load_beir(tmp_path / "nowhere")
    folder = _dataset(tmp_path)
    (folder / "queries.jsonl").unlink()
    with pytest.raises(InputError, match=r"queries.jsonl: file not found$"):
        load_beir(folder)
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(InputError, match=r"corpus.jsonl: file not found \(nor corpus.jsonl.gz\)$"):
        load_beir(folder)


def test_bom_crlf_and_unjudged_queries_are_accepted(tmp_path: Path) -> None:
    folder = _dataset(tmp_path)
    for name in ("corpus.jsonl", "queries.jsonl", "qrels/test.tsv"):
        text = (folder / name).read_bytes().replace(b"\n", b"\r\n")
        (folder / name).write_bytes(b"\xef\xbb\xbf" + text)
    with open(folder / "queries.jsonl", "ab") as handle:
        handle.write(b'{"_id": "q-unjudged", "text": "never judged"}\r\n')
    reference, accepted = load_beir(TOY), load_beir(folder)
    assert (accepted.corpus.ids, accepted.corpus.texts, accepted.queries, accepted.qrels) == (
        reference.corpus.ids,
        reference.corpus.texts,
        reference.queries,
        reference.qrels,
    )
    assert "q-unjudged" not in accepted.queries


RUN_CASES = {
    "wrong columns": (b"q1 Q0 d1 1 0.5\n", 1, "expected 6 columns 'qid Q0 docid rank score tag', got 5"),
    "score not a number": (b"q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 high t\n", 2, "score 'high' is not a number"),
    "score not finite": (b"q1 Q0 d1 1 nan t\n", 1, "score 'nan' is not finite"),
    "duplicate document": (b"q1 Q0 d1 1 0.5 t\nq1 Q0 d1 2 0.4 t\n", 2, "document 'd1' appears twice for query 'q1'"),
    "NUL byte": (b"q1 Q0 d1 1 0.5 t\x00\n", 1, "NUL byte in line"),
    "not UTF-8": (b"q1 Q0 d\xe91 1 0.5 t\n", 1, "not valid UTF-8 (byte 7)"),
    "empty": (b"\n\n", None, "no results: the run file is empty"),
}


@pytest.mark.parametrize("case", list(RUN_CASES))
def test_malformed_run_file(tmp_path: Path, case: str) -> None:
    content, line, problem = RUN_CASES[case]
    path = tmp_path / "run.trec"
    path.write_bytes(content)
    with pytest.raises(InputError) as caught:
        read_trec(path)
    assert str(caught.value) == (f"{path}:{line}: {problem}" if line else f"{path}: {problem}")


def test_run_file_with_bom_and_crlf_is_accepted(tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 0.5 t\r\nq1 Q0 d2 2 0.25 t\r\n")
    assert read_trec(path).scores == {"q1": {"d1": 0.5, "d2": 0.25}}


@pytest.mark.parametrize(
    ("qrels", "run", "message"),
    [
        ("qrels.tsv", b"q1 Q0 d1 1 0.5\n", "{run}:1: expected 6 columns 'qid Q0 docid rank score tag', got 5"),
        ("missing.tsv", b"q1 Q0 d1 1 0.5 t\n", "{qrels}: file not found"),
        ("qrels.tsv", None, "{run}: file not found"),
    ],
)
def test_eval_command_reports_one_line_and_exit_2(
    tmp_path: Path, capsys, qrels: str, run: bytes | None, message: str
) -> None:
    (tmp_path / "qrels.tsv").write_bytes(b"q1\td1\t1\n")
    if run is not None:
        (tmp_path / "run.trec").write_bytes(run)
    qrels_path, run_path = tmp_path / qrels, tmp_path / "run.trec"
    assert cli_main(["eval", str(qrels_path), str(run_path)]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"ragtrack: error: {message.format(run=run_path, qrels=qrels_path)}\n"
    assert captured.out == ""


@pytest.mark.parametrize(
    ("replace", "content", "problem"),
    [
        (
            "corpus.jsonl",
            DOC + b'{"_id": "d1", "text": "again"}\n',
            "corpus.jsonl:2: duplicate document id 'd1' (first on line 1)",
        ),
        (
            "qrels/test.tsv",
            b"q1\td1\t1\nq1\td99\t1\n",
            "qrels/test.tsv:2: unknown document id 'd99' (not in the corpus)",
        ),
    ],
)
def test_run_command_fails_before_writing_anything(tmp_path: Path, replace: str, content: bytes, problem: str) -> None:
    folder = _dataset(tmp_path, replace, content)
    result = ragtrack(
        tmp_path, "run", "dataset=beir", f"dataset.path={folder}", "encoder=hashing", "hydra.run.dir=outputs/job"
    )
    assert result.returncode == 2
    assert result.stderr == f"ragtrack: error: {folder}/{problem}\n"
    assert "Traceback" not in result.stdout
    assert not (tmp_path / "mlruns").exists()  # no MLflow store, so no run left RUNNING
    assert not (tmp_path / ".cache").exists()
    assert not (tmp_path / "outputs" / "job" / "results.json").exists()
