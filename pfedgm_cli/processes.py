"""This user's processes on Linux (/proc): their command lines, the trees below them, and
stopping a tree whole. Flower's SuperLink and SuperNode spawn helpers (SuperExec, ClientApp
and ServerApp processes) that outlive a parent stopped alone by its PID, so `pfedgm superlink
stop` and `pfedgm supernode stop` collect every process below the ones they stop first, and
signal only processes of the user who asks.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Collection
from pathlib import Path


def argv(pid: int) -> list[str]:
    """A process's arguments ([] when it is gone or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return [a.decode(errors="replace") for a in raw.split(b"\0")[:-1]]


def cmdline(pid: int) -> str:
    """A process's command line, arguments joined by spaces ("" when it is gone)."""
    return " ".join(argv(pid))


def mine(pid: int) -> bool:
    """Whether the process belongs to this user: another user's processes are never ours to
    stop, whatever their command line says."""
    try:
        return Path(f"/proc/{pid}").stat().st_uid == os.getuid()
    except OSError:
        return False


def alive(pid: int) -> bool:
    """Whether the process still runs: a zombie (dead, its exit status not yet collected by
    its parent) counts as gone, since it holds no port, memory or file any more."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def parent_pids() -> dict[int, int]:
    """{pid: parent pid} of every process this user can see."""
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
                parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def process_tree(roots: Collection[int]) -> set[int]:
    """`roots` and every process below them (collected before anything is killed, since killed
    parents re-parent their orphans).
    """
    parents = parent_pids()
    tree, frontier = set(roots), list(roots)
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def kill(pids: Collection[int], grace: float = 2.0) -> None:
    """SIGTERM `pids`, give them up to `grace` seconds to exit (a SuperNode takes a few to
    leave its SuperLink cleanly), then SIGKILL what is left; returns once all are gone (or 2 s
    after the SIGKILL), so that a caller may count on their ports and memory being free."""
    _signal(pids, signal.SIGTERM)
    _wait_gone(pids, grace)
    _signal([p for p in pids if alive(p)], signal.SIGKILL)
    _wait_gone(pids, 2.0)


def _wait_gone(pids: Collection[int], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while any(alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)


def _signal(pids: Collection[int], sig: signal.Signals) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
