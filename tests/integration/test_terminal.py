"""What a user meets in the terminal: a job's output in a file has no DEBUG lines, no carriage returns
and plain progress lines only for a slow step; the end of a run says where its outputs and MLflow runs
are, MLflow's own MLFLOW_TRACKING_URI is honoured, a mistake is told in one line before the heavy modules
are imported, `ragtrack metrics` aligns its columns, and
`ragtrack ui` leaves no process behind when it is stopped."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from ragtrack.pipeline.commands.cli import main as cli_main
from tests.support import TOY, TOY_JOB, free_port, ragtrack

TOY_QRELS = TOY / "qrels" / "test.tsv"


def test_a_run_ends_with_its_output_folder_run_id_and_run_page(tmp_path: Path) -> None:
    done = ragtrack(tmp_path, *TOY_JOB, f"hydra.run.dir={tmp_path}/job")
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert f"Output folder: {tmp_path}/job" in lines
    run_id = re.search(r"^MLflow run:\s+(\w+) \(experiment 'ragtrack-toy'\)$", done.stdout, re.MULTILINE).group(1)
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    job = client.get_run(run_id)
    assert job.info.status == "FINISHED" and "mlflow.parentRunId" not in job.data.tags
    page = f"http://127.0.0.1:5000/#/experiments/{job.info.experiment_id}/runs/{run_id}"
    assert f"Run page:      {page}" in lines and any(
        f"ragtrack ui --tracking-uri sqlite:///{tmp_path}/mlruns/mlflow.db" in line for line in lines
    )
    ndcg = next(line for line in lines if line.startswith("ndcg@10 "))
    assert ndcg.split() == ["ndcg@10", "0.9201", "0.9617*", "0.9617*"]  # bm25, dense, hybrid: the best marked
    header = next(i for i, line in enumerate(lines) if line.split() == ["bm25", "dense", "hybrid"])
    footer = lines.index("6 queries; mean per query; * best of each metric")
    assert max(map(len, lines[header : footer + 1])) <= 100
    assert (
        "mlflow.store.db.utils" not in done.stdout + done.stderr
    )  # MLflow's "Creating initial MLflow database tables..." stays out


HEAVY_MODULES = (
    "pandas",
    "scipy",
    "bm25s",
    "numba",
    "torch",
    "chromadb",
    "mlflow",
    "ragtrack.pipeline.execution.experiment",
)
PROBE = """import contextlib, io, json, sys
from ragtrack.pipeline.commands.cli import main
told = []
for argv in json.loads(sys.argv[1]):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code
    told.append([code, err.getvalue()])
