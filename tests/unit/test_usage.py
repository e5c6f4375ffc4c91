"""Tokens, cost and the dry run (issue 29, item 6): the chat client's token counts equal the fake
server's usage fields; cached replies keep their usage and count no new spend; cache entries written
before usage was stored load with usage unknown; cost = prices x tokens; a dry run sends nothing and
counts the requests the real run then sends."""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from ragtrack.core.cache import Cache
from ragtrack.core.llm import NOT_SENT, ChatCall, ChatClient, NotSent, estimate_tokens
from ragtrack.core.runs import Run
from ragtrack.core.stages import cached_run
from ragtrack.pipeline.execution import usage
from ragtrack.pipeline.execution.dryrun import dry_run
from ragtrack.pipeline.execution.experiment import run_experiment
from tests.support import ChatServer, server_usage, toy_config


def _client(server: ChatServer, cache: Path | None, **settings) -> ChatClient:
    return ChatClient(
        base_url=server.url,
        model="m",
        cache_dir=str(cache) if cache else None,
        backoff=0.01,
        parameters={"max_tokens": 32},
        **settings,
    )


def _expected_usage(server: ChatServer) -> dict[str, tuple[int, int]]:
    """What the server reported for each prompt it answered (prompt text -> tokens)."""
    found = {}
    for request in server.requests:
        messages = request["body"]["messages"]
        content = f"answer to {messages[-1]['content'].splitlines()[0]}"
        figures = server_usage(messages, content)
        found[messages[-1]["content"]] = (figures["prompt_tokens"], figures["completion_tokens"])
    return found


def test_token_counts_are_the_servers_and_cached_replies_keep_them(chat_server: ChatServer, tmp_path: Path) -> None:
    prompts = {f"q{i}": f"question {i} " + "word " * i for i in range(8)} | {
        "q8": "no figures [nousage]",
        ("q9", "d1"): "pair",
    }
    client = _client(chat_server, tmp_path, system_prompt="Be brief.")
    replies, failures = client.complete_all(prompts)
    assert not failures and len(chat_server.requests) == len(prompts)
    expected = _expected_usage(chat_server)
    calls = {call.prompt_id: call for call in client.take_calls()}
    assert client.take_calls() == []  # taken once
    for pid, prompt in prompts.items():
        call = calls[pid]
        assert not call.cached and call.seconds > 0
        if pid == "q8":
            assert (call.prompt_tokens, call.completion_tokens) == (
                None,
                None,
            )  # the server gave no usage: unknown, not 0
        else:
            assert (call.prompt_tokens, call.completion_tokens) == expected[prompt]
    again = _client(chat_server, tmp_path, system_prompt="Be brief.")
    assert again.complete_all(prompts) == (replies, {})
    assert len(chat_server.requests) == len(prompts)  # nothing sent
    cached = {call.prompt_id: call for call in again.take_calls()}
    assert all(c.cached and c.seconds == 0 for c in cached.values())
    assert {pid: (c.prompt_tokens, c.completion_tokens) for pid, c in cached.items()} == {
        pid: (c.prompt_tokens, c.completion_tokens) for pid, c in calls.items()
    }
    again.record(cached.values())
    table = usage.Meter()
    table.collect("bm25", "generator", [SimpleNamespace(client=again)])
    figures = usage.figures(table.table())
    assert figures["cached"] == len(prompts) and figures["sent"] == 0 and figures["new_prompt_tokens"] == 0
    assert figures["prompt_tokens"] == sum(expected[p][0] for pid, p in prompts.items() if pid != "q8")
    assert figures["unknown_usage"] == 1


