"""The shared cache: keyed entries, atomic builds, crashed builds never trusted, one builder per key."""

from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing
import os
import re
import shutil
import time
from pathlib import Path

import pytest

from ragtrack.core.cache import MANIFEST, Cache, cache_key
from ragtrack.core.errors import RagtrackError


def test_key_depends_on_every_part() -> None:
    assert cache_key("bm25", {"a": 1, "b": 2}) == cache_key("bm25", {"b": 2, "a": 1})
    assert cache_key("bm25", {"a": 1}) != cache_key("bm25", {"a": 2})
    assert cache_key("bm25", {"a": 1}) != cache_key("dense", {"a": 1})


def test_build_once_then_hit(tmp_path: Path) -> None:
    cache, built = Cache(tmp_path), []

    def build(folder: Path) -> None:
        built.append(folder)
        (folder / "data.txt").write_text("x")

    first = cache.entry("k", {"v": 1}, build)
    second = cache.entry("k", {"v": 1}, build)
    assert first == second and len(built) == 1 and (first / MANIFEST).exists()
    assert (first / "data.txt").read_text() == "x"


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    cache = Cache(tmp_path)

    def explode(folder: Path) -> None:
        (folder / "half.bin").write_text("partial")
        raise RuntimeError("killed")

    with pytest.raises(RuntimeError):
        cache.entry("k", {"v": 1}, explode)
    assert [p.name for p in (tmp_path / "k").iterdir() if not p.name.endswith(".lock")] == []


def test_incomplete_entries_are_rebuilt(tmp_path: Path) -> None:
    cache = Cache(tmp_path)
    final = tmp_path / "k" / cache_key("k", {"v": 1})
    final.mkdir(parents=True)
    (final / "garbage").write_text("from a killed job")  # no manifest: not trusted
    stale = final.parent / f".{final.name}.tmp-1-dead"
    stale.mkdir()
    folder = cache.entry("k", {"v": 1}, lambda f: (f / "ok").write_text("ok"))
    assert sorted(p.name for p in folder.iterdir()) == [MANIFEST, "ok"]
    assert not stale.exists()


def _slow_builder(root: str, results) -> None:
    cache = Cache(root)

    def build(folder: Path) -> None:
        time.sleep(0.5)
        (folder / "value").write_text("built")

    cache.entry("k", {"v": 1}, build)
    results.put(len(cache.builds))