print(json.dumps([sorted(m for m in HEAVY if m in sys.modules), told]))"""


def told_before_imports(root: Path, *commands: list[str]) -> tuple[list[str], list[list]]:
    """``ragtrack`` run on each of ``commands`` in one fresh process in ``root``: the heavy modules it
    imported, and each command's exit code and stderr."""
    probe = f"HEAVY = {HEAVY_MODULES!r}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", probe, json.dumps(commands)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAGTRACK_ROOT": str(root)},
    )
    assert done.returncode == 0, done.stderr
    return tuple(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.mark.parametrize(
    "mistake", [["retriever.bm25.k1=-1"], ["dataset=beir", "dataset.path=bad"]], ids=["setting", "data"]
)
def test_a_mistake_is_told_before_the_stages_are_imported(tmp_path: Path, mistake: list[str]) -> None:
    """A bad setting or data file stops ``ragtrack run`` before pandas, scipy, torch, MLflow or the
    stages are imported (these take seconds): the one-line error comes within about a second."""
    bad = tmp_path / "bad"
    shutil.copytree(TOY, bad)
    with (bad / "queries.jsonl").open("a") as queries:
        queries.write('{"_id": "q9", "text": \n')
    loaded, [(code, err)] = told_before_imports(tmp_path, ["run", "tracking=none", *mistake])
    assert (loaded, code) == ([], 2), err
    assert err.strip().splitlines()[-1] in (
        "ragtrack: error: retriever.bm25.k1: -1 is not allowed: a finite number >= 0",
        f"ragtrack: error: {bad}/queries.jsonl:8: malformed JSON: Expecting value (column 23)",
    )  # made absolute


def test_config_dir_mistakes_are_one_line_and_options_may_follow_overrides(tmp_path: Path) -> None:
    """A --config-dir that does not exist, or a YAML file in it that does not parse, is one line naming
    the folder or the file and line; Hydra's options may come after overrides (they are read first)."""
    mine = tmp_path / "mine" / "dataset"
    mine.mkdir(parents=True)
    (mine / "broken.yaml").write_text("type: beir\nname: broken\n  bad: [\n")
    loaded, told = told_before_imports(
        tmp_path,
        ["run", "--config-dir", str(tmp_path / "none"), "dataset=toy"],
        ["run", "--config-dir", str(tmp_path / "mine"), "dataset=broken"],
        ["run", "tracking=none", "--config-dir", str(tmp_path / "mine"), "retriever.bm25.k1=-1"],
    )
    assert loaded == [] and [code for code, _ in told] == [2, 2, 2]
    assert [err.strip().splitlines() for _, err in told] == [
        [f"ragtrack: error: {tmp_path / 'none'}: no such folder (given as --config-dir)"],
        [f"ragtrack: error: {mine / 'broken.yaml'}:3: invalid YAML: mapping values are not allowed here"],
        ["ragtrack: error: retriever.bm25.k1: -1 is not allowed: a finite number >= 0"],
    ]  # read after the option, not refused


def test_options_go_before_overrides_in_their_order() -> None:
    from ragtrack.pipeline.commands.cli import options_first

    assert options_first(["a=1", "--config-dir", "d", "-m", "b=2", "--info", "c=3"]) == [
        "--config-dir",
        "d",
        "-m",
        "--info",
        "a=1",
        "b=2",
        "c=3",
    ]
    assert options_first(["a=1", "--info", "searchpath", "--cfg=job", "-cd", "x", "k=-1"]) == [
        "--info",
        "searchpath",
        "--cfg=job",
        "-cd",
        "x",
        "a=1",
        "k=-1",
    ]


def test_reproduce_and_compare_tell_argument_folder_and_store_mistakes_before_mlflow(tmp_path: Path) -> None:
    """What ``reproduce`` and ``compare`` can find without MLflow (overrides, --output-dir, --cache-dir,
    --plot, --resamples, a store that does not exist) is one line and exit code 2 before pandas, MLflow
    or the stages are imported, and leaves no folder behind (a reader never creates a store)."""
    (tmp_path / "afile").write_text("")
    (tmp_path / "store.db").write_text("")  # exists: the arguments are checked next (MLflow never opens it)
    uri, none = f"sqlite:///{tmp_path}/store.db", tmp_path / "none"
    run = ["reproduce", "0123abcd", "--tracking-uri", uri]
    unwritable = f"cannot be written: {tmp_path}/afile/x: a file is in the way where a folder is needed"
    mistakes = {
        (
            *run[:2],
            "depth",
            *run[2:],
        ): "override 'depth': reproduce takes KEY=VALUE, e.g. generator.api_key_env=OPENAI_API_KEY",
        (
            *run,
            "depth=[1",
        ): "overrides 'depth=[1': while parsing a flow sequence",  # an override after the options is one too
        (*run, "--output-dir", f"{tmp_path}/afile/x"): f"the --output-dir folder {unwritable}",
        (
            *run,
            "--output-dir",
            f"{none}/out",
            "--cache-dir",
            f"{tmp_path}/afile/x",
        ): f"the --cache-dir folder {unwritable}",
        (
            "reproduce",
            "0123abcd",
            "--tracking-uri",
            f"sqlite:///{none}/mlflow.db",
        ): f"no MLflow store at {none}/mlflow.db (tracking URI sqlite:///{none}/mlflow.db): give the store of your runs with "
        "--tracking-uri, or log one with `ragtrack run`",
        (
            "reproduce",
            "0123abcd",
            "--tracking-uri",
            str(none),
        ): f"no MLflow store at {none} (tracking URI {none}): give the store of your runs with --tracking-uri, or log one with `ragtrack run`",
        (
            "compare",
        ): f"no MLflow store at {tmp_path}/mlruns/mlflow.db (tracking URI sqlite:///{tmp_path}/mlruns/mlflow.db): give the "
        "store of your runs with --tracking-uri, or log one with `ragtrack run`",
        ("compare", "--tracking-uri", uri, "--plot", f"{tmp_path}/afile/x/plot.png"): f"the --plot folder {unwritable}",
        (
            "compare",
            "--tracking-uri",
            uri,
            "--resamples",
            "0",
        ): "--resamples 0, --failures 10: give --resamples >= 1 and --failures >= 0",
        (
            "compare",
            "--tracking-uri",
            uri,
            "--reference-map",
            "a=b",
        ): "--reference-map and --tolerance check against a reference: give it with --reference RUN_OR_TABLE",
    }
    loaded, told = told_before_imports(tmp_path, *map(list, mistakes))
    assert loaded == [] and told == [[2, f"ragtrack: error: {line}\n"] for line in mistakes.values()]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile", "store.db"]  # no output folder, cache or store made


@pytest.mark.slow  # a whole job or several: make test-slow
def test_mlflow_tracking_uri_is_honoured_by_run_and_compare(tmp_path: Path) -> None:
    store = f"sqlite:///{tmp_path}/elsewhere/store.db"
    done = ragtrack(tmp_path, *TOY_JOB, env={"MLFLOW_TRACKING_URI": store})
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (tmp_path / "mlruns" / "mlflow.db").exists() and (tmp_path / "elsewhere" / "store.db").is_file()
    compared = ragtrack(tmp_path, "compare", "--no-log", "--failures", "0", env={"MLFLOW_TRACKING_URI": store})
    assert compared.returncode == 0, compared.stderr[-3000:]
    assert "hybrid" in compared.stdout and "bm25" in compared.stdout
    explicit = ragtrack(
        tmp_path, *TOY_JOB, f"tracking.uri=sqlite:///{tmp_path}/explicit.db", env={"MLFLOW_TRACKING_URI": store}
    )
    assert explicit.returncode == 0 and (tmp_path / "explicit.db").is_file()  # tracking.uri wins over the variable


def test_metrics_listing_aligns_every_description(capsys) -> None:
    assert cli_main(["metrics"]) == 0
    rows = [line[2:] for line in capsys.readouterr().out.splitlines() if line.startswith("  ")]
    names = [row.split(" ", 1)[0] for row in rows]
    description_starts = {len(row) - len(row.split(" ", 1)[1].lstrip()) for row in rows}
    assert len(rows) > 20 and max(map(len, names)) > 16 and len(description_starts) == 1


def _descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, their children, ...), from /proc."""
    parents = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parents[int(entry.name)] = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow  # a whole job or several: make test-slow (the default run stays under 10 minutes on 2 cores)
def test_ui_stopped_by_sigterm_leaves_no_process_and_frees_its_port(tmp_path: Path) -> None:
    port, store = free_port(), f"sqlite:///{tmp_path}/ui.db"
    ui = subprocess.Popen(
        [sys.executable, "-m", "ragtrack", "ui", "--tracking-uri", store, "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2):
                    break
            except OSError:
                assert ui.poll() is None and time.monotonic() < deadline, "the MLflow UI did not start"
                time.sleep(0.5)
        started = _descendants(ui.pid)
        assert len(started) >= 3  # the MLflow server, uvicorn and its job workers
        ui.send_signal(signal.SIGTERM)
        assert ui.wait(60) == 0
        deadline = time.monotonic() + 15
        while any(map(_alive, started)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not [pid for pid in started if _alive(pid)]
        with pytest.raises(OSError):  # the port no longer answers
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2)
    finally:
        for pid in _descendants(ui.pid) | {ui.pid}:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)


def test_eval_says_when_qrels_and_run_look_swapped(tmp_path: Path, capsys) -> None:
    run = tmp_path / "run.trec"
    run.write_text("q1 Q0 d1 1 2.5 x\nq2 Q0 d2 1 1.5 x\n")
    qrels = TOY_QRELS
    assert cli_main(["eval", str(run), str(qrels)]) == 2
    assert f"the arguments look swapped: {run} is a run file and {qrels} a qrels file" in capsys.readouterr().err
    assert cli_main(["eval", str(qrels), str(run), "-m", "mrr"]) == 0


def test_a_sweep_ends_with_one_summary_labeled_by_the_swept_values(toy_sweep, tmp_path: Path) -> None:
    import json

    from ragtrack.pipeline.app import sweep_summary

    assert toy_sweep.log.count("Sweep summary (") == 1
    for job, (k, hybrid) in enumerate([(10, 0.5), (30, 0.75), (60, 0.625)]):
        folder = tmp_path / str(job)
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "overrides.yaml").write_text(
            f"- dataset=toy\n- fusion.rrf.k={k}\n- generator.api_key=sk-123\n"
        )
        systems = {"bm25": {"ndcg@10": 0.25, "mrr": 0.5}, "hybrid": {"ndcg@10": hybrid, "mrr": 0.5}}
        (folder / "results.json").write_text(json.dumps({"systems": systems}))
    lines = sweep_summary(tmp_path, ["ndcg@10", "mrr"]).splitlines()
    assert lines[0].split() == ["hybrid", "ndcg@10"]
    assert [line.split() for line in lines[2:5]] == [
        ["fusion.rrf.k=10", "0.5000"],
        ["fusion.rrf.k=30", "0.7500*"],
        ["fusion.rrf.k=60", "0.6250"],
    ]
    assert lines[5] == "3 jobs; * marks the best value of each column"
    assert lines[6] == "the same in every job: bm25 ndcg@10 0.2500, bm25 mrr 0.5000, hybrid mrr 0.5000"
    assert lines[7] == "every job: dataset=toy generator.api_key=***" and "sk-123" not in "\n".join(lines)


def test_run_help_lists_usage_examples_and_every_config_group(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "ragtrack", "run", "--help"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.startswith(
        "usage: ragtrack run [-m] [--dry-run] [--config-dir DIR] [OVERRIDE ...]"
    )
    assert "ragtrack run -m experiment=rrf_k" in done.stdout and "ragtrack run --cfg job" in done.stdout
    assert max(map(len, done.stdout.splitlines())) <= 100
    from importlib.resources import files

    for group in ("dataset", "encoder", "retriever", "fusion", "experiment", "chunking", "tracking"):
        options = sorted(
            p.name.removesuffix(".yaml")
            for p in files("ragtrack.conf").joinpath(group).iterdir()
            if p.name.endswith(".yaml")
        )
        assert all(option in done.stdout for option in options) and f"  {group} " in done.stdout
    assert "Traceback" not in done.stderr and "hydra" not in done.stderr.lower()


def test_compare_says_what_it_wrote_and_where_it_logged(toy_sweep, tmp_path: Path, capsys) -> None:
    plot = tmp_path / "figure.png"
    assert (
        cli_main(
            ["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "latest", "-m", "ndcg@10", "--plot", str(plot)]
        )
        == 0
    )
    err = capsys.readouterr().err
    assert f"ragtrack: wrote the comparison plot to {plot}" in err and plot.stat().st_size > 10_000
    run_id = re.search(r"^MLflow run:  (\w+) \(comparison vs ", err, re.MULTILINE).group(1)
    experiment = MlflowClient(toy_sweep.uri).get_run(run_id).info.experiment_id
    assert MlflowClient(toy_sweep.uri).get_run(run_id).data.tags["ragtrack.comparison"] == "true"
    assert f"\nRun page:    http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}\n" in err
    assert (
        f"\nreport.html: http://127.0.0.1:5000/#/experiments/{experiment}/runs/{run_id}/artifacts/report.html\n" in err
    )
    assert re.search(
        r"^ragtrack: compared sweep \S+ of experiment 'ragtrack-toy'; its sweeps: \S+\n",
        " ".join(err.split("\n  ")),
        re.MULTILINE,
    )
    assert all(len(line) <= 100 for line in err.splitlines() if "http" not in line and str(plot) not in line)
    assert cli_main(["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "latest", "-m", "ndcg@10", "--no-log"]) == 0
    out = capsys.readouterr()
    assert "MLflow run" not in out.err and max(map(len, out.out.splitlines())) <= 100  # fits 100 columns
    assert (
        cli_main(
            ["compare", "--tracking-uri", toy_sweep.uri, "--sweep", "latest", "-m", "ndcg@10", "--no-log", "--wide"]
        )
        == 0
    )
    assert max(map(len, capsys.readouterr().out.splitlines())) > 100  # one wide table


# ``ragtrack`` whose BM25 searches take 0.3 s a query, with the progress intervals shortened so the
# 6-query search of the toy job (about 2 s) logs its estimate and progress lines
SLOW_SEARCH = """
import sys, time
from ragtrack.core import progress
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.pipeline.commands.cli import main
progress.ESTIMATE_FROM, progress.LINE_EVERY = 1.0, 0.5
search = BM25Retriever.search
BM25Retriever.search = lambda self, *args: (time.sleep(0.3), search(self, *args))[1]
sys.exit(main())
"""


def test_a_job_logs_no_debug_lines_no_carriage_returns_and_progress_only_for_its_slow_step(tmp_path: Path) -> None:
    env = {**os.environ, "RAGTRACK_ROOT": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    done = subprocess.run(
        [sys.executable, "-c", SLOW_SEARCH, *TOY_JOB, "tracking=none"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    output = done.stdout + done.stderr
    assert "[DEBUG]" not in output and "\r" not in output and "/s]" not in output
    assert "generate answers" not in output  # generator=none: no stage to report
    # a stage searches every query in one call (docs/performance.md): the step's start and end, no per-query lines
    assert re.search(r"^\[\d\d:\d\d:\d\d\]\[INFO\] bm25: search 6 queries \.\.\.$", done.stdout, re.MULTILINE)
    progress = [line for line in output.splitlines() if "elapsed" in line or "estimated from" in line]
    assert all("][INFO] bm25: search " in line for line in progress)  # the quick steps show nothing
    assert "[ragtrack" not in done.stdout  # the terminal's lines: time, level, message; logger names go to the log file
    (log,) = (tmp_path / "outputs" / "runs").glob("*/ragtrack.log")
    assert "][ragtrack.core.progress][INFO] - bm25: search 6 queries done" in log.read_text()
    assert "[DEBUG]" not in log.read_text() and "bm25: index done" in log.read_text()
    assert "bm25: search 6 queries done in " in log.read_text()


STALLED_SEARCH = """
import sys, time
from ragtrack.retrievers.bm25 import BM25Retriever
from ragtrack.pipeline.commands.cli import main
BM25Retriever.search = lambda self, *args: time.sleep(120)
sys.exit(main())
"""


def test_sigterm_ends_a_job_in_one_line_its_runs_killed_and_its_folder_marked(tmp_path: Path) -> None:
    """SIGTERM (as Ctrl-C) mid-job: exit code 130, one line and no traceback; the job's folder keeps its
    log and a FAILED marker, no half results; its MLflow run ends KILLED, not RUNNING."""
    env = {**os.environ, "RAGTRACK_ROOT": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / ".cache")}
    job = subprocess.Popen(
        [sys.executable, "-c", STALLED_SEARCH, *TOY_JOB, "retriever=[bm25]", "fusion=[]"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        for line in job.stdout:
            if "bm25: retriever ..." in line:  # the job has started its runs and is searching
                break
        job.send_signal(signal.SIGTERM)
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert (
        job.returncode == 130
        and err.strip().splitlines()[-1]
        == "ragtrack: interrupted (the cache keeps what was finished: run it again to go on)"
    )
    assert "Traceback" not in err
    (folder,) = (tmp_path / "outputs" / "runs").glob("*/")
    assert (folder / "FAILED").read_text() == "interrupted (Ctrl-C or SIGTERM)\n" and not (
        folder / "results.json"
    ).exists()
    with sqlite3.connect(tmp_path / "mlruns" / "mlflow.db") as store:
        assert [status for (status,) in store.execute("select status from runs")] == ["KILLED"]


def test_reproduce_without_a_run_id_names_only_what_is_required(capsys) -> None:
    with pytest.raises(SystemExit) as stopped:
        cli_main(["reproduce"])
    assert stopped.value.code == 2 and capsys.readouterr().err.splitlines()[-1].endswith(
        "the following arguments are required: run_id"
    )


def test_compare_takes_metrics_as_a_comma_list_as_eval_does() -> None:
    from ragtrack.pipeline.commands.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["compare", "-m", "ndcg@10,mrr", "-m", "map"]).metric == ["ndcg@10", "mrr", "map"]
    assert parser.parse_args(["eval", "q", "r", "-m", "ndcg@10,mrr"]).metric == ["ndcg@10", "mrr"]
