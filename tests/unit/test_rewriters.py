"""Query rewriters: RM3 equals an independent implementation of Anserini's formula and a brute-force
weighted BM25; it runs deterministically on the toy dataset; HyDE searches the generated passage (or
the query and the passage), keeps the query where the request fails, and reruns from the reply cache.
The shipped configs equal the settings models' defaults."""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from importlib.metadata import entry_points
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest
from omegaconf import OmegaConf

from ragtrack.core.cache import Cache
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run
from ragtrack.core.settings import TokenizerSettings
from ragtrack.core.stages import StageContext, StageOutput
from ragtrack.retrievers.base import Retriever
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.retrievers.rewriters import LLMRewriter, LLMRewriterSettings, RM3Rewriter, RM3Settings

DOCUMENTS = {  # title, text; feedback terms must be in at most 10% of the documents: here in one of 12
    "a1": ("Photosynthesis", "Plants turn sunlight into glucose in chloroplasts; chlorophyll absorbs sunlight."),
    "a2": ("Leaves", "Leaves hold chlorophyll and stomata; plants breathe through stomata and grow toward sunlight."),
    "a3": ("Glucose", "Glucose is a sugar; plants store glucose as starch, starch granules, starch everywhere."),
    "a4": ("Roots", "Roots take water and nitrogen from soil for plants; mycorrhiza help roots."),
    "a5": (
        "Café plants",
        "A café_owner grows plants under pneumonoultramicroscopicsilicovolcanoconiosis lamps with sunlight.",
    ),
    "b1": ("Earthquakes", "Earthquakes happen when tectonic plates slip along faults."),
    "b2": ("Volcanoes", "Magma erupts through vents in the crust."),
    "b3": ("Tsunami", "Undersea earthquakes push water into giant waves."),
    "c1": ("Vaccines", "Vaccines train the immune system to recognise a pathogen."),
    "c2": ("Antibiotics", "Antibiotics kill bacteria but not viruses."),
    "c3": ("Black holes", "Gravity so strong that light cannot escape."),
    "c4": ("Mitochondria", "Mitochondria produce energy for cells."),
}
QUERIES = {
    "q1": "how do plants use sunlight and glucose",
    "q2": "earthquakes under the sea",
    "q3": "plants plants roots",
    "q4": "zzzz unknown words",
}


def write_beir(folder: Path, documents: dict[str, tuple[str, str]], queries: dict[str, str]) -> Path:
    folder.mkdir(parents=True)
    (folder / "corpus.jsonl").write_text(
        "".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n" for d, (t, x) in documents.items())
    )
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": x}) + "\n" for q, x in queries.items()))
    (folder / "qrels").mkdir()
    (folder / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\ta1\t1\n" for q in queries)
    )
    return folder


def context_for(dataset, root: Path) -> StageContext:
    return StageContext(dataset=dataset, judged_corpus=dataset.corpus, cache=Cache(root), depth=10, search_depth=10)


# ----------------------------------------------------------------------------- an independent RM3
def reference_rm3(
    query: list[str], feedback: list[tuple[list[str], float]], df: Counter, n: int, fb_terms: int, weight: float
) -> dict[str, float]:
    """Anserini's Rm3Reranker written out with Counters: per document tf of the terms [a-z0-9]{2,20}
    with df/N <= 0.1, its fb_terms most frequent, / their sum, times its score; summed; the fb_terms
    largest / their sum; λ·tf(q)/|q| + (1 − λ)·that."""

    def best(counter, k):
        return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0]))[:k])

    rm1 = Counter()
    for tokens, score in feedback:
        tf = best(Counter(t for t in tokens if re.fullmatch("[a-z0-9]{2,20}", t) and df[t] / n <= 0.1), fb_terms)
        for term, count in tf.items():
            rm1[term] += count / sum(tf.values()) * score
    rm1 = best(rm1, fb_terms)
    rm1 = {t: w / sum(rm1.values()) for t, w in rm1.items()}
    q = {t: c / len(query) for t, c in Counter(query).items()}
    return {t: weight * q.get(t, 0.0) + (1 - weight) * rm1.get(t, 0.0) for t in set(q) | set(rm1)}


def lucene_bm25_scores(documents: list[list[str]], k1: float, b: float) -> dict[str, np.ndarray]:
    """S[t] per term, as bm25s stores it: idf as float32, tf/(tf + k1·(1 − b + b·|d|/avgdl)) in
    float64, their product rounded to float32."""
    n, lengths = len(documents), np.array([len(tokens) for tokens in documents], dtype=float)
    df = Counter(t for tokens in documents for t in set(tokens))
    scores = {}
    for term, frequency in df.items():
        idf = np.float32(math.log(1 + (n - frequency + 0.5) / (frequency + 0.5)))
        tf = np.array([tokens.count(term) for tokens in documents], dtype=float)
        scores[term] = (np.float64(idf) * (tf / (tf + k1 * (1 - b + b * lengths / lengths.mean())))).astype(np.float32)
    return scores


