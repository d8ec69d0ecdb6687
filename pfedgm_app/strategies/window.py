"""A Grid that polls for replies every 0.1 s and keeps a bounded number of messages in flight,
and the window that run-config `messages-in-flight` gives it.

Why poll: Flower 1.42's deployment grid (the ServerApp's, behind a SuperLink) checks for replies
every 3 s, so every exchange of a deployment takes a multiple of 3 s, however quick its
ClientApps (`benchmarks/README.md`, `bench_deploy.py`). Pushing the messages and pulling their
replies through the grid's public `push_messages` / `pull_messages` notices each reply within
0.1 s; the simulation's grid polls every 0.1 s already, so there nothing changes.

Why a window: a simulation engine whose cost per poll grows with the messages waiting in its
store (Flower 1.42's checks every stored message for every simulated node it polls:
`docs/upstream/poller-index.md`) costs less with fewer messages in flight. Keeping about as
many as ClientApps run at once bounds that cost by the window instead of the sampled clients;
the replies are the same. Each message then waits for a reply to come back first, which
starves the ClientApps when clients are quick, so it is not the default
(`benchmarks/README.md` has the measurements).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable
from pathlib import Path

from flwr.app import Message, RecordDict
from flwr.serverapp import Grid

AUTO = -1  # run-config `messages-in-flight`: chosen by where the ServerApp runs
STRAGGLER_FLOOR = 30.0  # seconds a training round's stragglers get at least (`WindowedGrid`)


def in_simulation_engine() -> bool:
    """Whether this process is Flower's simulation process (the ServerApp's host there)."""
    return Path(sys.argv[0]).name == "flwr-simulation"


def messages_in_flight(setting: int) -> int:
    """The window of `WindowedGrid` for run-config `messages-in-flight`: a value >= 0 as given
    (0: all of an exchange at once); AUTO: twice this machine's cores in Flower's simulation
    process (no more ClientApps than cores run at once, each taking a whole CPU; the spare
    half is queued so that none waits for the next message), 0 elsewhere: in a deployment
    SuperNodes train side by side and no engine polls for them. (With
    `client-resources-num-cpus=0` more ClientApps than cores can run: give the key a value.)"""
    if setting != AUTO:
        return setting
    if not in_simulation_engine():
        return 0
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return 2 * (cores or 1)


class WindowedGrid(Grid):
    """Wraps `grid`; `send_and_receive` pushes at most `window` messages before their replies
    arrive (0: all at once, as Flower's own grids) and looks for replies every `poll_interval`
    seconds while none arrives. Everything else is `grid`'s.

    The replies and their contents are those of `grid.send_and_receive`; only the order in
    which messages are pushed differs (the input order, `window` at a time). `timeout` bounds
    the whole exchange, as Flower's: messages not yet pushed when it expires are not sent.

    A training round waits for its stragglers a time its own replies give: once every
    `train` message is pushed and half of them answered, the rest get `straggler_wait` times
    as long as that half took (at least `STRAGGLER_FLOOR` seconds), not the whole `timeout`:
    a client that never answers (or answers another round's message) holds a round for that
    long, not an hour. The replies then missing are counted in `late`; a reply to no message
    of this exchange (another round's, or a second one) is dropped as it arrives and counted in
    `stale`, so that it neither stands for its node nor ends a wait. Other exchanges
    (queries, which may decode data first; the personalize round, whose every client counts)
    wait for `timeout`. `straggler_wait` 0: every exchange waits for `timeout`.
    """

    def __init__(
        self, grid: Grid, window: int, poll_interval: float = 0.1, straggler_wait: float = 0.0
    ) -> None:
        if window < 0:
            raise ValueError(f"window must be >= 0 (0: no limit), got {window}")
        self.grid, self.window, self.poll_interval = grid, window, poll_interval
        self.straggler_wait, self.late, self.stale = straggler_wait, 0, 0

    # -- delegated (Flower's run and node types are not public: passed through unannotated) --
    def set_run(self, run) -> None:
        self.grid.set_run(run)

    @property
    def run(self):
        return self.grid.run

    def create_message(  # Flower's signature
        self,
        content: RecordDict,
        message_type: str,
        dst_node_id: int,
        group_id: str,
        ttl: float | None = None,
    ) -> Message:
        return self.grid.create_message(content, message_type, dst_node_id, group_id, ttl)

    def get_node_ids(self) -> Iterable[int]:
        return self.grid.get_node_ids()

    def get_nodes(self) -> Iterable:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    # -- windowed -------------------------------------------------------------------------------
    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push `messages` `window` at a time (0: all), pushing the next as each reply arrives;
        return the replies received before `timeout` (seconds for the whole exchange; None: no
        limit)."""
        pending = list(messages)
        pending.reverse()  # pop() from the end sends them in the given order
        start, total = time.monotonic(), len(pending)
        deadline = None if timeout is None else start + timeout
        stragglers = self.straggler_wait and all(
            m.metadata.message_type == "train" for m in pending
        )
        in_flight: set[str] = set()
        replies: list[Message] = []
        while pending or in_flight:
            free = (self.window or len(pending)) - len(in_flight)
            if pending and free > 0:
                batch = [pending.pop() for _ in range(min(free, len(pending)))]
                in_flight.update(
                    i for i in self.grid.push_messages(batch) if i
                )  # None or '': refused
            arrived = list(self.grid.pull_messages(in_flight)) if in_flight else []
            for reply in arrived:
                if reply.metadata.reply_to_message_id in in_flight:
                    in_flight.remove(reply.metadata.reply_to_message_id)
                    replies.append(reply)
                else:
                    self.stale += 1
            now = time.monotonic()
            if stragglers and not pending and 2 * len(replies) >= total > 1:
                cap = now + max(STRAGGLER_FLOOR, self.straggler_wait * (now - start))
                deadline, stragglers = cap if deadline is None else min(deadline, cap), False
            if deadline is not None and now >= deadline:
                self.late += len(in_flight)
                break
            if not arrived:
                time.sleep(self.poll_interval)
        return replies
