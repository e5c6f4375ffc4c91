"""Orchestration, the top layer: the experiment, MLflow tracking and its layout, compare and reproduce,
regression fixtures, the CLI and the Hydra app. Importing it has no side effects."""
