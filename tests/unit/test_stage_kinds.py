"""The table of stage kinds (ragtrack/core/stage_kinds.py) is the one declaration of a kind: the
registry, the planner, the settings checks and pyproject.toml agree with it, and a toy kind added to
the table alone is planned and checked like a shipped one."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from ragtrack.core import stage_kinds
from ragtrack.core.errors import InputError
from ragtrack.core.settings import StageSettings, SystemSettings
from ragtrack.core.stage_kinds import STAGE_KINDS, StageKind
from ragtrack.core.stages import SingleInputStage, Stage
from ragtrack.pipeline import registry
from ragtrack.pipeline.configuration.settings import job_model, validate
from ragtrack.pipeline.configuration.systems import plan_systems

ROOT = Path(__file__).parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.mark.parametrize("kind", STAGE_KINDS, ids=lambda kind: kind.section)
def test_each_kind_names_its_base_class_and_common_keys(kind: StageKind) -> None:
    base = kind.base_class()
    assert issubclass(base, Stage) and base.kind == kind.section
    assert issubclass(kind.settings_model(), SystemSettings)
    assert (kind.reads == "input") == issubclass(
        kind.settings_model(), StageSettings
    )  # ``input`` is StageSettings' key
    assert kind.group in registry.GROUPS and f"ragtrack.{kind.group}" in PYPROJECT["project"]["entry-points"]
    for name in registry.installed(kind.group):
        assert issubclass(registry.load(kind.group, name), base), name


def test_every_entry_point_group_is_a_registry_group() -> None:
    groups = {
        group.removeprefix("ragtrack.")
        for group in PYPROJECT["project"]["entry-points"]
        if group.startswith("ragtrack.")
    }
    assert groups == set(registry.GROUPS)


def test_the_package_list_is_every_folder_the_package_dirs_map() -> None:
    """pyproject.toml lists packages by hand (the repo's top-level folders map into ``ragtrack``): a new
    folder missing there would be missing from the wheel."""
    setuptools = PYPROJECT["tool"]["setuptools"]
    found = set()
    for package, folder in setuptools["package-dir"].items():
        for path in [ROOT / folder, *(ROOT / folder).rglob("*")]:
            nested = path.relative_to(ROOT / folder).parts
            if path.is_dir() and "__pycache__" not in nested and any(child.is_file() for child in path.iterdir()):
                found.add(".".join([package, *nested]))
    assert set(setuptools["packages"]) == found


class Tagger(SingleInputStage):
    """A toy kind of stage: reads one system and makes another."""

    kind = "tagger"

    def identity(self) -> dict:
        return {}

    def produce(self, inputs, context):
        return replace(inputs[self.input], stage=self)  # the input's run, unchanged: the toy tags nothing


class ToyTaggerSettings(StageSettings, extra="forbid"):
    strength: int = 1


class ToyTagger(Tagger):
    settings_schema = ToyTaggerSettings


def test_a_kind_added_to_the_table_alone_is_planned_checked_and_run(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """One row (and its plugins' entry points, here faked): the job settings take its section, the
    planner names and orders its systems, its plugins' keys are checked, and a job runs it through the
    unchanged executor."""
    toy = StageKind(
        "tagger", "taggers", f"{__name__}:Tagger", "ragtrack.core.settings:StageSettings", "input+key", "input"
    )
    monkeypatch.setattr(stage_kinds, "STAGE_KINDS", (*STAGE_KINDS, toy))

    class Entry:
        value = f"{__name__}:ToyTagger"

        def load(self):
            return ToyTagger

    installed, load = registry.installed, registry.load
    monkeypatch.setattr(
        registry, "installed", lambda group: {"toy": Entry()} if group == "taggers" else installed(group)
    )
    monkeypatch.setattr(registry, "load", lambda group, name: ToyTagger if group == "taggers" else load(group, name))
    paths = {k: "/tmp/x" for k in ("root_dir", "data_dir", "log_dir", "output_dir", "cache_dir", "mlflow_dir")}
    job = {
        "depth": 10,
        "seed": 0,
        "paths": paths,
        "dataset": {"type": "beir", "name": "toy", "path": "/tmp/toy"},
        "tracking": {"enabled": False},
        "retriever": {"bm25": {"type": "bm25"}},
        "tagger": {"tags": {"type": "toy", "input": "bm25", "strength": 3}},
    }
    assert (
        "tagger" in job_model(stage_kinds.STAGE_KINDS).model_fields
        and "tagger" not in job_model(STAGE_KINDS).model_fields
    )
    validate(job)
    assert [system.name for system in plan_systems(job)] == ["bm25", "bm25+tags"]
    with pytest.raises(InputError, match=r"^tagger\.tags\.strength: 'x' is not allowed"):
        validate({**job, "tagger": {"tags": {"type": "toy", "input": "bm25", "strength": "x"}}})
    with pytest.raises(
        InputError, match=r"^tagger\.tags\.input: 'dense' is not allowed: a system of this job \(bm25\)"
    ):
        validate({**job, "tagger": {"tags": {"type": "toy", "input": "dense"}}})
    import ragtrack

    result = ragtrack.run_experiment(
        [
            "dataset=toy",
            "encoder=hashing",
            "retriever=[bm25]",
            "fusion=[]",
            "tracking=none",
            f"paths.root_dir={tmp_path}",
            f"paths.cache_dir={tmp_path / 'cache'}",
            "+tagger.tags.type=toy",
            "+tagger.tags.input=bm25",
        ]
    )
    assert list(result.systems) == ["bm25", "bm25+tags"]
    tagged = result.per_query[result.per_query.system == "bm25+tags"].drop(columns="system")
    alone = result.per_query[result.per_query.system == "bm25"].drop(columns="system")
    same = tagged.reset_index(drop=True).equals(alone.reset_index(drop=True))  # the toy tags nothing
    assert len(tagged) == 6 and same
    monkeypatch.setattr(stage_kinds, "STAGE_KINDS", STAGE_KINDS)
    with pytest.raises(InputError, match=r"^tagger: no such key"):
        validate(job)


def test_the_parent_run_shares_no_stage_setting() -> None:
    """Each system's child run carries its stages' settings; the parent's params keep none of any kind
    (rewriter and reranker settings leaked into them)."""
    from ragtrack.pipeline.execution.job_tracking import shared_params

    flat = {
        "depth": 100,
        "retriever.bm25.k1": 0.9,
        "rewriter.rm3.fb_terms": 10,
        "fusion.rrf.k": 60,
        "reranker.cross_encoder.depth": 10,
        "paths.cache_dir": "/tmp/c",
        "tracking.uri": "sqlite:///x",
        "dataset.name": "scifact",
    }
    assert shared_params(flat) == {"depth": 100, "dataset.name": "scifact"}


def test_a_learned_fusion_trained_on_reported_queries_stops_the_job_before_any_system_runs(tmp_path: Path) -> None:
    """Stage.dataset_problems, checked once the dataset is loaded: the job and its dry run stop in one
    line naming the setting, and nothing was searched (no run in the cache)."""
    from hydra import compose, initialize_config_module

    import ragtrack
    from ragtrack.core.errors import RagtrackError
    from ragtrack.core.runs import Run, write_trec
    from ragtrack.pipeline.configuration.config import CONFIG_MODULE
    from ragtrack.pipeline.execution.dryrun import dry_run

    train = tmp_path / "train"
    train.mkdir()
    (train / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nt9\td1\t1\n")
    for member in ("bm25", "dense"):
        write_trec(Run(member, {"q1": {"d1": 1.0}, "t9": {"d1": 1.0}}), train / f"{member}.trec")
    overrides = [
        "dataset=toy",
        "encoder=hashing",
        "tracking=none",
        f"paths.root_dir={tmp_path}",
        f"paths.cache_dir={tmp_path / 'cache'}",
        "fusion=[posfuse]",
        "fusion.posfuse.train.folds=null",
        f"fusion.posfuse.train.qrels='{train / 'qrels.tsv'}'",
        f"fusion.posfuse.train.runs={{bm25: '{train / 'bm25.trec'}', dense: '{train / 'dense.trec'}'}}",
    ]
    message = r"^fusion\.posfuse\.train\.qrels: 1 of its 2 training queries are among the \d+ queries of toy that this job reports \(e\.g\. 'q1'\)"
    with pytest.raises(RagtrackError, match=message):
        ragtrack.run_experiment(overrides)
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose("config", overrides=[*overrides, f"paths.output_dir={tmp_path / 'dry'}"])
    with pytest.raises(RagtrackError, match=message):
        dry_run(cfg)
    assert not list(tmp_path.rglob("run.trec"))
