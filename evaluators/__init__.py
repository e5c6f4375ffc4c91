"""What measures the system: evaluators (ranking metrics with trec_eval semantics, answer metrics,
judges), aggregation and significance, the dataset providers (corpus, queries, judgments) and the
seeded query perturbations of a robustness study."""