def test_old_cache_entries_without_usage_load_as_unknown(chat_server: ChatServer, tmp_path: Path) -> None:
    client = _client(chat_server, tmp_path)
    client.complete_all({"a": "hello there"})
    (entry,) = tmp_path.rglob("*.json")
    stored = json.loads(entry.read_text())
    assert stored["usage"] == dict(
        zip(("prompt_tokens", "completion_tokens"), _expected_usage(chat_server)["hello there"])
    )
    entry.write_text(json.dumps({"model": "m", "reply": stored["reply"]}))  # as ragtrack wrote entries before usage
    again = _client(chat_server, tmp_path)
    assert again.complete_all({"a": "hello there"}) == ({"a": stored["reply"]}, {})
    (call,) = again.take_calls()
    assert call == ChatCall("a", None, None, cached=True)
    assert len(chat_server.requests) == 1


def test_cost_is_prices_times_tokens() -> None:
    rng = random.Random(7)
    for _ in range(200):
        prices = [rng.choice([None, 0.0, rng.uniform(0, 30)]) for _ in range(2)]
        tokens = [rng.choice([None, rng.randrange(0, 10**6)]) for _ in range(2)]
        client = ChatClient(
            base_url="http://127.0.0.1:9/v1", model="m", price_prompt=prices[0], price_completion=prices[1]
        )
        cost = client.cost(*tokens)
        if prices == [None, None] or any(price and count is None for price, count in zip(prices, tokens)):
            assert cost is None
        else:
            assert cost == pytest.approx(sum((p or 0) * (t or 0) for p, t in zip(prices, tokens)) / 1e6, rel=1e-12)


def test_figures_equal_a_direct_computation_on_random_calls() -> None:
    rng = np.random.default_rng(3)
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="m", price_prompt=2.5, price_completion=10.0)
    meter = usage.Meter()
    calls = [
        ChatCall(
            f"q{rng.integers(20)}",
            *(None, None) if rng.random() < 0.2 else (int(rng.integers(1, 900)), int(rng.integers(1, 90))),
            cached=bool(rng.random() < 0.4),
            seconds=float(rng.random()),
        )
        for _ in range(300)
    ]
    client.record(calls)
    meter.collect("bm25", "llm_judge", [SimpleNamespace(client=client)])
    got = usage.figures(meter.table(), queries=20)
    known = [c for c in calls if c.prompt_tokens is not None]
    new = [c for c in known if not c.cached]
    assert (
        got["calls"] == 300
        and got["cached"] == sum(c.cached for c in calls)
        and got["unknown_usage"] == 300 - len(known)
    )
    assert got["prompt_tokens"] == sum(c.prompt_tokens for c in known) and got["new_completion_tokens"] == sum(
        c.completion_tokens for c in new
    )
    assert got["cost"] == pytest.approx(sum(2.5 * c.prompt_tokens + 10 * c.completion_tokens for c in known) / 1e6)
    assert got["new_cost"] == pytest.approx(sum(2.5 * c.prompt_tokens + 10 * c.completion_tokens for c in new) / 1e6)
    assert got["cost_per_query"] == pytest.approx(got["cost"] / 20)
    assert got["seconds_per_request"] == pytest.approx(np.mean([c.seconds for c in calls if not c.cached]))
    per_query = usage.per_query(meter.table()).set_index("qid")
    for qid in per_query.index:
        mine = [c for c in calls if c.prompt_id == qid]
        assert per_query.at[qid, "calls"] == len(mine)
        assert per_query.at[qid, "prompt_tokens"] == sum(c.prompt_tokens or 0 for c in mine)
    assert set(usage.metrics(usage.by_stage(meter.table()))) >= {"llm/llm_judge/prompt_tokens", "llm/all/cost"}
    assert max(map(len, usage.summary_text(meter.table()).splitlines())) <= 100  # the terminal summary's notes wrap
    counts = (
        "calls",
        "sent",
        "cached",
        "unknown_usage",
        "prompt_tokens",
        "completion_tokens",
        "new_prompt_tokens",
        "new_completion_tokens",
    )
    assert all(type(got[name]) is int for name in counts) and all(
        type(got[name]) is float for name in ("cost", "new_cost")
    )
    assert '"calls": 300,' in json.dumps(got)  # results.json: counts as integers


