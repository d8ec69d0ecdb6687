"""Decoded clients kept in memory (`_CLIENTS`, per process) and on disk (`cache_dir()/clients`),
keyed by the data's files and every setting they depend on: a deployment starts a fresh
ClientApp process per message, which then reads its client's tensors instead of decoding the
images again.

An entry on disk is checked, not trusted: a decoded client holds the SHA-256 of its arrays
(names, dtypes, shapes, bytes), a client's corrupted images have theirs beside them
(`<file>.sha256`). It is recomputed when the entry is read, and an entry that does not match it
(damaged, or edited: labels flipped) or cannot be read is computed again from the source, with
one warning naming the file. Nothing is unpickled. The SHA-256 is a check of integrity, not a
signature.
"""

from __future__ import annotations

import hashlib
import logging
import os
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .tensors import ClientData, _client_data

log = logging.getLogger(__name__)

_CLIENTS: dict[tuple, ClientData] = {}
CACHE_VERSION = 1  # bump when `corruptions` or the decoding changes what they compute
ENTRY_FORMAT = "sha256"  # in every entry's key: those written without a SHA-256 are not read
DIGEST = "sha256"  # the entry's own array holding the SHA-256 of the others
# What np.load and zipfile raise on a damaged file; TypeError: an .npy where an archive was,
# KeyError: no SHA-256 in it; AttributeError: an archive where an .npy was (no dtype).
UNREADABLE = (
    OSError,
    EOFError,
    ValueError,
    KeyError,
    TypeError,
    AttributeError,
    zipfile.BadZipFile,
)


def cache_dir() -> Path:
    """Where decoded clients and corrupted images are kept: $PFEDGM_CACHE_DIR, else
    ~/.cache/pfedgm (delete it to reclaim the space; entries are rebuilt when needed)."""
    return Path(os.environ.get("PFEDGM_CACHE_DIR") or Path.home() / ".cache" / "pfedgm")


def _fingerprint(source: str) -> tuple:
    """(name, size, modification time) of every file of a local source, which a cached client
    must match; a hub id stands for itself."""
    path = Path(source)
    if not path.exists():
        return (source,)
    files = [path] if path.is_file() else sorted(f for f in path.rglob("*") if f.is_file())
    return tuple(
        (str(f.relative_to(path.parent)), st.st_size, st.st_mtime_ns)
        for f in files
        for st in [f.stat()]
    )


def arrays_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 of each array's name, dtype, shape and bytes, in name order."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = arrays[name]
        h.update(f"\n{name} {a.dtype.str} {a.shape}\n".encode())
        h.update(np.ascontiguousarray(a).data)
    return h.hexdigest()


def _client_cache(parts: tuple, decode: Callable[[], dict[str, np.ndarray]]) -> ClientData:
    """A client's data from `cache_dir()/clients/<hash of parts>.npz` (uint8 images, labels),
    or decoded by `decode` and written there atomically; `parts` holds everything the data
    depends on (the files' sizes and times, the protocol or device settings, the class list)."""
    key = repr((CACHE_VERSION, ENTRY_FORMAT, *parts))
    path = cache_dir() / "clients" / f"{hashlib.sha256(key.encode()).hexdigest()[:32]}.npz"
    if path.exists() and (data := _read_client(path)) is not None:
        return data
    arrays = decode()
    digest = {DIGEST: arrays_digest(arrays)}  # numbers and a string: nothing to pickle
    _write_atomically(path, lambda f: np.savez(f, allow_pickle=False, **arrays, **digest))
    return _client_data(arrays)


def _read_client(path: Path) -> ClientData | None:
    """The client stored in `path` if it is whole and matches its SHA-256, else None (and one
    warning)."""
    try:
        with np.load(path, allow_pickle=False) as stored:
            arrays = {k: stored[k] for k in stored.files}
        if str(arrays.pop(DIGEST)) == arrays_digest(arrays):
            return _client_data(arrays)
        why = "its arrays do not match its SHA-256 (damaged or changed)"
    except UNREADABLE as exc:
        why = f"unreadable ({type(exc).__name__}: {exc})".splitlines()[0]
    log.warning("cached %s: %s; computing it again from its source", path, why)
    return None


def _read_array(path: Path) -> np.ndarray | None:
    """The array in `path` (.npy) if it matches the SHA-256 beside it (`<path>.sha256`), else
    None (and one warning)."""
    try:
        array = np.load(path, allow_pickle=False)
        if Path(f"{path}.sha256").read_text() == arrays_digest({"array": array}):
            return array
        why = "its array does not match its SHA-256 (damaged or changed)"
    except UNREADABLE as exc:
        why = f"unreadable ({type(exc).__name__}: {exc})".splitlines()[0]
    log.warning("cached %s: %s; computing it again from its source", path, why)
    return None


def _write_array(path: Path, array: np.ndarray) -> None:
    """`array` into `path` (.npy), its SHA-256 first: a reader that finds the array finds it."""
    digest = arrays_digest({"array": array})
    _write_atomically(Path(f"{path}.sha256"), lambda f: f.write(digest.encode()))
    _write_atomically(path, lambda f: np.save(f, array))


def _write_atomically(path: Path, write: Callable[[Any], None]) -> None:
    """`write(file)` into a temporary file beside `path`, then renamed onto it: two ClientApps
    may fill the same cache entry at once, and a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    tmp.replace(path)
