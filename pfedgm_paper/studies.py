"""The studies as rows of the grid: each reading, scale, budget or defence the paper leaves
open, ranked on a hold-out of every client's training data (`validation-fraction`), the test
sets unread, and only its finalists run on test; the default is each study's last row, the
one its paired differences start from."""

from __future__ import annotations

from collections.abc import Mapping

from pfedgm_app.methods import METHODS
from pfedgm_app.runconfig.common import AGGREGATIONS
from pfedgm_app.strategies.robust import FLOWER_ROBUST  # f: byzantine-nodes, default 1

from .rows import Row, read_as, variant

# Phase 1's open readings (RESULTS.md), ranked on validation accuracy: each run holds out 10 %
# of every client's training data (`validation-fraction`) and reports accuracy on it, never
# reading the test sets; the default reading is the last row, the one the paired differences
# start from.
VALIDATION = {"validation-fraction": 0.1}
# The studies before the navigator's scale was chosen ran at mu^0 ~ N(0, 1): their rows keep
# it, so that running them again repeats them (the default is now 1/sqrt(d), `navigator-std`).
LITERAL_STD = {"navigator-std": 1.0}
READINGS = tuple(
    variant(name, label, **VALIDATION, **LITERAL_STD, **keys)
    for name, label, keys in (
        ("val-nav-lr-10", "navigator lr x10", {"navigator-lr-scale": 10.0}),
        ("val-scale-sum", "R_c and zeta without 1/d", {"objective-scale": "sum"}),
        ("val-decay-none", "no decay on mu, b", {"head-weight-decay": ""}),
        ("val-npo", "NPO (no R_c)", {"personalized-objective": False}),
        ("val-step-none", "prototype step 0 (none)", {"prototype-step": "none"}),
        ("val-step-batch", "prototype step 1 (batch)", {"prototype-step": "batch"}),
        ("val-cov-average", "A averaged as covariances", {"covariance-average": "covariance"}),
        ("val-bias-mixture", "b averaged as mixture weights", {"bias-average": "mixture"}),
        ("val-decay-all", "decay on mu, b, A", {"head-weight-decay": "mu,b,A"}),
        ("val-default", "default reading", {}),
    )
)
STUDY_COLUMNS = ("cifar100-dir05", "cifar10-dir05")
# The finalists, on test: the default and every reading whose validation accuracy passes the
# default's by more than one standard error of the paired per-client difference in a study
# column: NPO alone, no reading of the text (docs/notes/phase1-readings.md). The same keys as
# the validation rows, without the hold-out.
FINALISTS = (
    variant("npo", "NPO (no R_c)", **LITERAL_STD, **{"personalized-objective": False}),
    Row("default", "default reading", "pfedgm", {"method": "pfedgm", **LITERAL_STD}),
)

# The navigator's scale at the full budget (docs/notes/navigator-std.md): mu^0's std 1 (the
# default, the last row), 0.3 and 1/sqrt(d) (d = 128, the CIFAR CNN's features), NPO at
# 1/sqrt(d), and 0.03, a step below the smallest (which led at 200 rounds), on validation.
# Ranked by the readings study's rule. On CIFAR-100 Dir(0.1) the chosen std alone (`--runs
# pfedgm-val-std-layer`): the kept model Phase 2's study starts from.
LAYER_STD = 128**-0.5
NAVIGATOR_STD = tuple(
    variant(name, label, **VALIDATION, **keys)
    for name, label, keys in (
        ("val-std-layer", "std 1/sqrt(d)", {"navigator-std": LAYER_STD}),
        ("val-std-0.3", "std 0.3", {"navigator-std": 0.3}),
        ("val-std-0.03", "std 0.03", {"navigator-std": 0.03}),
        (
            "val-std-layer-npo",
            "std 1/sqrt(d), NPO (no R_c)",
            {"navigator-std": LAYER_STD, "personalized-objective": False},
        ),
        ("val-default", "std 1 (the literal reading)", LITERAL_STD),
    )
)

# Phase 2's budget, alone (`--rounds 0 --set initial-model=<a kept 200-round model>`, one
# column at a time), on validation: the L-BFGS line search, and the fine-tuning's batch size
# and epochs, which the paper does not give (ours: the run's 50, and its 5 epochs). The
# default last.
PHASE2 = tuple(
    variant(name, label, **VALIDATION, **keys)
    for name, label, keys in (
        ("val-p2-wolfe", "L-BFGS, strong Wolfe", {"lbfgs-line-search": "strong-wolfe"}),
        ("val-p2-b10", "batch 10, 5 epochs", {"personal-batch-size": 10}),
        ("val-p2-b25", "batch 25, 5 epochs", {"personal-batch-size": 25}),
        (
            "val-p2-b10-e20",
            "batch 10, 20 epochs",
            {"personal-batch-size": 10, "personal-epochs": 20},
        ),
        (
            "val-p2-b25-e20",
            "batch 25, 20 epochs",
            {"personal-batch-size": 25, "personal-epochs": 20},
        ),
        (
            "val-p2-b50-e20",
            "batch 50, 20 epochs",
            {"personal-batch-size": 50, "personal-epochs": 20},
        ),
        ("val-p2-default", "batch 50, 5 epochs, fixed-step L-BFGS (default)", {}),
    )
)

