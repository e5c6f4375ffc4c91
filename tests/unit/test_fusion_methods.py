"""Every fusion method and normalization equals ranx's (ranx.fuse and its ``*_train`` functions) on
random runs: per query the same scores (1e-9) and the ranking in trec_eval order; Condorcet where
ranx's answer is unique (its documented bug otherwise); learned methods only from training queries."""

from __future__ import annotations

import random
from dataclasses import replace
from functools import cmp_to_key

import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.data import Corpus, Dataset
from ragtrack.core.errors import RagtrackError
from ragtrack.core.runs import Run, rank_documents, write_trec
from ragtrack.core.stages import StageContext, StageOutput, chain_key
from ragtrack.pipeline import registry
from ragtrack.pipeline.analysis.tuning import folds_of
from ragtrack.retrievers.fusion_methods import Trained, condorcet, fuse

ranx = pytest.importorskip("ranx")
from ranx import Qrels as RanxQrels  # noqa: E402
from ranx import Run as RanxRun  # noqa: E402
from ranx import fusion as ranx_fusion  # noqa: E402


def random_runs(seed: int, members: int = 2, queries: int = 25, prefix: str = "q") -> dict[str, Run]:
    """Members over the same queries, 2-40 documents each (minmax of one score is 1 here, 0 in ranx) from a pool of 60 (some shared), distinct scores."""
    rng = random.Random(seed)
    return {
        f"m{i}": Run(
            f"m{i}",
            {
                f"{prefix}{q}": {f"d{d}": rng.uniform(-3, 5) for d in rng.sample(range(60), rng.randint(2, 40))}
                for q in range(queries)
            },
        )
        for i in range(members)
    }


def as_ranx(runs: dict[str, Run]) -> list:
    return [RanxRun({qid: dict(scores) for qid, scores in run.scores.items()}) for run in runs.values()]


def assert_same(ours: Run, reference: dict[str, dict[str, float]]) -> None:
    assert set(ours.scores) == set(reference)
    for qid, scores in reference.items():
        assert ours.scores[qid] == pytest.approx(scores, rel=1e-9, abs=1e-9), qid
        ranked = [d for d, _ in ours.ranking(qid)]  # ranx's order, equal scores (to 1e-9) in trec_eval order
        assert all(scores[a] >= scores[b] - 1e-9 for a, b in zip(ranked, ranked[1:])), qid
        assert ranked == [d for d, _ in rank_documents(ours.scores[qid])]


NORMS = {
    "none": None,
    "minmax": "min-max",
    "zscore": "zmuv",
    "max": "max",
    "sum": "sum",
    "rank": "rank",
    "borda": "borda",
    "minmax-inverted": "min-max-inverted",
}
WEIGHTS = [0.7, 1.6]
UNSUPERVISED = [  # ours, its parameters, ranx's name, ranx's parameters
    ("combsum", {}, "sum", {}),
    ("combsum", {"weights": WEIGHTS}, "wsum", {"weights": WEIGHTS}),
    ("combmnz", {}, "mnz", {}),
    ("combanz", {}, "anz", {}),
    ("combgmnz", {"gamma": 0.3}, "gmnz", {"gamma": 0.3}),
    ("combmin", {}, "min", {}),
    ("combmax", {}, "max", {}),
    ("combmed", {}, "med", {}),
    ("wmnz", {"weights": WEIGHTS}, "wmnz", {"weights": WEIGHTS}),
    ("mixed", {"weights": WEIGHTS}, "mixed", {"weights": WEIGHTS}),
    ("rrf", {"k": 10}, "rrf", {"k": 10}),
    ("isr", {}, "isr", {}),
    ("log_isr", {}, "log_isr", {}),
    ("logn_isr", {"sigma": 0.2}, "logn_isr", {"sigma": 0.2}),
    ("rbc", {"phi": 0.7}, "rbc", {"phi": 0.7}),
    ("borda", {}, "bordafuse", {}),
    ("borda", {"weights": WEIGHTS}, "w_bordafuse", {"weights": WEIGHTS}),
]


