"""err, auc and mean_rank (no trec_eval counterpart) on cases worked by hand from their papers'
definitions; plus metric-name parsing. Documents get distinct scores, so the ranking is the listing order."""

from __future__ import annotations

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.evaluators.ranking import RankingEvaluator, parse_metric, score_ranking


def ranked(*docs: str) -> dict[str, float]:
    """A run for one query listing ``docs`` best first."""
    return {doc: float(len(docs) - rank) for rank, doc in enumerate(docs)}


def scores(run: dict, qrels: dict, metrics: list[str], **options) -> dict[str, dict[str, float]]:
    return score_ranking(run, qrels, metrics, **options)[0].to_dict(orient="index")


# ERR (Chapelle et al. 2009): R_i = (2^g_i - 1) / 2^g_max; ERR = sum_r (1/r) R_r prod_{i<r} (1 - R_i).
ERR_QRELS = {"a": {"d1": 3, "d2": 0, "d3": 2, "d5": 1}, "b": {"d6": 1}}
ERR_RUN = {"a": ranked("d1", "d2", "d3", "d4", "d5"), "b": ranked("d6")}


def test_err_graded_cascade() -> None:
    # g_max = 3 (largest grade in the qrels), 2^3 = 8. Query a: grades 3, 0, 2, unjudged, 1 ->
    # R = 7/8, 0, 3/8, 0, 1/8.  ERR = 7/8 + (1/8)(1)(3/8)/3 + (1/8)(1)(5/8)(1)(1/8)/5
    #                              = 448/512 + 8/512 + 1/512 = 457/512.
    # ERR@2 = 7/8 (rank 2 has R = 0); ERR@3 = 7/8 + 1/64 = 57/64.
    # Query b: one document of grade 1 at rank 1 -> R = 1/8, ERR = 1/8 (g_max is global, not per query).
    values = scores(ERR_RUN, ERR_QRELS, ["err", "err@2", "err@3"])
    assert values["a"] == pytest.approx({"err": 457 / 512, "err@2": 7 / 8, "err@3": 57 / 64}, abs=1e-12)
    assert values["b"]["err"] == pytest.approx(1 / 8, abs=1e-12)


def test_err_with_the_scale_given() -> None:
    # max_grade=4 (a 0-4 scale, 2^4 = 16): query a: R = 7/16, 0, 3/16, 0, 1/16.
    # ERR = 7/16 + (9/16)(3/16)/3 + (9/16)(13/16)(1/16)/5 = 7/16 + 9/256 + 117/20480
    #     = 8960/20480 + 720/20480 + 117/20480 = 9797/20480.  Query b: 1/16.
    values = scores(ERR_RUN, ERR_QRELS, ["err"], max_grade=4)
    assert values["a"]["err"] == pytest.approx(9797 / 20480, abs=1e-12)
    assert values["b"]["err"] == pytest.approx(1 / 16, abs=1e-12)
    binary = scores({"q": ranked("x", "r")}, {"q": {"r": 1}}, ["err"])
    assert binary["q"]["err"] == pytest.approx(0.5 / 2, abs=1e-12)  # binary: R = 1/2 for relevant, found at rank 2


def test_auc_pairs() -> None:
    # AUC = P(relevant above non-relevant), ties 1/2; N = retrieved non-relevant (judged or not) plus
    # judged non-relevant not retrieved; unretrieved documents tie below every retrieved one.
    qrels = {
        "a": {"r1": 2, "r2": 1, "n1": 0, "n2": 0},  # run r1 u1 n1 r2: N = {u1, n1, n2}
        "b": {"r1": 1, "r2": 1, "n1": 0},  # run n1 r1: N = {n1}
        "c": {"r1": 1, "r2": 1, "n1": 0, "n2": 0},  # run r1: N = {n1, n2}, both unretrieved
        "d": {"r1": 1, "r2": 1},  # run r1: N empty
        "e": {"r1": 1, "n1": 0},  # absent from the run
        "f": {"n1": 0},  # no relevant document
    }
    run = {"a": ranked("r1", "u1", "n1", "r2"), "b": ranked("n1", "r1"), "c": ranked("r1"), "d": ranked("r1")}
    values = scores(run, qrels, ["auc"])
    # a: r1 is above u1, n1, n2 (3 pairs right); r2 (rank 4) is above only the unretrieved n2 (1) -> 4 / (2*3)
    assert values["a"]["auc"] == pytest.approx(4 / 6, abs=1e-12)
    # b: r1 is below n1 (0); unretrieved r2 is below the retrieved n1 (0) -> 0 / (2*1)
    assert values["b"]["auc"] == 0
    # c: r1 above n1 and n2 (2); unretrieved r2 ties with unretrieved n1, n2 (1/2 + 1/2) -> 3 / (2*2)
    assert values["c"]["auc"] == pytest.approx(3 / 4, abs=1e-12)
    # d: no non-relevant document known; with any number U of unretrieved non-relevant ones:
    #    (1*U + 1/2*U) / (2*U) = 3/4
    assert values["d"]["auc"] == pytest.approx(3 / 4, abs=1e-12)
    # e: nothing retrieved: the one pair ties -> 1/2 (chance)
    assert values["e"]["auc"] == pytest.approx(1 / 2, abs=1e-12)
    assert values["f"]["auc"] == 0


