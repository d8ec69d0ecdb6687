"""The wire contract between the ServerApp (strategies) and the ClientApp: message types,
record names and metric keys. Both sides import them from here, and nothing else (flwr-free,
so a strategy stays usable by any Flower project).

Messages and their records (R = RecordDict key):

| message type           | server -> client                          | client -> server           |
|------------------------|-------------------------------------------|----------------------------|
| `query`                | (empty)                                   | METRICS: identity, data;   |
|                        |                                           | or UNAVAILABLE: REASON     |
| `train`                | ARRAYS, CONFIG (ROUND), EXTRAS (optional) | ARRAYS, METRICS, EXTRAS?   |
| `train.personalize`    | ARRAYS, CONFIG, EXTRAS (optional)         | METRICS: ACCURACY, ...     |

A node whose data cannot be loaded, or that cannot keep its personalized model, answers `query`
with UNAVAILABLE (a ConfigRecord whose REASON says why, in one line, and CAUSE what) instead of
raising: the server names the node and the reason before round 1. Messages carry per-round
values only; the run's settings reach every ClientApp through `context.run_config`. The
personalize reply holds metrics only: the personalized model stays on the device.
"""

PERSONALIZE = "personalize"
"""The ClientApp's `@app.train(PERSONALIZE)` action: Phase 2, personalize and evaluate."""
PERSONALIZE_MESSAGE_TYPE = f"train.{PERSONALIZE}"
"""The message type Flower routes to that action (`PersonalizedFedAvg.personalize` sends it)."""

# RecordDict keys
ARRAYS = "arrays"
"""Model arrays the server averages (Flower's default `arrayrecord_key`)."""
CONFIG = "config"
"""Per-round values (Flower's default `configrecord_key`)."""
METRICS = "metrics"
"""A reply's MetricRecord (a train reply's: NUM_EXAMPLES and TRAIN_METRICS; personalize's:
ACCURACY, NUM_TEST, `acc-*`)."""
EXTRAS = "extras"
"""Non-model arrays (statistics, per-client heads), in both directions."""
UNAVAILABLE = "unavailable"
"""A query reply's ConfigRecord: this node cannot take part (REASON, CAUSE)."""

# ConfigRecord keys
ROUND = "server-round"
"""The round number, set by the strategies in every train message."""
REASON = "reason"
"""UNAVAILABLE's: why, in one line ("data-path '/x' does not exist ...")."""
CAUSE = "cause"
"""UNAVAILABLE's: what cannot be had, `data` (when absent) or `model-dir`."""

# MetricRecord keys
NUM_EXAMPLES = "num-examples"
"""Training samples: the weight of the average."""
NUM_TEST = "num-test"
"""Test samples: the weight of the personalized accuracy's mean."""
ACCURACY = "accuracy"
"""Personalized test accuracy, a fraction in [0, 1] (clients.csv: percent)."""
PARTITION_ID = "partition-id"
"""The client's partition (simulation's node config, or a device's `--node-config`)."""
NUM_PARTITIONS = "num-partitions"
"""The number of partitions the dataset is split into."""
NUM_CLASSES_PRESENT = "num-classes-present"
"""The classes the client's training data hold."""
OWN_DATA = "own-data"
"""1: the device's own samples, 0: a partition of the run's dataset."""
NUM_CLASSES = "num-classes"
"""The model's classes (the run's label set)."""
IMAGE_SHAPE = "image-shape"
"""[C, H, W] of the client's images, from which the server builds the model."""
DATA_SECONDS = "seconds-data"
"""Seconds the message's ClientApp took to have its data ready."""

TRAIN_METRICS = ("loss", "sample-passes", DATA_SECONDS, "seconds-model", "seconds-compute")
"""Train-reply metrics the server takes from every method's clients (besides NUM_EXAMPLES);
others are ignored unless a method's strategy names them (`metric_keys`)."""
PFEDGM_METRICS = (
    "loss-shared",
    "loss-personalized",
    "saturated-fraction",
    "grad-norm-shared",
    "grad-norm-personalized",
    "grad-share-personalized",
    "z-norm",
    "mu-norm",
    "within-class-variance",
    "saturated-fraction-start",
    "covariance-norm",
    "mu-centroid-distance",
    "mu-centroid-cosine",
    "centroid-norm",
    "logit-margin",
    "covariance-deviation",
    "seconds-prototypes",
)
"""pFedGM's train metrics: Phase 1's diagnostics (`pfedgm_app.learning.diagnostics`) and its
prototype pass's seconds."""

# FedPAC's extras (EXTRAS): client -> server statistics, server -> client global prototypes
PROTOS = "protos"
"""FedPAC's extras: (K, d) class means."""
CLASS_COUNTS = "class-counts"
"""FedPAC's extras: (K,) the client's samples per class."""
VARIANCE = "variance"
"""FedPAC's extras: (1,) V_i."""
H_REF = "h-ref"
"""FedPAC's extras: (K, d) H_i."""
PROTOS_COUNT = "protos-count"
"""FedPAC's extras: (K,) samples behind each global prototype."""
