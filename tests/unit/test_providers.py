"""Dataset providers: an ir_datasets id (registered here over local files, through ir_datasets' public
API) gives exactly the BEIR folder of the same files; TREC topics (tsv and classic), an MS MARCO-style
tsv corpus and gzip read as strictly as BEIR files, every malformed variant one line naming file and
line; an unknown id or field is one line with a did-you-mean."""

from __future__ import annotations

import gzip
import shutil
import warnings
from pathlib import Path

import ir_datasets
import pandas as pd
import pytest
from ir_datasets.datasets.base import Dataset as IrdsCollection
from ir_datasets.datasets.beir import BeirDocs, BeirQrels, BeirQueries, BeirTitleDoc
from ir_datasets.formats import GenericQuery
from ir_datasets.util import LocalDownload

import ragtrack
from ragtrack.core.data import check_judged_documents, load_beir, load_topics, load_tsv_corpus
from ragtrack.core.errors import InputError, RagtrackError
from ragtrack.evaluators.providers import IrdsDataset, TrecDataset, dataset_from_frames
from ragtrack.pipeline.configuration.inputs import load_dataset
from tests.support import TOY

SCIFACT = TOY.parent / "scifact"


def register_beir_folder(folder: Path, dataset_id: str, scratch: Path) -> None:
    """``dataset_id`` in ir_datasets' registry over the files of a BEIR folder, as ir_datasets defines
    its own BEIR datasets (BeirDocs, BeirQueries, BeirQrels) but reading local files."""
    corpus = folder / "corpus.jsonl"
    if not corpus.exists():
        corpus = scratch / f"{folder.name}-corpus.jsonl"
        with gzip.open(folder / "corpus.jsonl.gz", "rb") as packed, open(corpus, "wb") as plain:
            shutil.copyfileobj(packed, plain)
    if dataset_id not in ir_datasets.registry:
        ir_datasets.registry.register(
            dataset_id,
            IrdsCollection(
                BeirDocs(dataset_id, LocalDownload(corpus), BeirTitleDoc),
                BeirQueries(dataset_id, LocalDownload(folder / "queries.jsonl"), GenericQuery),
                BeirQrels(LocalDownload(folder / "qrels" / "test.tsv"), qrels_defs={}),
            ),
        )


@pytest.fixture(scope="module")
def irds_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("irds-home")
    register_beir_folder(TOY, "ragtrack-test/toy", home)
    register_beir_folder(SCIFACT, "ragtrack-test/scifact", home)
    return home


def test_irds_equals_the_beir_folder_of_the_same_files(irds_home) -> None:
    beir = load_beir(SCIFACT)
    irds = load_dataset({"type": "irds", "id": "ragtrack-test/scifact", "home": str(irds_home)})
    assert list(irds.corpus.ids) == list(beir.corpus.ids)
    assert list(irds.corpus.titles) == list(beir.corpus.titles) and list(irds.corpus.texts) == list(beir.corpus.texts)
    assert irds.queries == beir.queries and irds.qrels == beir.qrels
    assert irds.source == "irds:ragtrack-test/scifact" and irds.name == "ragtrack-test-scifact"
    assert (
        set(irds.hashes) == {"documents", "queries", "qrels"} and irds.hash != beir.hash
    )  # hashed as read, not as stored


def test_irds_job_equals_the_beir_job_on_every_metric(irds_home, tmp_path) -> None:
    common = ["retriever=[bm25]", "fusion=[]", "tracking=none", f"paths.cache_dir={tmp_path / 'cache'}"]
    beir = ragtrack.run_experiment(["dataset=toy", *common, f"paths.output_dir={tmp_path / 'beir'}"])
    irds = ragtrack.run_experiment(
        [
            "dataset=irds",
            "dataset.id=ragtrack-test/toy",
            f"dataset.home={irds_home}",
            *common,
            f"paths.output_dir={tmp_path / 'irds'}",
        ]
    )
    assert irds.systems == beir.systems  # every metric, to the last digit
    assert irds.results["aggregates"] == beir.results["aggregates"]
    assert irds.results["dataset"]["name"] == "ragtrack-test-toy" and irds.results["dataset"]["provider"] == "irds"


