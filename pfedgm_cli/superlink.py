"""The managed SuperLink that `flwr run` starts in the background (`pfedgm superlink stop`):
found by its command line, which names its FLWR_HOME, with every process it spawned
(SuperExec, the simulation, its Ray cluster), and stopped (SIGTERM, then SIGKILL). Linux only
(/proc); only the processes of the user who asks (`processes`).
"""

from __future__ import annotations

import os
from pathlib import Path

from .processes import cmdline, kill, mine, parent_pids, process_tree


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


def superlink_tree(flwr_home: Path) -> set[int]:
    """PIDs of this user's managed SuperLink(s) whose command line names a path inside
    `flwr_home` (its database and log file are there), and of every process below them. The
    whole tree is collected first: killed parents re-parent orphans.
    """
    # "<home>/": "~/.flwr" must not match "~/.flwr-old/local-superlink/state.db"
    marker = os.path.join(Path(flwr_home), "")
    roots = [
        pid
        for pid in parent_pids()
        if "flower-superlink" in (c := cmdline(pid)) and marker in c and mine(pid)
    ]
    return process_tree(roots)
