"""The Hydra app behind ``ragtrack run``: a thin shell over ``run_experiment``.

Configs come from the package (``pkg://ragtrack.conf``); ``--config-dir DIR`` and ``hydra.searchpath``
add the user's own (docs/configuration.md). The app registers the config resolvers before Hydra composes.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig
from omegaconf.errors import OmegaConfBaseException

from ragtrack.core.errors import RagtrackError
from ragtrack.pipeline.config import CONFIG_NAME, CONFIG_PATH, register_resolvers
from ragtrack.pipeline.experiment import JobInfo, run_experiment

log = logging.getLogger("ragtrack")


@hydra.main(version_base="1.3", config_path=CONFIG_PATH, config_name=CONFIG_NAME)
def main(cfg: DictConfig) -> float | None:
    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    job = JobInfo(
        choices=dict(hydra_cfg.runtime.choices),
        overrides=list(hydra_cfg.overrides.task),
        sweep=hydra_cfg.sweep.dir if multirun else None,
        hydra_dir=None if hydra_cfg.output_subdir is None else Path(hydra_cfg.runtime.output_dir) / hydra_cfg.output_subdir,
    )
    try:
        results = run_experiment(cfg, job)
        return objective(results, cfg.get("optimize_metric"))
    except (RagtrackError, OmegaConfBaseException) as exc:  # user mistakes: one line, exit 2
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        mark_failed(Path(hydra_cfg.runtime.output_dir), message)
        fail(message)


FAILED_MARKER = "FAILED"


def mark_failed(output_dir: Path, message: str) -> None:
    """A job that stops on a mistake leaves its output folder marked: ``FAILED`` holds the error."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / FAILED_MARKER).write_text(message + "\n", encoding="utf-8")


def fail(message: str) -> None:
    """One line on stderr, exit 2; the job's log file records it too, the console shows it once."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)
    print(f"ragtrack: error: {message}", file=sys.stderr)
    sys.exit(RagtrackError.exit_code)


def run_app(overrides: list[str]) -> None:
    """``ragtrack run OVERRIDES``: Hydra parses the command line (``-m``, ``--config-dir``, ``--help``...)."""
    register_resolvers()
    sys.argv = ["ragtrack", *overrides]
    main()


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