def test_irds_fields_choose_the_text(irds_home) -> None:
    text_only = load_dataset({"type": "irds", "id": "ragtrack-test/toy", "home": str(irds_home), "fields": ["text"]})
    beir = load_beir(TOY)
    assert list(text_only.corpus.texts) == list(beir.corpus.texts) and set(text_only.corpus.titles) == {""}
    swapped = load_dataset(
        {"type": "irds", "id": "ragtrack-test/toy", "home": str(irds_home), "fields": ["text", "title"]}
    )
    assert list(swapped.corpus.titles) == list(beir.corpus.texts)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"id": "ragtrack-test/toi"},
            "dataset.id: 'ragtrack-test/toi' is not an ir_datasets id; did you mean 'ragtrack-test/toy'?",
        ),
        (
            {"id": "ragtrack-test/toy", "fields": ["body"]},
            "dataset.fields: 'body' is not a field of ir_datasets 'ragtrack-test/toy'; its fields: doc_id, text, title",
        ),
        (
            {"id": "ragtrack-test/toy", "query_field": "txt"},
            "dataset.query_field: 'txt' is not a field of ir_datasets 'ragtrack-test/toy'; its fields: query_id, text; did you mean 'text'?",
        ),
    ],
)
def test_irds_mistakes_are_one_line(irds_home, settings, message) -> None:
    with pytest.raises(RagtrackError) as error:
        IrdsDataset(home=str(irds_home), **settings).load()
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_an_irds_download_that_fails_is_one_line(irds_home, tmp_path) -> None:
    ir_datasets.registry.register(
        "ragtrack-test/gone",
        IrdsCollection(
            BeirDocs("ragtrack-test/gone", LocalDownload(tmp_path / "missing.jsonl"), BeirTitleDoc),
            BeirQueries("ragtrack-test/gone", LocalDownload(TOY / "queries.jsonl"), GenericQuery),
            BeirQrels(LocalDownload(TOY / "qrels" / "test.tsv"), qrels_defs={}),
        ),
    )
    with pytest.raises(RagtrackError, match=r"^ir_datasets 'ragtrack-test/gone': cannot read its documents: ") as error:
        IrdsDataset(id="ragtrack-test/gone", home=str(irds_home)).load()
    assert "\n" not in str(error.value)


# ----------------------------------------------------------------------------- trec

CLASSIC = """<top>
<num> Number: 301
<title> International Organized Crime
<desc> Description:
Identify organizations that participate
in international criminal activity.
<narr> Narrative:
A relevant document must name an organization.
</top>

<top>
<num> Number: 302 <title> Poliomyelitis and Post-Polio
<desc> Description: Is the disease coming back?
<narr> Narrative: Anything about polio.
</top>
"""


def test_classic_topics_give_each_field(tmp_path) -> None:
    path = tmp_path / "topics.301-302"
    path.write_text(CLASSIC)
    assert load_topics(path, "title")[0] == {
        "301": "International Organized Crime",
        "302": "Poliomyelitis and Post-Polio",
    }
    assert load_topics(path, "description")[0] == {
        "301": "Identify organizations that participate in international criminal activity.",
        "302": "Is the disease coming back?",
    }
    assert load_topics(path, "narrative")[0]["302"] == "Anything about polio."


def test_topic_markup_and_entities_are_not_query_text(tmp_path) -> None:
    """Closing tags, inline tags and entities, as TREC Robust and Web track topics have them."""
    path = tmp_path / "topics"
    path.write_text(
        "<top>\n<num> Number: 401 </num>\n<title> <i>Titanic</i> &amp; icebergs </title>\n"
        "<desc> Description: Ships &lt;1900&gt; and &#39;ice&#39;. </desc>\n</top>\n"
    )
    assert load_topics(path, "title")[0] == {"401": "Titanic & icebergs"}
    assert load_topics(path, "description")[0] == {"401": "Ships <1900> and 'ice'."}


def test_tsv_topics_and_corpus_gzip(tmp_path) -> None:
    topics = tmp_path / "queries.tsv.gz"
    with gzip.open(topics, "wt", encoding="utf-8") as out:
        out.write("q1\twhat is bm25\nq2\t dense retrieval \n")
    assert load_topics(topics)[0] == {"q1": "what is bm25", "q2": "dense retrieval"}
    corpus = tmp_path / "collection.tsv"
    corpus.write_text("d1\tBM25 is a ranking function\nd2\tDense\tretrieval with vectors\n")
    loaded = load_tsv_corpus(corpus)
    assert (
        list(loaded.ids) == ["d1", "d2"]
        and list(loaded.titles) == ["", "Dense"]
        and list(loaded.full_texts()) == ["BM25 is a ranking function", "Dense retrieval with vectors"]
    )


