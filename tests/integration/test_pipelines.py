"""Systems as chains of stages, as a user runs them: a cross-encoder reranker over BM25 is a system of
the job (run file, metrics with CIs, paired test, MLflow child run, report), a depth sweep builds and
searches BM25 once and scores each (query, document) pair once, an oracle reranker registered as a
plugin gives exactly the metrics of the ideal reordering, and a model that cannot be found stops the
job in one line before anything runs."""

from __future__ import annotations

import json
import shutil
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest
import pytrec_eval
from hydra import compose, initialize_config_module
from mlflow.tracking import MlflowClient

import ragtrack as api
from ragtrack.core.data import load_beir
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import read_trec
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.pipeline.execution.dryrun import dry_run
from ragtrack.pipeline.records import layout
from ragtrack.retrievers.fusion import ProbFuse
from tests.support import TOY, ragtrack, save_tiny_cross_encoder

DEPTHS = (2, 4, 8)
SYSTEM = "bm25+cross_encoder"


@pytest.fixture(scope="module")
def depth_sweep(tmp_path_factory):
    """``reranker.cross_encoder.depth=2,4,8`` over BM25 on the toy dataset, one Hydra multirun."""
    root = tmp_path_factory.mktemp("rerank")
    model = save_tiny_cross_encoder(root / "tiny-cross-encoder")
    done = ragtrack(
        root,
        "run",
        "-m",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "reranker=[cross_encoder]",
        f"reranker.cross_encoder.model={model}",
        "reranker.cross_encoder.device=cpu",
        f"reranker.cross_encoder.depth={','.join(map(str, DEPTHS))}",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    jobs = sorted((root / "outputs" / "multiruns").glob("*/*/results.json"), key=lambda p: int(p.parent.name))
    assert len(jobs) == len(DEPTHS)
    return root, [(path.parent, json.loads(path.read_text())) for path in jobs]


def test_a_reranker_is_a_system_of_the_job(depth_sweep) -> None:
    root, jobs = depth_sweep
    folder, results = jobs[-1]
    assert list(results["systems"]) == ["bm25", SYSTEM]
    assert 0 <= results["systems"][SYSTEM]["ndcg@10"] <= 1 and "ci_low" in results["aggregates"][SYSTEM]["ndcg@10"]
    against = results["against_input"][SYSTEM]  # the paired test against the system it re-scores
    assert against["input"] == "bm25" and 0 <= against["ndcg@10"]["p_randomization"] <= 1
    assert against["ndcg@10"]["delta"] == pytest.approx(
        results["systems"][SYSTEM]["ndcg@10"] - results["systems"]["bm25"]["ndcg@10"], abs=1e-12
    )
    assert list(results["against_input"]) == [SYSTEM]  # a retriever reads no system
    reranked, first = read_trec(folder / "runs" / f"{SYSTEM}.trec"), read_trec(folder / "runs" / "bm25.trec")
    for qid, ranked in first.rankings():  # the same documents, the top depth reordered, the rest in input order
        assert sorted(reranked.scores[qid]) == sorted(first.scores[qid])
        assert [d for d, _ in reranked.ranking(qid)][DEPTHS[-1] :] == [d for d, _ in ranked][DEPTHS[-1] :]
    report = (folder / "comparison" / "report.html").read_text()
    assert SYSTEM in report and "bm25" in report
    assert SYSTEM in (folder / "comparison" / "comparison.md").read_text()
    client = MlflowClient(f"sqlite:///{root}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
    children = [r for r in runs if r.data.tags.get(layout.TAG_SYSTEM) == SYSTEM]
    assert len(children) == len(DEPTHS) and all(
        {"ndcg_at_10", "ndcg_at_10_vs_input_p"} <= set(r.data.metrics) for r in children
    )
    parents = [
        r for r in runs if "mlflow.parentRunId" not in r.data.tags and layout.TAG_COMPARISON not in r.data.tags
    ]  # jobs, not the sweep's comparison
    assert len(parents) == len(DEPTHS) and all("bm25_cross_encoder/ndcg_at_10" in r.data.metrics for r in parents)


def test_a_depth_sweep_searches_bm25_once_and_scores_each_pair_once(depth_sweep) -> None:
    root, jobs = depth_sweep
    bm25 = [results["efficiency"]["bm25"]["run_from_cache"] for _, results in jobs]
    assert bm25 == [0.0, 1.0, 1.0]  # built and searched by the first job only
    assert len(list((root / ".cache" / "ragtrack" / "bm25").glob("*/entry.json"))) == 1
    first = read_trec(jobs[0][0] / "runs" / "bm25.trec")
    unique = {depth: {(qid, doc) for qid, ranked in first.rankings() for doc, _ in ranked[:depth]} for depth in DEPTHS}
    scored = [results["efficiency"][SYSTEM]["pairs_scored"] for _, results in jobs]
    assert scored == [len(unique[2]), len(unique[4] - unique[2]), len(unique[8] - unique[4])]
    assert [results["efficiency"][SYSTEM]["pairs_from_cache"] for _, results in jobs][1:] == [
        len(unique[2]),
        len(unique[4]),
    ]


def test_depth_1_keeps_each_querys_top_document(tmp_path: Path) -> None:
    model = save_tiny_cross_encoder(tmp_path / "model")
    done = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "reranker=[cross_encoder]",
        "tracking=none",
        f"reranker.cross_encoder.model={model}",
        "reranker.cross_encoder.depth=1",
        "reranker.cross_encoder.system=ce1",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (folder,) = (tmp_path / "outputs" / "runs").glob("*/")
    first, reranked = read_trec(folder / "runs" / "bm25.trec"), read_trec(folder / "runs" / "ce1.trec")
    assert {q: r[0][0] for q, r in first.rankings()} == {q: r[0][0] for q, r in reranked.rankings()}
    assert {q: [d for d, _ in r] for q, r in first.rankings()} == {q: [d for d, _ in r] for q, r in reranked.rankings()}


def test_a_missing_model_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    done = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "retriever=[bm25]",
        "fusion=[]",
        "reranker=[cross_encoder]",
        f"reranker.cross_encoder.model={tmp_path / 'no-such-model'}",
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == (
        f"ragtrack: error: reranker.cross_encoder.model: '{tmp_path / 'no-such-model'}' is not allowed: "
        "no such model folder; offline, give the path of a local model folder"
    )
    assert "Traceback" not in done.stderr
    assert not (tmp_path / ".cache" / "ragtrack" / "bm25").exists() and not list(tmp_path.rglob("results.json"))
    done = ragtrack(
        tmp_path, "run", "dataset=toy", "encoder=minilm", f"encoder.model={tmp_path / 'no-such-model'}"
    )  # the encoder alike
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1] == (
        f"ragtrack: error: retriever.dense.encoder.model: '{tmp_path / 'no-such-model'}' is not allowed: "
        "no such model folder; offline, give the path of a local model folder"
    )
    assert not (tmp_path / "mlruns").exists() and not list(tmp_path.rglob("results.json"))  # no MLflow run was started


def test_an_oracle_reranker_plugin_gives_the_ideal_reordering_of_bm25s_top_100(tmp_path: Path, monkeypatch) -> None:
    """A plugin is its class, an entry point and a YAML file; here on SciFact BM25's top 100 (300 queries),
    equal per metric to the ideal reordering of those documents computed with pytrec_eval."""
    installed = registry.installed
    oracle = EntryPoint(name="oracle", value="tests.support:OracleReranker", group="ragtrack.rerankers")
    monkeypatch.setattr(
        registry, "installed", lambda group: installed(group) | ({"oracle": oracle} if group == "rerankers" else {})
    )
    conf = tmp_path / "conf"
    (conf / "reranker").mkdir(parents=True)
    (conf / "reranker" / "oracle.yaml").write_text("oracle:\n  type: oracle\n  input: bm25\n  depth: 100\n")
    import ragtrack

    result = ragtrack.run_experiment(
        [
            "dataset=scifact",
            "retriever=[bm25]",
            "fusion=[]",
            "reranker=[oracle]",
            "tracking=none",
            f"paths.root_dir={tmp_path}",
        ],
        config_dir=conf,
    )
    dataset = load_beir(Path(str(TOY)).parent / "scifact")
    bm25 = read_trec(result.output_dir / "runs" / "bm25.trec")
    ideal = {}
    for qid, ranked in bm25.rankings():  # grade first, then BM25's order: an independent ideal reordering
        order = sorted(range(len(ranked)), key=lambda i: (-dataset.qrels.get(qid, {}).get(ranked[i][0], 0), i))
        ideal[qid] = {ranked[i][0]: float(len(ranked) - position) for position, i in enumerate(order)}
    measures = {"ndcg_cut_10": "ndcg@10", "map": "map", "recall_100": "recall@100", "recip_rank": "mrr", "P_5": "p@5"}
    per_query = pytrec_eval.RelevanceEvaluator(dataset.qrels, set(measures)).evaluate(ideal)
    oracle_metrics = result.results["systems"]["bm25+oracle"]
    for measure, name in measures.items():
        expected = sum(per_query.get(qid, {}).get(measure, 0.0) for qid in dataset.qrels) / len(dataset.qrels)
        assert oracle_metrics[name] == pytest.approx(expected, abs=1e-9), name
    assert oracle_metrics["ndcg@10"] > result.results["systems"]["bm25"]["ndcg@10"] + 0.1


def toy_job(tmp_path: Path, *overrides: str) -> list[str]:
    """A job's overrides on the toy dataset with the hashing encoder, its files under ``tmp_path``."""
    return [
        "dataset=toy",
        "encoder=hashing",
        "tracking=none",
        f"paths.root_dir={tmp_path}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        *overrides,
    ]


def test_a_cross_fitted_learned_fusion_is_a_system_of_the_job(tmp_path: Path) -> None:
    """``fusion=[probfuse]`` runs as shipped (cross-fitted on folds of the job's queries): its run file
    is the fold-by-fold fusion of the members' run files, and the dry run plans it without a search."""
    overrides = toy_job(
        tmp_path, "fusion=[rrf,probfuse]", "fusion.probfuse.train.folds=3", "fusion.probfuse.segments=2"
    )
    job = api.run_experiment(overrides)
    assert list(job.systems) == ["bm25", "dense", "hybrid", "probfuse"]
    runs = {name: read_trec(job.output_dir / "runs" / f"{name}.trec") for name in ("bm25", "dense", "probfuse")}
    expected = ProbFuse(system="probfuse", members=["bm25", "dense"], segments=2, train={"folds": 3}).fuse_on(
        runs, load_beir(TOY)
    )
    assert {q: runs["probfuse"].ranking(q) for q in expected.scores} == {
        q: [(d, pytest.approx(s, rel=1e-15)) for d, s in expected.ranking(q)] for q in expected.scores
    }
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, f"paths.output_dir={tmp_path / 'dry'}"])
    dry_run(cfg)


