"""The base layer: data types, errors, file I/O, the cache. Importing it has no side effects and pulls
in neither OmegaConf nor Hydra nor MLflow."""