@pytest.mark.parametrize(
    ("content", "ids", "header"),
    [
        ("docid\ttitle\ttext\nd1\tT\tone\nd2\t\ttwo\n", ["d1", "d2"], "1: skipped the header line 'docid title text'"),
        ("\n_id\ttext\nd1\tone\n", ["d1"], "2: skipped the header line '_id text'"),  # the first non-blank line
        (
            "DocID \t Title\tBody\nd1\tT\tone\n",
            ["d1"],
            "1: skipped the header line 'DocID Title Body'",
        ),  # any case, spaces around
        ("pid\tpassage\nd1\tone\n", ["d1"], "1: skipped the header line 'pid passage'"),
        ("id\tsome text\nd1\tone\n", ["id", "d1"], None),  # a cell that is no column name: a document
        ("d1\ttext\n", ["d1"], None),
    ],
)
def test_a_tsv_corpus_header_is_skipped_and_said(tmp_path, caplog, content, ids, header) -> None:
    path = tmp_path / "collection.tsv"
    path.write_text(content)
    with caplog.at_level("INFO", logger="ragtrack.core.data"):
        assert list(load_tsv_corpus(path).ids) == ids
    said = [r.getMessage() for r in caplog.records if "header" in r.getMessage()]
    assert said == ([f"{path}:{header} (column names, not a document)"] if header else [])


@pytest.mark.parametrize(
    ("content", "queries", "header"),
    [
        ("qid\tquery\nq1\thello\n", {"q1": "hello"}, "qid query"),
        ("query_id\ttext\nq1\thello\n", {"q1": "hello"}, "query_id text"),
        ("Topic\tTitle\nq1\thello\n", {"q1": "hello"}, "Topic Title"),
        (
            "qid\tmy query\nq1\thello\n",
            {"qid": "my query", "q1": "hello"},
            None,
        ),  # not every cell a column name: a topic
    ],
)
def test_a_tsv_topics_header_is_skipped_and_said(tmp_path, caplog, content, queries, header) -> None:
    path = tmp_path / "topics.tsv"
    path.write_text(content)
    with caplog.at_level("INFO", logger="ragtrack.core.data"):
        assert load_topics(path)[0] == queries
    said = [r.getMessage() for r in caplog.records if "header" in r.getMessage()]
    assert said == ([f"{path}:1: skipped the header line {header!r} (column names, not a topic)"] if header else [])


