"""``ragtrack reproduce`` treats a downloaded config as data: a tampered run is refused with one line
and exit code 2 before anything is written, sent or logged; an endpoint is contacted only with
``--allow-endpoints``, and never with the reproducer's key unless the reproducer gives it again."""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from mlflow.entities import Metric
from mlflow.tracking import MlflowClient
from omegaconf import OmegaConf

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.commands.cli import main as cli_main
from ragtrack.pipeline.commands.reproduce import prepare
from ragtrack.pipeline.configuration.config import config_path
from ragtrack.pipeline.records.layout import CONFIG_FILE, TAG_DATASET_HASH, TAG_PARENT, TAG_SYSTEM
from tests.support import TOY_JOB, ragtrack, reproduce_cli

FAKE_KEY = "sk-test-0123456789abcdefghij"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdefgh", "bcdefghi")
)


@pytest.fixture(scope="module")
def logged(toy_sweep, tmp_path_factory):
    """One job of the toy sweep, in a copy of the sweep's store (the sweep's own store stays as the other
    tests expect it): its config and metrics, and an experiment of its own for tampered copies."""
    folder = tmp_path_factory.mktemp("logged")
    shutil.copy(toy_sweep.root / "mlruns" / "mlflow.db", folder / "mlflow.db")
    uri = f"sqlite:///{folder}/mlflow.db"
    client = MlflowClient(uri)
    job = next(
        r
        for r in client.search_runs([client.get_experiment_by_name(toy_sweep.experiment).experiment_id])
        if r.info.run_name == "hybrid k=30"
    )
    config = yaml.safe_load(Path(client.download_artifacts(job.info.run_id, CONFIG_FILE, str(folder))).read_text())
    experiment_id = client.create_experiment("tampered", artifact_location=(folder / "artifacts").as_uri())
    return SimpleNamespace(client=client, job=job, config=config, experiment_id=experiment_id, uri=uri)


def tampered(logged, edit) -> str:
    """A run (in its own experiment) holding the job's metrics and dataset hash, and its config edited by ``edit``."""
    config = copy.deepcopy(logged.config)
    edit(config)
    run_id = logged.client.create_run(
        logged.experiment_id, tags={TAG_DATASET_HASH: logged.job.data.tags[TAG_DATASET_HASH]}
    ).info.run_id
    logged.client.log_batch(
        run_id, metrics=[Metric(key, value, 0, 0) for key, value in logged.job.data.metrics.items()]
    )
    logged.client.log_text(run_id, yaml.safe_dump(config, sort_keys=False), CONFIG_FILE)
    logged.client.set_terminated(run_id)
    return run_id


def all_runs(client: MlflowClient) -> int:
    return len(client.search_runs([e.experiment_id for e in client.search_experiments()]))


def refused(logged, run_id: str, capsys, tmp_path: Path, *args: str) -> str:
    """``ragtrack reproduce`` of ``run_id`` exits 2 with one line, no traceback, and writes no cache
    entry and no MLflow run; the line."""
    before = all_runs(logged.client)
    assert (
        cli_main(["reproduce", run_id, "--tracking-uri", logged.uri, "--cache-dir", str(tmp_path / "cache"), *args])
        == 2
    )
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("ragtrack: error: refused "), err
    assert not (tmp_path / "cache").exists() and all_runs(logged.client) == before
    return err


def openai_generator(url: str) -> dict:
    """The shipped ``generator=openai`` settings at ``url``, naming the variable of the fake key."""
    shipped = OmegaConf.to_container(OmegaConf.load(Path(config_path()) / "generator" / "openai.yaml"))
    return {
        **shipped,
        "base_url": url,
        "model": "m",
        "api_key_env": "RAGTRACK_TEST_KEY",
        "max_retries": 0,
        "cache_dir": None,
    }


def test_a_target_that_is_no_registered_component_is_refused_and_writes_nothing(logged, capsys, tmp_path) -> None:
    victim = tmp_path / "written"
    write = {
        "_target_": "pathlib.Path.write_text",
        "_args_": [{"_target_": "pathlib.Path", "_args_": [str(victim)]}, "owned"],
    }
    err = refused(
        logged, tampered(logged, lambda c: c["retriever"].update(bm25=write)), capsys, tmp_path, "--allow-endpoints"
    )
    assert "refused retriever.bm25._target_: 'pathlib.Path.write_text' is not a registered component" in err
    assert not victim.exists()


def test_resolvers_are_refused_and_never_resolved(logged, capsys, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "very-secret-value")
    generator = openai_generator("http://127.0.0.1:1/v1?k=${oc.env:AWS_SECRET_ACCESS_KEY}")
    err = refused(
        logged, tampered(logged, lambda c: c.update(generator=generator)), capsys, tmp_path, "--allow-endpoints"
    )
    assert "refused generator.base_url: a downloaded config may not call resolvers (${oc.env:...})" in err
    assert "very-secret-value" not in err


def test_endpoints_need_the_flag_and_never_get_the_reproducers_key(logged, chat_server, capsys, tmp_path) -> None:
    run_id = tampered(logged, lambda c: c.update(generator=openai_generator(chat_server.url)))
    err = refused(logged, run_id, capsys, tmp_path)
    assert (
        f"refused the downloaded config's endpoints generator.base_url={chat_server.url}: contact them with --allow-endpoints"
        in err
    )
    assert chat_server.requests == []
    done = reproduce_cli(
        run_id,
        logged.uri,
        "--allow-endpoints",
        "--cache-dir",
        str(tmp_path / "cache"),
        env={"RAGTRACK_TEST_KEY": FAKE_KEY},
    )
    assert "ragtrack: dropped generator.api_key_env of the downloaded config" in done.stderr, done.stderr[-2000:]
    assert done.returncode == 0 and "all 54 metrics identical" in done.stdout, done.stderr[-2000:]
    assert chat_server.requests and {request["auth"] for request in chat_server.requests} == {None}


