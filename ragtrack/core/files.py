"""Hardened file reading and atomic writing, shared by every input and output of ragtrack.

``read_lines`` is the one way input files are read line by line: UTF-8 (a BOM and CRLF accepted),
gzip when the name ends in ``.gz``, and every defect (NUL bytes, invalid UTF-8, over-long lines,
truncated gzip, a gzip file whose name lacks ``.gz``, a missing file) raised as an
:class:`~ragtrack.core.errors.InputError` naming the file and line. ``open_bytes`` opens regular files only: a FIFO, folder, device or socket is an error (it is
opened without blocking, so a FIFO never hangs), and so are a symbolic link loop and a file that
cannot be read.
``json_text`` is the one JSON writer of every file a job writes (results.json, comparison.json,
dry_run.json, generation.json, the judges' records): an undefined value (NaN, ±inf) is written as null,
never as the bare ``NaN`` no JSON parser accepts.
``write_atomically`` writes through a temporary file and a rename, so readers never see half a file.
``check_writable_folder`` tells at once, in one line, that an output or cache folder cannot be written.
"""

from __future__ import annotations

import contextlib
import errno
import gzip
import hashlib
import json
import math
import os
import secrets
import stat
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from ragtrack.core.errors import InputError, RagtrackError, describe_fault

MAX_LINE_BYTES = 64 * 2**20  # longer lines are rejected before they are held in memory
MAX_YAML_BYTES = 16 * 2**20  # a YAML file ragtrack reads but did not write: larger is refused unparsed
MAX_YAML_NODES = 1_000_000  # ... and so is one whose aliases expand to more values
GZIP_MAGIC = b"\x1f\x8b"


FILE_KINDS = {
    stat.S_IFDIR: "a directory",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
}


def _not_regular(path: Path, mode: int) -> InputError:
    return InputError(path, f"not a regular file ({FILE_KINDS.get(stat.S_IFMT(mode), 'not a file')})")