@pytest.mark.parametrize("field", ["description", "narrative"])
def test_tsv_topics_have_no_description(tmp_path, field) -> None:
    files = toy_as_trec_files(tmp_path)
    with pytest.raises(InputError) as error:
        TrecDataset(**files, query_field=field).load()
    assert str(error.value) == (
        f"{files['topics']}: qid<TAB>text topics have no {field} field, only one text: set dataset.query_field=title "
        "(description and narrative are fields of <top> topics)"
    )


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        (
            "topics.tsv",
            "q1\tone\nqid\tquery\n",
            "topics.tsv:2: the header 'qid query' is allowed only as the first non-blank line",
        ),
        ("topics.tsv", "q1 no tab here\n", "topics.tsv:1: expected 'qid<TAB>text' (or a <top> block)"),
        ("topics.tsv", "q1\tone\nq1\ttwo\n", "topics.tsv:2: duplicate topic id 'q1' (first on line 1)"),
        ("topics.tsv", "q1\t  \n", "topics.tsv:1: topic 'q1' has an empty text"),
        ("topics.tsv", "q 1\ttext\n", "topics.tsv:1: id 'q 1' contains whitespace"),
        ("topics.txt", "<top>\n<num> Number: 1\n<title> a\n", "topics.txt: the topic opened on line 1 has no </top>"),
        ("topics.txt", "<top>\n<title> a\n</top>\n", "topics.txt:3: topic without <num>"),
        ("topics.txt", "<top>\n<num> Number: 7\n<desc> d\n</top>\n", "topics.txt:1: topic '7' has no <title> field"),
        (
            "topics.txt",
            "<top>\n<num> Number: 7\n<title> a\n<top>\n",
            "topics.txt:4: <top> inside a topic (a missing </top>?)",
        ),
        (
            "topics.txt",
            "<top>\n<num> Number: 7\n<title> a\n</top>\nstray\n",
            "topics.txt:5: text outside a <top> block: 'stray'",
        ),
        ("topics.tsv", "", "topics.tsv: no topics"),
    ],
)
def test_malformed_topics_are_one_line(tmp_path, name, content, message) -> None:
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(InputError) as error:
        load_topics(path)
    assert str(error.value).replace(f"{tmp_path}/", "").startswith(message)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (
            "d1 only one column\n",
            "collection.tsv:1: expected 2 (docid, text) or 3 (docid, title, text) tab-separated columns, got 1",
        ),
        (
            "d1\ta\tb\tc\n",
            "collection.tsv:1: expected 2 (docid, text) or 3 (docid, title, text) tab-separated columns, got 4",
        ),
        ("d1\ta\nd1\tb\n", "collection.tsv:2: duplicate document id 'd1' (first on line 1)"),
        ("d1\t \n", "collection.tsv:1: document 'd1' has an empty title and text"),
        ("\tno id\n", "collection.tsv:1: 'document id' must be a non-empty string"),
        (
            "d1\ta\ndocid\ttext\n",
            "collection.tsv:2: the header 'docid text' is allowed only as the first non-blank line",
        ),
        ("docid\ttext\ndocid\tone\ndocid\ttwo\n", "collection.tsv:3: duplicate document id 'docid' (first on line 2)"),
    ],
)
def test_malformed_tsv_corpus_is_one_line(tmp_path, content, message) -> None:
    path = tmp_path / "collection.tsv"
    path.write_text(content)
    with pytest.raises(InputError) as error:
        load_tsv_corpus(path)
    assert str(error.value).replace(f"{tmp_path}/", "").startswith(message)


def toy_as_trec_files(folder: Path) -> dict[str, str]:
    """The toy dataset as a tsv corpus, tsv topics and TREC qrels."""
    beir = load_beir(TOY)
    (folder / "collection.tsv").write_text(
        "".join(f"{d}\t{t}\t{x}\n" for d, t, x in zip(beir.corpus.ids, beir.corpus.titles, beir.corpus.texts))
    )
    (folder / "topics.tsv").write_text("".join(f"{q}\t{text}\n" for q, text in beir.queries.items()))
    (folder / "qrels.txt").write_text(
        "".join(f"{q} 0 {d} {g}\n" for q, judged in beir.qrels.items() for d, g in judged.items())
    )
    return {
        "corpus": str(folder / "collection.tsv"),
        "topics": str(folder / "topics.tsv"),
        "qrels": str(folder / "qrels.txt"),
    }


def test_trec_files_equal_the_beir_folder(tmp_path) -> None:
    beir, trec = load_beir(TOY), TrecDataset(**toy_as_trec_files(tmp_path)).load()
    assert (
        list(trec.corpus.full_texts()) == list(beir.corpus.full_texts())
        and trec.queries == beir.queries
        and trec.qrels == beir.qrels
    )
    assert trec.name == "topics" and trec.queries_path == tmp_path / "topics.tsv"


def test_trec_qrels_naming_an_unknown_topic_names_the_line(tmp_path) -> None:
    files = toy_as_trec_files(tmp_path)
    with open(files["qrels"], "a") as qrels:
        qrels.write("nope 0 d1 1\n")
    with pytest.raises(InputError, match=r"qrels.txt:\d+: unknown query id 'nope' \(not in topics.tsv\)"):
        TrecDataset(**files).load()


# ----------------------------------------------------------------------------- DataFrames


def toy_frames() -> dict:
    """The toy dataset as DataFrames (answers one row each)."""
    beir = load_beir(TOY)
    return {
        "corpus": pd.DataFrame(
            {"docid": list(beir.corpus.ids), "title": list(beir.corpus.titles), "text": list(beir.corpus.texts)}
        ),
        "queries": pd.DataFrame({"qid": list(beir.queries), "text": list(beir.queries.values())}),
        "qrels": pd.DataFrame(
            [(q, d, g) for q, judged in beir.qrels.items() for d, g in judged.items()],
            columns=["qid", "docid", "grade"],
        ),
        "answers": pd.DataFrame([(q, a) for q, gold in beir.answers.items() for a in gold], columns=["qid", "answer"]),
    }


