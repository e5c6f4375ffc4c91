"""ragtrack orchestration: data loading, runs, cache, registry, MLflow tracking, experiments, CLI."""
