"""docs/run-config.md, methods.md and presets.md, formatted from the registries alone (the
settings groups, `METHODS`, `PRESETS`): no run and no data, so tests rebuild them in memory in
a moment and compare them with the files.
"""

from __future__ import annotations

from pfedgm_app.methods import markdown_table, run_config_keys
from pfedgm_app.runconfig import presets

from . import COMMAND, GENERATED
from .run_config_doc import run_config_tables


def run_config_page() -> str:
    """docs/run-config.md: every key's default, bound and meaning, from the settings groups."""
    return f"""# Run-config keys

{GENERATED}

Every key of a run, with its default (as `pyproject.toml`'s `[tool.flwr.app.config]` declares
it), the bound the app checks and its meaning. Set keys on the command line, `flwr run .
--run-config "method='fedper' num-server-rounds=50"`, through a preset
([presets.md](presets.md)), or in a TOML file (`flwr run . --run-config my.toml`).

A key that `[tool.flwr.app.config]` lacks (a misspelling) is refused by Flower before the app
starts, with "Invalid run configuration" and without the key's name: compare your keys with
the tables below; the name is in the SuperLink's log
([upstream/run-config-key-name.md](upstream/run-config-key-name.md)).

Every bad value (unknown method or dataset, a value outside its bound, a missing path, an
unreachable hub, an unreadable parquet file, labels outside the declared classes, images of an
unsupported shape, fewer SuperNodes than partitions) ends the run with one error naming the
key, before any round. With `min-nodes`, a SuperNode whose data cannot take part is left out
instead and listed in the summary's `failures`. A client update holding NaN or Inf is dropped
from the aggregate with a warning. The node-config keys of a deployment (`data-path`,
`partition-id`, ...) are in [../deploy/README.md](../deploy/README.md).

{run_config_tables()}
"""


# methods.md's glossary: (concept, the paper's symbol, the code's identifiers, the keys of the
# run-config, replies and files, which are formats and keep their names).
GLOSSARY = [
    (
        'generator (feature extractor; the baselines\' "body")',
        "phi",
        "`generator`: `Model.generator`, `models.GENERATORS` (one per image shape), "
        "`build_generator`; the first argument of `phases.train_round` and `personalize`",
        "model part `generator` (`sends`), state-dict keys `generator.*`; a model file's "
        "`backbone` (the generator's class)",
    ),
    ("features (representation)", "z = z(x; phi)", "`z`, of dimension `dim` (`generator.dim`)", ""),
    (
        "navigator",
        "psi = {mu_k, b_k}",
        "`GaussianHead.mu`, `GaussianHead.b`",
        "arrays `head.mu`, `head.b`; `navigator-std`, `navigator-lr-scale`",
    ),
    (
        "covariance (statistic extractor)",
        "nu = {A_k}, diagonal",
        "`GaussianHead.A`",
        "array `head.A`; `covariance-average`",
    ),
    ("head (classifier)", "psi_i", "`head`: `Model.head`", "model part `head`"),
    (
        "class prototypes",
        "upsilon_{i,k}",
        "`prototypes` (Phase 1), `PersonalizedHead.upsilon` (Phase 2)",
        "`prototype-step`; never sent",
    ),
    ("shared objective", "H (Eq. LossH)", "`gaussian.shared_objective`", "metric `loss-shared`"),
    (
        "personalized objective",
        "R_c (Eq. LossR)",
        "`gaussian.personalized_objective`",
        "metric `loss-personalized`; `personalized-objective`",
    ),
    (
        "weight of R_c and of zeta",
        "lambda",
        "`lambda_` (settings fields, `train_round`, `PersonalizedHead`); FedPAC's and pFedMe's "
        "lambdas too",
        "`lambda`, `fedpac-lambda`, `pfedme-lambda`; a model file's head-args `lambda`",
    ),
    (
        "personalized head (Phase 2)",
        "psi, A_g, A_c (Eq. LossC)",
        "`adaptation.PersonalizedHead` (`mu`, `b`, `a_g`, `a_c`), `phases.personalized_head`",
        "`personal-epochs`, `personal-learning-rate`, `lbfgs-*`, `adaptation`; metric `accuracy`",
    ),
    (
        "client",
        "c = i",
        "its partition id, `partition_id`; the SuperNode holding it, `node_id`",
        "`partition-id` (node-config, metrics, model files)",
    ),
    (
        "which client a SuperNode holds",
        "",
        "`node_partitions` (node id -> partition id): "
        "`PersonalizedFedAvg`, `sample_nodes`, `federation.node_partitions`",
        "",
    ),
    ("participation rate", "q", "`fraction_train`", "`fraction-train`"),
    ("communication rounds", "R", "`num_server_rounds`", "`num-server-rounds`"),
]


