"""Process trees on Linux (/proc): find a managed SuperLink and everything it spawned, and
stop them (SIGTERM, then SIGKILL)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path


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
    """PIDs of the managed SuperLink(s) whose command line names `flwr_home`, and of every
    process below them. The whole tree is collected first: killed parents re-parent orphans.
    """
    marker = str(Path(flwr_home))
    roots = [
        pid for pid in _parent_pids() if "flower-superlink" in (c := cmdline(pid)) and marker in c
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