def open_regular(path: Path) -> BinaryIO:
    """Open a regular file for binary reading. The file is opened without blocking and checked with
    fstat before anything is read, so a FIFO is refused at once (no stat-then-open race); every other
    failure is one :class:`InputError` line too."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(path, "broken symbolic link" if os.path.islink(path) else "file not found") from None
    except PermissionError:
        raise InputError(path, "permission denied") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise InputError(path, "symbolic link loop") from None
        with contextlib.suppress(OSError):  # a socket cannot be opened (ENXIO): name its kind
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):
                raise _not_regular(path, mode) from None
        raise InputError(path, f"cannot open file: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise _not_regular(path, mode)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


@contextlib.contextmanager
def open_bytes(path: Path) -> Iterator[BinaryIO]:
    """A regular file (:func:`open_regular`) for binary reading, decompressed if its name ends in ``.gz``.
    A gzip file by another name is an error: its name decides how it is read, here and wherever it is
    named (``corpus.jsonl.gz``), so it must say so."""
    with open_regular(path) as raw:
        if path.suffix == ".gz":
            with gzip.GzipFile(fileobj=raw, mode="rb") as unzipped:
                yield unzipped
        else:
            if raw.read(2) == GZIP_MAGIC:  # no UTF-8 text starts with these bytes
                raise InputError(path, "gzip-compressed, but its name does not end in .gz")
            raw.seek(0)
            yield raw


def read_lines(path: Path, digest: "hashlib._Hash | None" = None) -> Iterator[tuple[int, str]]:
    """Yield (line number, decoded line without line ending) for non-blank lines of a UTF-8 regular file
    (gzip if it ends in ``.gz``); a BOM and CRLF are accepted; NUL bytes, invalid UTF-8, lines over
    :data:`MAX_LINE_BYTES` and truncated gzip streams are errors. ``digest`` is fed the raw bytes."""
    number = 0
    try:
        with open_bytes(path) as handle:
            while raw := handle.readline(MAX_LINE_BYTES + 1):
                number += 1
                if len(raw) > MAX_LINE_BYTES:
                    raise InputError(path, f"line longer than {MAX_LINE_BYTES:,} bytes", number)
                if digest is not None:
                    digest.update(raw)
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                elif number == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                    raise InputError(path, "UTF-16 text (byte-order mark): save the file as UTF-8", number)
                if b"\x00" in raw:
                    raise InputError(path, "NUL byte in line", number)
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise InputError(path, f"not valid UTF-8 (byte {exc.start})", number) from None
                text = text.rstrip("\r\n")
                if text.strip(
                    " \t"
                ):  # blank: spaces and tabs only (other whitespace is content, checked by the caller)
                    yield number, text
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        where = f"after line {number}" if number else "at its start"
        raise InputError(path, f"corrupt or truncated gzip {where}: {exc}") from None
    except OSError as exc:
        raise InputError(path, f"cannot read file: {exc.strerror or exc}") from None


def read_json_objects(path: Path, digest: "hashlib._Hash | None" = None) -> Iterator[tuple[int, dict]]:
    """Yield (line number, object) for the non-blank lines of a JSON-lines file (:func:`read_lines`);
    a line that is not JSON, or not a JSON object, raises :class:`InputError` naming file and line."""
    import json

    for number, text in read_lines(path, digest):
        try:
            record = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InputError(path, f"malformed JSON: {exc.msg} (column {exc.colno})", number) from None
        except RecursionError:
            raise InputError(path, "malformed JSON: nesting too deep", number) from None
        if not isinstance(record, dict):
            raise InputError(path, f"expected a JSON object, got {type(record).__name__}", number)
        yield number, record


def yaml_text(path: Path, what: str, syntax: bool = True) -> str:
    """The text of a YAML file that ragtrack did not write (a rubric, a config from a shared store, a
    ``--config-dir`` file), checked before anything parses it into objects: at most
    :data:`MAX_YAML_BYTES` read, and aliases that expand to at most :data:`MAX_YAML_NODES` nodes, none
    referring to itself (a "billion laughs" document of a few hundred bytes would take all memory, or
    hang Hydra). :class:`InputError` when ``what`` (``"rubric file"``) is missing, unreadable, too
    large, not valid YAML (unless ``syntax`` is false: the caller's parser names such mistakes), or such
    a bomb."""
    import yaml

    if not path.is_file():
        raise InputError(path, f"{what} not found")
    with open_regular(path) as handle:
        raw = handle.read(MAX_YAML_BYTES + 1)
    if len(raw) > MAX_YAML_BYTES:
        raise InputError(path, f"{what} refused: larger than {MAX_YAML_BYTES:,} bytes")
    try:
        text = raw.decode("utf-8")
        _expanded_size(yaml.compose(text, Loader=yaml.SafeLoader), {}, set())
    except UnicodeDecodeError as exc:
        raise InputError(path, f"not valid UTF-8 (byte {exc.start})") from None
    except yaml.YAMLError as exc:
        if syntax:
            raise yaml_error(path, exc) from None
    except RecursionError:
        raise InputError(path, f"{what} nested too deeply") from None
    except ValueError as exc:
        raise InputError(path, f"{what} refused: {exc}") from None
    return text


def yaml_files(folder: Path, what: str) -> list[tuple[Path, str]]:
    """Each ``*.yaml`` file under ``folder`` (none when it is not a folder), sorted, with its text checked
    for size and aliases as :func:`yaml_text` checks it: the files of a ``--config-dir``, before Hydra
    reads them (Hydra names the syntax mistakes of the files it uses)."""
    return [
        (path, yaml_text(path, what, syntax=False))
        for path in (sorted(Path(folder).rglob("*.yaml")) if Path(folder).is_dir() else [])
    ]


def _expanded_size(node: object, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """Nodes of ``node`` with every alias expanded (each shared node counted once per use, computed
    once); ``ValueError`` beyond :data:`MAX_YAML_NODES` or for an alias inside its own anchor."""
    if node is None or id(node) in sizes:
        return sizes.get(id(node), 0)
    if id(node) in open_nodes:
        raise ValueError("an alias refers to the node that holds it")
    open_nodes.add(id(node))
    children = node.value if isinstance(node.value, list) else []
    size = 1 + sum(
        _expanded_size(part, sizes, open_nodes)
        for child in children
        for part in (child if isinstance(child, tuple) else (child,))
    )
    if size > MAX_YAML_NODES:
        raise ValueError(f"its aliases expand to more than {MAX_YAML_NODES:,} values")
    open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size


def read_yaml(path: Path, what: str) -> object:
    """The parsed content of a YAML file that ragtrack did not write, checked as :func:`yaml_text` checks it."""
    import yaml

    text = yaml_text(path, what)
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:  # composed, but not constructible (an unknown tag)
        raise yaml_error(path, exc) from None


def yaml_error(path: str | Path, exc: Exception) -> InputError:
    """A PyYAML parse error as one line at its line: ``file:2: invalid YAML: expected ',' or ']', but
    got '<stream end>'`` (PyYAML's own text spans several lines and names no file)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or " ".join(str(exc).split())[:200]
    return InputError(path, f"invalid YAML: {problem}", mark.line + 1 if mark is not None else None)


def read_bytes(path: Path) -> bytes:
    """The whole content of a regular file, decompressed if its name ends in ``.gz`` (the columnar
    reader's input). Opening fails as in :func:`open_regular`; a corrupt gzip stream raises the
    ``gzip``/``zlib``/``EOFError`` exception, for the caller to hand the file to :func:`read_lines`.
    A gzip stream is inflated block by block under :data:`MAX_LINE_BYTES`, as :func:`read_lines` reads
    it: a line longer than that is the same error at once, before it is held (a few MB that inflate to
    one line of gigabytes)."""
    with open_bytes(path) as handle:
        if path.suffix != ".gz":
            return handle.read()
        blocks, line, number = [], 0, 1  # bytes of the line being read, its number
        while block := handle.read(2**20):
            parts = block.split(b"\n")
            lengths = [line + len(parts[0]), *map(len, parts[1:])]
            if max(lengths) > MAX_LINE_BYTES:
                first_long = next(i for i, length in enumerate(lengths) if length > MAX_LINE_BYTES)
                raise InputError(path, f"line longer than {MAX_LINE_BYTES:,} bytes", number + first_long)
            line, number = lengths[-1], number + len(parts) - 1
            blocks.append(block)
        return b"".join(blocks)


def json_ready(value: object) -> object:
    """``value`` with every non-finite float (NaN: a metric undefined there, a mean over no query; ±inf)
    replaced by None, recursively through dicts, lists and tuples; numpy scalars as Python numbers."""
    if isinstance(value, dict):
        return {key: json_ready(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_ready(item) for item in value]
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):  # a numpy scalar
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def json_text(value: object, **options) -> str:
    """``value`` as strict JSON (``json.dumps(..., allow_nan=False)`` of :func:`json_ready`): null where
    a number is undefined; ``options`` go to ``json.dumps`` (``indent``, ``ensure_ascii``)."""
    return json.dumps(json_ready(value), allow_nan=False, **options)


def write_atomically(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` through a temporary file and a rename: readers never see half a file.
    The file gets the mode every other output gets (0666 less the umask; a temporary file's own is 0600)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
    try:
        with open(
            os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666), "w", encoding="utf-8"
        ) as handle:
            handle.write(text)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return path


def check_writable_folder(folder: Path, what: str, keep: bool = True) -> None:
    """Fail at once, with one line ``<what> cannot be written: <fault>``, when ``folder`` cannot be made
    or written (read-only disk, no permission, a file in the way). ``keep=False``: the folders the check
    made are removed again, so a command refused later leaves nothing behind."""
    made = [path for path in (folder, *folder.parents) if not os.path.lexists(path)]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as exc:
        raise RagtrackError(f"{what} cannot be written: {describe_fault(exc) or exc}") from None
    finally:
        for path in made if not keep else ():
            with contextlib.suppress(OSError):
                path.rmdir()
