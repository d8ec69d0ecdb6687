"""The simulation engine's share of the cores: its polling thread yields to the ClientApps,
and can be given fewer messages to poll.

In a simulation (`flwr run` to the local SuperLink) the ServerApp runs inside Flower's
`flwr-simulation` process, beside the engine's threads. One of them,
`vce_api.add_messages_to_queue` in Flower 1.42, polls the message store every 0.1 s for every
simulated node against every unanswered message: with 100 nodes and a round's 30 messages,
about a tenth of a core all round long (`benchmarks/bench_speed.py` prints the cores each part
of the simulation keeps busy), taken from the ClientApps wherever they fill every core.
Raising that thread's nice value lets the ClientApps run first; it still gets every core they
leave idle (between clients, between rounds), when there is a message to hand over. Only that
thread: the process also starts Ray, whose raylet and ClientApp workers would inherit the
nice value of the thread that spawns them. Results are unchanged: only which runnable thread
the kernel picks.

The poller's cost grows with the messages it checks, so the ServerApp can keep only a few in
flight (`messages-in-flight`; -1, auto: twice the cores in a simulation;
`strategies.WindowedGrid`): with 100 CIFAR clients on 2 cores the poller's share halves. It is
not the default: each message then waits for a reply to come back first (up to 0.2 s through
two 0.1 s polls), which starves the ClientApps when clients are quick (100 MNIST clients of 70
images: 4.8 -> 7.5 s a round; benchmarks/README.md). Replies, and so results, are the same.
"""

from __future__ import annotations

import os
import sys
import threading
from logging import INFO, WARNING
from pathlib import Path

from flwr.common import log

ENGINE_POLLERS = ("add_messages_to_queue",)  # Flower 1.42's thread targets (vce_api.py)
AUTO = -1  # run-config `messages-in-flight`: chosen by where the ServerApp runs


def in_simulation_engine() -> bool:
    """Whether this process is Flower's simulation process (the ServerApp's host there)."""
    return Path(sys.argv[0]).name == "flwr-simulation"


def messages_in_flight(setting: int) -> int:
    """The window of `strategies.WindowedGrid` for run-config `messages-in-flight`: a value
    >= 0 as given (0: all of an exchange at once); AUTO: twice this machine's cores in Flower's
    simulation process (no more ClientApps than cores run at once, each taking a whole CPU; the
    spare half is queued so that none waits for the next message), 0 elsewhere: in a
    deployment SuperNodes train side by side and no engine polls for them. (With
    `client-resources-num-cpus=0` more ClientApps than cores can run: give the key a value.)"""
    if setting != AUTO:
        return setting
    if not in_simulation_engine():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 * (cores or 1)


def lower_priority(nice: int, targets: tuple[str, ...] = ENGINE_POLLERS) -> list[int]:
    """Raise to `nice` (0 to 19) the threads of this process started on a function named in
    `targets` (Python names such a thread "Thread-N (function)"); returns their native ids
    (empty: none running).

    A nice value belongs to a thread on Linux; elsewhere it is the whole process's, so this
    raises OSError there rather than slowing the ClientApps that share it. A thread already
    at a higher value keeps it.
    """
    if not 0 <= nice <= 19:
        raise ValueError(f"nice must lie in [0, 19], got {nice}")
    if not Path("/proc/self/task").is_dir():
        raise OSError("per-thread nice values need Linux (/proc/self/task)")
    ids = []
    for thread in threading.enumerate():
        if thread.native_id is None or not any(f"({t})" in thread.name for t in targets):
            continue
        try:
            if os.getpriority(os.PRIO_PROCESS, thread.native_id) < nice:
                os.setpriority(os.PRIO_PROCESS, thread.native_id, nice)
            ids.append(thread.native_id)
        except ProcessLookupError:  # it ended meanwhile
            continue
    return ids


def yield_to_clients(nice: int) -> None:
    """The ServerApp's call (run-config `engine-nice`, 0: nothing): in Flower's simulation
    process, once the engine runs (after the first exchange), lower its poller's priority and
    log what was done, or why nothing was."""
    if not nice or not in_simulation_engine():
        return
    try:
        ids = lower_priority(nice)
    except OSError as exc:
        log(WARNING, "pFedGM app: engine-nice=%d left unapplied: %s (engine-nice=0 turns "
            "this off)", nice, exc)  # fmt: skip
        return
    if ids:
        log(INFO, "pFedGM app: Flower's engine poller at nice %d (engine-nice)", nice)
    else:
        log(WARNING, "pFedGM app: engine-nice=%d: no thread of %s in this process (a Flower "
            "other than 1.42?); nothing reniced", nice, ENGINE_POLLERS)  # fmt: skip
