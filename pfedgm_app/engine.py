"""The simulation engine's share of the cores: its threads yield to the ClientApps.

In a simulation (`flwr run` to the local SuperLink) the ServerApp runs inside Flower's
`flwr-simulation` process, beside the engine's threads. One of them polls the message store
every 0.1 s for every simulated node against every unanswered message
(`vce_api.add_messages_to_queue` in Flower 1.42): with 100 nodes and a round's 30 messages,
10 to 20% of a core all round long (`benchmarks/bench_speed.py` prints the cores each part
keeps busy), taken from the ClientApps wherever they fill every core. Raising the nice value
of this process's threads lets the ClientApps run first; the engine still gets every core
they leave idle (between clients, between rounds, while a reply waits for the next message),
so nothing waits on it longer than a ClientApp's turn. Results are unchanged: only which
runnable thread the kernel picks.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def in_simulation_engine() -> bool:
    """Whether this process is Flower's simulation process (the ServerApp's host there)."""
    return Path(sys.argv[0]).name == "flwr-simulation"


def lower_priority(nice: int) -> int:
    """Raise every thread of this process to at least `nice` (0 to 19); returns how many
    threads were changed.

    On Linux a nice value belongs to a thread, so each one in /proc/self/task is set (threads
    started later inherit their creator's); elsewhere on POSIX the whole process is set at
    once. A thread already at a higher value keeps it. Raises OSError where the platform has
    no nice values (Windows).
    """
    if not 0 <= nice <= 19:
        raise ValueError(f"nice must lie in [0, 19], got {nice}")
    if not hasattr(os, "setpriority"):
        raise OSError("this platform has no nice values (os.setpriority)")
    tasks = Path("/proc/self/task")
    ids = [int(t.name) for t in tasks.iterdir()] if tasks.is_dir() else [0]
    changed = 0
    for tid in ids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                os.setpriority(os.PRIO_PROCESS, tid, nice)
                changed += 1
        except ProcessLookupError:  # the thread ended meanwhile
            continue
    return changed