# What each aggregator, norm clip and pull bound costs an honest run (docs/robustness.md), on
# validation (a default chosen by experiment never reads the test sets): pFedGM at the paper's
# protocol with every server-side defence of `aggregation`, without clipping, with the former
# clip of 10 and without the pull bound, the default (mean, clip-ratio 5, pull-bound 1) last;
# run with `--rounds 50` or more.
_AGGREGATION_VARIANTS: tuple[tuple[str, str, Mapping[str, object]], ...] = (
    *(
        (f"val-agg-{a}", a + (", f = 1" if a in FLOWER_ROBUST else ""), {"aggregation": a})
        for a in AGGREGATIONS
        if a != "mean"
    ),
    # The collusion defence of docs/robustness.md: two colluders tolerated.
    (
        "val-agg-multi-krum-f2",
        "multi-krum, f = 2",
        {"aggregation": "multi-krum", "byzantine-nodes": 2},
    ),
    ("val-clip-off", "mean, no clipping", {"clip-ratio": 0.0}),
    ("val-clip-10", "mean, clip-ratio 10", {"clip-ratio": 10.0}),
    ("val-pull-off", "mean, no pull bound", {"pull-bound": 0.0}),
    ("val-agg-default", "mean, clip-ratio 5, pull-bound 1 (default)", {}),
)
AGGREGATION = tuple(
    variant(name, label, **VALIDATION, **keys) for name, label, keys in _AGGREGATION_VARIANTS
)

# The influence bound's c (`clip-ratio`; docs/robustness.md): every reply's step at most c
# typical clients' on each key, tried at 1, 1.5, 2, 3 and 5 (the default before it bounded the
# weighted step), each with the pull bound of 1, on validation, at 50 rounds on both columns,
# then 200 rounds on CIFAR-100 Dir(0.5) for the best two (`--runs`). The paired differences
# start from the last row, no bound at all: the default is the smallest c whose honest cost
# stays within one paired standard error of it at 200 rounds.
INFLUENCE = tuple(
    variant(name, label, **VALIDATION, **keys)
    for name, label, keys in (
        *(
            (f"val-influence-{c:g}", f"c = {c:g}, pull bound 1", {"clip-ratio": c})
            for c in (1.0, 1.5, 2.0, 3.0, 5.0)
        ),
        (
            "val-influence-off",
            "no bound (c = 0, no pull bound)",
            {"clip-ratio": 0.0, "pull-bound": 0.0},
        ),  # fmt: skip
    )
)

# Client-level DP (docs/privacy.md): personalized accuracy against epsilon at delta 1e-5 for
# the methods that keep part of their model at home and FedAvg, 50 rounds on CIFAR-10
# Dir(0.5) (100 clients, q = 0.3). C is chosen first, on validation at epsilon 4 (the grid's
# middle), per method: 0.1, 1, or C following the median step (Andrew et al.'s quantile 0.5,
# the DP counterpart of the influence bound at c = 1); 0.01 joined when 0.1, the grid's edge,
# led for three of the five methods, and 0.001 for pFedGM alone when 0.01 led it.
PRIVATE_METHODS = ("pfedgm", "pfedfda", "fedpac", "fedavgft", "fedavg")
EPSILONS = (8.0, 4.0, 2.0, 1.0)
CLIPS = {
    "0.1": {"dp-clip": 0.1},
    "0.01": {"dp-clip": 0.01},
    "1": {"dp-clip": 1.0},
    "median": {"dp-clip": 1.0, "dp-clip-quantile": 0.5},
    "0.001": {"dp-clip": 0.001},
}


def _private_row(method: str, name: str, label: str, keys: dict) -> Row:
    """`method`'s row `<method>-<name>`: the run of `keys`, FedAvg's in FedAvgFT's run."""
    runner, metric = read_as(method)
    return Row(f"{method}-{name}", f"{METHODS[method].label}, {label}", f"{runner}-{name}",
               {"method": runner, **keys}, metric)  # fmt: skip


def _clip_row(method: str, clip: str) -> Row:
    """The clip study's row of `method` at epsilon 4 with the clip `CLIPS[clip]`."""
    keys = {**VALIDATION, "dp-epsilon": 4.0, **CLIPS[clip]}
    return _private_row(method, f"val-dp4-clip-{clip}", f"C {clip}", keys)


PRIVACY_CLIP = tuple(
    _clip_row(m, c)
    for m in PRIVATE_METHODS
    for c in CLIPS
    if c != "0.001" or m == "pfedgm"  # pFedGM's best, 0.01, at the grid's edge again
)
# Each method's C: its best validation accuracy in PRIVACY_CLIP (docs/results/privacy/
# privacy-clip.md; `tests/test_paper_studies.py` checks the choice against the records). A
# method joins the epsilon table once its row of the study is complete, each run at a commit
# where a round whose every reply failed still releases its noise (earlier runs left the
# model as it was, which showed that event: they run again).
DP_CLIPS = {
    "pfedgm": "0.01",
    "pfedfda": "median",
    "fedpac": "0.01",
    "fedavgft": "0.1",
    "fedavg": "0.1",
}


def _epsilon_rows(method: str, clip: str) -> tuple[Row, ...]:
    """`method` without DP, then at each epsilon with its clip; the run names carry the clip,
    so FedAvg and FedAvgFT share a run where their clips agree and not otherwise."""
    no_dp = _private_row(method, "no-dp", "no DP", {})
    return (no_dp, *(
        _private_row(method, f"dp{e:g}-clip-{clip}", f"epsilon {e:g}, C {clip}",
                     {"dp-epsilon": e, **CLIPS[clip]}) for e in EPSILONS
    ))  # fmt: skip


# Local beside them: nothing leaves a device, so nothing is released (epsilon 0), the floor a
# private federation has to beat to be worth its noise.
LOCAL_ROW = Row(
    "local", f"{METHODS['local'].label}, nothing released", "local", {"method": "local"}
)
PRIVACY = (
    *(row for m in PRIVATE_METHODS if m in DP_CLIPS for row in _epsilon_rows(m, DP_CLIPS[m])),
    LOCAL_ROW,
)
