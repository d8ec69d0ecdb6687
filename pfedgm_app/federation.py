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
    """Query every SuperNode for its partition; wait until `num-partitions` of them answered
    (with `min-nodes` N > 0: until N answered, a deployment whose devices come and go).
    Returns {node id: its query metrics}.

    A query's reply may take long (a client decodes its data first; on a loaded machine 100 of
    them take minutes), so each query waits up to `round-timeout`, and `node-wait-timeout`
    counts only the time in which no new SuperNode answers. Raises ConfigError when fewer
    SuperNodes than needed answer by then, when they disagree on `num-partitions`, or share
    a `partition-id`.
    """
    deadline = time.time() + cfg.node_wait_timeout
    infos: dict[int, dict] = {}
    while True:
        if query_new_nodes(grid, cfg, infos):
            deadline = time.time() + cfg.node_wait_timeout  # progress: wait afresh for the rest
        expected = _num_partitions(infos)
        needed = cfg.min_nodes or expected
        if needed is not None and len(infos) >= needed:
            break
        if time.time() > deadline:
            raise ConfigError(
                f"fewer SuperNodes than needed: {len(infos)} connected, "
                + (f"min-nodes={cfg.min_nodes}" if cfg.min_nodes else f"num-partitions={expected}")
                + ". Start one SuperNode per partition (or lower num-partitions or min-nodes), "
                "or raise node-wait-timeout."
            )
        time.sleep(1)
    ids = sorted(int(i[wire.PARTITION_ID]) for i in infos.values())
    if not cfg.min_nodes and ids != list(range(expected)):
        raise ConfigError(f"SuperNodes must hold partition-ids 0..{expected - 1}, got {ids}")
    sizes = sorted(int(i[wire.NUM_EXAMPLES]) for i in infos.values())
    tests = sum(int(i[wire.NUM_TEST]) for i in infos.values())
    log(INFO, "pFedGM app: %d clients, train sizes min/median/max %d/%d/%d, %d samples in all",
        len(ids), sizes[0], sizes[len(sizes) // 2], sizes[-1], sum(sizes) + tests)  # fmt: skip
    return infos


def query_new_nodes(grid: Grid, cfg: RunConfig, infos: dict[int, dict]) -> list[int]:
    """Ask the connected SuperNodes not in `infos` for their partition and data sizes, add
    their answers to `infos` (checked: one num-partitions, distinct partition-ids); returns
    the nodes added."""
    new = [n for n in grid.get_node_ids() if n not in infos]
    messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in new]
    added, held = [], {int(i[wire.PARTITION_ID]) for i in infos.values()}
    for reply in grid.send_and_receive(messages, timeout=cfg.round_timeout) if new else []:
        node = reply.metadata.src_node_id
        if reply.has_error():
            raise ConfigError(f"SuperNode {node} could not load its data: {reply.error.reason}")
        info = dict(reply.content[wire.METRICS])
        pid = int(info[wire.PARTITION_ID])
        if pid in held:
            raise ConfigError(f"two SuperNodes hold partition-id {pid}")
        held.add(pid)
        infos[node] = info
        added.append(node)
    _num_partitions(infos)
    return added


def _num_partitions(infos: dict[int, dict]) -> int | None:
    counts = {int(i[wire.NUM_PARTITIONS]) for i in infos.values()}
    if len(counts) > 1:
        raise ConfigError(f"SuperNodes disagree on num-partitions: {sorted(counts)}")
    return counts.pop() if counts else None


def partition_ranks(clients: dict[int, dict]) -> dict[int, int]:
    """{node id: partition id}: the stable index by which clients are sampled."""
    return {node: int(info[wire.PARTITION_ID]) for node, info in clients.items()}