def glossary_table() -> str:
    """methods.md's glossary: one name per concept across the paper, the code and the keys."""
    lines = ["| concept | paper | code | run-config, replies, files |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(c or "-" for c in row) + " |" for row in GLOSSARY]
    return "\n".join(lines)


def methods_page() -> str:
    """docs/methods.md: the registry's table, the glossary and how to add a method."""
    return f"""# Methods (`method`)

{GENERATED}

`sends`: the model parts whose arrays leave the client and are averaged (the generator phi,
which the baselines' papers call the body; the head, the classifier; pFedGM's head is the
navigator psi and the covariance nu: [glossary](#glossary)). Each method's keys are in
[run-config.md](run-config.md); what each reply holds, in [privacy.md](privacy.md).

{markdown_table()}

Statistics that are not model weights (FedPAC's prototypes and feature statistics, its
per-client heads) travel in a second ArrayRecord, `extras`, in both directions; parameters a
method keeps on the client (FedPer's head, Ditto's personal model, ...) stay in the
SuperNode's `context.state` and never leave it.

Where the baselines' own code and papers differ, the code's settings are used: FedPAC runs 1
head epoch + `local-epochs` generator epochs, and computes (V, H) before training and the
prototypes after it (`JianXu95/FedPAC`); pFedFDA estimates its statistics from the features
seen during training and adds the identity to the estimated covariance
(`cj-mclaughlin/pFedFDA`); pFedMe's server uses beta = 1 (plain averaging). pFedMe's
personalize round runs the client update once more on every client against the final global
model (pFedMe's code trains every client in every round and evaluates theta from the last
one).

## Glossary

One name per concept: the paper's symbol, the identifier in the code, and the key in the
run-config, the replies or the files where there is one (these keys are formats and keep their
names).

{glossary_table()}

## The strategies in another project

`pfedgm_app.strategies` needs only flwr and numpy. `PFedGM` is shown in
[../examples/quickstart-pfedgm](../examples/quickstart-pfedgm/README.md);
`PersonalizedFedAvg` is the same machinery without the Gaussian head. The baselines' follow
the same pattern:

- `FedPAC(head_keys=("head.weight", "head.bias"))`: clients reply with the generator in "arrays"
  and, in a second ArrayRecord "extras" (`wire.EXTRAS`), their head arrays, `protos` (K, d),
  `class-counts` (K,), `variance` (1,) and `h-ref` (K, d); every message to a node then
  carries, in "extras", the global prototypes (`protos`, `protos-count`) and the head combined
  for that node.
- `PFedFDA(means_key="head.mu", covariance_key="head.cov")`: clients send their interpolated
  statistics with the generator; replies whose covariance is not positive definite are dropped.
- A strategy of your own can subclass `PersonalizedFedAvg` and override `extras_for(node_id)`
  and `aggregate_extras(server_round, arrays, extras)` to exchange non-model arrays.

## Adding a method

Four files, edited by hand; everything else comes from the registry:

1. `pfedgm_app/methods/<name>.py`: a client plug-in (subclass `ClientPlugin`; declare the
   model parts it `sends`, override `train` or `personalize`; FedPer in `split.py` is one line,
   `sends = ("generator",)`, under its docstring; `personalize` returns `Personalized`, the
   metrics and the model they are of, which the device keeps: a head of a class no method used
   before declares its kind in `HEADS` of `pfedgm_app/client/personal_model.py`).
2. `pfedgm_app/runconfig/method_settings.py`: its `Settings` dataclass of its own keys, if any
   (each field with its bound and its meaning: `at_least`, `above` or `setting`, with `doc=`).
3. `pfedgm_app/methods/__init__.py`: its `Method(name, label, "module:Plugin", summary,
   strategy=..., settings=...)` in `REGISTERED`, in the paper's table order; `label` is the
   paper's name for it, and the summary names its keys in backquotes (this page adds their
   defaults). The plug-in and the strategy are named as strings, imported when first used, so
   that `pfedgm check` parses a run-config without torch.
4. `pyproject.toml`: its keys with their defaults in `[tool.flwr.app.config]` (Flower refuses
   a key it does not declare).

Then `{COMMAND}` writes its row here, its keys in
[run-config.md](run-config.md) and its replies in [privacy.md](privacy.md); `pfedgm-paper`
names it by its `label`. The tests say what is missing; `tests/test_registry.py` adds a toy
method this way and runs it.
"""


def presets_page() -> str:
    """docs/presets.md: the presets' table and how a preset combines with other keys."""
    return f"""# Presets (`preset`)

{GENERATED}

Each preset is a cell group of the paper's tables (`pfedgm_app/runconfig/presets.py`), and a
run-config file, `conf/<preset>.toml`, that `flwr run` takes as it is, as Flower's baselines
keep their experiments:

```bash
flwr run . --run-config conf/cifar100-dir01.toml \\
  --federation-config "num-supernodes=100 client-resources-num-cpus=1"
```

Flower takes a file alone, without key=value pairs: to change a key (a method, the rounds, an
`output-dir`), copy the file and edit the copy. The `preset` key gives the same keys by name
and combines with others on the command line, where a key given with a value other than its
default wins; one given at its default cannot be told from one not given, so the preset's
value stays, and `pfedgm check` / `pfedgm run` say so in one line:

```bash
flwr run . --run-config "preset='cifar100-dir01' method='fedpac'" \\
  --federation-config "num-supernodes=100 client-resources-num-cpus=1"
```

Each has an `-offline` twin that reads
`<ancestor>/shared/data/<folder>` (`dataset='shared:cifar100'`); EMNIST's reads real EMNIST
ByClass (62 classes), only its official test split (116 images per client at 1000 clients; the
paper's are about 814). `num-supernodes` is the federation size the preset needs.

{presets.markdown_table()}
"""


# The paper's training hyperparameters (Sec. Training Setup), each with the keys that hold it;
# the values are the keys' defaults. docs/flower-baseline.md shows this table.
HYPERPARAMETERS = (
    ("rounds", "num-server-rounds"),
    ("participation q, local epochs, batch size", "fraction-train", "local-epochs", "batch-size"),
    ("SGD learning rate, momentum, weight decay", "learning-rate", "momentum", "weight-decay"),
    ("lambda (R_c's weight, and zeta's)", "lambda"),
    ("Phase 2: epochs, SGD learning rate", "personal-epochs", "personal-learning-rate"),
    ("Phase 2: L-BFGS learning rate, iterations, cycles", "lbfgs-learning-rate",
     "lbfgs-max-iter", "lbfgs-cycles"),
    ("pFedMe lambda, Ditto mu, FedPAC lambda", "pfedme-lambda", "ditto-mu", "fedpac-lambda"),
    ("mu^0's standard deviation (the paper gives none; 0: 1/sqrt(d))", "navigator-std"),
)  # fmt: skip


def hyperparameters_page() -> str:
    """docs/hyperparameters.md: the paper's training hyperparameters, the app's defaults."""
    defaults = run_config_keys()
    rows = [
        f"| {label} | {', '.join(str(defaults[k]) for k in keys)} | "
        f"{', '.join(f'`{k}`' for k in keys)} |"
        for label, *keys in HYPERPARAMETERS
    ]
    header = "| hyperparameter | value | run-config keys |\n|---|---|---|"
    return f"{GENERATED}\n\n" + "\n".join([header, *rows]) + "\n"


def pages() -> dict[str, str]:
    """The pages that need no data: {file name: text}."""
    return {
        "run-config.md": run_config_page(),
        "methods.md": methods_page(),
        "presets.md": presets_page(),
        "hyperparameters.md": hyperparameters_page(),
    }