def test_concurrent_builders_build_once(tmp_path: Path) -> None:
    context = multiprocessing.get_context("spawn")
    results = context.Queue()
    workers = [context.Process(target=_slow_builder, args=(str(tmp_path), results)) for _ in range(3)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert sorted(results.get(timeout=5) for _ in workers) == [0, 0, 1]


def _entry(cache: Cache, built: list) -> Path:
    def build(folder: Path) -> None:
        built.append(folder)
        (folder / "data.bin").write_bytes(bytes(range(256)) * 40)

    return cache.entry("k", {"v": 1}, build, label="data")


def test_the_manifest_records_every_file(tmp_path: Path) -> None:
    folder = _entry(Cache(tmp_path), [])
    files = json.loads((folder / MANIFEST).read_text())["files"]
    assert files == {
        "data.bin": {
            "sha256": hashlib.sha256(bytes(range(256)) * 40).hexdigest(),
            "size": 10240,
            "mtime_ns": (folder / "data.bin").stat().st_mtime_ns,
        }
    }


@pytest.mark.parametrize("damage", ["truncate", "same size", "remove", "no checksums"])
def test_a_damaged_entry_is_rebuilt_with_one_warning(
    tmp_path: Path, damage: str, caplog: pytest.LogCaptureFixture
) -> None:
    cache, built = Cache(tmp_path), []
    folder = _entry(cache, built)
    data = folder / "data.bin"
    if damage == "truncate":
        data.write_bytes(data.read_bytes()[: data.stat().st_size // 3])
    elif damage == "same size":
        data.write_bytes(bytes(10240))
    elif damage == "remove":
        data.unlink()
    else:  # an entry of an older ragtrack
        manifest = json.loads((folder / MANIFEST).read_text())
        (folder / MANIFEST).write_text(json.dumps({k: v for k, v in manifest.items() if k != "files"}))
    with caplog.at_level(logging.WARNING, logger="ragtrack.core.cache"):
        assert _entry(cache, built) == folder and len(built) == 2
    assert len(caplog.records) == 1 and str(folder) in caplog.records[0].getMessage()
    assert data.read_bytes() == bytes(range(256)) * 40 and not list(folder.parent.glob(".*tmp-*"))
    caplog.clear()
    assert _entry(cache, built) == folder and len(built) == 2 and not caplog.records


def test_a_touched_but_intact_file_is_a_hit(tmp_path: Path) -> None:
    cache, built = Cache(tmp_path), []
    folder = _entry(cache, built)
    os.utime(folder / "data.bin", ns=(1, 1))  # copied without its times: hashed, found intact
    assert _entry(cache, built) == folder and len(built) == 1


@pytest.mark.parametrize("where", ["entry", "file", "lock"])
def test_a_symbolic_link_is_refused_and_left_alone(tmp_path: Path, where: str) -> None:
    cache, built = Cache(tmp_path / "cache"), []
    folder = _entry(cache, built)
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "precious").write_text("keep")
    link = {"entry": folder, "file": folder / "data.bin", "lock": folder.with_name(f"{folder.name}.lock")}[where]
    if where != "file":  # the lock is taken when the entry is built again
        shutil.rmtree(folder)
    link.unlink(missing_ok=True)
    link.symlink_to(target if where == "entry" else target / "precious")
    with pytest.raises(RagtrackError, match=f"^{re.escape(str(link))}: a symbolic link in the cache") as raised:
        _entry(cache, built)
    assert "\n" not in str(raised.value) and link.is_symlink() and len(built) == 1
    assert [p.name for p in target.iterdir()] == ["precious"] and (target / "precious").read_text() == "keep"


@pytest.mark.parametrize(
    "manifest",
    [
        '{"kind": "k"}',
        '{"kind": "k", "parts": {"v": 2}, "schema": 1}',
        "not json",
        '{"kind": "k", "parts": {"v": 1}, "schema": 7}',
    ],
)
def test_a_foreign_folder_is_refused_and_left_alone(tmp_path: Path, manifest: str) -> None:
    cache = Cache(tmp_path)
    final = tmp_path / "k" / cache_key("k", {"v": 1})
    final.mkdir(parents=True)
    (final / MANIFEST).write_text(manifest)
    (final / "theirs").write_text("keep")
    with pytest.raises(RagtrackError, match=f"^{re.escape(str(final))}: not a ragtrack cache entry") as raised:
        _entry(cache, [])
    assert "\n" not in str(raised.value) and sorted(p.name for p in final.iterdir()) == [MANIFEST, "theirs"]


def test_an_entry_its_opener_rewrites_is_checksummed_again(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """``Cache.opened``: what the opener rewrites (as a Chroma client does) is recorded, so the next
    reader finds the entry intact; a rewrite by anything else is damage."""
    cache, built = Cache(tmp_path), []

    def rewrite(folder: Path) -> str:
        (folder / "data.bin").write_bytes(bytes(reversed(range(256))) * 40)
        return "opened"

    def build(folder: Path) -> None:
        built.append(folder)
        (folder / "data.bin").write_bytes(bytes(range(256)) * 40)

    with caplog.at_level(logging.WARNING, logger="ragtrack.core.cache"):
        assert [cache.opened("k", {"v": 1}, build, rewrite) for _ in range(3)] == ["opened"] * 3
        assert len(built) == 1 and not caplog.records
        folder = cache.entry("k", {"v": 1}, build)
        (folder / "data.bin").write_bytes(bytes(10240))
        cache.opened("k", {"v": 1}, build, rewrite)
    assert (
        len(built) == 2
        and len(caplog.records) == 1
        and "data.bin changed since it was built" in caplog.records[0].getMessage()
    )


@pytest.mark.parametrize(
    "where", ["kind folder", "pair store", "pair store journal", "pairs folder", "chat reply", "chat folder"]
)
def test_no_path_of_the_cache_is_reached_through_a_symbolic_link(tmp_path: Path, where: str) -> None:
    """Every file the cache writes (entries, their kind folder, the pair-score stores and SQLite's files
    beside them, the chat replies): a link there is one line, nothing written through it."""
    from ragtrack.core.llm import ChatClient
    from ragtrack.core.pairs import PairScores

    cache = Cache(tmp_path / "cache")
    store = PairScores(cache, {"model": "m"})
    client = ChatClient(base_url="http://127.0.0.1:9/v1", model="m", cache_dir=str(cache.root))
    reply = client._cache_file("hello")
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = {
        "kind folder": cache.root / "k",
        "pairs folder": cache.root / "pairs",
        "pair store": store.path,
        "pair store journal": store.path.with_name(store.path.name + "-journal"),
        "chat reply": reply,
        "chat folder": cache.root / "chat",
    }[where]
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(target if where.endswith("folder") else target / "victim")
    with pytest.raises(RagtrackError, match=f"^{re.escape(str(link))}: a symbolic link in the cache"):
        if where == "kind folder":
            _entry(cache, [])
        elif where.startswith("pair"):
            PairScores(cache, {"model": "m"}).store({("q", "d"): 1.0})
        else:
            ChatClient(base_url="http://127.0.0.1:9/v1", model="m", cache_dir=str(cache.root)).complete_all(
                {"q": "hello"}
            )
    assert not list(target.iterdir()) and link.is_symlink()


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch, tmp_path: Path) -> None:
    from ragtrack.core.checksums import user_cache_dir

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")
    assert user_cache_dir() == tmp_path / ".cache" / "ragtrack"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert user_cache_dir() == tmp_path / "xdg" / "ragtrack"
