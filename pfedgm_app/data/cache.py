"""Decoded clients kept in memory (`_CLIENTS`, per process) and on disk (`cache_dir()/clients`),
keyed by the data's files and every setting they depend on: a deployment starts a fresh
ClientApp process per message, which then reads its client's tensors instead of decoding the
images again.
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
    return tuple((str(f.relative_to(path.parent)), st.st_size, st.st_mtime_ns)
                 for f in files for st in [f.stat()])  # fmt: skip


def _client_cache(parts: tuple, decode: Callable[[], dict[str, np.ndarray]]) -> ClientData:
    """A client's data from `cache_dir()/clients/<hash of parts>.npz` (uint8 images, labels),
    or decoded by `decode` and written there atomically; `parts` holds everything the data
    depends on (the files' sizes and times, the protocol or device settings, the class list)."""
    digest = hashlib.sha256(repr((CACHE_VERSION, *parts)).encode()).hexdigest()[:32]
    path = cache_dir() / "clients" / f"{digest}.npz"
    arrays = None
    if path.exists():
        try:
            with np.load(path) as stored:
                arrays = {k: stored[k] for k in stored.files}
        except (OSError, ValueError, zipfile.BadZipFile) as exc:
            log.warning("unreadable cached client %s (%s): decoding again", path, exc)
    if arrays is None:
        arrays = decode()
        _write_atomically(path, lambda f: np.savez(f, **arrays))
    return _client_data(arrays)


def _write_atomically(path: Path, write: Callable[[Any], None]) -> None:
    """`write(file)` into a temporary file beside `path`, then renamed onto it: two ClientApps
    may fill the same cache entry at once, and a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with open(tmp, "wb") as f:
        write(f)
    tmp.replace(path)
