"""A Grid that keeps a bounded number of messages in flight (flwr only).

Why: Flower 1.42's simulation engine polls its message store for every simulated node every
0.1 s (`vce_api.add_messages_to_queue`), and each poll checks every stored message
(`InMemoryLinkState.get_message_ins`), so its cost is (nodes x messages in flight) per tenth
of a second. With 1000 nodes, a round's 30 train messages already cost more CPU than the
ClientApps get, and an all-client step (discovery, the personalize round) puts 1000 messages in
the store at once. Keeping only a few messages in flight, about as many as ClientApps run at
once, bounds that cost by the window instead of the sampled clients; the replies are the same.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from flwr.app import Message, RecordDict
from flwr.proto.node_pb2 import NodeInfo  # pylint: disable=E0611
from flwr.serverapp import Grid
from flwr.supercore.run import Run


class WindowedGrid(Grid):
    """Wraps `grid`; `send_and_receive` pushes at most `window` messages before their replies
    arrive (0: all at once, as Flower's own grids). Everything else is `grid`'s.

    The replies and their contents are those of `grid.send_and_receive`; only the order in
    which messages are pushed differs (the input order, `window` at a time). `timeout` bounds
    the whole exchange, as Flower's: messages not yet pushed when it expires are not sent.
    """

    def __init__(self, grid: Grid, window: int, poll_interval: float = 0.1) -> None:
        if window < 0:
            raise ValueError(f"window must be >= 0 (0: no limit), got {window}")
        self.grid, self.window, self.poll_interval = grid, window, poll_interval

    # -- delegated ------------------------------------------------------------------------------
    def set_run(self, run: Run) -> None:
        self.grid.set_run(run)

    @property
    def run(self) -> Run:
        return self.grid.run

    def create_message(  # noqa: PLR0913 (Flower's signature)
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

    def get_nodes(self) -> Iterable[NodeInfo]:
        return self.grid.get_nodes()

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        return self.grid.push_messages(messages)

    def pull_messages(self, message_ids: Iterable[str]) -> Iterable[Message]:
        return self.grid.pull_messages(message_ids)

    # -- windowed -------------------------------------------------------------------------------
    def send_and_receive(
        self, messages: Iterable[Message], *, timeout: float | None = None
    ) -> Iterable[Message]:
        """Push `messages` `window` at a time, pushing the next as each reply arrives; return
        the replies received before `timeout` (seconds for the whole exchange; None: no limit).
        """
        if self.window == 0:
            return self.grid.send_and_receive(messages, timeout=timeout)
        pending = list(messages)
        pending.reverse()  # pop() from the end sends them in the given order
        deadline = None if timeout is None else time.monotonic() + timeout
        in_flight: set[str] = set()
        replies: list[Message] = []
        while pending or in_flight:
            free = self.window - len(in_flight)
            if pending and free > 0:
                batch = [pending.pop() for _ in range(min(free, len(pending)))]
                in_flight.update(i for i in self.grid.push_messages(batch) if i)  # None: refused
            arrived = list(self.grid.pull_messages(in_flight)) if in_flight else []
            replies.extend(arrived)
            in_flight.difference_update(m.metadata.reply_to_message_id for m in arrived)
            if deadline is not None and time.monotonic() >= deadline:
                break
            if not arrived:
                time.sleep(self.poll_interval)
        return replies