def test_the_calls_footer_explains_only_the_columns_shown() -> None:
    """Every reply cached: no s/request column, so no note on it; no prices: no cost column and note."""
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="m")
    meter = usage.Meter()
    client.record([ChatCall(f"q{i}", 10, 2, cached=True) for i in range(3)])
    meter.collect("bm25", "generator", [SimpleNamespace(client=client)])
    text = usage.summary_text(meter.table())
    assert "s/request" not in text and "cost" not in text and "tokens as the server reported them" in text
    client.record([ChatCall("q9", 10, 2, seconds=0.5)])
    meter.collect("bm25", "generator", [SimpleNamespace(client=client)])
    assert text.count("s/request") == 0 and usage.summary_text(meter.table()).count("s/request") == 2  # column and note


def test_an_offline_client_sends_nothing_and_estimates(chat_server: ChatServer, tmp_path: Path) -> None:
    _client(chat_server, tmp_path).complete_all({"a": "cached one"})
    offline = _client(chat_server, tmp_path, offline=True, system_prompt="sys")
    prompts = {"a": "cached one", "b": "x" * 41, "c": "x" * 41}
    replies, failures = offline.complete_all(prompts)
    assert len(chat_server.requests) == 1  # only the first client's
    assert set(replies) == set() and failures == {
        pid: NOT_SENT for pid in prompts
    }  # "a" was asked with no system prompt
    offline = _client(chat_server, tmp_path, offline=True)
    replies, failures = offline.complete_all(prompts)
    assert replies == {"a": "answer to cached one"} and failures == {"b": NOT_SENT, "c": NOT_SENT}
    calls = {c.prompt_id: c for c in offline.take_calls()}
    assert calls["b"] == ChatCall("b", estimate_tokens("x" * 41), 32, planned=True) and estimate_tokens("x" * 41) == 11
    assert calls["c"].cached  # the same prompt again: the real run would find it cached
    assert len(chat_server.requests) == 1


def test_a_stage_run_keeps_its_calls_and_a_dry_run_stores_nothing(tmp_path: Path) -> None:
    context = SimpleNamespace(cache=Cache(tmp_path))
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="m")
    made = [ChatCall("q1", 10, 2, seconds=0.5), ChatCall(("q2", "d1"), None, None, cached=True)]

    def compute():
        client.record(made)
        return Run("s", {"q1": {"d1": 1.0}}), {}, {"q1": 0.1}

    cached_run(context, "key", "s", compute, [client])
    assert client.take_calls() == made
    cached_run(context, "key", "s", compute, [client])  # a hit: the calls again, as cached, no new time
    assert client.take_calls() == [ChatCall("q1", 10, 2, cached=True), ChatCall(("q2", "d1"), None, None, cached=True)]

    def planned():
        client.record([ChatCall("q1", 10, 2, planned=True)])
        return Run("s", {}), {}, {}

    with pytest.raises(NotSent):
        cached_run(context, "other", "s", planned, [client])
    assert client.take_calls() == [ChatCall("q1", 10, 2, planned=True)]
    assert len(context.cache.builds) == 1  # the dry run's entry was not stored


def _job(tmp_path: Path, url: str, *overrides: str):
    return toy_config(
        tmp_path,
        "retriever=[bm25]",
        "fusion=[]",
        "tracking=none",
        "generator=openai",
        f"generator.base_url={url}",
        "generator.model=g",
        "generator.top_k=1",
        "generator.prompt='{question} {context}'",
        "generator.price_prompt=2.5",
        "generator.price_completion=10",
        "evaluator=[ranking,llm_judge]",
        f"evaluator.llm_judge.base_url={url}",
        "evaluator.llm_judge.model=j",
        "evaluator.llm_judge.top_k=1",
        *overrides,
    )


