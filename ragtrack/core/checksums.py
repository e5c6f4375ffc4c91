"""sha256 of files, remembered so that an unchanged file is hashed once.

The memo is a small SQLite file, ``$RAGTRACK_HASH_MEMO`` or ``~/.cache/ragtrack/file-hashes.sqlite``
(under ``$XDG_CACHE_HOME`` when set): one row per file path, valid while the file's size, mtime,
ctime and inode are those it was hashed at. It serves model fingerprints (a model folder is hashed
once per change) and cache entries whose files' times moved. A memo that cannot be opened or written
(read-only home), or that is a symbolic link, is skipped: the file is hashed again.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import sqlite3
from pathlib import Path

log = logging.getLogger(__name__)

BLOCK = 8 * 2**20


def user_cache_dir() -> Path:
    """ragtrack's cache folder of this user, where pip, Hugging Face and ir_datasets keep theirs:
    ``$XDG_CACHE_HOME/ragtrack``, else ``~/.cache/ragtrack`` (the default ``paths.cache_dir``). A relative
    ``$XDG_CACHE_HOME`` is ignored, as the XDG Base Directory specification says (it would give every
    working folder a cache of its own)."""
    given = os.environ.get("XDG_CACHE_HOME", "")
    return (Path(given) if os.path.isabs(given) else Path.home() / ".cache") / "ragtrack"


def memo_path() -> Path:
    """Where the memo of file hashes lives."""
    if explicit := os.environ.get("RAGTRACK_HASH_MEMO"):
        return Path(explicit)
    return user_cache_dir() / "file-hashes.sqlite"


def sha256_of(path: Path) -> str:
    """The sha256 of the file's bytes, read in 8 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        while block := file.read(BLOCK):
            digest.update(block)
    return digest.hexdigest()


def _signature(path: Path) -> tuple[int, int, int, int]:
    info = path.stat()
    return info.st_size, info.st_mtime_ns, info.st_ctime_ns, info.st_ino


def _memo(action):
    """``action(connection)`` on the memo, or ``None`` when the memo cannot be used."""
    try:
        location = memo_path()
        if any(
            os.path.islink(f"{location}{suffix}") for suffix in ("", "-journal", "-wal", "-shm")
        ):  # never written through a link
            raise OSError(f"{location}: a symbolic link")
        location.parent.mkdir(parents=True, exist_ok=True)
        with contextlib.closing(sqlite3.connect(location, timeout=30)) as connection, connection:
            connection.execute(
                "CREATE TABLE IF NOT EXISTS hashes (path TEXT PRIMARY KEY, size INTEGER, mtime_ns INTEGER,"
                " ctime_ns INTEGER, inode INTEGER, sha256 TEXT)"
            )
            return action(connection)
    except (OSError, sqlite3.Error) as exc:
        log.debug("file hash memo not used: %s", exc)
        return None


def file_sha256(path: Path) -> str:
    """The sha256 of ``path``, from the memo when the file is unchanged since it was hashed."""
    name = str(Path(path).resolve())
    signature = _signature(path)
    row = _memo(
        lambda db: db.execute(
            "SELECT sha256 FROM hashes WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ? AND inode = ?",
            (name, *signature),
        ).fetchone()
    )
    if row:
        return row[0]
    digest = sha256_of(path)
    if _signature(path) == signature:  # not changed while it was read
        _memo(
            lambda db: db.execute("INSERT OR REPLACE INTO hashes VALUES (?, ?, ?, ?, ?, ?)", (name, *signature, digest))
        )
    return digest