def test_dataframes_equal_the_files(tmp_path) -> None:
    common = ["retriever=[bm25]", "fusion=[]", f"paths.cache_dir={tmp_path / 'cache'}", f"paths.root_dir={tmp_path}"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        files = ragtrack.run_experiment(["dataset=toy", *common, f"paths.output_dir={tmp_path / 'files'}"])
    assert not [
        w for w in caught if "No artists with labels" in str(w.message)
    ]  # a one-system job draws no empty legend
    frames = ragtrack.run_experiment(
        [*common, f"paths.output_dir={tmp_path / 'frames'}"], dataset={**toy_frames(), "name": "toy"}
    )
    assert frames.systems == files.systems and frames.results["aggregates"] == files.results["aggregates"]
    timing = [c for c in files.per_query.columns if c.endswith("_ms")]  # latency differs between two runs
    pd.testing.assert_frame_equal(frames.per_query.drop(columns=timing), files.per_query.drop(columns=timing))
    assert list(frames.per_query.columns[:2]) == ["system", "qid"] and set(frames.per_query["system"]) == {"bm25"}
    assert frames.summary.loc[("bm25", "ndcg@10"), "mean"] == files.systems["bm25"]["ndcg@10"]
    assert (
        list(frames.summary.columns) == ["mean", "std", "ci_low", "ci_high", "n"]
        and frames.summary.loc[("bm25", "mrr"), "n"] == 6
    )
    assert frames.results["dataset"]["provider"] == "frames" and frames.results["dataset"]["source"] == "frames:toy"
    again = dataset_from_frames(**toy_frames(), name="toy")
    assert (
        again.hash == dataset_from_frames(**toy_frames(), name="toy").hash and again.answers == load_beir(TOY).answers
    )


def test_a_frames_job_cannot_be_reloaded_from_its_config() -> None:
    with pytest.raises(
        RagtrackError, match="was given as DataFrames .* cannot be read from a config; pass the DataFrames again"
    ):
        load_dataset({"type": "frames", "name": "mine"})


def _broken(part: str, change) -> dict:
    frames = toy_frames()
    frames[part] = change(frames[part].copy())
    return frames


@pytest.mark.parametrize(
    ("frames", "message"),
    [
        (
            _broken("corpus", lambda f: f.drop(columns="text")),
            "corpus DataFrame: missing column text (needs docid, text, optional title)",
        ),
        (
            _broken("qrels", lambda f: f.rename(columns={"grade": "score"})),
            "qrels DataFrame: missing column grade (needs qid, docid, grade)",
        ),
        (
            _broken("qrels", lambda f: f.assign(grade=f["grade"].astype(float) + 0.5)),
            "qrels DataFrame row 0: grade 2.5 is not an integer",
        ),
        (
            _broken("qrels", lambda f: f.assign(grade=f["grade"].astype(str))),
            "qrels DataFrame row 0: grade '2' is not an integer",
        ),
        (
            _broken("queries", lambda f: f.assign(qid=range(len(f)))),
            "queries DataFrame row 0: qid is a int (0), not text",
        ),
        (
            _broken("queries", lambda f: f.assign(text=[None, *f["text"][1:]])),
            "queries DataFrame row 0: text is missing",
        ),
        (
            _broken("corpus", lambda f: f.assign(docid=["d 1", *f["docid"][1:]])),
            "corpus DataFrame row 0: id 'd 1' contains whitespace",
        ),
        (
            _broken("corpus", lambda f: pd.concat([f, f.iloc[:1]])),
            "corpus DataFrame row 0: duplicate document id 'd1' (first on row 0)",
        ),
        (
            _broken(
                "qrels", lambda f: pd.concat([f, pd.DataFrame([("zz", "d1", 1)], columns=f.columns)], ignore_index=True)
            ),
            "qrels DataFrame row 12: unknown query id 'zz' (not in queries DataFrame)",
        ),
        (
            _broken(
                "qrels", lambda f: pd.concat([f, pd.DataFrame([("q1", "NOPE", 1)], columns=f.columns, index=["mine"])])
            ),
            "qrels DataFrame row 'mine': unknown document id 'NOPE' (not in the corpus)",
        ),
        (
            _broken("qrels", lambda f: f.assign(grade=f["grade"].astype(float))),
            "qrels DataFrame row 0: grade 2.0 is not an integer (a float column: .astype(int) makes its grades integers)",
        ),
        (
            _broken("qrels", lambda f: f.assign(grade=[*f["grade"][:-1], 2**63])),
            "qrels DataFrame row 11: relevance grade '9223372036854775808' is out of range",
        ),
        (
            _broken("answers", lambda f: f.assign(qid=["nope", *f["qid"][1:]])),
            "answers DataFrame row 0: unknown query id 'nope' (not in the queries DataFrame)",
        ),
    ],
)
def test_a_wrong_dataframe_is_one_line(frames, message) -> None:
    with pytest.raises(RagtrackError) as error:
        dataset_from_frames(**frames)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_a_judged_document_that_the_job_does_not_index_names_its_row() -> None:
    """The Python API leaves the judged documents to the job (chunk ids may be judged): its check names
    the DataFrame row too, as a file's line."""
    frames = _broken(
        "qrels", lambda f: pd.concat([f, pd.DataFrame([("q2", "NOPE", 1)], columns=f.columns)], ignore_index=True)
    )
    dataset = dataset_from_frames(**frames, check_documents=False)
    with pytest.raises(InputError) as error:
        check_judged_documents(dataset, dataset.corpus.ids)
    assert str(error.value) == "qrels DataFrame row 12: unknown document id 'NOPE' (not in the corpus)"


def test_a_data_error_in_a_python_job_names_the_row_and_leaves_no_folder(tmp_path) -> None:
    frames = _broken(
        "qrels", lambda f: pd.concat([f, pd.DataFrame([("q2", "NOPE", 1)], columns=f.columns)], ignore_index=True)
    )
    with pytest.raises(InputError, match=r"^qrels DataFrame row 12: unknown document id 'NOPE' \(not in the corpus\)$"):
        ragtrack.run_experiment(
            ["retriever=[bm25]", "fusion=[]", "tracking=none", f"paths.root_dir={tmp_path}"], dataset=frames
        )
    assert list((tmp_path / "outputs" / "runs").iterdir()) == []  # the folder the job made is removed, being empty


def test_wrong_argument_types_are_type_errors() -> None:
    with pytest.raises(TypeError, match="overrides must be a list of strings"):
        ragtrack.run_experiment("dataset=toy")
    with pytest.raises(TypeError, match="corpus: a pandas DataFrame with columns docid, text, got dict"):
        dataset_from_frames(corpus={"d1": "x"}, queries=toy_frames()["queries"], qrels=toy_frames()["qrels"])


def test_a_frames_job_keeps_its_slice_settings_and_names_a_missing_frame(tmp_path) -> None:
    """dataset.slice_metadata (and slices_file) hold for DataFrames as for files; a missing DataFrame is a TypeError naming it."""
    frames = toy_frames()
    frames["queries"] = frames["queries"].assign(
        topic=["a", "b"] * (len(frames["queries"]) // 2) + ["a"] * (len(frames["queries"]) % 2)
    )
    common = [
        "retriever=[bm25]",
        "fusion=[]",
        "tracking=none",
        f"paths.cache_dir={tmp_path / 'cache'}",
        f"paths.root_dir={tmp_path}",
    ]
    job = ragtrack.run_experiment([*common, "dataset.slice_metadata=[topic]"], dataset=frames)
    assert "slice.topic" in job.per_query.columns and set(job.results["slices"]["systems"]["bm25"]) == {"topic"}
    with pytest.raises(InputError, match=r"has no metadata 'nokey' \(dataset\.slice_metadata\)"):
        ragtrack.run_experiment([*common, "dataset.slice_metadata=[nokey]"], dataset=frames)
    with pytest.raises(
        TypeError,
        match=r"^run_experiment: dataset lacks 'qrels'; its keys: corpus, queries, qrels, and optionally answers, name$",
    ):
        ragtrack.run_experiment(common, dataset={"corpus": frames["corpus"], "queries": frames["queries"]})