def test_dry_run_counts_the_requests_of_the_real_run(tmp_path: Path) -> None:
    """A generator and a judge on the toy set: the dry run sends nothing and counts as many requests
    as the real run then sends (the judge's as an upper bound: they need the answers); the real
    run's tokens are the server's; a second dry run finds everything cached."""
    server = ChatServer(atp_fails=False)
    try:
        cfg = _job(tmp_path, server.url)
        planned = dry_run(cfg)
        assert len(server.requests) == 0
        assert planned.to_send == 12 and planned.upper_bound  # 6 answers, then 6 judgements
        assert json.loads((tmp_path / "out" / "dry_run.json").read_text())["to_send"] == 12
        assert planned.text().startswith(
            "Dry run: nothing was sent. The job would send at most 12 LLM requests (caches as they are now):\n"
        )
        assert max(map(len, planned.text().splitlines())) <= 100
        results = run_experiment(cfg)
        assert len(server.requests) == planned.to_send
        spent = results["usage"]["systems"]["bm25"]
        sent = [request["body"] for request in server.requests]
        expected = {
            model: sum(server_usage(b["messages"], "")["prompt_tokens"] for b in sent if b["model"] == model)
            for model in "gj"
        }
        assert (
            spent["generator"]["prompt_tokens"] == expected["g"]
            and spent["llm_judge"]["prompt_tokens"] == expected["j"]
        )
        assert spent["generator"]["cost"] == pytest.approx(
            (2.5 * spent["generator"]["prompt_tokens"] + 10 * spent["generator"]["completion_tokens"]) / 1e6
        )
        assert "cost" not in spent["llm_judge"]  # no prices given
        per_query = pd.read_csv(tmp_path / "out" / "systems" / "bm25" / "usage.csv")
        assert per_query.groupby("stage")["prompt_tokens"].sum().to_dict() == {
            "generator": expected["g"],
            "llm_judge": expected["j"],
        }
        assert "Cost and tokens" in (tmp_path / "out" / "comparison" / "report.html").read_text()
        again = dry_run(cfg)
        assert again.to_send == 0 and int(again.calls["cached"].sum()) == 12
        assert len(server.requests) == 12
    finally:
        server.stop()


@pytest.mark.slow  # two whole jobs in subprocesses: make test-slow
def test_dry_run_command_and_token_metrics_in_mlflow(tmp_path: Path) -> None:
    """``ragtrack run --dry-run`` prints the table and sends nothing; the real job logs the server's
    tokens as the system run's MLflow metrics and prints the LLM calls table."""
    from mlflow.tracking import MlflowClient

    from tests.support import ragtrack

    server = ChatServer(atp_fails=False)
    try:
        job = [
            "dataset=toy",
            "encoder=hashing",
            "retriever=[bm25]",
            "fusion=[]",
            "generator=openai",
            f"generator.base_url={server.url}",
            "generator.model=g",
            "generator.top_k=1",
            "generator.prompt='{question} {context}'",
            "generator.price_prompt=2.5",
        ]
        dry = ragtrack(tmp_path, "run", "--dry-run", *job, "hydra.run.dir=outputs/dry")
        assert dry.returncode == 0, dry.stderr[-3000:]
        assert "would send 6 LLM requests" in dry.stdout and "generator" in dry.stdout and not server.requests
        real = ragtrack(tmp_path, "run", *job, "hydra.run.dir=outputs/real")
        assert real.returncode == 0, real.stderr[-3000:]
        assert len(server.requests) == 6 and "LLM calls:" in real.stdout
        client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
        runs = client.search_runs([client.get_experiment_by_name("ragtrack-toy").experiment_id])
        system = next(r for r in runs if r.data.tags.get("ragtrack.system") == "bm25")
        expected = sum(server_usage(r["body"]["messages"], "")["prompt_tokens"] for r in server.requests)
        assert (
            system.data.metrics["llm/generator/prompt_tokens"]
            == expected
            == system.data.metrics["llm/all/prompt_tokens"]
        )
        assert system.data.metrics["llm/generator/cost"] == pytest.approx(2.5 * expected / 1e6)
        assert "usage.csv" in {a.path for a in client.list_artifacts(system.info.run_id)}
    finally:
        server.stop()


