"""The simulation engine's share of the cores: its polling thread yields to the ClientApps,
skips the nodes with nothing to receive, and can be given fewer messages to poll.

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

Most of the poller's work is wasted: each node's ask checks every unanswered message, though
at most a few are for that node. The ServerApp, in the same process, indexes the store by
destination (`index_pending_messages`, run-config `engine-poll-index`, on by default): a node
with nothing undelivered is answered at once, the others by Flower's own code, so the poller
costs about the number of nodes, not nodes x messages (100 CIFAR clients on 2 cores: engine
0.09-0.11 -> 0.03 cores; benchmarks/README.md).

Without the index the poller's cost grows with the messages it checks, so the ServerApp can
keep only a few in flight (`messages-in-flight`; -1, auto: twice the cores in a simulation;
`strategies.WindowedGrid`): with 100 CIFAR clients on 2 cores the poller's share halves. It is
not the default: each message then waits for a reply to come back first (up to 0.2 s through
two 0.1 s polls), which starves the ClientApps when clients are quick (100 MNIST clients of 70
images: 4.8 -> 7.5 s a round; benchmarks/README.md). Replies, and so results, are the same.
"""

from __future__ import annotations

import functools
import os
import sys
import threading
from collections import Counter
from logging import INFO, WARNING
from pathlib import Path

import flwr
from flwr.common import log

ENGINE_POLLERS = ("add_messages_to_queue",)  # Flower 1.42's thread targets (vce_api.py)
AUTO = -1  # run-config `messages-in-flight`: chosen by where the ServerApp runs
# The Flower whose InMemoryLinkState `index_pending_messages` was read against.
INDEXED_FLWR = "1.42."
_PENDING = "_pfedgm_pending_nodes"  # the index: an attribute of each InMemoryLinkState


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


def _pending_nodes(state) -> Counter[int]:  # noqa: ANN001 (an InMemoryLinkState)
    """The index (with `state.lock` held): per node, how many undelivered messages it may have.
    Built on first use from the whole store, then kept by the two wrappers below. A count may
    run high (a message deleted undelivered: expired, or its node left), never low: a high
    one costs one call of Flower's own method, which finds nothing and resets it."""
    pending = state.__dict__.get(_PENDING)
    if pending is None:
        pending = Counter(m.metadata.dst_node_id for m in list(state.message_ins_store.values())
                          if m.metadata.delivered_at == "")  # fmt: skip
        setattr(state, _PENDING, pending)
    return pending


def index_pending_messages(cls: type | None = None) -> str:
    """Index `cls`'s (Flower 1.42's `InMemoryLinkState`) undelivered messages by destination
    node, so that `get_message_ins` for a node with none returns at once. Returns '' when
    indexed (or already), else why not (another Flower: its store may differ from 1.42's).

    Flower's `get_message_ins(node, limit)` walks every stored message, checking each for
    expiry and federation (deleting those that fail) before it picks the node's; the engine
    asks it for every node ten times a second. In 1.42 messages enter the store only through
    `store_message_ins` and stop being undelivered only through `get_message_ins`, so wrapping
    those two keeps the index: a stored message counts for its node; an ask for a node with
    none returns [] without Flower's walk; what Flower's method hands over is counted off, and
    an ask (for any run) that it answers with nothing zeroes the node. Both wrappers hold
    `state.lock` (re-entrant) across Flower's call and the index. What a node receives, in
    what order and when, is what Flower's method gives; the one change is that a message is
    no longer checked for expiry when another node asks (its own node's asks, and the
    ServerApp's pulls of its reply, check and delete it as before).
    """
    if not flwr.__version__.startswith(INDEXED_FLWR):
        return f"flwr {flwr.__version__} (the index was written against {INDEXED_FLWR}x)"
    if cls is None:  # imported here: only Flower's simulation process holds one
        from flwr.server.superlink.linkstate.in_memory_linkstate import InMemoryLinkState

        cls = InMemoryLinkState
    if getattr(cls.get_message_ins, _PENDING, False):
        return ""
    store, get = cls.store_message_ins, cls.get_message_ins

    @functools.wraps(store)
    def store_message_ins(self, message):  # noqa: ANN001, ANN202 (Flower's signature)
        with self.lock:
            pending = _pending_nodes(self)  # before the store: it would count this one
            stored = message.metadata.message_id in self.message_ins_store
            message_id = store(self, message)
            if message_id is not None and not stored:
                pending[message.metadata.dst_node_id] += 1
            return message_id

    @functools.wraps(get)
    def get_message_ins(self, node_id, limit, *, run_id=None):  # noqa: ANN001, ANN202
        with self.lock:
            pending = _pending_nodes(self)
            if pending[node_id] <= 0 and (limit is None or limit >= 1):  # < 1: Flower raises
                return []
            messages = get(self, node_id, limit, run_id=run_id)
            pending[node_id] -= len(messages)
            if (not messages and run_id is None) or pending[node_id] <= 0:
                pending.pop(node_id, None)  # none left for this node in any run
            return messages

    setattr(get_message_ins, _PENDING, True)
    cls.store_message_ins, cls.get_message_ins = store_message_ins, get_message_ins
    return ""


def index_engine_polls(enabled: bool) -> None:
    """The ServerApp's call (run-config `engine-poll-index`): in Flower's simulation process,
    index the link state's messages by node (`index_pending_messages`) and log it, or why not."""
    if not enabled or not in_simulation_engine():
        return
    if why_not := index_pending_messages():
        log(WARNING, "pFedGM app: engine-poll-index left unapplied: %s; Flower's engine polls "
            "unindexed (engine-poll-index=false turns this off)", why_not)  # fmt: skip
    else:
        log(INFO, "pFedGM app: Flower's engine polls an index of messages by node "
            "(engine-poll-index)")  # fmt: skip
