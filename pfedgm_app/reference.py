"""What every run-config key means: one line per key in `MEANINGS`, the one place a key is
described. Defaults and bounds are read from the settings groups that declare the keys
(`config.RunConfig`, each method's `Settings`), so `docs/run-config.md` (written with the other
references by `python -m devtools.reference`) is the code's own account; a test requires a
meaning for every registered key and none for a key that no longer exists.

`python -m pfedgm_app.reference` prints the run-config tables.
"""

from __future__ import annotations

from dataclasses import fields

from .config import Settings
from .methods import METHODS, settings_groups
from .presets import toml_value

MEANINGS: dict[str, str] = {
    # every method (config.RunConfig)
    "preset": "a preset's name (docs/presets.md) or the path of a TOML file: its keys replace "
    "the defaults; a key given with a non-default value wins",
    "method": "one of the methods of docs/methods.md",
    "dataset": "hub id (`uoft-cs/cifar10`, `uoft-cs/cifar100`, `ylecun/mnist`, "
    "`flwrlabs/femnist`, `zh-plus/tiny-imagenet`), `shared:<folder>` (the first "
    "`<ancestor>/shared/data/<folder>` above the working directory) or a local path: a folder "
    "of parquet splits with the hub schema, or an image folder (one subfolder per class, "
    "optionally inside `train/` and `test/`). The backbone follows the images: 28 px "
    "grayscale (EMNIST CNN), 32 px color (CIFAR CNN), 64 px color (TinyImageNet CNN)",
    "classes": "the model's classes in order, comma-separated (`'cat,dog,bird'`); empty: the "
    "`dataset`'s. Every client's labels are mapped onto it by name, so devices holding only "
    "some classes agree with the model",
    "dirichlet-alpha": "Dir(alpha) label skew over the pooled train+test images",
    "num-server-rounds": "Phase 1 rounds; 0 (with `initial-model` only): no training, the "
    "personalize round alone, on the SuperNodes connected now",
    "initial-model": "a finished run's `output-dir` (or its `global_model.pt`, with its "
    "`config.json` beside it) to start from instead of a random model; refused before any "
    "message when its method, classes, image shape or class count differ from this run's. "
    "With `num-server-rounds=0`, devices that joined after training get their personalized "
    "models without any client training again (deploy/README.md)",
    "fraction-train": "participation rate q",
    "local-epochs": "local epochs per round",
    "batch-size": "mini-batch size",
    "learning-rate": "SGD learning rate",
    "momentum": "SGD momentum",
    "weight-decay": "SGD weight decay",
    "min-train-samples": "every client gets at least this many training samples (the partition "
    "resamples until it holds)",
    "test-fraction": "each client's test split (0.2: 80/20)",
    "aggregation": "how the round's updates are combined (docs/robustness.md): `mean` "
    "(FedAvg, weighted), `trimmed-mean` (Flower's FedTrimmedAvg) or `median` (FedMedian)",
    "trim-fraction": "`trimmed-mean`: the share of the replies cut at each end, per coordinate",
    "clip-ratio": "an update whose norm exceeds this many times the round's median update norm "
    "is scaled down to it (0: no clipping; at least 3 replies)",
    "weight-ratio": "a client counts at most this many times the median size the clients "
    "reported at query (its weight in the mean, its test size in the personalized mean)",
    "validation-fraction": "for studies that choose a reading: v > 0 takes ceil(v n) of each "
    "client's n training samples (seeded) as a validation set, trains on the rest and reports "
    "accuracy on the validation set in place of the test set, which the run never reads",
    "pool-size": "0: all pooled samples (the paper); N > 0: a seeded random subset of N "
    "samples, for quick runs",
    "corruption": "CIFAR-10S / CIFAR-100S: `50C` gives client i < 50 the i-th of the 50 "
    "(corruption, severity) pairs of CIFAR-10-C, the rest stay clean; `100C` gives clients 2j "
    "and 2j+1 pair j; corrupted images are cached in `$PFEDGM_CACHE_DIR` "
    "(default `~/.cache/pfedgm`)",
    "frost-dir": "folder of the frost textures of the CIFAR-10-C generator; empty: the first "
    "`<ancestor>/shared/data/frost` above the working directory",
    "protocol": "`generalization`: the paper's new-client protocol: Phase 1 trains 90% of the "
    "clean half of the clients, Phase 2 evaluates the unseen clean and corrupted clients per "
    "type (`accuracy_by_type`)",
    "eval-every": "N > 0: each method's own Phase 2 on every client after every N-th round "
    "(clients keep nothing of it), in `rounds.jsonl` and `accuracy.png`; costs one "
    "personalize round each time",
    "seed": "partition, split, initialization, client sampling",
    "device": "`auto`, `cpu`, `cuda` or `cuda:N`",
    "client-threads": "torch threads per ClientApp; 0: the CPU share Ray assigns",
    "node-wait-timeout": "before round 1: seconds without a new SuperNode answering after "
    "which the run stops",
    "round-timeout": "seconds to wait for the replies of one round",
    "messages-in-flight": "N > 0: at most N messages unanswered at a time, the next pushed as "
    "replies arrive (`strategies.WindowedGrid`); 0: all of a round at once; -1: auto (twice "
    "the cores in a simulation, 0 in a deployment). Results are the same either way",
    "resume": "`true`: continue the stopped run in `output-dir` from its last "
    "`checkpoint.pt` (docs/outputs.md)",
    "min-nodes": "0: every partition's SuperNode must answer before round 1; N > 0 (devices "
    "that come and go): start once N answered, take in later ones, leave out of a round a "
    "node that fails in it (deploy/README.md)",
    "client-state-dir": "a folder where each client also keeps the arrays its method keeps "
    "between rounds, so that stateful methods resume exactly; empty: SuperNode memory only",
    "output-dir": "where outputs go (an absolute path); empty: `outputs/<time>-<method>` in "
    "the managed SuperLink's directory",
    # fedavgft, fedbabu (methods/fedavg.py: FineTune)
    "finetune-epochs": "local fine-tuning epochs at the end",
    "finetune-part": "what they tune: `model` (body and head, as FedBABU's authors) or `head` "
    "(the body frozen)",
    # ditto
    "ditto-mu": "proximal weight mu of the personal model's term mu/2 ||v - w||^2",
    # fedpac
    "fedpac-lambda": "weight of the feature alignment (MSE to the global class prototypes)",
    "fedpac-head-epochs": "head epochs before the `local-epochs` body epochs of each round",
    "fedpac-head-learning-rate": "learning rate of those head epochs",
    # fedrep
    "fedrep-head-epochs": "head epochs, body fixed, before the `local-epochs` body epochs of "
    "each round (1: PFLlib's `plocal_epochs`, the paper's FedRep cost; the authors' CIFAR "
    "scripts: 10)",
    "fedrep-refit-epochs": "head epochs of the final refit on the final body (the authors' "
    "max(10, .))",
    # pfedme
    "pfedme-lambda": "Moreau-envelope weight lambda (as the paper tuned it)",
    "pfedme-inner-steps": "inner steps per batch on the personal model theta",
    "pfedme-personal-learning-rate": "step size of the inner steps",
    "pfedme-tolerance": "gradient norm at which the inner solve stops early (0: never)",
    "pfedme-local-batches": "0: `local-epochs` epochs a round (the paper's protocol); R > 0: R "
    "mini-batches a round (the authors': 20)",
    # lgfedavg
    "lgfedavg-warmup-fraction": "the fraction of `num-server-rounds` run as FedAvg (every layer "
    "global) before the split into global convolutions and local fully connected layers",
    # pfedfda
    "pfedfda-cv-folds": "folds of the cross-validation that picks the interpolation coefficients",
    # pfedgm (methods/pfedgm.py: PFedGMSettings)
    "lambda": "weight of the personalized objective R_c (also in zeta of Eq. LossC)",
    "personal-epochs": "Phase 2: SGD epochs fine-tuning the personalized head",
    "personal-learning-rate": "Phase 2: their learning rate",
    "lbfgs-learning-rate": "Phase 2: L-BFGS learning rate on the biases",
    "lbfgs-max-iter": "Phase 2: L-BFGS iterations per cycle",
    "lbfgs-cycles": "Phase 2: L-BFGS cycles (0 skips the refinement)",
    "navigator-init": "scale of mu^0 in psi^0: `standard` N(0, 1) per coordinate (Algorithm 1 "
    "read literally), `scaled` N(0, 1/d)",
    "adaptation": "Phase 2, the classifier-adaptation ablation: the head saved and reported as "
    "`accuracy`. `finetune-lbfgs` (GA, pFedGM) fine-tunes Eq. LossC then L-BFGS on the biases; "
    "`finetune` (FA) stops before L-BFGS; `none` (NA) keeps the global Gaussian classifier "
    "(psi*, nu*) with its covariance, no local term",
    "personalized-objective": "false: the NPO ablation, Phase 1 trains on H alone (no R_c, no "
    "prototypes); unlike lambda = 0, Phase 2 keeps zeta, which lambda scales (2 lambda/d A_c)",
    "decoupling": "Phase 1, the decoupling ablation: `gm-d` (G.M.+D., pFedGM) navigator on "
    "Eq. LossH with nu co-updated; `gm-c` (G.M.-C.) navigator alone, A stays E; `gm` (G.M.) "
    "one Gaussian classifier, H with covariance trained on phi, mu, b and A jointly",
    "prototype-step": 'Phase 1, Algorithm 1\'s prototype step size ("with a stepsize"): '
    "`epoch` n_k(batch)/N_k(client), a moving average over about an epoch; `batch` 1, the "
    "batch's class mean; `none` 0, the round-start means",
    "objective-scale": "the scale of R_c (Eq. LossR) and zeta (Eq. LossC): `mean` with their "
    "1/d as printed; `sum` without it, on the scale of H's sum over the d coordinates",
    "navigator-lr-scale": "Phase 1: mu and b train at learning-rate times this",
    "head-weight-decay": "Phase 1: the head parameters weight-decay reaches, a comma-separated "
    "subset of mu,b,A (empty: none)",
    "covariance-average": "server: A averaged as `precision` (the arrays as sent) or as "
    "`covariance` (the mean of A^-1, inverted back)",
    "bias-average": "server: b averaged as sent (`arithmetic`) or as `mixture` weights (the "
    "log of the mean of exp b)",
    "rc-input": "Phase 1, where a dropout precedes the navigator (TinyImageNet): R_c reads z "
    "`before-dropout` (the paper, Sec. Model Setup) or `after-dropout`",
}


