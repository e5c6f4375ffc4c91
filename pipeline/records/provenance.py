"""Where a result came from: the ragtrack version always, the git commit of ragtrack's own source
only where it runs from a git checkout (an editable install); a wheel install has no commit to name."""

from __future__ import annotations

import functools
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

from ragtrack.pipeline.records.layout import TAG_GIT_COMMIT, TAG_VERSION

SOURCE_ROOT = Path(__file__).resolve().parents[2]  # the checkout in an editable install; inside site-packages otherwise


def package_version() -> str:
    """The installed distribution's version (``0+unknown`` for a source tree never installed)."""
    try:
        return version("ragtrack")
    except PackageNotFoundError:
        return "0+unknown"


@functools.lru_cache(maxsize=4)
def git_commit(folder: Path = SOURCE_ROOT) -> str | None:
    """The commit of the checkout at ``folder`` (read once per process), ``None`` when ``folder`` is not
    the top of a git checkout (installed from a wheel, or a checkout without git)."""
    if not (folder / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=folder, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 and out.stdout.strip() else None


def provenance_tags() -> dict[str, str]:
    """``ragtrack.version`` and, inside a git checkout, ``ragtrack.git_commit``."""
    commit = git_commit()
    return {TAG_VERSION: package_version(), **({TAG_GIT_COMMIT: commit} if commit else {})}
