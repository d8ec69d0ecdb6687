"""ServerApp: validate the run-config, check the federation, run the rounds with the method's
strategy, run the personalize round on every client, write the outputs.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from logging import ERROR, INFO

import flwr
import torch
from flwr.app import ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from .config import ConfigError, RunConfig
from .data import load_pool, resolve_dataset
from .methods import get_method
from .results import RunWriter
from .strategies import FedPAC, PersonalizedFedAvg, PFedFDA, PFedGM

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The whole experiment: Phase 1 (rounds) then Phase 2 (personalize), outputs on disk."""
    started = time.time()
    try:
        cfg = RunConfig.from_run_config(dict(context.run_config))
        cfg = dataclasses.replace(cfg, dataset=resolve_dataset(cfg.dataset))
        pool = load_pool(cfg.dataset)  # fails here, before any round, if the data are unusable
        writer = RunWriter.create(cfg)
        clients = discover_clients(grid, cfg)
    except ConfigError as exc:
        log(ERROR, "pFedGM app: %s", exc)
        raise
    num_clients = len(clients)
    writer.write_json(
        "config.json",
        {**cfg.to_run_config(), "num-clients": num_clients, "flwr-version": flwr.__version__},
    )
    log(
        INFO,
        "pFedGM app: method=%s, %d clients, outputs in %s",
        cfg.method,
        num_clients,
        writer.run_dir,
    )

    torch.manual_seed(cfg.seed)
    model = get_method(cfg.method).build_model(pool.image_shape, pool.num_classes)
    initial = ArrayRecord(model.state_dict())
    ranks = {node: int(info["partition-id"]) for node, info in clients.items()}
    strategy = build_strategy(cfg, ranks, writer)
    settings = cfg.to_run_config()
    rounds_started = time.time()
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=cfg.num_server_rounds,
        timeout=cfg.round_timeout,
        train_config=ConfigRecord(settings),
    )
    trained = time.time()
    final = result.arrays if result.arrays else initial  # no round aggregated: the start
    writer.save_weights(final)

    outcome = strategy.personalize(grid, final, ConfigRecord(settings), cfg.round_timeout)
    writer.write_clients(outcome.clients)
    finished = time.time()
    summary = {
        "method": cfg.method,
        "dataset": cfg.dataset,
        "dirichlet_alpha": cfg.dirichlet_alpha,
        "num_clients": num_clients,
        "rounds": cfg.num_server_rounds,
        "fraction_train": cfg.fraction_train,
        "mean_accuracy": outcome.mean_accuracy,
        "std_accuracy": outcome.std_accuracy,
        "unweighted_mean_accuracy": outcome.unweighted_mean_accuracy,
        "accuracy_note": "percent; mean weighted by client test-set size (as pFedFDA), "
        "std across clients (unweighted)",
        "ablation_mean_accuracy": outcome.means,
        "num_clients_evaluated": len(outcome.clients),
        "failures": outcome.failures,
        "seconds_total": finished - started,
        "seconds_training": trained - started,
        "seconds_per_round": (trained - rounds_started) / cfg.num_server_rounds,
        "seconds_personalize": finished - trained,
        "output_dir": str(writer.run_dir),
    }
    writer.write_json("summary.json", summary)
    log(INFO, "")
    log(
        INFO,
        "pFedGM app summary: method=%s dataset=%s alpha=%s clients=%d rounds=%d",
        cfg.method,
        cfg.dataset,
        cfg.dirichlet_alpha,
        num_clients,
        cfg.num_server_rounds,
    )
    log(
        INFO,
        "  personalized test accuracy: %.2f (%.2f) %% [mean weighted by test size (std "
        "across clients)]",
        outcome.mean_accuracy,
        outcome.std_accuracy,
    )
    for key, value in outcome.means.items():
        log(INFO, "  %s: %.2f %%", key, value)
    if outcome.failures:
        log(logging.WARNING, "  %d client(s) failed: %s", len(outcome.failures), outcome.failures)
    log(INFO, "  outputs: %s", writer.run_dir)


def build_strategy(
    cfg: RunConfig, node_ranks: dict[int, int], writer: RunWriter
) -> PersonalizedFedAvg:
    """The server side of `cfg.method`; every round waits for all clients to be connected and
    samples them by partition id, so methods with the same seed see the same clients.
    """
    num_clients = len(node_ranks)
    round_start = time.time()

    def on_round(server_round: int, arrays: ArrayRecord, metrics) -> None:
        nonlocal round_start
        now = time.time()
        writer.append_round(server_round, metrics, seconds=now - round_start)
        round_start = now

    kwargs = dict(
        fraction_train=cfg.fraction_train,
        fraction_evaluate=0.0,  # the paper evaluates once, after personalization
        min_train_nodes=1,
        min_available_nodes=num_clients,
        on_round=on_round,
        node_ranks=node_ranks,
        seed=cfg.seed,
    )
    strategy = {"pfedgm": PFedGM, "fedpac": FedPAC, "pfedfda": PFedFDA}
    return strategy.get(cfg.method, PersonalizedFedAvg)(**kwargs)


def discover_clients(grid: Grid, cfg: RunConfig) -> dict[int, dict]:
    """Query every SuperNode for its partition; wait until `num-partitions` of them answered.

    A query's reply may take long (a client decodes its data first; on a loaded machine 100 of
    them take minutes), so each query waits up to `round-timeout`, and `node-wait-timeout`
    counts only the time in which no new SuperNode answers. Raises ConfigError when fewer
    SuperNodes than partitions answer by then, when they disagree on `num-partitions`, or share
    a `partition-id`.
    """
    deadline = time.time() + cfg.node_wait_timeout
    infos: dict[int, dict] = {}
    expected = None
    settings = ConfigRecord(cfg.to_run_config())
    while True:
        new = [n for n in grid.get_node_ids() if n not in infos]
        messages = [
            Message(RecordDict({"config": settings}), dst_node_id=n, message_type=MessageType.QUERY)
            for n in new
        ]
        for reply in grid.send_and_receive(messages, timeout=cfg.round_timeout) if new else []:
            node = reply.metadata.src_node_id
            if reply.has_error():
                raise ConfigError(f"SuperNode {node} could not load its data: {reply.error.reason}")
            infos[node] = dict(reply.content["metrics"])
            deadline = time.time() + cfg.node_wait_timeout  # progress: wait afresh for the rest
        counts = {int(i["num-partitions"]) for i in infos.values()}
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
    ids = sorted(int(i["partition-id"]) for i in infos.values())
    if ids != list(range(expected)):
        raise ConfigError(f"SuperNodes must hold partition-ids 0..{expected - 1}, got {ids}")
    sizes = [int(i["num-examples"]) for i in infos.values()]
    log(
        INFO,
        "pFedGM app: %d clients, train sizes min/median/max %d/%d/%d, %d samples in all",
        len(ids),
        min(sizes),
        sorted(sizes)[len(sizes) // 2],
        max(sizes),
        sum(sizes) + sum(int(i["num-test"]) for i in infos.values()),
    )
    return infos