@pytest.mark.parametrize("method, ours, name, theirs", UNSUPERVISED, ids=[f"{m}-{n}" for m, _, n, _ in UNSUPERVISED])
def test_every_unsupervised_method_equals_ranx(method: str, ours: dict, name: str, theirs: dict) -> None:
    runs = random_runs(sum(map(ord, name + method)))
    reference = ranx.fuse(as_ranx(runs), norm="min-max", method=name, params=theirs).to_dict()
    assert_same(fuse(runs, list(runs), method, depth=1000, normalization="minmax", **ours), reference)


@pytest.mark.parametrize("normalization", sorted(NORMS))
@pytest.mark.parametrize("method, name", [("combsum", "sum"), ("combmnz", "mnz"), ("combmed", "med")])
def test_every_normalization_equals_ranx(normalization: str, method: str, name: str) -> None:
    runs = random_runs(7, members=3)
    reference = ranx.fuse(as_ranx(runs), norm=NORMS[normalization], method=name).to_dict()
    assert_same(fuse(runs, list(runs), method, depth=1000, normalization=normalization), reference)


def test_rank_methods_read_the_inverted_order() -> None:
    """min-max-inverted re-ranks a member (distances: lowest first), as ranx does before a rank method."""
    runs = random_runs(3)
    reference = ranx.fuse(as_ranx(runs), norm="min-max-inverted", method="sum").to_dict()
    assert_same(fuse(runs, list(runs), "combsum", depth=1000, normalization="minmax-inverted"), reference)


def acyclic_runs(seed: int) -> dict[str, Run]:
    """Three members ranking the same 12 documents: small perturbations of one order, so a strict majority
    decides every pair; kept only when the majority relation is transitive (the Condorcet order is unique)."""
    rng = random.Random(seed)
    base = [f"d{i}" for i in range(12)]
    while True:
        orders = []
        for _ in range(3):
            order = base[:]
            for _ in range(3):
                i = rng.randrange(11)
                order[i], order[i + 1] = order[i + 1], order[i]
            orders.append(order)
        position = [{d: p for p, d in enumerate(order)} for order in orders]
        wins = {d: sum(sum(p[d] < p[e] for p in position) >= 2 for e in base if e != d) for d in base}
        if sorted(wins.values()) == list(range(12)):
            return {
                f"m{i}": Run(f"m{i}", {"q": {d: 100.0 - p for p, d in enumerate(order)}})
                for i, order in enumerate(orders)
            }


@pytest.mark.parametrize("seed", range(5))
def test_condorcet_equals_ranx_where_its_order_is_unique(seed: int) -> None:
    runs = acyclic_runs(seed)
    assert_same(
        condorcet(runs, list(runs), depth=100), ranx.fuse(as_ranx(runs), norm=None, method="condorcet").to_dict()
    )
    weights = [1.0, 1.0, 3.0]  # the third member outvotes the other two: its order
    fused = condorcet(runs, list(runs), depth=100, weights=weights)
    assert [d for d, _ in fused.ranking("q")] == [d for d, _ in runs["m2"].ranking("q")]
    assert_same(fused, ranx.fuse(as_ranx(runs), norm=None, method="w_condorcet", params={"weights": weights}).to_dict())


def test_condorcet_unranked_pairs_get_no_vote() -> None:
    """The documented difference: x (ranked 2nd by a) against z (ranked 1st by b): one vote each, a
    tie kept in Borda order; ranx lets each member that ranked neither vote for the second argument."""
    runs = {"a": Run("a", {"q": {"w": 3.0, "x": 2.0}}), "b": Run("b", {"q": {"z": 3.0, "y": 2.0}})}
    fused = condorcet(runs, ["a", "b"])
    assert [d for d, _ in fused.ranking("q")] == [
        "z",
        "w",
        "y",
        "x",
    ]  # Borda order (rank sums 1+3, 2+3 each), ties by id
    assert fused.scores["q"] == {"z": 4.0, "w": 3.0, "y": 2.0, "x": 1.0}


