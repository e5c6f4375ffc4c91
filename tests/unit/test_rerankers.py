"""Rerankers on the toy dataset: the cross-encoder (a tiny random BERT built here, loaded by the
reranker's own loading code) equals sentence-transformers' ``CrossEncoder.predict``, keeps the input's
documents, scores each pair once across a depth sweep and needs no model when every pair is stored; the
LLM reranker (pointwise grades and RankGPT-style windows) against the local chat server."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragtrack.core.cache import Cache, cache_key
from ragtrack.core.data import Corpus, Dataset, load_beir
from ragtrack.core.pairs import PairScores
from ragtrack.core.runs import Run, rank_documents
from ragtrack.core.stages import StageContext, StageOutput
from ragtrack.retrievers.rerankers import (
    CrossEncoderReranker,
    CrossEncoderSettings,
    LLMReranker,
    LLMRerankerSettings,
    parse_grade,
    parse_permutation,
    sliding_windows,
)
from tests.support import TOY, ChatServer, save_tiny_cross_encoder

INPUT = "bm25"


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    return save_tiny_cross_encoder(tmp_path_factory.mktemp("tiny-cross-encoder"))


@pytest.fixture(scope="module")
def toy() -> Dataset:
    return load_beir(TOY)


def input_run(dataset: Dataset) -> Run:
    """Every document for every query, in corpus order (scores 12, 11, ..., 1)."""
    ids = list(dataset.corpus.ids)
    return Run(INPUT, {qid: {doc: float(len(ids) - i) for i, doc in enumerate(ids)} for qid in dataset.queries})


def rerank(reranker, dataset: Dataset, cache_root: Path, run: Run | None = None) -> StageOutput:
    run = run or input_run(dataset)
    context = StageContext(
        dataset=dataset, judged_corpus=dataset.corpus, cache=Cache(cache_root), depth=12, search_depth=12
    )
    return reranker.produce({INPUT: StageOutput(run, run, cache_key("input", run.scores), None)}, context)


def cross_encoder(folder: Path, **settings) -> CrossEncoderReranker:
    return CrossEncoderReranker(input=INPUT, model=str(folder), device="cpu", **settings)


def order(run: Run, qid: str) -> list[str]:
    return [doc for doc, _ in run.ranking(qid)]


# ----------------------------------------------------------------------------- cross-encoder
def test_cross_encoder_equals_sentence_transformers(tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder
    from torch.nn import Identity

    out = rerank(cross_encoder(tiny_cross_encoder, batch_size=5), toy, tmp_path)
    reference = CrossEncoder(str(tiny_cross_encoder), device="cpu")
    texts = dict(zip(toy.corpus.ids, toy.corpus.full_texts()))
    for qid, query in toy.queries.items():
        logits = reference.predict([(query, texts[doc]) for doc in toy.corpus.ids], activation_fn=Identity())
        expected = dict(zip(toy.corpus.ids, map(float, logits)))
        assert order(out.run, qid) == [doc for doc, _ in rank_documents(expected)]
        assert out.run.scores[qid] == pytest.approx(expected, abs=1e-6)
    assert out.efficiency["pairs_scored"] == 12 * len(toy.queries) and out.efficiency["pairs_from_cache"] == 0
    assert out.efficiency["on_gpu"] == 0.0


@pytest.mark.parametrize("depth", [1, 5])
def test_depth_keeps_the_input_documents_and_the_tail_order(
    tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path, depth: int
) -> None:
    run = input_run(toy)
    out = rerank(cross_encoder(tiny_cross_encoder, depth=depth), toy, tmp_path, run)
    for qid in toy.queries:
        before, after = order(run, qid), order(out.run, qid)
        assert len(after) == len(before) and set(after) == set(before)
        assert set(after[:depth]) == set(before[:depth]) and after[depth:] == before[depth:]
        assert min(out.run.scores[qid][doc] for doc in after[:depth]) > max(
            out.run.scores[qid][doc] for doc in after[depth:]
        )
        assert depth > 1 or after[0] == before[0]


def test_equal_texts_tie_by_document_id(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    corpus = Corpus(["a", "b", "c"], ["", "", ""], ["same words", "same words", "other words here"], "h")
    dataset = Dataset("ties", corpus, {"q": "words"}, {"q": {"a": 1}})
    for scores in ({"a": 3.0, "b": 2.0, "c": 1.0}, {"b": 3.0, "a": 2.0, "c": 1.0}):
        out = rerank(cross_encoder(tiny_cross_encoder), dataset, tmp_path / str(scores), Run(INPUT, {"q": scores}))
        ranked = order(out.run, "q")
        assert (
            out.run.scores["q"]["a"] == out.run.scores["q"]["b"] and ranked.index("b") == ranked.index("a") - 1
        )  # trec_eval: id descending


def test_depth_sweep_scores_each_pair_once(tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path) -> None:
    queries = len(toy.queries)
    before = PairScores.scored
    shallow = rerank(cross_encoder(tiny_cross_encoder, depth=4), toy, tmp_path)
    assert PairScores.scored - before == 4 * queries
    deep = rerank(cross_encoder(tiny_cross_encoder, depth=8), toy, tmp_path)
    assert PairScores.scored - before == 8 * queries
    assert (deep.efficiency["pairs_scored"], deep.efficiency["pairs_from_cache"]) == (4 * queries, 4 * queries)
    for qid in toy.queries:
        assert all(
            deep.run.scores[qid][doc] == score
            for doc, score in shallow.run.scores[qid].items()
            if doc in order(shallow.run, qid)[:4]
        )
    stored_only = cross_encoder(tiny_cross_encoder, depth=6)
    again = rerank(stored_only, toy, tmp_path)
    assert again.efficiency["pairs_scored"] == 0 and stored_only._model is None  # every pair stored: no model loaded
    assert PairScores.scored - before == 8 * queries


def test_scores_do_not_depend_on_what_the_store_held(tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path) -> None:
    """Depth 10 on a store holding depth 5's scores gives a fresh depth-10 run's bits (batches padded to
    their longest pair changed the last bits of some scores)."""
    fresh = rerank(cross_encoder(tiny_cross_encoder, depth=10), toy, tmp_path / "fresh")
    rerank(cross_encoder(tiny_cross_encoder, depth=5), toy, tmp_path / "topped-up")
    topped_up = rerank(cross_encoder(tiny_cross_encoder, depth=10), toy, tmp_path / "topped-up")
    assert topped_up.efficiency["pairs_from_cache"] > 0 and topped_up.run.scores == fresh.run.scores


def test_an_unloadable_model_is_one_line_naming_the_setting(toy: Dataset, tmp_path: Path) -> None:
    script = (
        "from tests.unit.test_rerankers import *\n"
        "from ragtrack.core.errors import RagtrackError\n"
        "reranker = CrossEncoderReranker(input=INPUT, model='cross-encoder/not-on-this-machine')\n"
        "try:\n"
        f"    rerank(reranker, load_beir(TOY), Path({str(tmp_path)!r}))\n"
        "except RagtrackError as error:\n"
        "    print(error)\n"
    )
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    message = done.stdout.strip()
    assert "\n" not in message and "Traceback" not in done.stderr
    assert message.startswith("reranker.cross_encoder.model: cannot load 'cross-encoder/not-on-this-machine'")
    assert message.endswith("offline, give the path of a local model folder")


# ----------------------------------------------------------------------------- LLM
WORDS = ["alpha", "beta", "gamma"]


def graded_dataset(documents: int = 25) -> Dataset:
    """Document i holds the first ``i % 4`` of WORDS (the chat server's relevance for query "alpha beta
    gamma"); "p" asks the same with [unparsable], "f" with [down] (always HTTP 500)."""
    ids = [f"d{i:02d}" for i in range(documents)]
    texts = [" ".join([*WORDS[: i % 4], f"filler{i}"]) for i in range(documents)]
    queries = {"q": "alpha beta gamma", "p": "alpha beta gamma [unparsable]", "f": "alpha beta gamma [down]"}
    return Dataset(
        "graded", Corpus(ids, [""] * documents, texts, "graded"), queries, {qid: {"d03": 1} for qid in queries}
    )


def relevance(doc: str) -> int:
    return int(doc[1:]) % 4


def llm(server: ChatServer, tmp_path: Path, **settings) -> LLMReranker:
    return LLMReranker(
        input=INPUT,
        base_url=server.url,
        model="m",
        max_retries=0,
        backoff=0.0,
        cache_dir=str(tmp_path / "chat"),
        **settings,
    )


def test_windows_and_reply_parsing() -> None:
    assert sliding_windows(25, 20, 10) == [(5, 25), (0, 20)]  # the top window starts at the top
    assert sliding_windows(100, 20, 10)[:2] == [(80, 100), (70, 90)] and len(sliding_windows(100, 20, 10)) == 9
    assert sliding_windows(5, 20, 10) == [(0, 5)] and sliding_windows(1, 20, 10) == []
    assert parse_permutation("[3] > [1] > [3] > [9] > [0]", 4) == [2, 0, 1, 3]
    assert parse_permutation("Ranking: 2 > 1", 3) == [1, 0, 2] and parse_permutation("I cannot tell.", 3) is None
    assert parse_permutation("[1] is about cats, [2] about dogs, [3] about both.\nRanking: [3] > [2] > [1]", 3) == [
        2,
        1,
        0,
    ]
    assert [parse_grade(reply) for reply in ("3", "Grade: 2.", "grade 1 of 3", "10", "2.5", "none")] == [
        3,
        2,
        1,
        None,
        None,
        None,
    ]


@pytest.mark.parametrize(
    "reply, grade",
    [
        ("Grade (0-3): 3", 3),
        ("Relevance: 2 out of 3", 2),
        ("3/3", 3),
        ('{"grade": 1}', 1),
        ("**Grade:** 1", 1),
        ("3 = perfectly relevant, 0 = irrelevant.\nGrade: 0", 0),
        ("On a 0 to 3 scale: 2", 2),
        ("The grade is 2.", 2),
        ('The answer says {"grade": 3}; my grade: {"grade": 0}', 0),
        ("either 2 or 3", None),
        ("Grade: 1 ... Grade: 2", 2),
    ],
)
def test_the_grade_is_the_models_own(reply: str, grade: int | None) -> None:
    """The model's verdict, not the scale it restates nor a grade it quotes; two that disagree: unparsed."""
    assert parse_grade(reply) == grade


def test_llm_settings_check_the_prompt_and_the_windows() -> None:
    with pytest.raises(ValueError, match="pointwise prompt must show {document}"):
        LLMRerankerSettings(input=INPUT, base_url="http://x/v1", model="m", mode="pointwise", prompt="{query}?")
    with pytest.raises(ValueError, match="unknown fields"):
        LLMRerankerSettings(input=INPUT, base_url="http://x/v1", model="m", prompt="{query} {passages} {documents}")
    with pytest.raises(ValueError, match="step < window"):
        LLMRerankerSettings(input=INPUT, base_url="http://x/v1", model="m", window=4, step=4)


def test_pointwise_grades_with_input_rank_tie_break(chat_server: ChatServer, tmp_path: Path, caplog) -> None:
    dataset = graded_dataset(8)
    with caplog.at_level(logging.WARNING):
        out = rerank(llm(chat_server, tmp_path, mode="pointwise"), dataset, tmp_path / "cache", input_run(dataset))
    ids = list(dataset.corpus.ids)
    assert out.run.scores["q"] == {doc: min(3, relevance(doc)) - rank / 8 for rank, doc in enumerate(ids)}
    assert order(out.run, "q") == sorted(ids, key=lambda doc: (-relevance(doc), ids.index(doc)))
    for qid in ("p", "f"):  # an unparsable reply, a failed request: the input order
        assert order(out.run, qid) == ids
    assert (out.efficiency["unparsed_queries"], out.efficiency["failed_queries"], out.efficiency["prompts"]) == (
        1,
        1,
        24,
    )
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "keep their input order" in r.getMessage()
    ]
    assert len(warnings) == 1 and "2 of 3 queries" in warnings[0]


