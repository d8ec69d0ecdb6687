"""ServerApp: the paper's two phases. Phase 1: rounds of the method's strategy over the sampled
clients. Phase 2: the personalize round on every client. Outputs go to `output-dir` as the
run goes (`results.RunWriter`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from logging import ERROR

import torch
from flwr.app import ArrayRecord, ConfigRecord, Context
from flwr.common import log
from flwr.serverapp import Grid, ServerApp

from . import wire
from .config import ConfigError, RunConfig
from .data import PoolInfo, Protocol, load_pool, resolve_dataset
from .federation import discover_clients, partition_ranks
from .methods import Method, parse_run_config
from .results import RunWriter, accuracy_by_type, evaluation_row
from .strategies import PersonalizationResult, PersonalizedFedAvg, RoundHook

app = ServerApp()


@app.main()
def main(grid: Grid, context: Context) -> None:
    """The whole experiment: Phase 1 (rounds), then Phase 2 (personalize), outputs on disk."""
    started = time.time()
    try:  # every check before round 1: a bad run-config or federation ends the run here
        cfg, method, settings = parse_run_config(context.run_config)
        cfg = dataclasses.replace(cfg, dataset=resolve_dataset(cfg.dataset))
        pool = load_pool(cfg.dataset)
        writer = RunWriter.create(cfg, started)
        clients = discover_clients(grid, cfg)
    except ConfigError as exc:
        log(ERROR, "pFedGM app: %s", exc)
        raise
    writer.write_config(cfg, settings, len(clients))
    protocol = Protocol.of(cfg, len(clients))
    ranks = partition_ranks(clients)
    trained = [node for node, pid in ranks.items() if protocol.trains(pid)]
    evaluated = [node for node, pid in ranks.items() if protocol.evaluated(pid)]
    by_type = types_of(protocol)
    strategy: PersonalizedFedAvg

    def on_round(server_round: int, arrays: ArrayRecord, metrics) -> None:
        extra = {}  # --eval-every: Phase 2 on the current arrays (clients keep no trace of it)
        if cfg.eval_every and server_round % cfg.eval_every == 0:
            if server_round < cfg.num_server_rounds:  # the last round's is the final Phase 2
                config = ConfigRecord({wire.ROUND: server_round})
                outcome = strategy.personalize(grid, arrays, config, cfg.round_timeout, evaluated)
                extra = evaluation_row(outcome, by_type(outcome))
        writer.on_round(server_round, arrays, metrics, **extra)

    strategy = build_strategy(cfg, method, ranks, on_round, trained)
    initial = initial_arrays(cfg, method, pool)

    # Phase 1: global collaborative training (Algorithm 1, or the baseline's rounds)
    writer.mark("rounds")
    result = strategy.start(
        grid=grid,
        initial_arrays=initial,
        num_rounds=cfg.num_server_rounds,
        timeout=cfg.round_timeout,
        train_config=ConfigRecord(),
    )
    writer.mark("trained")
    final = result.arrays if result.arrays else initial  # no round aggregated: the start
    writer.save_weights(final)

    # Phase 2: personalized client adaptation and evaluation, on every (evaluated) client
    outcome = strategy.personalize(grid, final, ConfigRecord(), cfg.round_timeout, evaluated)
    writer.finish(cfg, len(clients), outcome, by_type(outcome))


def types_of(protocol: Protocol) -> Callable[[PersonalizationResult], dict[str, dict] | None]:
    """Accuracy per client type (clean, each corruption) where the protocol has several."""
    if protocol.protocol == "standard" and protocol.corruption == "none":
        return lambda outcome: None
    return lambda outcome: accuracy_by_type(outcome.clients, protocol.client_type)


def initial_arrays(cfg: RunConfig, method: Method, pool: PoolInfo) -> ArrayRecord:
    """phi^0, psi^0, nu^0 (or the baseline's model), seeded by `seed`."""
    torch.manual_seed(cfg.seed)
    model = method.plugin().build_model(pool.image_shape, pool.num_classes)
    return ArrayRecord(model.state_dict())


def build_strategy(
    cfg: RunConfig,
    method: Method,
    node_ranks: dict[int, int],
    on_round: RoundHook | None = None,
    train_nodes: list[int] | None = None,
) -> PersonalizedFedAvg:
    """The server side of `method`; every round waits for all clients to be connected and
    samples them (among `train_nodes`, default all) by partition id, so methods with the same
    seed see the same clients.
    """
    return method.strategy(
        fraction_train=cfg.fraction_train,
        fraction_evaluate=0.0,  # the paper evaluates once, after personalization
        min_train_nodes=1,
        min_available_nodes=len(node_ranks),
        on_round=on_round,
        node_ranks=node_ranks,
        train_nodes=train_nodes,
        seed=cfg.seed,
    )
