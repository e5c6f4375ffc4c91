"""Every config in conf/ composes, and the overrides users type work."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf, open_dict

from ragtrack.pipeline.configuration.config import CONFIG_MODULE
from ragtrack.pipeline.execution.job_outputs import yaml_text

MULTI_SELECT = {"retriever", "rewriter", "fusion", "reranker", "evaluator"}
DATASET_OF = {  # the dataset an override runs on, where it is not the default's (SciFact)
    "dataset=beir": "nfcorpus",
    "dataset=irds": "beir-scifact-test",
    "experiment=beir_irds": "beir-scifact-test",
    "dataset=toy": "toy",
    "dataset=trec": "dl19-queries",
    "dataset=xquad_en": "xquad_en",
    "dataset=xquad_en_unanswerable": "xquad_en_unanswerable",
    "experiment=qa_xquad": "xquad_en",
    "experiment=qa_xquad_cited": "xquad_en",
}


def _options() -> list[str]:
    overrides = []
    for group in sorted(
        p for p in Path(str(files(CONFIG_MODULE))).iterdir() if p.is_dir() and p.name not in {"hydra", "local"}
    ):
        for option in sorted(group.rglob("*.yaml")):
            name = option.relative_to(group).with_suffix("").as_posix()
            overrides.append(f"{group.name}=[{name}]" if group.name in MULTI_SELECT else f"{group.name}={name}")
    return overrides


def compose_config(overrides: list[str]):
    GlobalHydra.instance().clear()
    with initialize_config_module(CONFIG_MODULE, version_base="1.3"):
        cfg = compose(config_name="config", overrides=overrides, return_hydra_config=True)
    HydraConfig.instance().set_config(cfg)
    return cfg


def test_the_default_config() -> None:
    cfg = compose_config([])
    assert cfg.dataset.name == "scifact" and cfg.dataset.split == "test"
    assert list(cfg.retriever) == ["bm25", "dense"] and list(cfg.fusion) == ["rrf"]
    assert cfg.fusion.rrf.k == 60 and cfg.fusion.rrf.system == "hybrid"
    assert "ndcg@10" in cfg.evaluator.ranking.metrics and "recall@10" in cfg.evaluator.ranking.metrics
    assert cfg.tracking.uri.startswith("sqlite:///")


@pytest.mark.parametrize("override", _options())
def test_every_config_composes(override: str) -> None:
    given = {
        "dataset=beir": ["dataset.path=/tmp/nfcorpus"],
        "dataset=irds": ["dataset.id=beir/scifact/test"],
        "experiment=beir_irds": ["dataset.id=beir/scifact/test"],  # a sweep gives it (hydra.sweeper.params)
        "dataset=trec": ["dataset.corpus=c.tsv", "dataset.topics=/data/dl19-queries.tsv.gz", "dataset.qrels=q.txt"],
    }
    cfg = compose_config([override, *given.get(override, [])])
    assert cfg.dataset.name == DATASET_OF.get(override, "scifact") and cfg.depth > 0
    with open_dict(cfg):
        del cfg["hydra"]
    assert yaml_text(OmegaConf.to_container(cfg, resolve=True)) == OmegaConf.to_yaml(
        cfg, resolve=True
    )  # the written config.yaml


def test_overrides_users_type() -> None:
    cfg = compose_config(
        [
            "retriever=[bm25]",
            "fusion=[]",
            "retriever.bm25.k1=1.2",
            "paths.cache_dir=/tmp/c",
            "tracking.uri=http://127.0.0.1:5000",
        ]
    )
    assert list(cfg.retriever) == ["bm25"] and not cfg.get("fusion")
    assert (
        cfg.retriever.bm25.k1 == 1.2 and cfg.paths.cache_dir == "/tmp/c" and cfg.tracking.uri == "http://127.0.0.1:5000"
    )
    assert compose_config(["fusion.rrf.k=30"]).fusion.rrf.k == 30
    assert compose_config(["tracking=none"]).tracking.enabled is False


def test_the_default_store_is_the_one_the_layout_names(tmp_path: Path, monkeypatch) -> None:
    """The tracking config and ``ragtrack compare/reproduce/ui`` (which read ``layout``) agree on the
    store; MLflow's own MLFLOW_TRACKING_URI wins for both."""
    from ragtrack.pipeline.commands.cli import default_tracking_uri as command_default
    from ragtrack.pipeline.records.layout import default_tracking_uri

    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.setenv("RAGTRACK_ROOT", str(tmp_path))
    cfg = compose_config([f"paths.root_dir={tmp_path}"])
    assert cfg.tracking.uri == default_tracking_uri(tmp_path) == command_default()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert compose_config([]).tracking.uri == "http://127.0.0.1:5999" == command_default()


def test_a_plugin_a_preset_needs_names_the_extra_that_installs_it() -> None:
    """hparams_search=rrf_optuna without Hydra's Optuna sweeper (the optional extra ragtrack[optuna])."""
    from hydra.errors import MissingConfigException

    from ragtrack.pipeline.configuration.config import explain_composition_error

    error = explain_composition_error(
        MissingConfigException("no optuna", missing_cfg_file="hydra/sweeper/optuna", options=["basic"])
    )
    assert (
        str(error)
        == "hydra/sweeper: 'optuna' is not allowed: one of basic (it comes with ragtrack[optuna]: pip install 'ragtrack[optuna]')"
    )
