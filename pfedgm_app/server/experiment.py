"""The experiment a ServerApp runs, below Flower's entry point: Phase 1 (the method's rounds,
`Rounds`, with evaluations and checkpoints between them), Phase 2 (`Evaluation`, the personalize
round on every client), resuming a stopped run, the initial model and the method's strategy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from logging import INFO, WARNING

import torch
from flwr.app import ArrayRecord, ConfigRecord, MetricRecord
from flwr.common import log
from flwr.serverapp import Grid

from pfedgm_app.data import Protocol
from pfedgm_app.learning.models import Model
from pfedgm_app.methods import Method, noise_multiplier
from pfedgm_app.methods.base import ClientPlugin
from pfedgm_app.protocol import wire
from pfedgm_app.records import checkpoint, initial_model
from pfedgm_app.records.results import RunWriter, accuracy_by_type, evaluation_row
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError, Settings
from pfedgm_app.strategies import PersonalizationResult, PersonalizedFedAvg, summarize
from pfedgm_app.strategies.privacy import ClientLevelDP, epsilon_after

from .federation import known_sizes, model_input, node_partitions, query_new_nodes, use_known_sizes
from .rounds import AfterRound, Rounds


def experiment(
    grid: Grid,
    cfg: RunConfig,
    method: Method,
    settings: Settings,
    writer: RunWriter,
    clients: dict[int, dict],
    left_out: dict[int, str],
    initial: initial_model.InitialModel | None = None,
) -> None:
    """Phase 1 (rounds), then Phase 2 (personalize), over the discovered `clients`, from
    `initial` (`initial-model`) when given."""
    protocol = Protocol.of(cfg, int(next(iter(clients.values()))[wire.NUM_PARTITIONS]))
    partitions = node_partitions(clients)  # the protocol's roles are by partition id
    trained = None
    if protocol.kind != "standard":
        trained = [node for node, pid in partitions.items() if protocol.trains(pid)]

    def take_in_new_nodes(grid: Grid) -> None:  # min-nodes: SuperNodes that joined since
        added = query_new_nodes(grid, cfg, clients, left_out)
        partitions.update({node: int(clients[node][wire.PARTITION_ID]) for node in added})
        if added:
            log(INFO, "pFedGM app: %d SuperNode(s) joined; %d known", len(added), len(partitions))

    known = known_sizes(protocol, clients)  # the true sizes, where the server can compute them
    differ = use_known_sizes(clients, known)
    plugin = method.plugin(settings)
    model = starting_model(cfg, plugin, *model_input(clients))
    strategy = build_strategy(cfg, method, partitions, trained, clients, settings, set(known),
                              shared_keys(plugin, model))  # fmt: skip
    strategy.suspects.extend(differ)
    refresh = take_in_new_nodes if cfg.min_nodes else None
    evaluation = Evaluation(grid, cfg, protocol, partitions, strategy, refresh, left_out)
    arrays = ArrayRecord(model.state_dict())
    if initial is not None:
        arrays = initial_model.fit(initial, arrays)
        log(INFO, "pFedGM app: starting from %s", initial.describe())
        writer.rounds_before = initial.rounds  # the run's budget counts the model's rounds
    strategy.check_initial(arrays)
    writer.write_config(cfg, settings, len(clients))  # the first file: every check passed
    done = 0
    if cfg.resume:
        done, arrays = resume(cfg, writer, strategy, method, arrays)

    # Phase 1: global collaborative training (Algorithm 1, or the baseline's rounds)
    writer.mark("rounds")
    rounds = Rounds(grid, strategy, cfg.num_server_rounds, cfg.round_timeout, refresh)
    arrays = rounds.run(arrays, done, evaluation.after_round(writer))
    writer.mark("trained")
    writer.save_weights(arrays)
    writer.training_problems(strategy.dropped, strategy.rounds_without_update, strategy.suspects)
    writer.largest_share = strategy.largest_share
    if strategy.privacy is not None:
        writer.privacy = strategy.privacy.record(strategy.outside_privacy)

    # Phase 2: personalized client adaptation and evaluation, on every evaluated client
    writer.finish(cfg, len(clients), *evaluation.run(arrays))


@dataclass
class Evaluation:
    """Phase 2 (each method's personalize round) on every client: once after training and,
    with `eval-every`, during it (the clients keep nothing of it)."""

    grid: Grid
    cfg: RunConfig
    protocol: Protocol
    partitions: dict[int, int]  # node id -> partition id
    strategy: PersonalizedFedAvg
    refresh: Callable[[Grid], None] | None = None  # min-nodes: take in SuperNodes that joined
    left_out: dict[int, str] = dataclasses.field(default_factory=dict)  # node id -> why

    def run(
        self, arrays: ArrayRecord, server_round: int = 0
    ) -> tuple[PersonalizationResult, dict[str, dict] | None]:
        """The outcome (mean and std over the protocol's headline clients, rows of all), and
        its accuracy per client type where the protocol has several types."""
        config = ConfigRecord({wire.ROUND: server_round} if server_round else {})
        nodes, gone = list(self.partitions), []
        if self.refresh is not None:  # every client known and connected now
            self.refresh(self.grid)
            connected = set(self.grid.get_node_ids())
            nodes = [n for n in self.partitions if n in connected]
            gone = [
                f"partition {p}: not connected"
                for n, p in self.partitions.items()
                if n not in connected
            ]
        outcome = self.strategy.personalize(
            self.grid, arrays, config, self.cfg.round_timeout, nodes
        )
        gone += [f"node {n}: {why}" for n, why in self.left_out.items()]
        if gone:  # the summary lists every client that was not evaluated, and why
            outcome = dataclasses.replace(outcome, failures=outcome.failures + gone)
        protocol, rows = self.protocol, outcome.clients
        if protocol.kind == "standard" and protocol.corruption == "none":
            return outcome, None
        headline = [r for r in rows if protocol.headline(int(r[wire.PARTITION_ID]))]
        if len(headline) < len(rows):
            summary = summarize(headline, outcome.failures)
            outcome = dataclasses.replace(summary, clients=rows)
        return outcome, accuracy_by_type(rows, protocol.client_type)

    def after_round(self, writer: RunWriter) -> AfterRound:
        """After each round: evaluate every `eval-every` rounds (the last round's is the final
        Phase 2), write the round's line of `rounds.jsonl`, then the checkpoint a stopped run
        resumes from (`resume`)."""
        every, last = self.cfg.eval_every, self.cfg.num_server_rounds

        def after(server_round: int, arrays: ArrayRecord, metrics: MetricRecord | None) -> None:
            extra = {}
            if every and server_round % every == 0 and server_round < last:
                extra = evaluation_row(*self.run(arrays, server_round))
            if suspects := self.strategy.round_suspects(server_round):
                extra["suspects"] = suspects
            if influence := self.strategy.round_influence(server_round):
                extra["influence"] = influence  # each node's share of the step, those bounded
            writer.on_round(server_round, arrays, metrics, **extra)
            checkpoint.save(writer.run_dir, server_round, arrays, self.strategy.state())

        return after


def resume(
    cfg: RunConfig,
    writer: RunWriter,
    strategy: PersonalizedFedAvg,
    method: Method,
    initial: ArrayRecord,
) -> tuple[int, ArrayRecord]:
    """The rounds done and the global arrays of the stopped run's last checkpoint; the
    strategy continues from the state saved with them."""
    done, arrays, state = checkpoint.load(writer.run_dir)
    path = writer.folder.checkpoint
    if sorted(arrays) != sorted(initial) or any(
        (arrays[k].shape, arrays[k].dtype) != (a.shape, a.dtype) for k, a in initial.items()
    ):
        raise ConfigError(f"the arrays of {path} are another model's: same method and dataset?")
    try:
        strategy.load_state(state)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigError(
            f"{path} holds no state of this method's strategy ({type(exc).__name__}: {exc}); "
            "resume with the stopped run's method, or start a new run in another output-dir"
        ) from exc
    writer.cut_rounds(done)
    if method.keeps_state and not cfg.client_state_dir:
        log(
            WARNING,
            "pFedGM app: %s keeps arrays on its clients and client-state-dir is "
            "not set: a new run's clients start without them, so the resumed run differs from "
            "an uninterrupted one",
            method.name,
        )
    return done, arrays


def starting_model(
    cfg: RunConfig, plugin: ClientPlugin, image_shape: tuple[int, int, int], num_classes: int
) -> Model:
    """phi^0, psi^0, nu^0 (or the baseline's model), seeded by `seed`, for the clients' images
    and classes (from their query replies: the server needs no copy of the data), built by the
    method's plug-in with the run's settings (e.g. pFedGM's `navigator-std`)."""
    torch.manual_seed(cfg.seed)
    return plugin.build_model(image_shape, num_classes)


def shared_keys(plugin: ClientPlugin, model: Model) -> list[str]:
    """The arrays the method's clients send (its `sends`), known before any reply."""
    kept = set(plugin.kept_keys(model))
    return [k for k in model.state_dict() if k not in kept]


def build_strategy(
    cfg: RunConfig,
    method: Method,
    node_partitions: dict[int, int],
    train_nodes: list[int] | None = None,
    reported: dict[int, dict] | None = None,
    settings: Settings | None = None,
    exact_sizes: set[int] | None = None,
    shared: list[str] | None = None,
) -> PersonalizedFedAvg:
    """The server side of `method`; every round waits for all clients to be connected (with
    `min-nodes` N: for N, ending the run when fewer stay connected for `node-wait-timeout`)
    and samples them (among `train_nodes`, default all) by partition id, so methods with the
    same seed see the same clients. `reported` (node id -> its query metrics, kept current as
    nodes join) bounds what each reply may claim: its weight, its test size; of the nodes in
    `exact_sizes` the server computed those sizes, the others' count at most `share-ratio`
    typical clients. `settings` (the method's) add the strategy options they fix
    (`Settings.strategy_options`).
    """
    strategy = method.strategy_class()(
        fraction_train=cfg.fraction_train,
        min_train_nodes=1,
        min_available_nodes=cfg.min_nodes or len(node_partitions),
        node_wait_timeout=cfg.node_wait_timeout if cfg.min_nodes else None,
        node_partitions=node_partitions,
        train_nodes=train_nodes,
        seed=cfg.seed,
        reported=reported,
        exact_sizes=exact_sizes or (),
        weight_ratio=cfg.weight_ratio,
        share_ratio=cfg.share_ratio,
        clip_ratio=cfg.clip_ratio,
        pull_bound=cfg.pull_bound,
        aggregation=cfg.aggregation,
        trim_fraction=cfg.trim_fraction,
        byzantine_nodes=cfg.byzantine_nodes,
        privacy=client_level_dp(cfg, len(train_nodes or node_partitions), shared),
        **(settings.strategy_options() if settings is not None else {}),
    )
    return strategy


def client_level_dp(
    cfg: RunConfig, population: int, shared: list[str] | None = None
) -> ClientLevelDP | None:
    """The run's DP (`dp-*` keys) over `population` clients, m = q N sampled a round, on the
    `shared` arrays (None: every float array); None without it. Logs what it will spend: the
    influence bounds give way to its clip."""
    if not cfg.private:
        return None
    sample = min(max(int(population * cfg.fraction_train), 1), population)
    z = noise_multiplier(cfg)
    dp = ClientLevelDP(
        z, cfg.dp_clip, cfg.dp_delta, population, sample, cfg.dp_clip_quantile, shared
    )
    log(
        INFO,
        "pFedGM app: client-level DP, z=%.4g, C=%g, %d of %d clients a round: epsilon %.3g at "
        "delta %g after %d rounds (clip-ratio, pull-bound give way to the clip)",
        z, cfg.dp_clip, sample, population,
        epsilon_after(z, max(cfg.num_server_rounds, 1), cfg.dp_delta),
        cfg.dp_delta, cfg.num_server_rounds,
    )  # fmt: skip
    return dp
