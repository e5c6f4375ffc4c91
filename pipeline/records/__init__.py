"""What a job records and where: MLflow tracking, the one layout of tags, keys and artifact paths,
provenance, the libraries' log lines, CSV files. The bottom room of the pipeline: imports only
the components and the core."""
