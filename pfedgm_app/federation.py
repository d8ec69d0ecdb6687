"""Who is in the federation: before round 1 the ServerApp asks every SuperNode for its
partition and data sizes (`query` messages), and refuses a federation that cannot run.
"""

from __future__ import annotations

import time
from logging import INFO

from flwr.app import Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from . import wire
from .config import ConfigError, RunConfig


def discover_clients(grid: Grid, cfg: RunConfig) -> dict[int, dict]:
    """Query every SuperNode for its partition; wait until `num-partitions` of them answered.
    Returns {node id: its query metrics}.

    A query's reply may take long (a client decodes its data first; on a loaded machine 100 of
    them take minutes), so each query waits up to `round-timeout`, and `node-wait-timeout`
    counts only the time in which no new SuperNode answers. Raises ConfigError when fewer
    SuperNodes than partitions answer by then, when they disagree on `num-partitions`, or share
    a `partition-id`.
    """
    deadline = time.time() + cfg.node_wait_timeout
    infos: dict[int, dict] = {}
    while True:
        new = [n for n in grid.get_node_ids() if n not in infos]
        messages = [
            Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in new
        ]
        for reply in grid.send_and_receive(messages, timeout=cfg.round_timeout) if new else []:
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise ConfigError(f"SuperNode {node} could not load its data: {reply.error.reason}")
            infos[node] = dict(reply.content[wire.METRICS])
            deadline = time.time() + cfg.node_wait_timeout  # progress: wait afresh for the rest
        counts = {int(i[wire.NUM_PARTITIONS]) for i in infos.values()}
        if len(counts) > 1:
            raise ConfigError(f"SuperNodes disagree on num-partitions: {sorted(counts)}")
        expected = counts.pop() if counts else None
        if expected is not None and len(infos) >= expected:
            break
        if time.time() > deadline:
            raise ConfigError(
                f"fewer SuperNodes than needed: {len(infos)} connected, num-partitions="
                f"{expected}. Start one SuperNode per partition (or lower num-partitions), or "
                "raise node-wait-timeout."
            )
        time.sleep(1)
    ids = sorted(int(i[wire.PARTITION_ID]) for i in infos.values())
    if ids != list(range(expected)):
        raise ConfigError(f"SuperNodes must hold partition-ids 0..{expected - 1}, got {ids}")
    sizes = sorted(int(i[wire.NUM_EXAMPLES]) for i in infos.values())
    tests = sum(int(i[wire.NUM_TEST]) for i in infos.values())
    log(INFO, "pFedGM app: %d clients, train sizes min/median/max %d/%d/%d, %d samples in all",
        len(ids), sizes[0], sizes[len(sizes) // 2], sizes[-1], sum(sizes) + tests)  # fmt: skip
    return infos


def partition_ranks(clients: dict[int, dict]) -> dict[int, int]:
    """{node id: partition id}: the stable index by which clients are sampled."""
    return {node: int(info[wire.PARTITION_ID]) for node, info in clients.items()}
