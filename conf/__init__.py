"""Hydra configs of ragtrack (found by Hydra as ``pkg://ragtrack.conf``)."""