def test_robustness_reruns_are_metered_apart_and_planned_by_the_dry_run(tmp_path: Path) -> None:
    """The study's reruns (``lowercase`` changes one toy query, ``uppercase`` every one) with a generator
    and a judge: their calls go under ``robustness/<perturbation>/<stage>`` with the fake server's
    tokens, the dry run plans as many requests as they send, the job's total sums them with the main
    run's, and the main run's figures are those of the same job without the study."""
    study = "robustness={seed: 0, metrics: [ndcg@10], perturbations: {lowercase: {kind: lowercase}, uppercase: {kind: uppercase}}}"
    alone, server = ChatServer(atp_fails=False), ChatServer(atp_fails=False)
    try:
        plain = run_experiment(_job(tmp_path / "plain", alone.url))
        cfg = _job(tmp_path / "study", server.url, study)
        planned = dry_run(cfg)
        assert not server.requests
        results = run_experiment(cfg)
    finally:
        alone.stop()
        server.stop()
    main = len(alone.requests)  # the main run's batches end before the reruns' begin
    assert sorted(json.dumps(r["body"]) for r in server.requests[:main]) == sorted(
        json.dumps(r["body"]) for r in alone.requests
    )
    reruns = server.requests[main:]
    job = results["usage"]["job"]
    labels = [f"robustness/{p}/{s}" for p in ("lowercase", "uppercase") for s in ("generator", "llm_judge")]
    assert [s for s in job if s.startswith("robustness/")] == [*labels, "robustness/all"]
    for stage_name, model in (("generator", "g"), ("llm_judge", "j")):
        mine = [r for r in reruns if r["body"]["model"] == model]
        for figure in ("prompt_tokens", "completion_tokens"):  # what the reruns sent: the server's usage fields
            assert sum(job[f"robustness/{p}/{stage_name}"][f"new_{figure}"] for p in ("lowercase", "uppercase")) == sum(
                r["usage"][figure] for r in mine
            )
        assert sum(job[f"robustness/{p}/{stage_name}"]["sent"] for p in ("lowercase", "uppercase")) == len(mine)
    assert (
        job["robustness/all"]["sent"] == len(reruns) and job["robustness/all"]["cached"] > 0
    )  # unchanged queries: cached replies
    for figure in ("calls", "cached", "prompt_tokens", "completion_tokens", "cost"):
        assert job["total"][figure] == pytest.approx(job["all"][figure] + job["robustness/all"][figure])

    rows = planned.calls
    for label in labels:  # the dry run's planned requests per rerun stage: the real run's
        assert int((~rows[rows["stage"] == label]["cached"].astype(bool)).sum()) == job[label]["sent"]
    assert int((~rows[usage.is_rerun(rows)]["cached"].astype(bool)).sum()) == len(reruns) and planned.to_send == len(
        server.requests
    )
    assert "robustness/generator" in planned.text() and max(map(len, planned.text().splitlines())) <= 100

    per_query = pd.read_csv(tmp_path / "study" / "out" / "usage.csv").set_index(["stage", "qid"])
    for stage_name in (
        "generator",
        "llm_judge",
    ):  # a rerun's cached reply keeps the tokens the main run's request was given
        for qid in ("q1", "q3", "q4"):  # lowercase leaves them as they are
            rerun = per_query.loc[(f"robustness/lowercase/{stage_name}", qid)]
            assert rerun["cached"] == rerun["calls"] == 1
            assert (
                rerun[["prompt_tokens", "completion_tokens"]].tolist()
                == per_query.loc[(stage_name, qid), ["prompt_tokens", "completion_tokens"]].tolist()
            )

    def without_time(figures: dict) -> dict:
        return {
            stage_name: {k: v for k, v in values.items() if k != "seconds_per_request"}
            for stage_name, values in figures.items()
            if not stage_name.startswith("robustness/") and stage_name != "total"
        }

    assert without_time(job) == without_time(plain["usage"]["job"])  # the main run's figures: as without the study
    assert without_time(results["usage"]["systems"]["bm25"]) == without_time(plain["usage"]["systems"]["bm25"])
    main_rows = per_query[~per_query.index.get_level_values("stage").str.startswith("robustness/")].drop(
        columns="seconds"
    )
    assert main_rows.equals(
        pd.read_csv(tmp_path / "plain" / "out" / "usage.csv").set_index(["stage", "qid"]).drop(columns="seconds")
    )
    metrics = usage.metrics(job)  # MLflow keys: a segment per part of the stage label
    assert {"llm/robustness/lowercase/generator/prompt_tokens", "llm/robustness/all/cost", "llm/total/cost"} <= set(
        metrics
    )
    assert metrics["llm/all/cost"] == usage.metrics(plain["usage"]["job"])["llm/all/cost"]


