"""Loaders: BEIR and TREC formats, content hash, and one-line errors for every defect."""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from ragtrack.core.data import CorpusBuilder, first_repeat, load_beir, load_qrels
from ragtrack.core.errors import InputError
from tests.support import TOY


def make_dataset(folder: Path, corpus: str | None = None, queries: str | None = None, qrels: str | None = None) -> Path:
    """A copy of the toy dataset with some files replaced."""
    shutil.copytree(TOY, folder)
    for name, text in (("corpus.jsonl", corpus), ("queries.jsonl", queries), ("qrels/test.tsv", qrels)):
        if text is not None:
            (folder / name).write_bytes(text.encode() if isinstance(text, str) else text)
    return folder


def test_toy_loads_with_judged_queries_only() -> None:
    dataset = load_beir(TOY, "test")
    assert len(dataset.corpus) == 12
    assert list(dataset.queries) == ["q1", "q2", "q3", "q4", "q5", "q6"]  # q7 has no judgments
    assert dataset.qrels["q1"] == {"d1": 2, "d2": 0}
    assert dataset.answers["q2"] == ["mitochondria"]
    assert len(dataset.hash) == 64


def test_gzip_crlf_bom_and_trec_qrels_give_the_same_content(tmp_path: Path) -> None:
    folder = make_dataset(tmp_path / "d")
    corpus = (folder / "corpus.jsonl").read_bytes()
    (folder / "corpus.jsonl").unlink()
    (folder / "corpus.jsonl.gz").write_bytes(gzip.compress(b"\xef\xbb\xbf" + corpus.replace(b"\n", b"\r\n")))
    trec = "".join(f"{q} 0 {d} {g}\n" for q, docs in load_beir(TOY).qrels.items() for d, g in docs.items())
    (folder / "trec.qrels").write_text(trec)
    dataset = load_beir(folder, qrels_file=str(folder / "trec.qrels"))
    reference = load_beir(TOY)
    assert dataset.corpus.ids == reference.corpus.ids and dataset.corpus.texts == reference.corpus.texts
    assert dataset.qrels == reference.qrels
    assert dataset.hash != reference.hash  # the hash is of the bytes read


def test_hash_changes_with_any_file(tmp_path: Path) -> None:
    base = load_beir(TOY).hash
    folder = make_dataset(tmp_path / "d")
    (folder / "qrels/test.tsv").write_text((TOY / "qrels/test.tsv").read_text().replace("q6\td7\t1", "q6\td7\t2"))
    assert load_beir(folder).hash != base


CORPUS_OK = '{"_id": "d1", "title": "", "text": "x"}\n'
BAD_INPUTS = [
    ("corpus.jsonl", '{"_id": "d1", "text": "a"}\n{"_id": "d2", "text": \n', "corpus.jsonl:2: malformed JSON"),
    ("corpus.jsonl", '{"text": "a"}\n', "corpus.jsonl:1: missing field '_id'"),
    ("corpus.jsonl", '{"_id": "d1"}\n', "corpus.jsonl:1: missing field 'text'"),
    (
        "corpus.jsonl",
        CORPUS_OK + '{"_id": "d1", "text": "y"}\n',
        "corpus.jsonl:2: duplicate document id 'd1' (first on line 1)",
    ),
    (
        "corpus.jsonl",
        '\n{"_id": "d0", "text": "w"}\n' + CORPUS_OK + '{"_id": "d2", "text": "z"}\n{"_id": "d1", "text": "y"}\n',
        "corpus.jsonl:5: duplicate document id 'd1' (first on line 3)",
    ),
    (
        "corpus.jsonl",
        CORPUS_OK + '{"_id": "d2", "text": "y"}\n{"_id": "d2", "text": "z"}\n{"_id": "d1", "text": "w"}\n',
        "corpus.jsonl:3: duplicate document id 'd2' (first on line 2)",
    ),  # the first repeat in file order, not the first id repeated
    ("corpus.jsonl", '{"_id": "d 1", "text": "y"}\n', "corpus.jsonl:1: id 'd 1' contains whitespace"),
    ("corpus.jsonl", '{"_id": 7, "text": "y"}\n', "corpus.jsonl:1: '_id' must be a non-empty string, got 7"),
    (
        "corpus.jsonl",
        '{"_id": "d1", "title": "", "text": "  "}\n',
        "corpus.jsonl:1: document 'd1' has an empty title and text",
    ),
    ("corpus.jsonl", "[1, 2]\n", "corpus.jsonl:1: expected a JSON object, got list"),
    ("corpus.jsonl", b'{"_id": "d1", "text": "\xff"}\n', "corpus.jsonl:1: not valid UTF-8"),
    ("corpus.jsonl", "\n\n", "corpus.jsonl: corpus is empty"),
    ("queries.jsonl", '{"_id": "q1", "text": ""}\n', "queries.jsonl:1: query 'q1' has an empty text"),
    (
        "queries.jsonl",
        '{"_id": "q1", "text": "a"}\n{"_id": "q1", "text": "b"}\n',
        "queries.jsonl:2: duplicate query id 'q1'",
    ),
    (
        "qrels/test.tsv",
        "query-id\tcorpus-id\tscore\nq1\td1\thigh\n",
        "test.tsv:2: relevance grade 'high' is not an integer",
    ),
    (
        "qrels/test.tsv",
        "query-id\tcorpus-id\tscore\nq1\td1\t1.5\n",
        "test.tsv:2: relevance grade '1.5' is not an integer",
    ),
    ("qrels/test.tsv", "q1\td1\t1\nq1\td404\t1\n", "test.tsv:2: unknown document id 'd404' (not in the corpus)"),
    ("qrels/test.tsv", "q1\td1\t1\nq99\td1\t1\n", "test.tsv:2: unknown query id 'q99' (not in queries.jsonl)"),
    (
        "qrels/test.tsv",
        "q1\td1\t1\nq1\t1\t0\n",
        "test.tsv:2: unknown document id '1' (not in the corpus)",
    ),  # the id's line, not a grade's
    (
        "qrels/test.tsv",
        "q1 0 d1 0\nq1 0 0 1\n",
        "test.tsv:2: unknown document id '0' (not in the corpus)",
    ),  # TREC: not the iteration
    ("qrels/test.tsv", "q1\td1\t1\nd1\tq1\t1\n", "test.tsv:2: unknown query id 'd1' (not in queries.jsonl)"),
    ("qrels/test.tsv", "q1\td1\t1\nq1\td1\t2\n", "test.tsv:2: duplicate judgment for query 'q1' and document 'd1'"),
    ("qrels/test.tsv", "q1\td1\n", "test.tsv:1: expected 3 (BEIR) or 4 (TREC) columns, got 2"),
]