def test_rm3_equals_reference_and_brute_force_bm25(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "hand", DOCUMENTS, QUERIES))
    context = context_for(dataset, tmp_path / "cache")
    bm25 = BM25Retriever(
        name="bm25", backend="bm25s", tokenizer=TokenizerSettings().model_dump()
    )  # the reference: bm25s's formula, Snowball stems
    first = bm25.produce({}, context)
    rm3 = RM3Rewriter(input="bm25", type="rm3", fb_docs=3, fb_terms=4, original_query_weight=0.3)
    expanded, _ = rm3.rewrite(bm25, first, context)

    tokens = dict(zip(dataset.corpus.ids, bm25.tokenizer(dataset.corpus.full_texts())))
    df = Counter(t for terms in tokens.values() for t in set(terms))
    for qid, query in zip(dataset.queries, bm25.tokenizer(dataset.queries.values())):
        feedback = [(tokens[doc], score) for doc, score in first.passage_run.ranking(qid)[:3]]
        reference = reference_rm3(query, feedback, df, len(tokens), fb_terms=4, weight=0.3)
        assert expanded[qid].keys() == reference.keys(), qid
        assert all(abs(expanded[qid][t] - w) <= 1e-12 for t, w in reference.items()), qid
    assert set(expanded["q1"]) - {"how", "do", "plant", "use", "sunlight", "and", "glucos"}, "q1 gains feedback terms"
    assert not {"café", "café_own", "pneumonoultramicroscopicsilicovolcanoconiosi"} & set(
        expanded["q1"]
    )  # a5 is feedback: filtered

    index = lucene_bm25_scores(list(tokens.values()), bm25.k1, bm25.b)
    output = rm3.produce({"bm25": first}, context)
    for qid, weights in expanded.items():
        brute = {
            doc: sum(w * float(index[t][i]) for t, w in weights.items() if t in index) for i, doc in enumerate(tokens)
        }
        ranked = sorted(((s, d) for d, s in brute.items() if s > 0), reverse=True)[: context.search_depth]
        assert [d for _, d in ranked] == [d for d, _ in output.passage_run.ranking(qid)], qid
        assert np.allclose([s for s, _ in ranked], [s for _, s in output.passage_run.ranking(qid)], rtol=0, atol=1e-12)
    assert "q4" not in output.run.scores  # no known term, no feedback: no documents


def test_rm3_with_original_query_weight_1_ranks_as_bm25(tmp_path: Path) -> None:
    dataset = load_beir(write_beir(tmp_path / "hand", DOCUMENTS, QUERIES))
    context = context_for(dataset, tmp_path / "cache")
    first = BM25Retriever(name="bm25").produce({}, context)
    output = RM3Rewriter(input="bm25", original_query_weight=1.0).produce({"bm25": first}, context)
    for qid, ranked in first.run.rankings():
        assert [d for d, _ in output.run.ranking(qid)] == [d for d, _ in ranked]


def test_rm3_on_toy_dataset_is_deterministic(toy_path: Path, tmp_path: Path) -> None:
    dataset = load_beir(toy_path)
    runs = []
    for attempt in range(2):
        context = context_for(dataset, tmp_path / f"cache{attempt}")
        first = BM25Retriever(name="bm25").produce({}, context)
        rewriter = RM3Rewriter(input="bm25", type="rm3")
        output = rewriter.produce({"bm25": first}, context)
        assert output.run.name == "bm25+rm3" and output.efficiency["run_from_cache"] == 0.0
        assert set(output.run.scores) == set(dataset.queries)
        runs.append(output.run.scores)
    assert runs[0] == runs[1]
    assert max(len(first.passage_run.ranking(qid)) for qid in dataset.queries) < 50
    deep = RM3Rewriter(input="bm25", fb_docs=50, fb_terms=50).produce({"bm25": first}, context)  # more than the hits
    assert set(deep.run.scores) == set(dataset.queries)


def test_rm3_needs_a_bm25_input_with_its_sparse_index(toy_path: Path, tmp_path: Path) -> None:
    class Fixed(Retriever):
        def index_settings(self) -> dict:
            return {}

        def index(self, corpus, cache) -> None:
            """Nothing to index."""

        def search(self, queries, depth) -> Run:
            return Run(self.name, {qid: {"d1": 1.0} for qid in queries})

    dataset = load_beir(toy_path)
    context = context_for(dataset, tmp_path / "cache")
    rm3 = RM3Rewriter(input="fixed")
    fixed = Fixed("fixed")
    with pytest.raises(RagtrackError, match=r"input 'fixed' is a Fixed, not a BM25 retriever"):
        rm3.produce({"fixed": StageOutput(Run("fixed"), Run("fixed"), "key", fixed)}, context)
    slow = BM25Retriever(name="fixed", backend="rank_bm25")
    with pytest.raises(RagtrackError, match="needs backend bm25s"):
        rm3.produce({"fixed": slow.produce({}, context)}, context)


