"""Model fingerprints: content, not file names and sizes; a folder is read once per change."""

from __future__ import annotations

from pathlib import Path

import pytest

from ragtrack.core import checksums
from ragtrack.core.models import model_fingerprint, resolve_model
from tests.support import save_tiny_cross_encoder


@pytest.fixture(autouse=True)
def memo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RAGTRACK_HASH_MEMO", str(tmp_path / "memo.sqlite"))
    return tmp_path / "memo.sqlite"


def _sizes(folder: Path) -> dict[str, int]:
    return {p.name: p.stat().st_size for p in folder.iterdir()}


def test_weights_changed_in_place_change_the_fingerprint(tmp_path: Path) -> None:
    folder = save_tiny_cross_encoder(tmp_path / "model", seed=0)
    before, sizes = model_fingerprint(str(folder)), _sizes(folder)
    save_tiny_cross_encoder(folder, seed=1)  # a fine-tune saved to the same folder
    assert _sizes(folder) == sizes and model_fingerprint(str(folder)) != before
    save_tiny_cross_encoder(folder, seed=0)
    assert model_fingerprint(str(folder)) == before


def test_an_unchanged_folder_is_hashed_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = save_tiny_cross_encoder(tmp_path / "model")
    first, reads = model_fingerprint(str(folder)), []
    monkeypatch.setattr(checksums, "sha256_of", lambda path: reads.append(path))
    assert model_fingerprint(str(folder)) == first and reads == []


def test_the_shipped_model_has_a_stable_fingerprint(memo: Path) -> None:
    location = resolve_model("all-MiniLM-L6-v2")
    first = model_fingerprint(location)
    memo.unlink()  # hashed afresh: the same content gives the same fingerprint
    assert model_fingerprint(location) == first and len(first) == 64