@pytest.mark.parametrize(
    ("name", "content", "message"), BAD_INPUTS, ids=[m.split(": ", 1)[1][:40] for _, _, m in BAD_INPUTS]
)
def test_bad_input_names_file_line_and_problem(tmp_path: Path, name: str, content: str, message: str) -> None:
    folder = make_dataset(
        tmp_path / "d",
        **{{"corpus.jsonl": "corpus", "queries.jsonl": "queries", "qrels/test.tsv": "qrels"}[name]: content},
    )
    with pytest.raises(InputError) as raised:
        load_beir(folder)
    assert message in str(raised.value)
    assert str(raised.value).startswith(str(folder))
    assert "\n" not in str(raised.value)


def test_missing_files(tmp_path: Path) -> None:
    folder = make_dataset(tmp_path / "d")
    (folder / "qrels/test.tsv").unlink()
    with pytest.raises(InputError, match=r"qrels/test.tsv: file not found"):
        load_beir(folder)
    with pytest.raises(InputError, match=r"qrels/dev.tsv: file not found"):
        load_beir(TOY, split="dev")
    with pytest.raises(InputError, match="dataset folder not found"):
        load_beir(tmp_path / "nowhere")
    with pytest.raises(
        InputError,
        match=r"corpus.jsonl: a file, not a folder: a BEIR dataset is the folder that holds corpus.jsonl, queries.jsonl and qrels/$",
    ):
        load_beir(folder / "corpus.jsonl")
    (folder / "corpus.jsonl").unlink()
    with pytest.raises(InputError, match=r"corpus.jsonl: file not found \(nor corpus.jsonl.gz\)"):
        load_beir(folder)


def test_trec_qrels_with_negative_grades(tmp_path: Path) -> None:
    path = tmp_path / "q.txt"
    path.write_text("q1 0 d1 -1\nq1 0 d2 3\n")
    qrels, digest = load_qrels(path)
    assert qrels == {"q1": {"d1": -1, "d2": 3}} and len(digest) == 64


def test_first_repeat_compares_ids_where_keys_collide() -> None:
    ids = ["a", "b", "c", "b", "a"]
    assert first_repeat(np.zeros(5, dtype=np.int64), ids) == 3  # every key equal: the ids decide
    assert first_repeat(np.array([hash(i) for i in ids], dtype=np.int64), ids) == 3
    assert first_repeat(np.zeros(3, dtype=np.int64), ["a", "b", "c"]) is None
    assert first_repeat(np.arange(3, dtype=np.int64), ["a", "b", "c"]) is None


@pytest.mark.parametrize("buckets", [3, 1 << 62])
def test_first_repeat_equals_a_set_of_every_id(buckets: int) -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        ids = [f"d{n}" for n in rng.integers(0, 400, size=int(rng.integers(1, 300)))]
        expected = next((position for position, doc in enumerate(ids) if doc in ids[:position]), None)
        assert first_repeat(np.array([hash(doc) % buckets for doc in ids], dtype=np.int64), ids) == expected


def test_a_repeated_id_is_named_where_its_document_was_added() -> None:
    builder = CorpusBuilder(lambda doc_id: f"row {doc_id}")
    for doc_id, where, line in [
        ("a", "first", 1),
        ("b", "first", 2),
        ("c", "second", None),
        ("b", "second", None),
        ("d", "third", 9),
    ]:
        builder.add(doc_id, "", "text", where, line)
    with pytest.raises(InputError) as raised:
        builder.corpus("all")
    assert str(raised.value) == "second: duplicate document id 'b' (first on row b)"
