"""ragtrack orchestration: data loading, runs, cache, registry, MLflow tracking, experiments, CLI."""

import os
from pathlib import Path

from omegaconf import OmegaConf

PROJECT_DIR = Path(__file__).resolve().parent.parent

# ${project_dir:} in configs: the checkout holding conf/ and data/, wherever the command runs.
OmegaConf.register_new_resolver("project_dir", lambda: str(PROJECT_DIR), replace=True)
# ${cwd:} in configs: the launch folder; unlike ${hydra:runtime.cwd} it resolves before Hydra's config
# is set, which a multirun's sweep dir needs.
OmegaConf.register_new_resolver("cwd", os.getcwd, replace=True)