@pytest.fixture
def two_splits(tmp_path: Path) -> Path:
    """The toy dataset with q1-q3 judged in qrels/train.tsv and q4-q6 in qrels/test.tsv."""
    data = tmp_path / "toy"
    shutil.copytree(TOY, data)
    lines = (data / "qrels" / "test.tsv").read_text().splitlines()
    for split, queries in (("train", {"q1", "q2", "q3"}), ("test", {"q4", "q5", "q6"})):
        kept = [line for line in lines[1:] if line.split("\t")[0] in queries]
        (data / "qrels" / f"{split}.tsv").write_text("\n".join([lines[0], *kept]) + "\n")
    return data


def split_job(tmp_path: Path, data: Path, *overrides: str) -> list[str]:
    """:func:`toy_job` on the toy data at ``data`` (:func:`two_splits`)."""
    return toy_job(tmp_path, f"dataset.path={data}", *overrides)


def test_a_learned_fusion_learns_from_another_split_in_the_same_job(tmp_path: Path, two_splits: Path) -> None:
    """``train.dataset={split: train}``: the members run on the train queries within the job, and the
    fused test run is the one the same method fitted on a train-split job's run files gives."""
    learned = ["fusion=[probfuse]", "fusion.probfuse.train.folds=null", "fusion.probfuse.train.dataset={split: train}"]
    job = api.run_experiment(split_job(tmp_path, two_splits, "fusion.probfuse.segments=2", *learned))
    train = api.run_experiment(split_job(tmp_path, two_splits, "dataset.split=train", "fusion=[]"))
    folder = train.output_dir / "runs"
    expected = ProbFuse(
        system="probfuse",
        members=["bm25", "dense"],
        segments=2,
        train={
            "qrels": str(two_splits / "qrels" / "train.tsv"),
            "runs": {m: str(folder / f"{m}.trec") for m in ("bm25", "dense")},
        },
    ).fuse({m: read_trec(job.output_dir / "runs" / f"{m}.trec") for m in ("bm25", "dense")})
    fused = read_trec(job.output_dir / "runs" / "probfuse.trec")
    assert set(fused.scores) == {"q4", "q5", "q6"} == set(expected.scores)
    assert {q: fused.ranking(q) for q in fused.scores} == {
        q: [(d, pytest.approx(s, rel=1e-15)) for d, s in expected.ranking(q)] for q in expected.scores
    }
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose(
            "config", overrides=[*split_job(tmp_path, two_splits, *learned), f"paths.output_dir={tmp_path / 'dry'}"]
        )
    dry_run(cfg)


@pytest.mark.parametrize(
    "overrides, message",
    [
        (
            ["fusion.probfuse.train.dataset={split: test}"],
            r"fusion\.probfuse\.train\.dataset: 3 of its 3 training queries are among the 3 queries that this job reports \(e\.g\. 'q4'\)",
        ),
        (["fusion.probfuse.train.dataset={split: dev}"], r"qrels/dev\.tsv: file not found"),
        (
            ["fusion.probfuse.train.dataset={splt: train}"],
            r"fusion\.probfuse\.train\.dataset: splt: no such key of the job's dataset",
        ),
        (
            ["fusion.probfuse.train.dataset={split: train}", "chunking=tokens"],
            r"fusion\.probfuse\.train\.dataset: a job that chunks learns from folds",
        ),
    ],
)
def test_a_training_dataset_that_cannot_serve_stops_the_job_before_any_system_runs(
    tmp_path: Path, two_splits: Path, overrides: list[str], message: str
) -> None:
    with pytest.raises(RagtrackError, match=message):
        api.run_experiment(
            split_job(tmp_path, two_splits, "fusion=[probfuse]", "fusion.probfuse.train.folds=null", *overrides)
        )
    assert not list(tmp_path.rglob("run.trec"))
