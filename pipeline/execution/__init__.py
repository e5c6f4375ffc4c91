"""The executor and its steps: one job's recipe (experiment), plan -> produce -> generate -> evaluate
(executor, run live, counted by the dry run, rerun on perturbed queries by robustness), then scoring,
the job's findings (slices, agreement, usage), its output files, its MLflow records and its terminal
report. Imports the analysis, configuration and records rooms, never the commands."""
