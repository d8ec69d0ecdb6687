"""The managed SuperLink that `flwr run` starts in the background (`pfedgm superlink stop`):
found by its command line, which names its FLWR_HOME, with every process it spawned
(SuperExec, the simulation, its Ray cluster), and stopped (SIGTERM, then SIGKILL). Linux only
(/proc); only the processes of the user who asks.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


def flwr_home() -> Path:
    """The FLWR_HOME that `flwr` uses: the variable, else `~/.flwr`."""
    return Path(os.environ.get("FLWR_HOME") or Path.home() / ".flwr")


def stop_local_superlink(flwr_home: Path) -> int:
    """Stop the managed SuperLink that `flwr run` started for `flwr_home` (or any FLWR_HOME below
    that folder), with every process it spawned. Returns how many processes were signalled.
    """
    doomed = superlink_tree(flwr_home)
    kill(doomed)
    return len(doomed)


def kill(pids: set[int]) -> None:
    """SIGTERM `pids`, wait 2 s, then SIGKILL what is left."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        if sig == signal.SIGTERM and pids:
            time.sleep(2)


def superlink_tree(flwr_home: Path) -> set[int]:
    """PIDs of this user's managed SuperLink(s) whose command line names a path inside
    `flwr_home` (its database and log file are there), and of every process below them. The
    whole tree is collected first: killed parents re-parent orphans.
    """
    # "<home>/": "~/.flwr" must not match "~/.flwr-old/local-superlink/state.db"
    marker = os.path.join(Path(flwr_home), "")
    roots = [
        pid
        for pid in _parent_pids()
        if "flower-superlink" in (c := cmdline(pid)) and marker in c and _mine(pid)
    ]
    return process_tree(roots)


def process_tree(roots: list[int]) -> set[int]:
    """`roots` and every process below them (collected before anything is killed, since killed
    parents re-parent their orphans).
    """
    parents = _parent_pids()
    tree, frontier = set(roots), list(roots)
    while frontier:
        pid = frontier.pop()
        children = [c for c, p in parents.items() if p == pid and c not in tree]
        tree.update(children)
        frontier.extend(children)
    return tree


def _mine(pid: int) -> bool:
    """Whether the process belongs to this user (another user's SuperLink is not ours to stop,
    even under a path that matches)."""
    try:
        return Path(f"/proc/{pid}").stat().st_uid == os.getuid()
    except OSError:
        return False


def _parent_pids() -> dict[int, int]:
    parents = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
                parents[int(proc.name)] = int(stat.rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return parents


def cmdline(pid: int) -> str:
    """A process's command line, arguments joined by spaces ("" when it is gone)."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