def test_rm3_identity_is_its_settings() -> None:
    identity = RM3Rewriter(input="bm25", fb_docs=5).identity()
    assert identity == {"format": 1, "fb_docs": 5, "fb_terms": 10, "original_query_weight": 0.5}
    with pytest.raises(ValueError, match="fb_doc"):
        RM3Settings(input="bm25", fb_doc=5)


# ----------------------------------------------------------------------------- HyDE
def hyde(chat_server, tmp_path: Path, **settings) -> LLMRewriter:
    """Prompts whose first line is the query: the server answers "answer to <query>"."""
    return LLMRewriter(
        **{
            "input": "bm25",
            "type": "llm",
            "base_url": chat_server.url,
            "model": "m",
            "max_retries": 0,
            "backoff": 0.0,
            "cache_dir": str(tmp_path / "chat"),
            "prompt": "{query}\nWrite a passage.",
            **settings,
        }
    )


@pytest.mark.parametrize("mode", ["replace", "append"])
def test_hyde_searches_the_generated_passage(chat_server, toy_path: Path, tmp_path: Path, mode: str) -> None:
    dataset = load_beir(toy_path)
    context = context_for(dataset, tmp_path / "cache")
    bm25 = BM25Retriever(name="bm25")
    first = bm25.produce({}, context)
    rewriter = hyde(chat_server, tmp_path, mode=mode)
    rewritten, efficiency = rewriter.rewrite(bm25, first, context)
    failing = {qid for qid, text in dataset.queries.items() if "ATP" in text}  # the server always fails these
    assert failing and efficiency["failed_queries"] == len(failing)
    for qid, query in dataset.queries.items():
        passage = f"answer to {query}"
        expected = query if qid in failing else passage if mode == "replace" else f"{query}\n{passage}"
        assert rewritten[qid] == expected
    output = rewriter.produce({"bm25": first}, context)
    assert output.run.name == "bm25+llm" and output.efficiency["failed_queries"] == len(failing)
    assert output.run.scores == {
        qid: ranked for qid, ranked in bm25.search(rewritten, context.search_depth).scores.items() if ranked
    }


def test_hyde_reruns_from_the_reply_cache(chat_server, toy_path: Path, tmp_path: Path) -> None:
    dataset = load_beir(toy_path)
    context = context_for(dataset, tmp_path / "cache")
    hyde(chat_server, tmp_path).produce({"bm25": BM25Retriever(name="bm25").produce({}, context)}, context)
    sent = len(chat_server.requests)
    fresh = context_for(dataset, tmp_path / "other_cache")  # a new run cache: the rewrite runs again
    output = hyde(chat_server, tmp_path).produce({"bm25": BM25Retriever(name="bm25").produce({}, fresh)}, fresh)
    again = [request["body"]["messages"][-1]["content"] for request in chat_server.requests[sent:]]
    assert again and all("ATP" in prompt for prompt in again)  # only the failed request is sent again
    assert output.efficiency["chat_requests"] == len(again)


def test_hyde_identity_holds_no_key(chat_server, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HYDE_TEST_KEY", "sk-secret-value")
    identity = hyde(chat_server, tmp_path, api_key_env="HYDE_TEST_KEY", parameters={"temperature": 0.7}).identity()
    assert identity == {
        "format": 1,
        "model": "m",
        "base_url": chat_server.url,
        "parameters": {"temperature": 0.7},
        "system_prompt": None,
        "prompt": "{query}\nWrite a passage.",
        "mode": "replace",
    }
    with pytest.raises(RagtrackError, match="unknown fields"):
        hyde(chat_server, tmp_path, prompt="{question}")


# ----------------------------------------------------------------------------- configs and entry points
@pytest.mark.parametrize("name, model", [("rm3", RM3Settings), ("llm", LLMRewriterSettings)])
def test_shipped_config_equals_the_defaults(name: str, model) -> None:
    config = OmegaConf.to_container(OmegaConf.load(Path(str(files("ragtrack.conf"))) / "rewriter" / f"{name}.yaml"))[
        name
    ]
    assert config["type"] == name and config["input"] == "bm25" and config["system"] is None
    for key, field in model.model_fields.items():
        if key in ("type", "target", "input"):
            continue
        assert key in config, key
        if key in ("cache_dir", "base_url"):  # as the generator: the shared cache, a local server
            assert config[key] == {"cache_dir": "${paths.cache_dir}", "base_url": "http://127.0.0.1:8000/v1"}[key]
        elif field.is_required():
            assert config[key] == "???", key
        else:
            assert config[key] == field.default, key
    assert set(config) - {"type"} <= set(model.model_fields)
    assert entry_points(group="ragtrack.rewriters")[name].load().settings_schema is model
