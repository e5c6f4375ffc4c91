"""ragtrack as a user installs it: a wheel built from the repo, installed into a fresh venv, run from an
empty folder far from the checkout. The wheel holds only ``ragtrack`` (configs and datasets inside), the
shipped configs and datasets are found through the package, a user's own folder and configs work, and
the layers contract (import-linter, pyproject.toml) holds on the installed package.

The fresh venv reaches the project's dependencies through a ``.pth`` line to the test venv's
site-packages (installing torch and the rest again would take minutes); the ragtrack package itself
comes from the wheel only. The slow test installs the wheel with its dependencies resolved by pip, as
a user does (CPU torch first).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.support import TOY

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(venv bin folder, wheel path): the wheel built from the repo, installed into a fresh venv."""
    root = tmp_path_factory.mktemp("wheel")
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-v",
            "-w",
            str(root / "dist"),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert build.returncode == 0, build.stderr[-3000:]
    noise = [
        line
        for line in (build.stdout + build.stderr).splitlines()
        if "absent from the `packages`" in line or "SetuptoolsDeprecationWarning" in line
    ]
    assert noise == [], noise[:3]  # the project's own packaging builds quietly
    (wheel,) = (root / "dist").glob("ragtrack-*.whl")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=300)
    venv_site = next((root / "venv" / "lib").glob("python3*/site-packages"))
    (venv_site / "dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    install = subprocess.run(
        [str(root / "venv" / "bin" / "pip"), "install", "--no-deps", "--no-index", "--quiet", str(wheel)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr[-3000:]
    return root / "venv" / "bin", wheel


def run(bin_dir: Path, folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A command of the venv in ``folder``, with an environment that names nothing of the checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "RAGTRACK_ROOT", "VIRTUAL_ENV")}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(folder / ".cache")  # the user's cache, kept in the test's folder
    return subprocess.run(list(args), cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def job_results(folder: Path) -> dict:
    (results,) = (folder / "outputs" / "runs").glob("*/results.json")
    return json.loads(results.read_text())


def test_the_wheel_holds_one_package_with_its_configs_and_datasets(installed) -> None:
    _, wheel = installed
    names = zipfile.ZipFile(wheel).namelist()
    assert {name.split("/")[0] for name in names} == {
        "ragtrack",
        wheel.name.split("-")[0] + "-" + wheel.name.split("-")[1] + ".dist-info",
    }
    for expected in (
        "ragtrack/conf/config.yaml",
        "ragtrack/conf/dataset/scifact.yaml",
        "ragtrack/conf/hydra/default.yaml",
        "ragtrack/datasets/scifact/corpus.jsonl.gz",
        "ragtrack/datasets/scifact/SOURCE.md",
        "ragtrack/datasets/xquad_en/qrels/test.tsv",
        "ragtrack/datasets/toy/queries.jsonl",
        "ragtrack/core/data.py",
        "ragtrack/pipeline/commands/cli.py",
        "ragtrack/retrievers/bm25.py",
        "ragtrack/evaluators/ranking.py",
        "ragtrack/pipeline/regressions.yaml",
        "ragtrack/mlflow.py",
    ):
        assert expected in names, expected


PACKAGE_DIRS = {
    "ragtrack/pipeline/": "pipeline/",
    "ragtrack/retrievers/": "retrievers/",
    "ragtrack/evaluators/": "evaluators/",
    "ragtrack/conf/": "conf/",
    "ragtrack/datasets/": "data/",
    "ragtrack/": "ragtrack/",
}  # pyproject's package-dir


def test_every_file_of_the_wheel_is_one_tracked_file_and_no_link(installed) -> None:
    """The checkout holds each source file once (no symlinks: git, grep and editors see it once), and the
    wheel is exactly the tracked files of the mapped folders that setuptools packages."""
    _, wheel = installed
    listed = subprocess.run(
        ["git", "ls-files", "-s"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    if not listed:
        pytest.skip("not a git checkout")
    links = [line.split("\t")[1] for line in listed if line.startswith("120000")]
    assert links == []
    tracked = {line.split("\t")[1] for line in listed}
    in_wheel = [name for name in zipfile.ZipFile(wheel).namelist() if not name.split("/")[0].endswith(".dist-info")]
    sources = []
    for name in in_wheel:
        prefix = next(p for p in PACKAGE_DIRS if name.startswith(p))
        sources.append(PACKAGE_DIRS[prefix] + name[len(prefix) :])
    assert len(set(sources)) == len(sources) and set(sources) <= tracked, sorted(set(sources) - tracked)[:5]
    code = [
        folder for folder in PACKAGE_DIRS.values() if folder != "data/"
    ]  # data/ also holds the datasets' build scripts
    python = {path for path in tracked if path.endswith(".py") and path.startswith(tuple(code))}
    assert python <= set(sources), sorted(python - set(sources))[:5]


def test_only_ragtrack_is_importable(installed, tmp_path: Path) -> None:
    bin_dir, _ = installed
    for generic in ("pipeline", "retrievers", "evaluators", "conf"):
        done = run(bin_dir, tmp_path, str(bin_dir / "python"), "-c", f"import {generic}")
        assert done.returncode != 0 and "ModuleNotFoundError" in done.stderr, generic
    done = run(
        bin_dir,
        tmp_path,
        str(bin_dir / "python"),
        "-c",
        "import ragtrack.pipeline.commands.cli, ragtrack; print(ragtrack.__file__)",
    )
    assert done.returncode == 0 and "site-packages" in done.stdout and str(REPO) not in done.stdout


def test_the_default_bm25_job_runs_from_an_empty_folder(installed, tmp_path: Path) -> None:
    bin_dir, _ = installed
    done = run(bin_dir, tmp_path, "ragtrack", "run", "retriever=[bm25]", "fusion=[]")
    assert done.returncode == 0, done.stderr[-3000:]
    results = job_results(tmp_path)
    assert results["dataset"]["name"] == "scifact" and round(results["systems"]["bm25"]["ndcg@10"], 4) == 0.6789
    assert (tmp_path / "mlruns" / "mlflow.db").is_file() and (tmp_path / ".cache" / "ragtrack").is_dir()
    client = MlflowClient(f"sqlite:///{tmp_path}/mlruns/mlflow.db")
    runs = client.search_runs([client.get_experiment_by_name("ragtrack-scifact").experiment_id])
    (job,) = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert (
        job.data.tags["ragtrack.version"] == "0.1.0" and "ragtrack.git_commit" not in job.data.tags
    )  # no checkout, no commit


def test_a_users_folder_and_configs_work(installed, tmp_path: Path) -> None:
    bin_dir, _ = installed
    data = tmp_path / "my data"
    shutil.copytree(TOY, data)
    folder = tmp_path / "beir"
    folder.mkdir()
    done = run(
        bin_dir, folder, "ragtrack", "run", "dataset=beir", f"dataset.path={data}", "retriever=[bm25]", "fusion=[]"
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert job_results(folder)["dataset"]["documents"] == 12

    conf = tmp_path / "myconf"
    (conf / "dataset").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "dataset" / "mine.yaml").write_text(
        f"type: beir\nname: mine\npath: {data}\nsplit: test\nqrels_file: null\n"
    )
    (conf / "experiment" / "quick.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /dataset: mine\n"
        "  - override /retriever: [bm25]\n  - override /fusion: []\nrun_name: quick bm25\n"
    )
    for args in (["dataset=mine", "retriever=[bm25]", "fusion=[]"], ["experiment=quick"]):
        job = tmp_path / args[0].replace("=", "-")
        job.mkdir()
        done = run(bin_dir, job, "ragtrack", "run", "--config-dir", str(conf), *args)
        assert done.returncode == 0, done.stderr[-3000:]
        results = job_results(job)
        assert results["dataset"]["name"] == "mine" and set(results["systems"]) == {"bm25"}


def test_the_layers_contract_holds_on_the_installed_package(installed, tmp_path: Path) -> None:
    bin_dir, _ = installed
    done = run(
        bin_dir,
        tmp_path,
        str(bin_dir / "python"),
        "-c",
        "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
        "--config",
        str(REPO / "pyproject.toml"),
        "--no-cache",
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    kept = re.search(r"Contracts: (\d+) kept, 0 broken", done.stdout)
    assert kept and int(kept.group(1)) >= 2, done.stdout[-3000:]


@pytest.mark.slow
def test_the_wheel_installs_with_its_dependencies_into_an_empty_venv(installed, tmp_path: Path) -> None:
    _, wheel = installed
    subprocess.run([sys.executable, "-m", "venv", str(tmp_path / "venv")], check=True, timeout=300)
    bin_dir = tmp_path / "venv" / "bin"
    for step in (["torch==2.13.0"], [str(wheel)]):
        done = subprocess.run(
            [str(bin_dir / "pip"), "install", "--quiet", *step], capture_output=True, text=True, timeout=3600
        )
        assert done.returncode == 0, done.stderr[-3000:]
    work = tmp_path / "work"
    work.mkdir()
    done = run(bin_dir, work, "ragtrack", "run", "retriever=[bm25]", "fusion=[]")
    assert done.returncode == 0, done.stderr[-3000:]
    assert round(job_results(work)["systems"]["bm25"]["ndcg@10"], 4) == 0.6789
    assert run(bin_dir, work, str(bin_dir / "python"), "-c", "import pipeline").returncode != 0


def test_regress_runs_from_the_wheel(installed, tmp_path: Path) -> None:
    bin_dir, _ = installed
    done = run(bin_dir, tmp_path, "ragtrack", "regress", "--only", "scifact-bm25")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "OK   scifact-bm25  bm25/ndcg@10" in done.stdout and "PASSED: 4 OK, 0 FAIL" in done.stdout
