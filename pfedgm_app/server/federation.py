"""Who is in the federation: before round 1 the ServerApp asks every SuperNode for its
partition and data sizes (`query` messages), and refuses a federation that cannot run.
"""

from __future__ import annotations

import math
import time
from logging import INFO, WARNING

from flwr.app import Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid

from pfedgm_app.data import Protocol, client_split
from pfedgm_app.protocol import wire
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.strategies.client_errors import error_cause
from pfedgm_app.strategies.contract import query_reply_problem

REASON_CHARS = 300  # at most this much of a reason a ClientApp gave is reported
CAUSES = {"data": "could not load its data", "model-dir": "cannot save its personalized model"}


def discover_clients(
    grid: Grid, cfg: RunConfig, failed: dict[int, str] | None = None
) -> dict[int, dict]:
    """Query every SuperNode for its partition; wait until each of `num-partitions` answered
    (with `min-nodes` N > 0: until N answered, a deployment whose devices come and go).
    Returns {node id: its query metrics}.

    A query's reply may take long (a client decodes its data first; on a loaded machine 100 of
    them take minutes), so each query waits up to `round-timeout`, and `node-wait-timeout`
    counts only the time in which no new SuperNode answers. A node that cannot take part (its
    data missing or unreadable, labels outside the run's classes, a malformed reply, its
    ClientApp failed: `query_new_nodes`) is left out and recorded in `failed` ({node id: why});
    the run starts once every node answered if at least `quorum` of `num-partitions` can take
    part (with `min-nodes`: once N can). Raises ConfigError, naming the first node that cannot
    take part and why, when fewer can; when fewer SuperNodes than needed answer by the wait's
    end; when they disagree on `num-partitions` or share a `partition-id`.
    """
    failed = {} if failed is None else failed
    deadline = time.time() + cfg.node_wait_timeout
    infos: dict[int, dict] = {}
    while True:
        if query_new_nodes(grid, cfg, infos, failed):
            deadline = time.time() + cfg.node_wait_timeout  # progress: wait afresh for the rest
        expected = _num_partitions(infos)
        if expected == 0 and not cfg.min_nodes:
            raise ConfigError(
                "SuperNodes hold their own data (data-path) without num-partitions: set "
                "min-nodes=N (start once N answered), or give each node num-partitions and its "
                "partition-id 0..num-partitions-1"
            )
        if cfg.min_nodes and len(infos) >= cfg.min_nodes:
            break
        answered = set(infos) | set(failed)
        if not cfg.min_nodes and failed and answered >= set(grid.get_node_ids()):
            if not infos or len(answered) >= (expected or 0):  # no node left to wait for
                _check_quorum(cfg, infos, failed, expected or len(answered))
                break
        if not cfg.min_nodes and expected is not None and len(infos) >= expected:
            break
        if time.time() > deadline:
            left_out = "".join(f"; left out: node {n}: {why}" for n, why in failed.items())
            raise ConfigError(
                f"fewer SuperNodes than needed: {len(infos)} connected, "
                + (f"min-nodes={cfg.min_nodes}" if cfg.min_nodes else f"num-partitions={expected}")
                + ". Start one SuperNode per partition (or lower num-partitions or min-nodes), "
                "or raise node-wait-timeout" + left_out
            )
        time.sleep(1)
    ids = sorted(int(i[wire.PARTITION_ID]) for i in infos.values())
    if not cfg.min_nodes:
        assert expected is not None  # some node answered: with none, the quorum check raised
        if not set(ids) <= set(range(expected)):
            raise ConfigError(f"SuperNodes must hold partition-ids 0..{expected - 1}, got {ids}")
    sizes = sorted(int(i[wire.NUM_EXAMPLES]) for i in infos.values())
    tests = sum(int(i[wire.NUM_TEST]) for i in infos.values())
    ready = max(float(i.get(wire.DATA_SECONDS, 0.0)) for i in infos.values())
    log(
        INFO,
        "pFedGM app: %d clients, train sizes min/median/max %d/%d/%d, %d samples in all; "
        "data ready in at most %.1f s",
        len(ids),
        sizes[0],
        sizes[len(sizes) // 2],
        sizes[-1],
        sum(sizes) + tests,
        ready,
    )
    return infos


def _check_quorum(cfg: RunConfig, infos: dict, failed: dict[int, str], expected: int) -> None:
    """ConfigError naming the first node left out and why, unless `quorum` of the `expected`
    partitions can take part."""
    if len(infos) >= math.ceil(cfg.quorum * expected):
        return
    node = min(failed)
    more = (
        f" ({len(failed)} of {expected} cannot; quorum={cfg.quorum:g})" if len(failed) > 1 else ""
    )
    raise ConfigError(f"SuperNode {node} cannot take part: {failed[node]}{more}")


def query_new_nodes(
    grid: Grid, cfg: RunConfig, infos: dict[int, dict], failed: dict[int, str] | None = None
) -> list[int]:
    """Ask the connected SuperNodes not in `infos` (nor in `failed`) for their partition and
    data, add their answers to `infos` (checked: one num-partitions, distinct partition-ids,
    one model input: image shape and classes); returns the nodes added.

    A node that cannot take part (`unavailable`: its data cannot be loaded, e.g. missing or
    with labels outside the run's classes, or its ClientApp failed), whose reply is malformed
    or whose data gives another model input is logged, recorded in `failed` and never asked
    again (`discover_clients` decides whether the run can go on without it).
    """
    failed = {} if failed is None else failed
    new = [n for n in grid.get_node_ids() if n not in infos and n not in failed]
    messages = [Message(RecordDict(), dst_node_id=n, message_type=MessageType.QUERY) for n in new]
    added, held = [], {int(i[wire.PARTITION_ID]) for i in infos.values()}
    for reply in grid.send_and_receive(messages, timeout=cfg.round_timeout) if new else []:
        node = reply.metadata.src_node_id
        info, problem = _read_query(reply, infos)
        if problem:
            log(WARNING, "pFedGM app: SuperNode %d left out: %s", node, problem)
            failed[node] = problem
            continue
        pid = int(info[wire.PARTITION_ID])
        if pid in held:
            raise ConfigError(
                f"two SuperNodes hold partition-id {pid}: give each its own partition-id in "
                "--node-config (devices with their own data get one from their data-path's "
                "name unless given)"
            )
        held.add(pid)
        infos[node] = info
        added.append(node)
    _num_partitions(infos)
    return added


def _read_query(reply: Message, infos: dict[int, dict]) -> tuple[dict, str | None]:
    """(metrics, None) of a query reply that describes a client fitting the federation, else
    ({}, why); nothing a reply holds can raise here."""
    try:
        if problem := unavailable(reply):
            return {}, problem
        info = dict(reply.content.metric_records[wire.METRICS])
        return info, query_reply_problem(info) or _other_input(info, infos)
    except Exception as exc:  # the reply's fault, reported as its node's
        return {}, f"its query reply cannot be read ({type(exc).__name__})"


def unavailable(reply: Message) -> str | None:
    """Why the node of a query reply cannot take part, in one line; None if it can. Its data
    could not be loaded, or its model folder cannot be written: the reason its ClientApp gave
    (`wire.UNAVAILABLE`, its CAUSE the kind). Its ClientApp failed otherwise (an error
    reply): Flower's error code and the exception's name and message (`error_cause`)."""
    if reply.has_error():
        reason = error_cause(reply.error.reason)
        return f"its ClientApp failed (Flower error code {reply.error.code}): {reason}"
    if wire.UNAVAILABLE in reply.content.config_records:
        record = reply.content.config_records[wire.UNAVAILABLE]
        what = CAUSES.get(str(record.get(wire.CAUSE, "data")), "cannot take part")
        return f"{what}: {' '.join(str(record.get(wire.REASON, '?')).split())[:REASON_CHARS]}"
    if wire.METRICS not in reply.content.metric_records:
        return "its query reply holds neither metrics nor a reason (another app's ClientApp?)"
    return None


def _other_input(info: dict, infos: dict[int, dict]) -> str | None:
    """Why a node's data cannot feed the federation's model (None if it can)."""
    if not infos:
        return None
    keys = (wire.IMAGE_SHAPE, wire.NUM_CLASSES)
    ours, theirs = ([i.get(k) for k in keys] for i in (next(iter(infos.values())), info))
    if theirs == ours:
        return None
    return (
        f"its data gives the model {theirs[0]} images and {theirs[1]} classes, the "
        f"federation's give {ours[0]} and {ours[1]}"
    )


def model_input(clients: dict[int, dict]) -> tuple[tuple[int, int, int], int]:
    """(image shape (C, H, W), number of classes) the clients' data gives the model."""
    info = next(iter(clients.values()))
    c, h, w = (int(d) for d in info[wire.IMAGE_SHAPE])  # three, as the query's check found
    return (c, h, w), int(info[wire.NUM_CLASSES])


def _num_partitions(infos: dict[int, dict]) -> int | None:
    counts = {int(i[wire.NUM_PARTITIONS]) for i in infos.values()}
    if len(counts) > 1:
        raise ConfigError(f"SuperNodes disagree on num-partitions: {sorted(counts)}")
    return counts.pop() if counts else None


def known_sizes(protocol: Protocol, clients: dict[int, dict]) -> dict[int, dict[str, int]]:
    """{node id: its train and test sizes} for each node that holds a partition of the run's
    dataset (`own-data` 0), computed here from the dataset as the clients split it: in a
    simulation, or a deployment whose ServerApp has the data, no node's claim is needed to weigh
    it. {} where the ServerApp cannot read the dataset (its copy is on the devices only)."""
    nodes = {n: int(i[wire.PARTITION_ID]) for n, i in clients.items() if not _own_data(i)}
    if not nodes or not protocol.num_partitions:
        return {}
    try:
        splits = {n: client_split(protocol, pid) for n, pid in nodes.items()}
    except Exception as exc:  # any reason the data cannot be read here
        why = " ".join(str(exc).split())[:REASON_CHARS]
        log(INFO, "pFedGM app: the clients' sizes are bounded, not known here (%s)", why)
        return {}
    return {
        n: {wire.NUM_EXAMPLES: len(tr), wire.NUM_TEST: len(te)} for n, (tr, te) in splits.items()
    }


def use_known_sizes(clients: dict[int, dict], known: dict[int, dict[str, int]]) -> list[str]:
    """Replace the nodes' reported sizes by the `known` ones, in place; returns a line per node
    whose report differed ("query: node n: ..."), for the run's suspects."""
    differ = []
    for node, sizes in known.items():
        claimed = {k: clients[node].get(k) for k in sizes}
        if claimed != sizes:
            differ.append(f"query: node {node}: reported {claimed}, its partition holds {sizes}")
        clients[node].update(sizes)
    return differ


def _own_data(info: dict) -> bool:
    try:
        return float(info.get(wire.OWN_DATA, 0)) != 0
    except (TypeError, ValueError):
        return True  # not a number: not a claim to hold a partition


def node_partitions(clients: dict[int, dict]) -> dict[int, int]:
    """{node id: partition id}: the stable index by which clients are sampled."""
    return {node: int(info[wire.PARTITION_ID]) for node, info in clients.items()}