def test_an_alias_bomb_in_the_logged_config_is_refused_before_it_is_parsed(logged, capsys, tmp_path) -> None:
    run_id = tampered(logged, lambda c: None)
    logged.client.log_text(
        run_id, yaml.safe_dump(logged.config) + BOMB, CONFIG_FILE
    )  # 9 levels of 9: 387 million values
    err = refused(logged, run_id, capsys, tmp_path)
    assert (
        err
        == f"ragtrack: error: refused {CONFIG_FILE} of run {run_id}: logged config refused: its aliases expand to more than 1,000,000 values"
    )


def test_settings_are_checked_with_the_message_ragtrack_run_gives(logged, capsys, tmp_path) -> None:
    run_id = tampered(logged, lambda c: c["retriever"]["bm25"].update(k1=-5))
    assert cli_main(["reproduce", run_id, "--tracking-uri", logged.uri, "--cache-dir", str(tmp_path / "cache")]) == 2
    err = capsys.readouterr().err.strip()
    run = ragtrack(tmp_path, *TOY_JOB, "retriever.bm25.k1=-5")
    assert (
        run.returncode == 2
        and err == run.stderr.strip() == "ragtrack: error: retriever.bm25.k1: -5 is not allowed: a finite number >= 0"
    )
    assert not (tmp_path / "cache").exists()


def test_a_wrong_baseline_is_refused_before_the_job_runs(logged, capsys, tmp_path) -> None:
    args = [
        "reproduce",
        logged.job.info.run_id,
        "--tracking-uri",
        logged.uri,
        "--cache-dir",
        str(tmp_path / "cache"),
        "--baseline",
        "colbert",
    ]
    assert cli_main(args) == 2
    assert (
        capsys.readouterr().err.strip()
        == "ragtrack: error: baseline 'colbert' is not a compared system or run; rows: bm25, dense, hybrid"
    )
    assert not (tmp_path / "cache").exists()  # nothing was built: the job did not run


def test_run_mistakes_are_told_from_the_run_records_before_anything_is_downloaded(logged, capsys) -> None:
    """A run id the store lacks, a run that is not a ragtrack job and a --baseline that is none of the
    job's systems are told from MLflow's records of the runs alone: this job has no config.yaml (without
    --baseline, that is what stops it); a URI MLflow refuses is one line too."""
    foreign = logged.client.create_run(logged.experiment_id).info.run_id
    job = logged.client.create_run(logged.experiment_id, start_time=1000, tags={TAG_DATASET_HASH: "0" * 64}).info.run_id
    for start, system in enumerate(("bm25", "dense")):
        logged.client.create_run(
            logged.experiment_id, start_time=2000 + start, tags={TAG_PARENT: job, TAG_SYSTEM: system}
        )
    mistakes = {
        ("0123abcd",): f"no run '0123abcd' in {logged.uri}",
        (
            foreign,
        ): f"run {foreign} is not a ragtrack job (no tag {TAG_DATASET_HASH}): give the run id of a job of `ragtrack run` "
        "or of one of its system runs",
        (job, "--baseline", "colbert"): "baseline 'colbert' is not a compared system or run; rows: bm25, dense",
        (job,): f"run {job} has no artifact 'config.yaml'",
        (job, "--tracking-uri", "foo://bar"): "MLflow store foo://bar: Model registry functionality is unavailable",
    }
    for arguments, line in mistakes.items():
        assert cli_main(["reproduce", "--tracking-uri", logged.uri, *arguments]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"ragtrack: error: {line}") and err.count("\n") == 1, err


def test_the_reproducer_configures_keys_and_endpoints_by_overrides() -> None:
    chroma = {"mode": "http", "host": "store.example", "port": 8000, "token_env": "THEIR_TOKEN"}
    config = OmegaConf.create(
        {
            "retriever": {"dense": {"chroma": chroma}},
            "generator": {"base_url": "http://their.host/v1", "api_key_env": "OPENAI_API_KEY"},
        }
    )
    with pytest.raises(
        RagtrackError,
        match=r"endpoints retriever.dense.chroma.host=store.example:8000, generator.base_url=http://their.host/v1: ",
    ):
        prepare(copy.deepcopy(config))
    mine = [
        "generator.base_url=http://my.host/v1",
        "generator.api_key_env=OPENAI_API_KEY",
        "retriever.dense.chroma.host=chroma.mine",
    ]
    cfg, dropped = prepare(copy.deepcopy(config), mine)  # every endpoint is the reproducer's: no flag needed
    assert cfg.generator.api_key_env == "OPENAI_API_KEY" and cfg.retriever.dense.chroma.token_env is None
    assert dropped == [
        (
            "dropped retriever.dense.chroma.token_env of the downloaded config (your keys go only to hosts you configure; "
            "give it again as an override)"
        )
    ]
    cfg, _ = prepare(copy.deepcopy(config), allow_endpoints=True)
    assert cfg.generator.base_url == "http://their.host/v1" and cfg.generator.api_key_env is None
    for override, problem in (
        ("generator.api_key_env", "reproduce takes KEY=VALUE"),
        ("depth=[1", "while parsing a flow sequence"),
    ):
        with pytest.raises(RagtrackError, match=problem):
            prepare(copy.deepcopy(config), [override])
