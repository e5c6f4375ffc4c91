"""The run-file retriever (retrievers/run_file.py): a TREC run read by ``ragtrack eval``'s reader, in
trec_eval order, cut at the depth, named by ``system``, identified by its content; and
``Corpus.texts_of``, which stops a reader of texts at a document the corpus does not have."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import pytest

from ragtrack.core.data import Corpus
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.core.runs import read_run_columns
from ragtrack.retrievers.run_file import RunFileRetriever

LINES = "q2 Q0 d9 1 0.5 x\nq1 Q0 d1 1 2.0 x\nq1 Q0 d3 7 9.25 x\nq1 Q0 d2 3 2.0 x\n"  # ranks wrong, ties, queries interleaved


def test_the_run_is_the_reader_of_ragtrack_eval_in_trec_eval_order(tmp_path: Path) -> None:
    path = tmp_path / "other.trec"
    path.write_text(LINES)
    retriever = RunFileRetriever(path=str(path))
    assert retriever.name == "run_file"
    expected = read_run_columns(path).to_run("run_file")
    assert retriever.search({"q1": "", "q2": "", "q3": ""}, 100).scores == expected.scores  # q3: not in the file
    assert retriever.search({"q1": ""}, 2).ranking("q1") == [
        ("d3", 9.25),
        ("d2", 2.0),
    ]  # score, then the larger id first
    assert RunFileRetriever(name="run_file", path=str(path), system="anserini").name == "anserini"


def test_a_gzip_file_gives_the_same_run(tmp_path: Path) -> None:
    (tmp_path / "other.trec").write_text(LINES)
    (tmp_path / "other.trec.gz").write_bytes(gzip.compress(LINES.encode()))
    assert (
        RunFileRetriever(path=str(tmp_path / "other.trec.gz")).run.scores
        == RunFileRetriever(path=str(tmp_path / "other.trec")).run.scores
    )


def test_the_identity_is_the_files_content_not_its_path(tmp_path: Path) -> None:
    path = tmp_path / "other.trec"
    path.write_text(LINES)
    shutil.copy(path, tmp_path / "copy.trec")
    assert RunFileRetriever(path=str(tmp_path / "copy.trec")).identity() == RunFileRetriever(path=str(path)).identity()
    first = RunFileRetriever(path=str(path)).identity()
    path.write_text(LINES.replace("0.5", "0.75"))
    assert RunFileRetriever(path=str(path)).identity() != first


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("q1 Q0 d1 1 2.0 x\nq1 Q0 d2 2 x\n", "2: expected 6 columns 'qid Q0 docid rank score tag', got 5"),
        ("q1 Q0 d1 1 nan x\n", "1: score 'nan' is not finite"),
        ("q1 Q0 d1 1 2 x\nq1 Q0 d1 2 1 x\n", "2: document 'd1' appears twice for query 'q1'"),
        ("", " no results: the run file is empty"),
    ],
)
def test_a_malformed_file_is_one_line_naming_file_and_line(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "bad.trec"
    path.write_text(text)
    with pytest.raises(InputError) as caught:
        RunFileRetriever(path=str(path))
    assert str(caught.value) == f"{path}:{problem}"


def test_a_missing_file_and_a_missing_path_are_one_line(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"^nope\.trec: file not found$"):
        RunFileRetriever(path="nope.trec")
    with pytest.raises(RagtrackError, match=r"^run file 'run_file': path: a value is required$"):
        RunFileRetriever()


def test_texts_of_reads_the_corpus_and_refuses_an_unknown_document() -> None:
    corpus = Corpus(["d1", "d2"], ["T1", "T2"], ["text one", "text two"], "h")
    assert corpus.texts_of(["d2"], "reader") == {"d2": "T2 text two"}
    assert corpus.texts_of(["d1"], "reader", full=False) == {"d1": "text one"}
    with pytest.raises(
        RagtrackError,
        match=r"^bm25\+ce \(reranking anserini\): no text for 2 of its documents, which are not in the corpus "
        r"\(e\.g\. 'x1'\)$",
    ):
        corpus.texts_of(["d1", "x2", "x1"], "bm25+ce (reranking anserini)")
