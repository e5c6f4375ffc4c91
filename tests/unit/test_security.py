"""Security: secrets from the environment never reach the MLflow store, the output folder or the cache;
secret-looking config keys are redacted; no pickle is loaded; `ragtrack ui` listens on 127.0.0.1."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.core.secrets import check_variable_name
from ragtrack.pipeline.cli import build_parser
from ragtrack.pipeline.redaction import (check_run_arguments, check_variable_names, flatten, redact, redact_everywhere,
                                         redact_overrides, redact_text)
from tests.support import package_sources, ragtrack

SECRET = "sk-test-4f9c2e7d-never-written"


def test_a_secret_in_the_environment_never_reaches_store_outputs_or_cache(tmp_path: Path) -> None:
    """The secret is referenced by name only: an ``${oc.env:...}`` interpolation and a Chroma ``token_env``."""
    env = {"RAGTRACK_TEST_SECRET": SECRET}
    result = ragtrack(tmp_path, "run", "dataset=toy", "encoder=hashing", "+vars.llm_api_key=${oc.env:RAGTRACK_TEST_SECRET}",
                      "retriever.dense.chroma.token_env=RAGTRACK_TEST_SECRET", "hydra.run.dir=outputs/job", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in written) and any(p.name == "config.yaml" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in result.stdout + result.stderr
    assert "llm_api_key: '***'" in (tmp_path / "outputs" / "job" / "config.yaml").read_text()


def test_a_secret_typed_on_the_command_line_never_reaches_store_outputs_or_logs(tmp_path: Path) -> None:
    """Hydra records overrides as typed (``.hydra/``, a sweep's ``multirun.yaml``, its job list in the log);
    ragtrack rewrites those records redacted before logging them and filters every log line."""
    result = ragtrack(tmp_path, "run", "-m", "dataset=toy", "encoder=hashing", f"+vars.llm.api_key={SECRET}", f"+vars.db.password='{SECRET}'",
                      "fusion.rrf.k=10,20", "hydra.sweep.dir=outputs/sweep")
    assert result.returncode == 0, result.stderr[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "overrides.yaml" for p in written) and any(p.name == "multirun.yaml" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in result.stdout + result.stderr
    assert "+vars.llm.api_key=***" in (tmp_path / "outputs" / "sweep" / "0" / ".hydra" / "overrides.yaml").read_text()


def test_secret_assignments_in_text_are_redacted() -> None:
    line = "#0 : +llm.api_key=sk-1 fusion.rrf.k=10 x.token='a b',y=2 Authorization=\"Bearer z\" chroma.token_env=NAME"
    assert redact_text(line) == "#0 : +llm.api_key=*** fusion.rrf.k=10 x.token=***,y=2 Authorization=*** chroma.token_env=NAME"
    assert redact_everywhere({"task": ["+a.api_key=s", "k=1"], "dirname": "+a.api_key=s,k=1", "password": "p"}) == {
        "task": ["+a.api_key=***", "k=1"], "dirname": "+a.api_key=***,k=1", "password": "***"}


def test_secret_looking_keys_are_redacted() -> None:
    config = {"llm": {"api_key": "a", "apikey": "b", "model": "m"}, "chroma": {"headers": {"X-Chroma-Token": "c"}, "token_env": "NAME"},
              "db": {"password": "d", "client_secret": "e", "Authorization": "f"}, "unset": {"token": None}}
    flat = flatten(config)
    assert {k for k, v in flat.items() if v == "***"} == {"llm.api_key", "llm.apikey", "chroma.headers.X-Chroma-Token",
                                                         "db.password", "db.client_secret", "db.Authorization"}
    assert flat["chroma.token_env"] == "NAME" and flat["llm.model"] == "m" and flat["unset.token"] is None
    assert redact(config)["db"] == {"password": "***", "client_secret": "***", "Authorization": "***"}
    assert redact_overrides(["+llm.api_key=sk-1", "fusion.rrf.k=10", "~old.token"]) == ["+llm.api_key=***", "fusion.rrf.k=10", "~old.token"]


UNSAFE_LOADS = re.compile(r"\bpickle\b|allow_pickle\s*=\s*True|read_pickle|joblib\.load|torch\.load|yaml\.load\(|yaml\.unsafe_load|\beval\(")
LOADS = re.compile(r"(np\.load|BM25\.load)\((.*)")


def test_nothing_loads_pickle_or_executes_stored_code() -> None:
    sources = package_sources()
    assert sources
    for source in sources:
        text = source.read_text()
        assert not UNSAFE_LOADS.search(text), f"{source}: {UNSAFE_LOADS.search(text).group()}"
        for call in LOADS.finditer(text):  # numpy and bm25s load with pickle disabled (on the call's line)
            assert "allow_pickle=False" in call.group(2), f"{source}: {call.group()}"


def test_ui_listens_on_localhost_by_default() -> None:
    assert build_parser().parse_args(["ui"]).host == "127.0.0.1"


KEYS = ["sk-proj-Zx81QmT0aBcD", "AKIAIOSFODNN7EXAMPLE", "3f9c2a7e51d04b8c9e6a", "Bearer abc.def"]


@pytest.mark.parametrize("value, refused", [("OPENAI_API_KEY", False), ("HF_TOKEN", False), ("_X1", False), (None, False), ("", False),
                                            *((key, True) for key in KEYS), ("openai_api_key", True), ("MY-KEY", True)])
def test_a_variable_name_setting_refuses_what_looks_like_a_key(value, refused: bool) -> None:
    if not refused:
        check_variable_name("generator.api_key_env", value)
        return
    with pytest.raises(RagtrackError, match="generator.api_key_env must be the NAME of an environment variable") as error:
        check_variable_name("generator.api_key_env", value)
    assert value not in str(error.value)


def test_variable_name_settings_are_found_in_overrides_files_and_configs(tmp_path: Path) -> None:
    for argument in [f"generator.api_key_env={KEYS[0]}", f"+evaluator.j={{type:llm_judge,api_key_env: {KEYS[1]}}}",
                     f"retriever.dense.chroma.token_env='{KEYS[2]}'"]:
        with pytest.raises(RagtrackError, match=r"^override \S*_env must be the NAME") as error:
            check_run_arguments([argument])
        assert not any(key in str(error.value) for key in KEYS)
    check_run_arguments(["generator.api_key_env=OPENAI_API_KEY", "retriever.dense.chroma.token_env=null", "x_env=${oc.env:A}"])
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "mine.yaml").write_text(f"type: openai\nmodel: m\n# the key\napi_key_env: {KEYS[0]}\n")
    with pytest.raises(RagtrackError, match=rf"^{tmp_path / 'generator' / 'mine.yaml'}:4: api_key_env must be the NAME"):
        check_run_arguments(["--config-dir", str(tmp_path), "generator=mine"])
    with pytest.raises(RagtrackError, match=r"^generator\.api_key_env must be the NAME"):
        check_variable_names({"generator": {"api_key_env": KEYS[3]}, "chroma": {"token_env": "NAME"}})
    assert flatten({"generator": {"api_key_env": KEYS[0], "base_url": "u"}}) == {"generator.api_key_env": "***", "generator.base_url": "u"}
    assert redact_text(f"generator.api_key_env={KEYS[0]} chroma.token_env=CHROMA_TOKEN") == \
        "generator.api_key_env=*** chroma.token_env=CHROMA_TOKEN"


@pytest.mark.parametrize("how", ["override", "config-dir", "searchpath"])
def test_a_key_given_as_a_variable_name_is_refused_and_stored_nowhere(tmp_path: Path, how: str) -> None:
    """On the command line or in a --config-dir file the job stops before Hydra writes anything; from a
    search path (found only by Hydra) it stops before the MLflow run, with Hydra's records redacted."""
    key = "sk-live-9c2e7d4f1a0b88"
    conf = tmp_path / "myconf"
    (conf / "generator").mkdir(parents=True)
    (conf / "generator" / "mine.yaml").write_text(f"defaults:\n  - openai\n  - _self_\nmodel: m\napi_key_env: {key}\n")
    arguments = {"override": ["generator=openai", "generator.model=m", f"generator.api_key_env={key}"],
                 "config-dir": ["--config-dir", str(conf), "generator=mine"],
                 "searchpath": [f"hydra.searchpath=[file://{conf}]", "generator=mine"]}[how]
    result = ragtrack(tmp_path, "run", "dataset=toy", "retriever=[bm25]", "fusion=[]", *arguments)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "api_key_env must be the NAME of an environment variable" in result.stderr.strip().splitlines()[-1]
    assert key not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and conf not in p.parents]
    assert [str(p) for p in written if key.encode() in p.read_bytes()] == []
    assert not (tmp_path / "mlruns").exists()
    if how != "searchpath":
        assert not (tmp_path / "outputs").exists()
    else:
        assert "api_key_env: '***'" in next(tmp_path.glob("outputs/runs/*/.hydra/config.yaml")).read_text()