def condorcet_by_comparisons(runs: dict[str, Run], weights: list[float] | None = None) -> dict[str, dict[str, float]]:
    """The definition, query by query: Python's stable sort by pairwise weighted majority (a member that
    ranked neither document votes for neither) from the Borda order; the i-th (from 0) scores N − i."""
    weights = weights or [1.0] * len(runs)
    fused = {}
    for qid in dict.fromkeys(q for run in runs.values() for q in run.scores):
        position = [
            {d: p for p, (d, _) in enumerate(run.ranking(qid), 1)} if qid in run.scores else {} for run in runs.values()
        ]
        docs = list(dict.fromkeys(d for ranks in position for d in ranks))
        at = {d: [ranks.get(d, len(docs) + 1) for ranks in position] for d in docs}

        def compare(x: str, y: str, at: dict[str, list[int]] = at) -> int:
            margin = sum(w * ((a < b) - (b < a)) for w, a, b in zip(weights, at[x], at[y]))
            return -1 if margin > 0 else 1 if margin < 0 else 0

        start = [d for d, _ in rank_documents({d: -sum(at[d]) for d in docs})]
        fused[qid] = {d: float(len(docs) - i) for i, d in enumerate(sorted(start, key=cmp_to_key(compare)))}
    return fused


@pytest.mark.parametrize(
    "members, weights",
    [
        (2, None),
        (2, [0.4, 0.6]),
        (2, [0.0, 1.0]),
        (2, [2.0, 2.0]),
        (3, None),
        (3, [1.0, 1.0, 3.0]),
        (3, [0.2, 0.3, 0.5]),
        (4, [1.0, 2.0, 4.0, 8.0]),
        (4, None),
    ],
)
def test_condorcet_equals_its_definition_by_comparisons(members: int, weights: list[float] | None) -> None:
    """Every path of the sort (lexicographic votes; the Borda order kept; a query sorted by comparisons,
    with cycles among 3 or 4 members) gives the order Python's sort gives with the majority comparator."""
    runs = random_runs(40 + members, members=members, queries=40)
    fused = condorcet(runs, list(runs), depth=1000, weights=weights)
    assert fused.scores == condorcet_by_comparisons(runs, weights)
    assert [d for d, _ in fused.ranking("q0")] == [d for d, _ in rank_documents(fused.scores["q0"])]


LEARNED = [
    ("posfuse", {}, {}),
    ("probfuse", {"segments": 4}, {"n_segments": 4}),
    ("segfuse", {}, {}),
    ("slidefuse", {"window": 3}, {"w": 3}),
    ("bayesfuse", {}, {}),
    ("mapfuse", {}, {}),
]


@pytest.mark.parametrize("method, ours, theirs", LEARNED, ids=[m for m, _, _ in LEARNED])
def test_every_learned_method_equals_ranx_trained_on_other_queries(method: str, ours: dict, theirs: dict) -> None:
    train, test = random_runs(11, prefix="train"), random_runs(12, prefix="test")
    rng = random.Random(5)
    qrels = {qid: {f"d{d}": rng.choice([1, 1, 2]) for d in rng.sample(range(60), 12)} for qid in train["m0"].scores}
    norm = "min-max" if method == "segfuse" else None
    train_params = {"n_segments": theirs["n_segments"]} if "n_segments" in theirs else {}
    learned = getattr(ranx_fusion, f"{method}_train")(RanxQrels(qrels), as_ranx(train), **train_params)
    apply = {"w": theirs["w"]} if "w" in theirs else {}
    key = {"mapfuse": "map_scores", "bayesfuse": "log_odds"}.get(method, "probs")
    normed = [ranx.normalization.min_max_norm(r) for r in as_ranx(test)] if norm else as_ranx(test)
    reference = getattr(ranx_fusion, method)(normed, **{key: learned}, **apply).to_dict()
    fusion = Trained(method, list(test), depth=1000, normalization="minmax" if norm else "none", **ours).fit(
        train, qrels
    )
    assert_same(fusion.fuse(test), reference)


def test_learned_methods_refuse_the_queries_they_were_trained_on() -> None:
    runs = random_runs(1)
    qrels = {"q0": {"d1": 1}}
    fusion = Trained("posfuse", list(runs)).fit(runs, qrels)
    with pytest.raises(RagtrackError, match="posfuse was trained on 1 of the queries it would fuse .e.g. 'q0'."):
        fusion.fuse(runs)
    with pytest.raises(RagtrackError, match="fit it on training queries before fusing"):
        Trained("mapfuse", list(runs)).fuse(runs)
    with pytest.raises(RagtrackError, match="unknown fusion method 'magic'"):
        fuse(runs, list(runs), "magic")