def test_listwise_one_window_sorts_by_the_replies(chat_server: ChatServer, tmp_path: Path) -> None:
    dataset = graded_dataset(8)
    out = rerank(llm(chat_server, tmp_path), dataset, tmp_path / "cache", input_run(dataset))
    ids = list(dataset.corpus.ids)
    assert order(out.run, "q") == sorted(ids, key=lambda doc: (-relevance(doc), ids.index(doc)))
    assert order(out.run, "p") == ids and order(out.run, "f") == ids
    assert (out.efficiency["unparsed_queries"], out.efficiency["failed_queries"]) == (1, 1)


def test_listwise_windows_slide_from_the_bottom(chat_server: ChatServer, tmp_path: Path) -> None:
    dataset = graded_dataset(25)
    ids = list(dataset.corpus.ids)
    bottom_up = Run(INPUT, {"q": {doc: float(i) for i, doc in enumerate(ids)}})  # d24 first, ..., d00 last
    reranker = llm(chat_server, tmp_path, window=6, step=3)
    before = len(chat_server.requests)
    out = rerank(reranker, dataset, tmp_path / "cache", bottom_up)
    assert len(chat_server.requests) - before == len(sliding_windows(25, 6, 3)) == 8
    ranked = order(out.run, "q")
    assert sorted(ranked) == sorted(ids)
    assert ranked[:3] == ["d23", "d19", "d15"]  # the best (relevance 3) carried up through the windows, in input order
    others = [doc for doc in ids if relevance(doc) < 3]
    best_last = Run(INPUT, {"q": {doc: -float(i) for i, doc in enumerate([*others, "d03"])}})
    assert (
        order(rerank(reranker, dataset, tmp_path / "cache", best_last).run, "q")[0] == "d03"
    )  # from the bottom to the top
    before = len(chat_server.requests)

    again = rerank(
        llm(chat_server, tmp_path, window=6, step=3), dataset, tmp_path / "other cache", bottom_up
    )  # new run cache, same replies
    assert len(chat_server.requests) == before and again.efficiency["chat_requests"] == 0
    assert again.run.scores == out.run.scores