def test_replies_are_checked_before_they_are_cached(chat_server: ChatServer, tmp_path: Path) -> None:
    """A reply with a lone surrogate, or a usage figure no request spends, is a per-prompt failure
    that is not cached (a rerun asks again); a cache entry that fails the same checks is asked again."""
    prompts = {"q1": "city [surrogate]", "q2": "city [hugeusage]", "q3": "city"}
    client = _client(chat_server, tmp_path, max_retries=1)
    replies, failures = client.complete_all(prompts)
    assert set(replies) == {"q3"} and set(failures) == {"q1", "q2"}
    assert "malformed reply (UnicodeEncodeError: " in failures["q1"] and "not a token count" in failures["q2"]
    assert len(list(tmp_path.rglob("*.json"))) == 1  # q3's only
    (entry,) = tmp_path.rglob("*.json")
    stored = json.loads(entry.read_text())
    for poisoned in ({"reply": "Denver \ud83d"}, {"usage": {"prompt_tokens": 10**20, "completion_tokens": 1}}):
        entry.write_text(json.dumps(stored | poisoned))
        sent = len(chat_server.requests)
        assert _client(chat_server, tmp_path).complete_all({"q3": "city"}) == ({"q3": replies["q3"]}, {})
        assert len(chat_server.requests) == sent + 1  # asked again, and the entry replaced by a valid one
        assert json.loads(entry.read_text()) == stored


def test_identical_prompts_of_two_queries_are_sent_once_and_the_dry_run_counts_that(
    chat_server: ChatServer, tmp_path: Path
) -> None:
    prompts = {"q1": "the same question", "q2": "the same question", ("q3", 1): "another"}
    planned = _client(chat_server, None, offline=True)
    planned.complete_all(prompts)
    assert [call.cached for call in planned.take_calls()] == [False, True, False]  # 2 to send, exactly
    client = _client(chat_server, None)
    replies, failures = client.complete_all(prompts)
    assert not failures and len(chat_server.requests) == 2 and replies["q1"] == replies["q2"]
    calls = client.take_calls()
    assert [call.prompt_id for call in calls] == list(prompts) and [call.cached for call in calls] == [
        False,
        True,
        False,
    ]


def test_a_generator_after_an_unknown_llm_stage_is_counted_as_an_upper_bound(tmp_path: Path) -> None:
    """The generator's replies cached for bm25 do not answer bm25+llm's prompts (other passages): the
    dry run counts them to send, as upper bounds, and the real run sends no more than it said."""
    server = ChatServer(atp_fails=False)
    try:
        run_experiment(_job(tmp_path, server.url))  # bm25's answers cached
        cfg = _job(
            tmp_path,
            server.url,
            "reranker=[llm]",
            f"reranker.llm.base_url={server.url}",
            "reranker.llm.model=r",
            "reranker.llm.mode=pointwise",
            "reranker.llm.depth=3",
        )
        planned = dry_run(cfg)
        rows = {row["system"]: row for row in planned.record()["stages"] if row["stage"] == "generator"}
        assert rows["bm25+llm"]["to_send"] == 6 and rows["bm25+llm"]["upper_bound"] and rows["bm25"]["to_send"] == 0
        sent = len(server.requests)
        run_experiment(cfg)
        assert len(server.requests) - sent <= planned.to_send and planned.upper_bound
    finally:
        server.stop()