def test_a_learned_fusion_refuses_a_job_that_reports_its_training_queries(tmp_path) -> None:
    """Checked from the settings and the dataset before any system runs: the overlap counted, one example named."""
    train = random_runs(11, prefix="q")  # the training queries are q0 .. q24
    (tmp_path / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td1\t1\n" for i in range(25)))
    for name, run in train.items():
        write_trec(run, tmp_path / f"{name}.trec")
    fusion = registry.build(
        "fusions",
        {
            "type": "posfuse",
            "system": "posfuse",
            "members": ["m0", "m1"],
            "train": {"qrels": str(tmp_path / "qrels.tsv"), "runs": {m: str(tmp_path / f"{m}.trec") for m in train}},
        },
    )

    def dataset(qids: list[str]) -> Dataset:
        return Dataset(
            "toy", Corpus(["d1"], [""], ["text"], "h"), {qid: "text" for qid in qids}, {qid: {"d1": 1} for qid in qids}
        )

    assert fusion.dataset_problems(dataset(["t1", "t2"])) == {}
    problem = fusion.dataset_problems(dataset(["q24", "q3", "t1"]))["train.qrels"]
    assert problem.startswith(
        "2 of its 25 training queries are among the 3 queries of toy that this job reports (e.g. 'q24')"
    )
    assert "\n" not in problem


# ----------------------------------------------------------------------------- cross-fitted on folds
UNJUDGED = "q3"  # judged by no qrels: a fold model learns nothing from it


def judged_dataset(runs: dict[str, Run], seed: int, name: str = "toy") -> Dataset:
    """The runs' queries, each judging 12 of the 60 documents (grades 1 or 2), q3 left unjudged."""
    rng = random.Random(seed)
    qids = list(next(iter(runs.values())).scores)
    qrels = {q: {f"d{d}": rng.choice([1, 1, 2]) for d in rng.sample(range(60), 12)} for q in qids if q != UNJUDGED}
    return Dataset(
        name, Corpus([f"d{d}" for d in range(60)], [""] * 60, ["text"] * 60, "h"), dict.fromkeys(qids, "t"), qrels
    )


def learned_stage(method: str, **values):
    return registry.build("fusions", {"type": method, "system": method, "members": ["m0", "m1"], **values})


@pytest.mark.parametrize("method, ours, theirs", LEARNED, ids=[m for m, _, _ in LEARNED])
def test_a_cross_fitted_fusion_equals_ranx_trained_on_the_other_folds(method: str, ours: dict, theirs: dict) -> None:
    """Each fold of the job's queries (cut as ``compare --folds`` cuts them) equals ranx's method trained
    on the other folds' judgments and runs, then applied to the fold."""
    runs = random_runs(21)
    data = judged_dataset(runs, 4)
    norm = method == "segfuse"  # SegFuse reads min-max scores (ranx normalizes them first)
    stage = learned_stage(method, depth=1000, train={"folds": 4, "seed": 7}, **ours)
    fused = stage.fuse_on(runs, data)
    folds = folds_of(list(data.queries), 4, seed=7)
    for fold in folds:
        qrels = {q: j for q, j in data.qrels.items() if q not in fold}  # ranx pairs run and qrels query by query:
        train = {m: RanxRun({q: dict(r.scores[q]) for q in qrels}) for m, r in runs.items()}  # the judged ones
        train_params = {"n_segments": theirs["n_segments"]} if "n_segments" in theirs else {}
        learned = getattr(ranx_fusion, f"{method}_train")(RanxQrels(qrels), list(train.values()), **train_params)
        held = [RanxRun({q: dict(r.scores[q]) for q in fold}) for r in runs.values()]
        held = [ranx.normalization.min_max_norm(r) for r in held] if norm else held
        key = {"mapfuse": "map_scores", "bayesfuse": "log_odds"}.get(method, "probs")
        apply = {"w": theirs["w"]} if "w" in theirs else {}
        reference = getattr(ranx_fusion, method)(held, **{key: learned}, **apply).to_dict()
        assert_same(Run(method, {q: fused.scores[q] for q in fold}), reference)
    assert list(fused.scores) == list(runs["m0"].scores)  # the members' query order


def test_a_folds_judgments_never_reach_its_own_fusion() -> None:
    """Changing every judgment of one fold's queries changes the other folds' rankings, never its own."""
    runs = random_runs(22)
    data = judged_dataset(runs, 5)
    stage = learned_stage("probfuse", train={"folds": 5, "seed": 0})
    fold = folds_of(list(data.queries), 5, seed=0)[2]
    flipped = {q: ({f"d{d}": 2 for d in range(30)} if q in fold else j) for q, j in data.qrels.items()}
    before, after = stage.fuse_on(runs, data), stage.fuse_on(runs, replace(data, qrels=flipped))
    assert all(before.ranking(q) == after.ranking(q) for q in fold)
    assert any(before.scores[q] != after.scores[q] for q in data.queries if q not in fold)


def test_cross_fitted_fusion_keys_its_output_by_the_judgments(tmp_path) -> None:
    """A reranker reading a cross-fitted fusion is recomputed when the qrels change; no other stage's key
    reads the judgments (their keys are as before)."""
    runs = random_runs(23)
    data = judged_dataset(runs, 6)
    context = StageContext(data, data.corpus, Cache(tmp_path), 100, 100)
    inputs = {m: StageOutput(r, r, f"key-{m}", None) for m, r in runs.items()}
    stage = learned_stage("posfuse")
    other = replace(data, qrels={**data.qrels, "q0": {"d1": 1}})
    assert stage.identity()["train"] == {"folds": 5, "seed": 0}
    assert chain_key(stage, inputs, context) != chain_key(stage, inputs, replace(context, dataset=other))
    rrf = registry.build("fusions", {"type": "rrf", "system": "hybrid", "members": ["m0", "m1"]})
    assert rrf.identity_on(data) == {} and chain_key(rrf, inputs, context) == chain_key(
        rrf, inputs, replace(context, dataset=other)
    )
    files = learned_stage("posfuse", train={"folds": None, "qrels": __file__, "runs": {"m0": __file__, "m1": __file__}})
    assert files.identity_on(data) == {}


def test_cross_fitting_refuses_what_cannot_be_folded_before_any_system_runs() -> None:
    runs = random_runs(24, queries=4)
    data = judged_dataset(runs, 7)
    assert learned_stage("mapfuse", train={"folds": 4}).dataset_problems(data) == {}
    assert learned_stage("mapfuse", train={"folds": 5}).dataset_problems(data) == {
        "train.folds": "5 folds of the 4 queries of toy: give 2 to 4"
    }
    unjudged = replace(data, qrels={"q0": data.qrels["q0"]})
    problem = learned_stage("mapfuse", train={"folds": 2, "seed": 1}).dataset_problems(unjudged)["train.folds"]
    assert problem.startswith("fold ") and "the other folds hold no judged query of toy to learn from" in problem


@pytest.mark.parametrize(
    "train, message",
    [
        ({"folds": 5, "qrels": "q.tsv", "runs": {"m0": "a", "m1": "b"}}, "one of folds"),
        ({"folds": None}, "one of folds"),
        ({"folds": None, "qrels": "q.tsv"}, "training files need both qrels and runs"),
        ({"folds": 1}, "greater than or equal to 2"),
        ({"folds": None, "qrels": "q.tsv", "runs": {"m0": "a"}}, "one training run per member"),
        (None, "train"),
    ],
)
def test_train_takes_folds_or_files(train: dict | None, message: str) -> None:
    with pytest.raises(RagtrackError, match=message):
        learned_stage("posfuse", train=train)


def test_a_learned_stage_is_cross_fitted_on_five_folds_by_default() -> None:
    settings = learned_stage("slidefuse").settings.train
    assert (settings.folds, settings.seed, settings.qrels, settings.runs) == (5, 0, None, None)