def test_llm_key_only_from_the_environment(chat_server: ChatServer, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("RERANK_TEST_KEY", "sk-rerank-secret")
    dataset = graded_dataset(4)
    reranker = llm(chat_server, tmp_path, api_key_env="RERANK_TEST_KEY")
    out = rerank(reranker, dataset, tmp_path / "cache", input_run(dataset))
    assert chat_server.requests[-1]["auth"] == "Bearer sk-rerank-secret"
    written = json.dumps([reranker.identity(), out.efficiency]) + "".join(
        p.read_text() for p in (tmp_path / "cache").rglob("*.*") if p.is_file()
    )
    assert "sk-rerank-secret" not in written and "RERANK_TEST_KEY" not in json.dumps(reranker.identity())


@pytest.mark.parametrize("name, schema", [("cross_encoder", CrossEncoderSettings), ("llm", LLMRerankerSettings)])
def test_shipped_configs_hold_the_defaults(name: str, schema) -> None:
    from importlib.metadata import entry_points
    from importlib.resources import files

    import yaml

    values = yaml.safe_load((Path(str(files("ragtrack.conf"))) / "reranker" / f"{name}.yaml").read_text())[name]
    fields = {field: info for field, info in schema.model_fields.items() if field != "target"}
    assert set(values) == set(fields) and values["type"] == name and values["input"] == INPUT
    assert {key: value for key, value in values.items() if not fields[key].is_required()} == {
        field: info.get_default(call_default_factory=True) for field, info in fields.items() if not info.is_required()
    } | {"type": name}
    assert entry_points(group="ragtrack.rerankers")[name].load().settings_schema is schema
