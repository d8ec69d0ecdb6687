"""The paper's tables as a grid of runs: columns are presets (`presets.PRESETS`), rows are
methods or ablation variants, and each (column, run, seed) is one run in its own folder.

A results folder holds `<preset>/<run>/seed<seed>/`, the run's `output-dir`. Rows that read the
same run share it: the adaptation table's NA / FA / GA rows are three metrics of the pFedGM runs
of the standard and corruption tables, the runtime table is those tables' wall times, and
pFedGM's row in the ablations is the standard pFedGM run. So asking for several tables runs
each distinct run once.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pfedgm_app.methods import METHODS
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import AGGREGATIONS
from pfedgm_app.runconfig.presets import PRESETS

PAPER_ROUNDS = 200  # "all methods are trained for 200 global communication rounds"


@dataclass(frozen=True)
class Row:
    """A row of a table: `run` names the run it reads (its folder, and the run-config `keys`
    that make it), `metric` the per-client value it shows (`clients.csv`'s column), `label`
    the paper's name for it."""

    name: str
    label: str
    run: str
    keys: dict[str, Any] = field(default_factory=dict, hash=False)
    metric: str = "accuracy"


@dataclass(frozen=True)
class Table:
    name: str
    caption: str
    columns: tuple[str, ...]  # preset names
    rows: tuple[Row, ...]
    kind: str = "accuracy"  # "accuracy", "runtime" (minutes), "curve" (accuracy per round)


def method_row(method: str) -> Row:
    """A registered method's row, named as the paper's tables name it (`Method.label`)."""
    return Row(method, METHODS[method].label, method, {"method": method})


PFEDGM = method_row("pfedgm")
ALL_METHODS = tuple(method_row(m) for m in METHODS)  # the registry's order is the paper's
DIRS = ("dir01", "dir05")
STANDARD = tuple(
    f"{d}-{a}" for d in ("emnist", "cifar10", "cifar100", "tinyimagenet") for a in DIRS
)
CORRUPTION = tuple(
    f"{d}s-{a}-{c}" for d in ("cifar10", "cifar100") for a in DIRS for c in ("50c", "100c")
)
CORRUPTED_ALL = tuple(c for c in CORRUPTION if c.endswith("100c"))


def _rows(*methods: str) -> tuple[Row, ...]:
    return tuple(method_row(m) for m in methods)


def _variant(name: str, label: str, **keys: Any) -> Row:
    return Row(name, label, f"pfedgm-{name}", {"method": "pfedgm", **keys})


# The adaptation ablation reads one pFedGM run: NA is Phase 2's head before any fitting, the
# global navigator with the global covariance (`acc-global-cov`); FA after the fine-tuning
# (`acc-finetune`); GA after the L-BFGS biases, the method's own accuracy. The `adaptation` key
# gives each as a run's `accuracy`; reading the metrics spares two runs per cell.
ADAPTATION_ROWS = (
    Row("na", "NA", "pfedgm", {"method": "pfedgm"}, "acc-global-cov"),
    Row("fa", "FA", "pfedgm", {"method": "pfedgm"}, "acc-finetune"),
    Row("ga", "GA", "pfedgm", {"method": "pfedgm"}, "accuracy"),
)

# Phase 1's open readings (RESULTS.md), ranked on validation accuracy: each run holds out 10 %
# of every client's training data (`validation-fraction`) and reports accuracy on it, never
# reading the test sets; the default reading is the last row, the one the paired differences
# start from.
VALIDATION = {"validation-fraction": 0.1}
# The studies before the navigator's scale was chosen ran at mu^0 ~ N(0, 1): their rows keep
# it, so that running them again repeats them (the default is now 1/sqrt(d), `navigator-std`).
LITERAL_STD = {"navigator-std": 1.0}
READINGS = tuple(
    _variant(name, label, **VALIDATION, **LITERAL_STD, **keys)
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
    _variant("npo", "NPO (no R_c)", **LITERAL_STD, **{"personalized-objective": False}),
    Row("default", "default reading", "pfedgm", {"method": "pfedgm", **LITERAL_STD}),
)

# The navigator's scale at the full budget (docs/notes/navigator-std.md): mu^0's std 1 (the
# default, the last row), 0.3 and 1/sqrt(d) (d = 128, the CIFAR CNN's features), NPO at
# 1/sqrt(d), and 0.03, a step below the smallest (which led at 200 rounds), on validation.
# Ranked by the readings study's rule. On CIFAR-100 Dir(0.1) the chosen std alone (`--runs
# pfedgm-val-std-layer`): the kept model Phase 2's study starts from.
LAYER_STD = 128**-0.5
NAVIGATOR_STD = tuple(
    _variant(name, label, **VALIDATION, **keys)
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
    _variant(name, label, **VALIDATION, **keys)
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
AGGREGATION = tuple(
    _variant(name, label, **VALIDATION, **keys)
    for name, label, keys in (
        *((f"val-agg-{a}", f"{a}", {"aggregation": a}) for a in AGGREGATIONS if a != "mean"),
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
)

# One Table per entry: (name, caption, columns, rows[, kind])
# fmt: off
TABLES: dict[str, Table] = {t.name: t for t in (
    Table("standard", "Average (std) test accuracy (%) on multiple datasets", STANDARD,
          ALL_METHODS),
    Table("corruption", "Average (std) test accuracy (%) on CIFAR-10S/100S", CORRUPTION,
          ALL_METHODS),
    Table("generalization", "New-client generalization on CIFAR-10 Dir(0.5)",
          ("generalization",),
          _rows("fedavg", "fedavgft", "fedbabu", "pfedme", "lgfedavg", "fedpac", "pfedfda",
                "pfedgm")),
    Table("moderate", "Average (std) test accuracy (%) under moderate settings",
          tuple(f"moderate-{c}" for c in STANDARD),
          _rows("local", "fedavg", "fedavgft", "fedpac", "pfedfda", "pfedgm")),
    # The figure's methods are not legible in the paper's text: the standard table's leaders.
    Table("low-participation", "Test accuracy during training with q = 0.1",
          ("cifar10-q01", "cifar100-q01", "cifar10s-q01", "cifar100s-q01"),
          _rows("fedavg", "fedavgft", "ditto", "fedpac", "pfedfda", "pfedgm"), "curve"),
    Table("runtime", "System runtime (min) on CIFAR-10/100 Dir(0.5)",
          ("cifar10-dir05", "cifar100-dir05"),
          _rows("local", "fedavg", "fedavgft", "ditto", "fedper", "fedrep", "fedbabu", "pfedme",
                "lgfedavg", "fedpac", "pfedfda", "pfedgm"), "runtime"),
    Table("adaptation", "Ablation on the classifier head (NA / FA / GA)",
          STANDARD + CORRUPTION, ADAPTATION_ROWS),
    Table("objective", "Ablation on the personalized objective (NPO / WPO)", CORRUPTED_ALL,
          (_variant("npo", "NPO", **{"personalized-objective": False}),
           Row("wpo", "WPO", "pfedgm", {"method": "pfedgm"}))),
    Table("decoupling", "Ablation on the shared objective and statistic extractor",
          CORRUPTED_ALL,
          (_variant("gm", "G.M.", decoupling="gm"),
           _variant("gm-c", "G.M. - C.", decoupling="gm-c"),
           Row("gm-d", "G.M. + D.", "pfedgm", {"method": "pfedgm"}))),
    Table("readings", "Phase 1's open readings: validation accuracy (%)", STUDY_COLUMNS,
          READINGS),
    Table("readings-test", "Phase 1's finalist readings: test accuracy (%)", STUDY_COLUMNS,
          FINALISTS),
    Table("navigator-std", "The navigator's scale at 200 rounds: validation accuracy (%)",
          ("cifar100-dir05", "cifar100-dir01"), NAVIGATOR_STD),
    Table("aggregation", "Each defence's honest cost: validation accuracy (%)",
          ("cifar10-dir05", "cifar100-dir05"), AGGREGATION),
    Table("phase2", "Phase 2's budget from a kept model: validation accuracy (%)",
          ("cifar100-dir05", "cifar100-dir01"), PHASE2),
    # The navigator's initial scale at 30 rounds (docs/notes/navigator-init.md): mu^0 from
    # N(0, 1), the default, against N(0, 1/d) (ran with d = 128 on the CIFAR cells and 512 on
    # TinyImageNet's), beside pFedFDA; each run's global model alone (`acc-global`: pFedGM's
    # navigator, pFedFDA's global Gaussian head) as a row of its own.
    Table("navigator", "The navigator's initial scale: N(0, 1) against N(0, 1/d)",
          ("cifar100-dir05", "cifar10-dir05", "cifar100-dir01", "cifar10-dir01",
           "cifar10s-dir05-100c", "tinyimagenet-dir01"),
          (_variant("scaled", "pFedGM, N(0, 1/d)", **{"navigator-std": LAYER_STD}),
           method_row("pfedfda"),
           Row("global", "pFedGM's navigator alone", "pfedgm",
               {"method": "pfedgm", **LITERAL_STD}, "acc-global"),
           Row("scaled-global", "pFedGM's navigator alone, N(0, 1/d)", "pfedgm-scaled",
               {"method": "pfedgm", "navigator-std": LAYER_STD}, "acc-global"),
           Row("pfedfda-global", "pFedFDA's global head alone", "pfedfda",
               {"method": "pfedfda"}, "acc-global"),
           Row("pfedgm", "pFedGM, N(0, 1)", "pfedgm", {"method": "pfedgm", **LITERAL_STD}))),
)}
# fmt: on


@dataclass(frozen=True)
class Run:
    """One run of the grid: preset `column`, run `name`, `seed`."""

    column: str
    name: str
    seed: int
    keys: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def folder(self, out: Path) -> Path:
        return out / self.column / self.name / f"seed{self.seed}"

    def label(self) -> str:
        return f"{self.column} {self.name} seed {self.seed}"


def preset_name(column: str, offline: bool) -> str:
    return f"{column}-offline" if offline else column


def runs(tables: list[str], seeds: list[int], columns: list[str] | None = None) -> list[Run]:
    """The distinct runs the `tables` need over `seeds`, in table order, each once; `columns`
    keeps only those presets."""
    unknown = [t for t in tables if t not in TABLES]
    if unknown:
        raise ValueError(f"no table {unknown}: choose from {', '.join(TABLES)}")
    found: dict[tuple[str, str, int], Run] = {}
    for table in tables:
        t = TABLES[table]
        for column in t.columns:
            if columns and column not in columns:
                continue
            for seed in seeds:
                # the table's own row first (pFedGM, or the full method or default reading of
                # a study: the last row), so a grid stopped part-way has it in every cell
                for row in sorted(t.rows, key=lambda r: r.run != t.rows[-1].run):
                    found.setdefault((column, row.run, seed), Run(column, row.run, seed, row.keys))
    return list(found.values())


def run_config(run: Run, out: Path, rounds: int, offline: bool, extra: dict | None = None) -> dict:
    """The run-config of `run`: its preset, its row's keys, the seed (partition and training),
    the budget, its folder; `resume` when a stopped run left a checkpoint there."""
    folder = run.folder(out)
    return {
        "preset": preset_name(run.column, offline),
        **run.keys,
        "seed": run.seed,
        "num-server-rounds": rounds,
        **(extra or {}),
        "output-dir": str(folder),
        "resume": RunFolder(folder).checkpoint.exists(),
    }


def supernodes(run: Run) -> int:
    return PRESETS[run.column].num_supernodes