def test_a_reply_nested_too_deep_is_a_malformed_reply(tmp_path: Path) -> None:
    from tests.support import LocalServer

    class Nested(LocalServer):
        def handle(self, handler, body: bytes) -> None:
            self.send(handler, 200, b"[" * 200_000 + b"]" * 200_000)

    server = Nested(("POST",))
    try:
        client = ChatClient(
            base_url=f"http://127.0.0.1:{server.port}/v1", model="m", cache_dir=str(tmp_path), max_retries=0
        )
        replies, failures = client.complete_all({"q1": "hello"})
        assert not replies and "malformed reply (RecursionError" in failures["q1"]
    finally:
        server.stop()


class _SlowFirst(ChatClient):
    """Answers at once, except the prompt "first", whose reply arrives last."""

    def _request(self, prompt: str, http):
        if prompt == "first":
            time.sleep(0.3)
        return f"reply to {prompt}", (len(prompt), 1)


def test_calls_are_recorded_in_prompt_order_however_the_replies_arrive() -> None:
    """Calls were recorded as replies arrived, so the usage rows (and float sums of cost over them)
    depended on thread timing."""
    client = _SlowFirst(base_url="http://127.0.0.1:9/v1", model="m", concurrency=4)
    prompts = {"q0": "first", "q1": "second", "q2": "third"}
    replies, failures = client.complete_all(prompts)
    assert not failures and list(replies) == list(prompts)
    assert [call.prompt_id for call in client.take_calls()] == list(prompts)


def _calls(rows: list[tuple]) -> pd.DataFrame:
    """Meter rows (system, stage, qid, cached, prompt_tokens, completion_tokens, cost)."""
    meter = usage.Meter()
    meter.rows = [
        dict(
            zip(
                usage.COLUMNS,
                (system, stage, qid, False, cached, False, False, prompt, completion, cost, 0.0 if cached else 0.5),
            )
        )
        for system, stage, qid, cached, prompt, completion, cost in rows
    ]
    return meter.table()


def test_token_sums_of_calls_without_usage_are_unknown_not_zero() -> None:
    """A server that reports no usage gave prompt_tokens 0 (results.json, MLflow) and 0 in usage.csv;
    the sent calls' new_cost was 0 when only cached calls had a cost."""
    calls = _calls(
        [
            ("bm25", "generator", "q1", False, None, None, None),
            ("bm25", "generator", "q2", False, None, None, None),
            ("bm25", "llm_judge", "q1", True, 10, 2, 0.5),
            ("bm25", "llm_judge", "q1", False, None, None, None),
        ]
    )
    generator = usage.figures(calls[calls["stage"] == "generator"])
    assert generator["calls"] == 2 and generator["unknown_usage"] == 2
    assert "prompt_tokens" not in generator and "new_completion_tokens" not in generator
    everything = usage.figures(calls)
    assert everything["prompt_tokens"] == 10 and everything["cost"] == 0.5  # lower bounds: unknown_usage says so
    assert (
        "new_prompt_tokens" not in everything and "new_cost" not in everything
    )  # the sent calls' usage is all unknown
    assert usage.figures(calls[calls["cached"]])["new_prompt_tokens"] == 0  # nothing sent: truly 0
    assert all(key.rsplit("/", 1)[-1] != "prompt_tokens" for key in usage.metrics({"generator": generator}))
    table = usage.per_query(calls).set_index(["stage", "qid"])
    assert (
        pd.isna(table.loc[("generator", "q1"), "prompt_tokens"])
        and table.loc[("llm_judge", "q1"), "prompt_tokens"] == 10
    )
    assert "\r\ngenerator,q1,1,0,1,,,,0.5\r\n" in usage.usage_csv(calls)