def test_mean_rank() -> None:
    # rank of the first relevant document; a miss scores one past the cutoff: k + 1, or the run's
    # depth + 1 without a cutoff (depth = 5, the longest ranking, query d's).
    qrels = {"a": {"r": 1}, "b": {"r": 1, "n": 0}, "c": {"r": 2}, "d": {"r": 1}}
    run = {"a": ranked("x", "y", "r"), "b": ranked("n", "x"), "d": ranked("r", "v", "w", "x", "y")}
    values = scores(run, qrels, ["mean_rank", "mean_rank@2"])
    assert values["a"] == {"mean_rank": 3, "mean_rank@2": 3}  # found at 3; beyond k=2 -> k + 1 = 3
    assert values["b"] == {"mean_rank": 6, "mean_rank@2": 3}  # not found -> depth + 1 = 6 / k + 1 = 3
    assert values["c"] == {"mean_rank": 6, "mean_rank@2": 3}  # absent from the run
    assert values["d"] == {"mean_rank": 1, "mean_rank@2": 1}
    assert scores(run, qrels, ["mean_rank"], threshold=2)["a"]["mean_rank"] == 6  # grade 1 < 2: not relevant


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("ndgc@10", "unknown metric 'ndgc@10'; known: p@k, recall@k"),
        ("p", "needs a cutoff"),
        ("auc@10", "takes no cutoff"),
        ("ndcg@0", "positive integer"),
    ],
)
def test_bad_metric_names(name: str, problem: str) -> None:
    with pytest.raises(RagtrackError, match=problem.replace("(", r"\(")):
        parse_metric(name)
    with pytest.raises(RagtrackError):
        RankingEvaluator(metrics=[name])


@pytest.mark.parametrize(
    "typed, suggestion",
    [("ndgc@10", "ndcg@10"), ("recal@100", "recall@100"), ("mrrr", "mrr"), ("qqq", None), ("zzz@3", None)],
)
def test_a_misspelled_metric_gets_a_did_you_mean(typed: str, suggestion: str | None) -> None:
    with pytest.raises(RagtrackError) as failure:
        parse_metric(typed)
    message = str(failure.value)
    assert message.startswith(f"unknown metric {typed!r}; ") and "known: " in message
    assert message.endswith(f"; did you mean {suggestion!r}?") if suggestion else "did you mean" not in message


# --- variants from other sources, on their worked examples ----------------------------------------


def test_ndcg_retrieved_on_the_wikipedia_example() -> None:
    # Wikipedia, "Discounted cumulative gain", worked example: six retrieved documents graded 3 2 3 0 1 2.
    # DCG6 = 3 + 2/log2(3) + 3/2 + 0 + 1/log2(6) + 2/log2(7) = 6.861; the ideal order of the retrieved
    # documents, 3 3 2 2 1 0, gives IDCG6 = 7.141 and nDCG6 = 0.961. With two more relevant documents
    # judged (3 and 2) but not retrieved, trec_eval's ideal is 3 3 3 2 2 2: IDCG6 = 8.740, nDCG6 = 0.785.
    run = {"q": ranked("d1", "d2", "d3", "d4", "d5", "d6")}
    grades = {"d1": 3, "d2": 2, "d3": 3, "d4": 0, "d5": 1, "d6": 2}
    values = scores(run, {"q": grades}, ["dcg@6", "ndcg_retrieved@6", "ndcg@6"])["q"]
    assert (round(values["dcg@6"], 3), round(values["ndcg_retrieved@6"], 3), round(values["ndcg@6"], 3)) == (
        6.861,
        0.961,
        0.961,
    )
    values = scores(run, {"q": grades | {"d7": 3, "d8": 2}}, ["ndcg_retrieved@6", "ndcg@6"])["q"]
    assert (round(values["ndcg_retrieved@6"], 3), round(values["ndcg@6"], 3)) == (0.961, 0.785)


