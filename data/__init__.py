"""Datasets shipped with ragtrack, in BEIR layout, each with its SOURCE.md."""
