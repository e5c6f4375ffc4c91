"""``python -m pipeline [overrides]``: the Hydra app; a thin shell over ``run_experiment``."""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.experimental.callback import Callback
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from pipeline import PROJECT_DIR
from pipeline.composition import share_composition
from pipeline.errors import RagtrackError
from pipeline.experiment import JobInfo, run_experiment
from pipeline.tracking import background_writer, close_background_writers, discard_spare_writers, start_spare_writer, tracking_target

log = logging.getLogger("ragtrack")

CONFIG_DIR = str(PROJECT_DIR / "conf")
IN_PROCESS_LAUNCHER = "hydra._internal.core_plugins.basic_launcher.BasicLauncher"  # a sweep's jobs one after another here

share_composition()


@hydra.main(version_base="1.3", config_path=CONFIG_DIR, config_name="config")
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    job = JobInfo(
        choices=dict(hydra_cfg.runtime.choices),
        overrides=list(hydra_cfg.overrides.task),
        sweep=hydra_cfg.sweep.dir if multirun else None,
        hydra_dir=None if hydra_cfg.output_subdir is None else Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir,
        shares_process=multirun and runs_jobs_here(hydra_cfg),
    )
    try:
        results = run_experiment(cfg, job)
        return objective(results, cfg.get("optimize_metric"))
    except (RagtrackError, OmegaConfBaseException) as exc:  # user mistakes: one line, exit 2
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(message)


def runs_jobs_here(hydra_cfg: DictConfig) -> bool:
    """Whether the launcher runs a sweep's jobs one after another in this process."""
    return hydra_cfg.launcher.get("_target_") == IN_PROCESS_LAUNCHER


class StartMlflowWriter(Callback):
    """Hydra callback (``conf/hydra/default.yaml``): a sweep whose jobs will log in the background
    opens its MLflow writer when the sweep starts (the one ``run_app`` started ahead, or a new one), so
    that the writer's own start (importing MLflow, opening the store: about 4 s) overlaps the sweep's
    first job instead of holding back its writes; a sweep that will not, ends the spare writer."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        tracking = config.get("tracking") or {}
        if not (runs_jobs_here(config.hydra) and tracking.get("enabled", False) and tracking.get("background", True)):
            discard_spare_writers()
            return
        try:
            target = tracking_target(tracking)
        except OmegaConfBaseException:  # resolvable only inside a job: the first job opens the writer
            return
        background_writer(target)


def fail(message: str) -> None:
    log.error("%s", message)
    print(f"ragtrack: error: {message}", file=sys.stderr)
    sys.exit(RagtrackError.exit_code)


def run_app() -> None:
    """The Hydra app, then the wait until a sweep's jobs are written to MLflow (their writer runs in
    the background, ``pipeline.tracking.BackgroundWriter``); a failed write fails the command."""
    start_spare_writer(sys.argv[1:])
    try:
        main()
    finally:
        try:
            close_background_writers()
        except RagtrackError as exc:
            fail(str(exc))


def objective(results: dict, optimize_metric: str | None) -> float | None:
    """The value an optimizing sweeper maximizes or minimizes: ``<system>/<metric>`` of this job."""
    if not optimize_metric:
        return None
    system, _, metric = str(optimize_metric).partition("/")
    systems = results["systems"]
    if system not in systems or metric not in systems[system]:
        known = ", ".join(f"{s}/{m}" for s in systems for m in list(systems[s])[:3])
        raise RagtrackError(f"optimize_metric {optimize_metric!r} is not a result of this job; e.g. {known}, ...")
    return float(systems[system][metric])


if __name__ == "__main__":
    run_app()
