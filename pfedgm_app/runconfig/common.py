"""The run-config keys every method shares (`RunConfig`), with the paper's defaults, and their
checks across keys. The machinery (bounds, parsing, `ConfigError`) is `settings.py`; each
method's own keys are in `method_settings.py`.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

from .settings import ConfigError, RunView, Settings, above, at_least, setting

CORRUPTION_ASSIGNMENTS = ("none", "50C", "100C")  # CIFAR-10S / 100S (data.corruption_pair)
# strategies.robust (flwr-free here): the combinations of a round's updates
AGGREGATIONS = ("mean", "trimmed-mean", "median", "krum", "multi-krum", "bulyan")
PROTOCOLS = ("standard", "generalization")  # who trains and who is evaluated (data.Protocol)
TRACKERS = ("none", "tensorboard", "wandb")  # records.tracking; each needs its own package


@dataclass(frozen=True)
class RunConfig(Settings):
    """The keys every method shares, with the paper's defaults (Sec. Training Setup)."""

    # a field, its bound and its meaning (docs/run-config.md) in a few lines each
    # fmt: off
    preset: str = setting("", doc="a preset's name (docs/presets.md) or the path of a TOML "
        "file: its keys replace the defaults; a key given with a non-default value wins")
    method: str = setting("pfedgm", doc="one of the methods of docs/methods.md")
    dataset: str = setting("uoft-cs/cifar10", doc="hub id (`uoft-cs/cifar10`, "
        "`uoft-cs/cifar100`, `ylecun/mnist`, `flwrlabs/femnist`, `zh-plus/tiny-imagenet`), "
        "`shared:<folder>` (the first `<ancestor>/shared/data/<folder>` above the working "
        "directory) or a local path: a folder of parquet splits with the hub schema, or an image "
        "folder (one subfolder per class, optionally inside `train/` and `test/`). The generator "
        "follows the images: 28 px grayscale (EMNIST CNN), 32 px color (CIFAR CNN), 64 px color "
        "(TinyImageNet CNN)")
    classes: str = setting("", doc="the model's classes in order, comma-separated "
        "(`'cat,dog,bird'`); empty: the `dataset`'s. Every client's labels are mapped onto it by "
        "name, so devices holding only some classes agree with the model")  # data/labels
    dirichlet_alpha: float = above(0, 0.5, at_most=1e6,  # beyond: IID within sampling noise
        doc="Dir(alpha) label skew over the pooled train+test images")
    num_server_rounds: int = at_least(0, 200, at_most=100_000, doc="Phase 1 rounds; 0 (with "
        "`initial-model` only): no training, the personalize round alone, on the SuperNodes "
        "connected now")
    initial_model: str = setting("", doc="a finished run's `output-dir` (or a copy by "
        "`pfedgm-paper collect`, or its `global_model.safetensors` with its `config.json` beside "
        "it) to start from instead of a random model; an earlier version's `global_model.pt`, a "
        "pickle, is refused (`collect` converts it). Refused before any message when its method, "
        "classes, image shape or class count differ from this run's. With `num-server-rounds=0`, "
        "devices that joined after training get their personalized models without any client "
        "training again (deploy/README.md)")
    fraction_train: float = above(0, 0.3, at_most=1,  # a share of the clients
        doc="participation rate q")
    local_epochs: int = at_least(1, 5, at_most=10_000,  # the paper: 5; 10^4 is a typo
        doc="local epochs per round")
    batch_size: int = at_least(1, 50, at_most=10**6,  # more than a client holds: one batch
        doc="mini-batch size")
    learning_rate: float = above(0, 0.01, at_most=100,  # SGD diverges long before 100
        doc="SGD learning rate")
    momentum: float = at_least(0, 0.5, below=1,  # at 1 the velocity never decays
        doc="SGD momentum")
    weight_decay: float = at_least(0, 5e-4, at_most=1,  # the paper 5e-4; > 1 outweighs any loss
        doc="SGD weight decay")
    min_train_samples: int = at_least(1, 50, at_most=10**7,  # more than any dataset holds
        doc="every client gets at least this many training samples (the partition resamples "
        "until it holds)")
    test_fraction: float = above(0, 0.2, at_most=0.9,  # a client keeps >= 10% to train on
        doc="each client's test split (0.2: 80/20)")
    validation_fraction: float = at_least(0, 0.0, at_most=0.9,  # >= 10% remains to train on
        doc="for studies that choose a reading: v > 0 takes ceil(v n) of each client's n "
        "training samples (seeded) as a validation set, trains on the rest and reports accuracy "
        "on the validation set in place of the test set, which the run never reads")
    pool_size: int = at_least(0, 0, at_most=10**9,  # beyond any dataset: all samples
        doc="0: all pooled samples (the paper); N > 0: a seeded random subset of N samples, for "
        "quick runs")
    corruption: str = setting("none", doc="CIFAR-10S / CIFAR-100S: `50C` gives client i < 50 "
        "the i-th of the 50 (corruption, severity) pairs of CIFAR-10-C, the rest stay clean; "
        "`100C` gives clients 2j and 2j+1 pair j; corrupted images are cached in "
        "`$PFEDGM_CACHE_DIR` (default `~/.cache/pfedgm`)")  # one of CORRUPTION_ASSIGNMENTS
    frost_dir: str = setting("", doc="folder of the frost textures of the CIFAR-10-C generator; "
        "empty: the first `<ancestor>/shared/data/frost` above the working directory")
    protocol: str = setting("standard", doc="`generalization`: the paper's new-client protocol: "
        "Phase 1 trains 90% of the clean half of the clients, Phase 2 evaluates the unseen clean "
        "and corrupted clients per type (`accuracy_by_type`)")  # one of PROTOCOLS
    eval_every: int = at_least(0, 0, at_most=100_000,  # as rounds
        doc="N > 0: each method's own Phase 2 on every client after every N-th round (clients "
        "keep nothing of it), in `rounds.jsonl` and `accuracy.png`; costs one personalize round "
        "each time")
    seed: int = at_least(0, 0, at_most=2**32 - 1,  # numpy's seeding limit
        doc="partition, split, initialization, client sampling")
    device: str = setting("auto", doc="`auto`, `cpu`, `cuda` or `cuda:N`")
    client_threads: int = at_least(0, 0, at_most=4096,  # more than any machine's cores
        doc="torch threads per ClientApp; 0: the CPU share Ray assigns")
    # seconds, finite: a wait without end is a stall (10^7 s: four months)
    node_wait_timeout: float = above(0, 120.0, at_most=1e7, doc="before round 1: seconds "
        "without a new SuperNode answering after which the run stops")
    round_timeout: float = above(0, 3600.0, at_most=1e7,
        doc="seconds to wait for the replies of one round")
    straggler_wait: float = at_least(0, 2.0, at_most=1e6, doc="once half of a training round's "
        "replies are in, the rest get this many times as long as that half took (at least 30 "
        "s), not round-timeout; 0: wait round-timeout")
    messages_in_flight: int = at_least(-1, 0, at_most=10**6, doc="N > 0: at most N messages "
        "unanswered at a time (`strategies.WindowedGrid`); 0: all of a round at once; -1: auto "
        "(twice the cores in a simulation, 0 in a deployment). The results are the same")
    resume: bool = setting(False, doc="`true`: continue the stopped run in `output-dir` from "
        "its last `checkpoint.pt` (docs/outputs.md)")
    min_nodes: int = at_least(0, 0, at_most=10**6,  # far beyond any federation
        doc="0: every partition's SuperNode must answer before round 1; N > 0 (devices that "
        "come and go): start once N answered, take in later ones, leave out of a round a node "
        "that fails in it (deploy/README.md)")
    quorum: float = above(0, 0.5, at_most=1.0, doc="min-nodes=0: start when this share of "
        "num-partitions can take part, the others (data missing, a malformed reply) left out "
        "and named in summary.json; 1: every partition's node must")
    client_state_dir: str = setting("", doc="a folder where each client also keeps its method's "
        "arrays between rounds (stateful methods resume exactly); empty: SuperNode memory only")
    commit: str = setting("", doc="the source commit the run came from, kept in `config.json` "
        "(`pfedgm-paper` sets it from its checkout: `git rev-parse`, `+dirty` with changes)")
    output_dir: str = setting("", doc="where outputs go (an absolute path); empty: "
        "`outputs/<time>-<method>` in the managed SuperLink's directory")
    # what the server trusts of a reply (docs/robustness.md, strategies/robust.py)
    aggregation: str = setting("mean", doc="how the round's updates are combined "
        "(docs/robustness.md): `mean` (FedAvg, weighted), `trimmed-mean` (Flower's "
        "FedTrimmedAvg), `median` (FedMedian), `krum`, `multi-krum` or `bulyan` (Flower's "
        "Krum, MultiKrum, Bulyan, tolerating `byzantine-nodes`)")  # one of AGGREGATIONS
    byzantine_nodes: int = at_least(0, 1, at_most=10**6, doc="`krum`, `multi-krum`, "
        "`bulyan`: the hostile replies a round tolerates, f (multi-krum averages the n - f "
        "updates closest to the others; bulyan needs n >= 4f + 3 replies)")
    trim_fraction: float = at_least(0, 0.2, below=0.5,  # at each end: below half, some remain
        doc="`trimmed-mean`: the share of the replies cut at each end, per coordinate")
    clip_ratio: float = at_least(0, 5.0, at_most=1e6, doc="c: no reply moves a round more "
        "than c typical clients' steps on any array (its weighted update scaled down to c "
        "times the round's median; 0: no bound)")
    pull_bound: float = at_least(0, 1.0, at_most=1e6, doc="a reply that takes back more "
        "than this many typical clients' steps of the others' aggregate step is scaled down "
        "to take back that much (0: no bound; at least 2 replies)")
    weight_ratio: float = above(0, 20.0, at_most=1e6, doc="a client counts at most this many "
        "times the median size the clients reported at query (its weight in the mean, its test "
        "size in the personalized mean)")
    share_ratio: float = at_least(0, 2.0, at_most=1e6, doc="a client whose sizes the server "
        "cannot compute (its own data, or data the ServerApp cannot read) counts at most this "
        "many typical clients in the means (0: no cap); a partition counts its true size")
    # client-level differential privacy (docs/privacy.md, strategies/privacy.py), off by default
    dp_epsilon: float = at_least(0, 0.0, at_most=1e6, doc="a target epsilon at `dp-delta` for "
        "the run's rounds: the app sets the smallest noise multiplier that spends at most it "
        "(Flower's RDP accountant); 0: none (no DP, or `dp-noise` as given)")
    dp_noise: float = at_least(0, 0.0, at_most=1e4, doc="z: Gaussian noise of std z C / m on "
        "the mean step of the m sampled clients (DP-FedAvg); 0: no DP unless `dp-epsilon`")
    dp_clip: float = above(0, 1.0, at_most=1e6, doc="C: under DP each sampled client's step "
        "(L2 over all its shared arrays) is clipped to C, and every client weighs 1/m")
    dp_clip_quantile: float = at_least(0, 0.0, below=1, doc="0: C fixed; q in (0, 1): "
        "Flower's adaptive clipping moves C (from `dp-clip`) toward the q-quantile of the "
        "steps' norms (Andrew et al. 2021)")
    dp_delta: float = above(0, 1e-5, below=1, doc="the delta at which epsilon is counted")
    # experiment tracking (records/tracking.py), off by default; `pip install -e ".[track]"`
    tracker: str = setting("none", doc="`tensorboard`: event files in `<output-dir>/"
        "tensorboard`; `wandb`: a W&B run in `<output-dir>/wandb`, offline unless `WANDB_MODE` "
        "or `WANDB_API_KEY` says otherwise; each round's figures, the config, each client's "
        "final accuracy")  # one of TRACKERS
    tracker_name: str = setting("", doc="the tracked run's name (W&B); `pfedgm-paper`: its cell")
    tracker_group: str = setting("", doc="the tracked run's group (W&B); `pfedgm-paper`: its "
        "table")
    # fmt: on

    @property
    def private(self) -> bool:
        """Client-level DP is on (`dp-noise` or `dp-epsilon`)."""
        return self.dp_noise > 0 or self.dp_epsilon > 0

    def validate(self, run: RunView | None = None) -> None:
        super().validate(self)
        if not self.dataset:
            raise ConfigError("dataset is empty; give a hub id or a local path")
        if self.num_server_rounds == 0 and not self.initial_model:
            raise ConfigError(
                "num-server-rounds=0 trains nothing: give initial-model (a finished run's "
                "output-dir or its global model) to personalize it, or num-server-rounds >= 1"
            )
        parse_classes(self.classes)
        for key, value, choices in (
            ("corruption", self.corruption, CORRUPTION_ASSIGNMENTS),
            ("protocol", self.protocol, PROTOCOLS),
            ("aggregation", self.aggregation, AGGREGATIONS),
            ("tracker", self.tracker, TRACKERS),
        ):
            if value not in choices:
                raise ConfigError(f"{key} must be one of {choices}, got {value!r}")
        if self.min_nodes and self.protocol != "standard":
            raise ConfigError("min-nodes (a changing federation) needs protocol='standard'")
        if self.protocol == "generalization" and self.corruption != "none":
            raise ConfigError(
                "protocol='generalization' corrupts the second half of the clients itself; "
                f"leave corruption='none' (got {self.corruption!r})"
            )
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ConfigError(f"device must be 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.private:
            privacy_problem(self)
        if self.tracker != "none" and importlib.util.find_spec(self.tracker) is None:
            raise ConfigError(f"tracker={self.tracker!r} needs the {self.tracker} package: "
                              "pip install -e '.[track]'")  # fmt: skip


def privacy_problem(cfg: RunConfig) -> None:
    """Raise ConfigError for DP settings whose guarantee cannot hold."""
    if cfg.dp_noise and cfg.dp_epsilon:
        raise ConfigError("give dp-noise or dp-epsilon, not both (dp-epsilon sets the noise)")
    if cfg.aggregation != "mean":
        raise ConfigError(
            f"aggregation={cfg.aggregation!r} under DP: the guarantee covers the mean of "
            "clipped steps only; set aggregation='mean'"
        )
    if cfg.min_nodes:
        raise ConfigError("DP needs a fixed federation (min-nodes=0): the accountant counts "
                          "rounds of a known population")  # fmt: skip
    if importlib.util.find_spec("dp_accounting") is None:
        raise ConfigError("DP counts epsilon with Flower's RDP accountant, which needs "
                          "dp-accounting: pip install -e '.[dp]'")  # fmt: skip


def parse_classes(classes: str) -> tuple[str, ...]:
    """Run-config `classes` ('cat,dog,...', the model's classes in order) as a tuple; '' gives
    () (the dataset's own classes)."""
    if not classes.strip():
        return ()
    names = tuple(c.strip() for c in classes.split(","))
    if "" in names or len(set(names)) < len(names):
        raise ConfigError(f"classes must be distinct non-empty names, comma-separated: {classes!r}")
    return names
