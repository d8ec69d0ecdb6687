"""Which clients train in a round: wait for enough SuperNodes, then sample by partition id.

flwr + the standard library only: any Flower project can use it.
"""

from __future__ import annotations

import random
import time
from collections.abc import Collection, Mapping
from logging import INFO

from flwr.common import log
from flwr.serverapp import Grid


def wait_for_nodes(
    grid: Grid, count: int, poll: float = 1.0, timeout: float | None = None
) -> list[int]:
    """The connected node ids, once at least `count` are connected; with `timeout`, raises
    RuntimeError when fewer stay connected that long (a run cannot go on below its minimum)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while len(nodes := list(grid.get_node_ids())) < count:
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(
                f"only {len(nodes)} SuperNode(s) connected for {timeout:.0f}s, fewer than the "
                f"{count} the run needs (min-nodes): the run stops here; restart SuperNodes "
                "and continue it with resume=true"
            )
        log(INFO, "Waiting for nodes to connect: %d connected (need %d)", len(nodes), count)
        time.sleep(poll)
    return nodes


def sample_nodes(
    nodes: list[int],
    fraction: float,
    minimum: int,
    rng: random.Random,
    node_partitions: Mapping[int, int] | None = None,
    allowed: Collection[int] | None = None,
) -> list[int]:
    """`fraction` of `nodes` (at least `minimum`, at most all), drawn with `rng`.

    With `node_partitions` (node id -> its partition id, or any stable client index), only
    nodes it holds are eligible and they are drawn in partition order, so runs whose nodes got
    other ids (another run, a resumed one) draw the same clients from the same `rng` state.
    With `allowed`, only those nodes are eligible (e.g. the trained clients of a generalization
    protocol).
    """
    if node_partitions is not None:
        nodes = sorted((n for n in nodes if n in node_partitions), key=node_partitions.__getitem__)
    if allowed is not None:
        nodes = [n for n in nodes if n in allowed]
    size = min(max(int(len(nodes) * fraction), minimum), len(nodes))
    return rng.sample(nodes, size)
