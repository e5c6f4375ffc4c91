"""Security: secrets from the environment never reach the MLflow store, the output folder or the cache;
secret-looking config keys are redacted and known secret values masked wherever they appear; the
tracking probe authenticates with a URI's credentials; store URIs read back as their folders; no pickle
is loaded; `ragtrack ui` listens on 127.0.0.1."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from ragtrack.core.errors import RagtrackError
from ragtrack.core.llm import ChatClient
from ragtrack.core.secrets import (
    check_variable_name,
    known_secrets,
    mask,
    masked,
    remember,
    remember_url_credentials,
    split_credentials,
    without_credentials,
)
from ragtrack.pipeline.commands.cli import build_parser
from ragtrack.pipeline.records.layout import file_uri, sqlite_path, sqlite_uri
from ragtrack.pipeline.records.tracking import CREDENTIAL_VARIABLES, probe_server, use_credentials
from ragtrack.pipeline.redaction import (
    SecretFilter,
    check_run_arguments,
    check_variable_names,
    flatten,
    redact,
    redact_everywhere,
    redact_overrides,
    redact_text,
    remember_argument_secrets,
    remember_config_secrets,
)
from tests.support import BasicAuthServer, ChatServer, free_port, package_sources, ragtrack

SECRET = "sk-test-4f9c2e7d-never-written"


def test_a_secret_in_the_environment_never_reaches_store_outputs_or_cache(tmp_path: Path) -> None:
    """The secret is referenced by name only: an ``${oc.env:...}`` interpolation and a Chroma ``token_env``."""
    env = {"RAGTRACK_TEST_SECRET": SECRET}
    result = ragtrack(
        tmp_path,
        "run",
        "dataset=toy",
        "encoder=hashing",
        "+vars.llm_api_key=${oc.env:RAGTRACK_TEST_SECRET}",
        "retriever.dense.chroma.token_env=RAGTRACK_TEST_SECRET",
        "hydra.run.dir=outputs/job",
        env=env,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "mlflow.db" for p in written) and any(p.name == "config.yaml" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in result.stdout + result.stderr
    assert "llm_api_key: '***'" in (tmp_path / "outputs" / "job" / "config.yaml").read_text()


@pytest.mark.slow  # a whole job or several: make test-slow (the default run stays under 10 minutes on 2 cores)
def test_a_secret_typed_on_the_command_line_never_reaches_store_outputs_or_logs(tmp_path: Path) -> None:
    """Hydra records overrides as typed (``.hydra/``, a sweep's ``multirun.yaml``, its job list in the log);
    ragtrack rewrites those records redacted before logging them and filters every log line."""
    result = ragtrack(
        tmp_path,
        "run",
        "-m",
        "dataset=toy",
        "encoder=hashing",
        f"+vars.llm.api_key={SECRET}",
        f"+vars.db.password='{SECRET}'",
        "fusion.rrf.k=10,20",
        "hydra.sweep.dir=outputs/sweep",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.name == "overrides.yaml" for p in written) and any(p.name == "multirun.yaml" for p in written)
    assert [p for p in written if SECRET.encode() in p.read_bytes()] == []
    assert SECRET not in result.stdout + result.stderr
    assert "+vars.llm.api_key=***" in (tmp_path / "outputs" / "sweep" / "0" / ".hydra" / "overrides.yaml").read_text()


def test_secret_assignments_in_text_are_redacted() -> None:
    line = "#0 : +llm.api_key=sk-1 fusion.rrf.k=10 x.token='a b',y=2 Authorization=\"Bearer z\" chroma.token_env=NAME"
    assert (
        redact_text(line)
        == "#0 : +llm.api_key=*** fusion.rrf.k=10 x.token=***,y=2 Authorization=*** chroma.token_env=NAME"
    )
    assert redact_everywhere({"task": ["+a.api_key=s", "k=1"], "dirname": "+a.api_key=s,k=1", "password": "p"}) == {
        "task": ["+a.api_key=***", "k=1"],
        "dirname": "+a.api_key=***,k=1",
        "password": "***",
    }


def test_secret_looking_keys_are_redacted() -> None:
    config = {
        "llm": {"api_key": "a", "apikey": "b", "model": "m"},
        "chroma": {"headers": {"X-Chroma-Token": "c"}, "token_env": "NAME"},
        "db": {"password": "d", "client_secret": "e", "Authorization": "f"},
        "unset": {"token": None},
    }
    flat = flatten(config)
    assert {k for k, v in flat.items() if v == "***"} == {
        "llm.api_key",
        "llm.apikey",
        "chroma.headers.X-Chroma-Token",
        "db.password",
        "db.client_secret",
        "db.Authorization",
    }
    assert flat["chroma.token_env"] == "NAME" and flat["llm.model"] == "m" and flat["unset.token"] is None
    assert redact(config)["db"] == {"password": "***", "client_secret": "***", "Authorization": "***"}
    assert redact_overrides(["+llm.api_key=sk-1", "fusion.rrf.k=10", "~old.token"]) == [
        "+llm.api_key=***",
        "fusion.rrf.k=10",
        "~old.token",
    ]


UNSAFE_LOADS = re.compile(
    r"\bpickle\b|allow_pickle\s*=\s*True|read_pickle|joblib\.load|torch\.load|yaml\.load\(|yaml\.unsafe_load|\beval\("
)
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


def test_ui_keeps_the_store_password_off_the_server_command_line(monkeypatch) -> None:
    """A command line is readable by every user of the machine (ps): the URI goes in the environment."""
    from ragtrack.pipeline.commands import cli

    started = []

    class Server:
        def __init__(self, command, **options):
            started.append((command, options))

        def wait(self) -> int:
            return 0

    monkeypatch.setattr(cli.subprocess, "Popen", Server)
    uri = "postgresql://alice:S3cret-Passw0rd@db.example/mlflow"
    assert cli.main(["ui", "--tracking-uri", uri]) == 0
    ((command, options),) = started
    assert not any("S3cret" in part for part in command) and options["env"]["MLFLOW_BACKEND_STORE_URI"] == uri


KEYS = ["sk-proj-Zx81QmT0aBcD", "AKIAIOSFODNN7EXAMPLE", "3f9c2a7e51d04b8c9e6a", "Bearer abc.def"]


@pytest.mark.parametrize(
    "value, refused",
    [
        ("OPENAI_API_KEY", False),
        ("HF_TOKEN", False),
        ("_X1", False),
        (None, False),
        ("", False),
        *((key, True) for key in KEYS),
        ("openai_api_key", True),
        ("MY-KEY", True),
    ],
)
def test_a_variable_name_setting_refuses_what_looks_like_a_key(value, refused: bool) -> None:
    if not refused:
        check_variable_name("generator.api_key_env", value)
        return
    with pytest.raises(
        RagtrackError, match="generator.api_key_env must be the NAME of an environment variable"
    ) as error:
        check_variable_name("generator.api_key_env", value)
    assert value not in str(error.value)


def test_variable_name_settings_are_found_in_overrides_files_and_configs(tmp_path: Path) -> None:
    for argument in [
        f"generator.api_key_env={KEYS[0]}",
        f"+evaluator.j={{type:llm_judge,api_key_env: {KEYS[1]}}}",
        f"retriever.dense.chroma.token_env='{KEYS[2]}'",
    ]:
        with pytest.raises(RagtrackError, match=r"^override \S*_env must be the NAME") as error:
            check_run_arguments([argument])
        assert not any(key in str(error.value) for key in KEYS)
    check_run_arguments(
        ["generator.api_key_env=OPENAI_API_KEY", "retriever.dense.chroma.token_env=null", "x_env=${oc.env:A}"]
    )
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "mine.yaml").write_text(f"type: openai\nmodel: m\n# the key\napi_key_env: {KEYS[0]}\n")
    with pytest.raises(
        RagtrackError, match=rf"^{tmp_path / 'generator' / 'mine.yaml'}:4: api_key_env must be the NAME"
    ):
        check_run_arguments(["--config-dir", str(tmp_path), "generator=mine"])
    with pytest.raises(RagtrackError, match=r"^generator\.api_key_env must be the NAME"):
        check_variable_names({"generator": {"api_key_env": KEYS[3]}, "chroma": {"token_env": "NAME"}})
    assert flatten({"generator": {"api_key_env": KEYS[0], "base_url": "u"}}) == {
        "generator.api_key_env": "***",
        "generator.base_url": "u",
    }
    assert (
        redact_text(f"generator.api_key_env={KEYS[0]} chroma.token_env=CHROMA_TOKEN")
        == "generator.api_key_env=*** chroma.token_env=CHROMA_TOKEN"
    )


@pytest.mark.parametrize("how", ["override", "config-dir", "searchpath"])
def test_a_key_given_as_a_variable_name_is_refused_and_stored_nowhere(tmp_path: Path, how: str) -> None:
    """On the command line or in a --config-dir file the job stops before Hydra writes anything; from a
    search path (found only by Hydra) the typed settings stop it before anything is built, and the
    folder Hydra made is removed."""
    key = "sk-live-9c2e7d4f1a0b88"
    conf = tmp_path / "myconf"
    (conf / "generator").mkdir(parents=True)
    (conf / "generator" / "mine.yaml").write_text(f"defaults:\n  - openai\n  - _self_\nmodel: m\napi_key_env: {key}\n")
    arguments = {
        "override": ["generator=openai", "generator.model=m", f"generator.api_key_env={key}"],
        "config-dir": ["--config-dir", str(conf), "generator=mine"],
        "searchpath": [f"hydra.searchpath=[file://{conf}]", "generator=mine"],
    }[how]
    result = ragtrack(tmp_path, "run", "dataset=toy", "retriever=[bm25]", "fusion=[]", *arguments)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    last = result.stderr.strip().splitlines()[-1]  # refused before Hydra runs, or by the typed settings (searchpath)
    assert (
        "api_key_env must be the NAME of an environment variable" in last
        or "api_key_env: the value given (not shown) is not allowed" in last
    )
    assert key not in result.stdout + result.stderr
    written = [p for p in tmp_path.rglob("*") if p.is_file() and conf not in p.parents]
    assert [str(p) for p in written if key.encode() in p.read_bytes()] == []
    assert not (tmp_path / "mlruns").exists()
    assert not [
        p for p in (tmp_path / "outputs").rglob("*") if p.is_file()
    ]  # a searchpath job is stopped by the typed settings: its folder is removed


# ----------------------------------------------------------------------------- secrets by value
def test_remembered_values_are_masked_whole_in_any_text_and_short_ones_never() -> None:
    remember("mask-Me-7a1c")
    remember("mask-Me-7a1c-and-more")  # a secret holding another: masked whole, not as ***-and-more
    remember("pw!@7a1c/=")  # masked as written and percent-encoded
    remember("short7")  # under 8 characters: not a secret (it would garble every file)
    remember(None)
    text = "a mask-Me-7a1c-and-more b mask-Me-7a1c c pw!@7a1c/= d pw%21%407a1c%2F%3D e short7"
    assert mask(text) == "a *** b *** c *** d *** e short7"
    assert masked({"k": ["x mask-Me-7a1c", ("mask-Me-7a1c",)], "n": 3, "none": None}) == {
        "k": ["x ***", ("***",)],
        "n": 3,
        "none": None,
    }
    assert "short7" not in known_secrets() and mask("one 'mask-Me-7a1c' two", "two") == "one '***' ***"


@pytest.mark.parametrize(
    "url, bare, user, password, shown",
    [
        (
            "http://alice:pw-5e8d1b@host:5000/x?q=1",
            "http://host:5000/x?q=1",
            "alice",
            "pw-5e8d1b",
            "http://alice:***@host:5000/x?q=1",
        ),
        (
            "https://tok-4c9e2f7a@host/",
            "https://host/",
            "tok-4c9e2f7a",
            None,
            "https://***@host/",
        ),  # a token as the user name
        (
            "http://alice:pa%3Ass%40wd-9f1@127.0.0.1:1",
            "http://127.0.0.1:1",
            "alice",
            "pa:ss@wd-9f1",
            "http://alice:***@127.0.0.1:1",
        ),
        (
            "http://alice:raw@pw-3b7d@host",
            "http://host",
            "alice",
            "raw@pw-3b7d",
            "http://alice:***@host",
        ),  # the last @ ends the userinfo
        ("http://host:5000", "http://host:5000", None, None, "http://host:5000"),
    ],
)
def test_url_credentials_are_split_off_and_remembered(
    url: str, bare: str, user: str | None, password: str | None, shown: str
) -> None:
    assert split_credentials(url) == (bare, user, password) and without_credentials(url) == bare
    remember_url_credentials(f"see {url} there")
    assert mask(url) == shown and (password is None or mask(password) == "***")


def test_a_composed_config_tells_its_secrets(monkeypatch, tmp_path: Path) -> None:
    """``${oc.env:}`` values (in a default too), ``*_env`` variables, URL credentials and header values;
    not the locations the shipped configs read from the environment (RAGTRACK_ROOT)."""
    from ragtrack.pipeline.configuration.config import compose

    env = {
        "RT_UNIT_NOTE": "note-6d2a9c1e",
        "RT_UNIT_KEY": "key-6d2a9c1e",
        "RT_UNIT_DEFAULT": "default-6d2a9c1e",
        "RAGTRACK_ROOT": str(tmp_path / "root-6d2a9c1e"),
    }
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = compose(
        [
            "dataset=toy",
            f"paths.output_dir={tmp_path}",
            "generator=openai",
            "generator.model=m",
            "generator.base_url=http://bob:url-6d2a9c1e@127.0.0.1:9/v1",
            "generator.api_key_env=RT_UNIT_KEY",
            "+vars.note=${oc.env:RT_UNIT_NOTE}",
            "+vars.other='${oc.env:RT_UNIT_UNSET,${oc.env:RT_UNIT_DEFAULT}}'",
            "+retriever.dense.chroma.headers.X-Api-Key=header-6d2a9c1e",
        ]
    )
    remember_config_secrets(cfg)
    text = " ".join([*env.values(), "url-6d2a9c1e", "header-6d2a9c1e"])
    assert mask(text) == f"*** *** *** {tmp_path / 'root-6d2a9c1e'} *** ***"


def test_run_arguments_tell_their_secrets_before_hydra_logs_them(monkeypatch) -> None:
    monkeypatch.setenv("RT_ARG_KEY", "argkey-0b4f8e2d")
    remember_argument_secrets(
        [
            "+vars.headers.Token='arghead-0b4f8e2d'",
            "x.key_env=RT_ARG_KEY",
            "t.uri=http://u:argurl-0b4f8e2d@h",
            "fusion.rrf.k=10,20",
        ]
    )
    assert (
        mask("arghead-0b4f8e2d argkey-0b4f8e2d argurl-0b4f8e2d fusion.rrf.k=10,20") == "*** *** *** fusion.rrf.k=10,20"
    )


def test_every_redaction_masks_known_values_under_any_key() -> None:
    remember("value-1f7c3a9e")
    config = {"note": "see value-1f7c3a9e", "list": ["value-1f7c3a9e"], "k": 1}
    assert redact(config) == {"note": "see ***", "list": ["***"], "k": 1}
    assert flatten(config)["note"] == "see ***" and redact_overrides(["+vars.note=value-1f7c3a9e"]) == [
        "+vars.note=***"
    ]
    assert redact_text("job: x=value-1f7c3a9e") == "job: x=***" and redact_everywhere(
        {"task": ["a=value-1f7c3a9e"]}
    ) == {"task": ["a=***"]}
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "run %s (%d)", ("value-1f7c3a9e", 3), None)
    assert SecretFilter().filter(record) and record.getMessage() == "run *** (3)"


def test_the_probe_authenticates_with_the_uri_credentials_and_never_shows_them() -> None:
    guarded = BasicAuthServer("alice", "pa:ss@wd-2c8e")
    try:
        probe_server(f"http://alice:pa%3Ass%40wd-2c8e@127.0.0.1:{guarded.port}", 5)
        assert (guarded.authorized, guarded.refused) == (1, 0)
    finally:
        guarded.stop()
    closed = free_port()
    with pytest.raises(RagtrackError) as error:
        probe_server(f"http://alice:pa%3Ass%40wd-2c8e@127.0.0.1:{closed}", 5)
    assert (
        str(error.value)
        == f"MLflow tracking server http://127.0.0.1:{closed} is unreachable: connection refused (nothing listens there)"
    )


def test_uri_credentials_reach_mlflow_through_its_variables_and_only_for_that_uri(monkeypatch) -> None:
    for name in CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert use_credentials("http://alice:cred-8e1d5b@127.0.0.1:5000/") == "http://127.0.0.1:5000/"
    assert [os.environ.get(name) for name in CREDENTIAL_VARIABLES] == ["alice", "cred-8e1d5b"]
    assert use_credentials("http://127.0.0.1:5001") == "http://127.0.0.1:5001"  # another server gets none of them
    assert not any(name in os.environ for name in CREDENTIAL_VARIABLES)
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "users-own-8e1d5b")  # the user's own variables are left alone
    assert (
        use_credentials("http://127.0.0.1:5001") == "http://127.0.0.1:5001"
        and os.environ["MLFLOW_TRACKING_PASSWORD"] == "users-own-8e1d5b"
    )
    assert (
        use_credentials("postgresql://u:db-8e1d5b@db/mlflow") == "postgresql://u:db-8e1d5b@db/mlflow"
    )  # a database URI keeps its password
    assert mask("db-8e1d5b") == "***"


@pytest.mark.parametrize("folder", ["pct%41", "a?b#c", "sp ace+colon:at@", "100%"])
def test_store_uris_of_any_folder_name_read_back_as_that_folder(tmp_path: Path, folder: str) -> None:
    from urllib.parse import urlsplit
    from urllib.request import url2pathname

    from sqlalchemy.engine import make_url

    database = tmp_path / folder / "mlruns" / "mlflow.db"
    uri = sqlite_uri(database)
    assert make_url(uri).database == str(database) and sqlite_path(uri) == database
    assert (
        Path(url2pathname(urlsplit(file_uri(database.parent)).path)) == database.parent
    )  # as MLflow reads an artifact location


def test_llm_stage_identities_hold_no_credentials(chat_server, tmp_path: Path) -> None:
    """An identity is written into cache manifests: the endpoint without its credentials."""
    from ragtrack.retrievers.rerankers import LLMReranker
    from ragtrack.retrievers.rewriters import LLMRewriter

    url = chat_server.url.replace("http://", "http://bob:ident-5a0c7e@")
    reranker = LLMReranker(input="bm25", base_url=url, model="m", cache_dir=str(tmp_path))
    rewriter = LLMRewriter(input="bm25", type="llm", base_url=url, model="m", prompt="{query}")
    assert reranker.scorer_identity()["base_url"] == rewriter.rewrite_identity()["base_url"] == chat_server.url


def test_a_refused_request_names_the_endpoint_without_its_credentials(chat_server: ChatServer) -> None:
    """An HTTP 4xx error named ``base_url`` with its ``user:password@``: the error text goes to
    judge.jsonl, nugget_scores.jsonl, citations.jsonl, generation.json and the log."""
    password = "pw-0123"  # shorter than the secrets registry's minimum: only the URL's own stripping hides it
    url = chat_server.url.replace("http://", f"http://alice:{password}@")
    client = ChatClient(base_url=url, model="m", backoff=0.01, max_retries=0)
    replies, failures = client.complete_all({"a": "[401] refused", "b": "[down] broken"})
    assert not replies and set(failures) == {"a", "b"}
    assert "HTTP 401" in failures["a"] and "HTTP 500" in failures["b"]
    assert all(password not in text and "alice" not in text for text in failures.values()), failures
