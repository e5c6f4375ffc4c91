"""Evaluators: ranking metrics (trec_eval semantics), answer metrics, aggregation."""