def test_precision_over_the_retrieved_documents() -> None:
    # 3 documents retrieved, 2 relevant: P@10 = 2/10 (trec_eval), p_retrieved@10 = 2/3; @2: 1/2 both.
    values = scores(
        {"q": ranked("r1", "n", "r2")}, {"q": {"r1": 1, "r2": 1, "r3": 1}}, ["p@10", "p_retrieved@10", "p_retrieved@2"]
    )["q"]
    assert values == pytest.approx({"p@10": 0.2, "p_retrieved@10": 2 / 3, "p_retrieved@2": 0.5}, abs=1e-12)
    assert scores({}, {"q": {"r1": 1}}, ["p_retrieved@5"])["q"]["p_retrieved@5"] == 0  # nothing retrieved


def test_capped_recall_hole_and_judged() -> None:
    # BEIR (Thakur et al. 2021): R_cap@k = relevant in top k / min(k, |relevant|); Hole@k = top-k documents
    # judged for no query / k. Query a has 4 relevant documents; its run: r1 r2 u1 n1 x, where x is judged
    # only for query b and u1 nowhere. R_cap@2 = 2/min(2, 4) = 1 (recall@2 = 2/4); R_cap@5 = 2/4.
    # Hole@5 = 1/5 (u1; x is judged for b); judged@5 = 3/5 (r1 r2 n1: judged for a).
    qrels = {"a": {"r1": 1, "r2": 2, "r3": 1, "r4": 1, "n1": 0}, "b": {"x": 1}}
    values = scores(
        {"a": ranked("r1", "r2", "u1", "n1", "x")},
        qrels,
        ["recall@2", "r_cap@2", "r_cap@5", "hole@5", "judged@5", "hole@10"],
    )["a"]
    assert values == pytest.approx(
        {"recall@2": 0.5, "r_cap@2": 1.0, "r_cap@5": 0.5, "hole@5": 0.2, "judged@5": 0.6, "hole@10": 0.1}, abs=1e-12
    )


def test_context_precision_on_the_ragas_example() -> None:
    # ragas docs (context precision): contexts ranked [irrelevant, relevant]: precision@1 = 0,
    # precision@2 = 1/2 -> (0·0 + 1/2·1) / 1 = 0.5. Verdicts 1 0 1: (1 + 2/3) / 2 = 5/6; none relevant: 0.
    qrels = {"a": {"r": 1}, "b": {"r1": 1, "r2": 2}, "c": {"r": 1}}
    run = {"a": ranked("n", "r"), "b": ranked("r1", "n", "r2", "r3"), "c": ranked("n1", "n2")}
    values = scores(run, qrels, ["context_precision@2", "context_precision"])
    assert values["a"] == pytest.approx({"context_precision@2": 0.5, "context_precision": 0.5}, abs=1e-12)
    assert values["b"] == pytest.approx({"context_precision@2": 1.0, "context_precision": 5 / 6}, abs=1e-12)
    assert values["c"] == {"context_precision@2": 0.0, "context_precision": 0.0}


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("ndcg@¹⁰", "metric 'ndcg@¹⁰': the cutoff must be a positive integer in ASCII digits; did you mean 'ndcg@10'?"),
        (
            "recall@１０",
            "metric 'recall@１０': the cutoff must be a positive integer in ASCII digits; did you mean 'recall@10'?",
        ),
        ("p@٣", "metric 'p@٣': the cutoff must be a positive integer in ASCII digits; did you mean 'p@3'?"),
        ("map@1_0", "metric 'map@1_0': the cutoff must be a positive integer in ASCII digits, e.g. map@10"),
        ("hole@+5", "metric 'hole@+5': the cutoff must be a positive integer in ASCII digits, e.g. hole@10"),
        ("ndcg@", "metric 'ndcg@': the cutoff must be a positive integer in ASCII digits, e.g. ndcg@10"),
    ],
)
def test_a_cutoff_takes_ascii_digits_only(name: str, message: str) -> None:
    with pytest.raises(RagtrackError) as failure:
        parse_metric(name)
    assert str(failure.value) == message