def _bound(f) -> str:
    """A field's bounds as an interval, `[0, 1)`, or a half-line, `>= 0`."""
    m = f.metadata
    low = ("[", m["min"]) if "min" in m else ("(", m["gt"]) if "gt" in m else None
    high = (m["max"], "]") if "max" in m else (m["lt"], ")") if "lt" in m else None
    if low and high:
        return f"{low[0]}{_number(low[1])}, {_number(high[0])}{high[1]}"
    if low:
        return f"{'>=' if low[0] == '[' else '>'} {_number(low[1])}"
    return ""


def _number(value: float) -> str:
    """1e6 as 10^6, 100.0 as 100: a bound read at a glance."""
    if not float(value).is_integer():
        return f"{value:g}"
    digits = str(int(value))
    return f"10^{len(digits) - 1}" if len(digits) > 4 and digits.strip("0") == "1" else digits


def group_title(group: type[Settings]) -> str:
    """'every method' for the common keys, else the methods that read the group's keys."""
    if group is settings_groups()[0]:
        return "every method"
    users = [f"`{m.name}`" for m in METHODS.values() if m.settings is group]
    return ", ".join(users)


def run_config_tables() -> str:
    """One table per settings group (key, default, bound, meaning), in the registry's order;
    groups without keys are left out."""
    parts = []
    for group in settings_groups():
        rows = [(group.key(f.name), f.default, _bound(f)) for f in fields(group)]
        if not rows:
            continue
        lines = [
            f"## {group_title(group)} (`{group.__name__}`)",
            "",
            "| key | default | bound | meaning |",
            "|---|---|---|---|",
        ]
        for key, default, bound in rows:
            meaning = MEANINGS.get(key, "**undocumented: add it to `pfedgm_app/reference.py`**")
            lines.append(f"| `{key}` | `{toml_value(default)}` | {bound} | {meaning} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


if __name__ == "__main__":
    print(run_config_tables())
