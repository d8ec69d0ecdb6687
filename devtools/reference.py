"""The reference pages under docs/, written from the code that defines what they describe.

    python -m devtools.reference            # docs/run-config.md, methods.md, presets.md, privacy.md

- `run-config.md`: every key, its default, bound and meaning (the settings groups' fields,
  formatted by `pfedgm_app.run_config_doc`);
- `methods.md`: the method registry's table (`pfedgm_app.methods.markdown_table`) and how to
  add a method;
- `presets.md`: the presets' table (`pfedgm_app.presets.markdown_table`);
- `privacy.md`: what leaves a device, from the replies the real ClientApp handlers send (every
  method in process, two MNIST clients, two rounds: a few seconds; needs the local MNIST copy,
  `--data`).

Tests regenerate the pages in memory and compare them with the files (`tests/test_docs.py`; the
privacy page in `tests/test_deploy_security.py`): a change to a method, a key or a preset that
is not regenerated fails there with this command in the message. A helper of the repository,
not part of the app.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import pfedgm_engine.inprocess as inprocess
from devtools.same_numbers import TINY
from pfedgm_app import presets
from pfedgm_app.methods import METHODS, get_method, markdown_table
from pfedgm_app.run_config_doc import run_config_tables

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
COMMAND = "python -m devtools.reference"
GENERATED = f"<!-- Written by `{COMMAND}` from the code; edit the code and run it again. -->"


def run_config_page() -> str:
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
    lines = ["| concept | paper | code | run-config, replies, files |", "|---|---|---|---|"]
    lines += ["| " + " | ".join(c or "-" for c in row) + " |" for row in GLOSSARY]
    return "\n".join(lines)


def methods_page() -> str:
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
   before declares its kind in `HEADS` of `pfedgm_app/personal_model.py`), and one
   `Method(name, label, plug-in, summary, strategy=..., settings=...)`, `label` being the
   paper's name for it.
2. `pfedgm_app/method_settings.py`: its `Settings` dataclass of its own keys, if any (each
   field with its bound and its meaning: `at_least`, `above` or `setting`, with `doc=`), and
   its line in `SETTINGS`, so that `pfedgm check` knows its keys without importing torch.
3. `pfedgm_app/methods/__init__.py`: the method in `REGISTERED`, in the paper's table order.
4. `pyproject.toml`: its keys with their defaults in `[tool.flwr.app.config]` (Flower refuses
   a key it does not declare).

Then `{COMMAND}` writes its row here, its keys in
[run-config.md](run-config.md) and its replies in [privacy.md](privacy.md); `pfedgm-paper`
names it by its `label`. The tests say what is missing; `tests/test_registry.py` adds a toy
method this way and runs it.
"""


def presets_page() -> str:
    return f"""# Presets (`preset`)

{GENERATED}

Each preset is a cell group of the paper's tables (`pfedgm_app/presets.py`), given as the
`preset` key, which combines with other keys (a key given with a non-default value wins):

```bash
flwr run . --run-config "preset='cifar100-dir01' method='fedpac'" \\
  --federation-config "num-supernodes=100 client-resources-num-cpus=1"
```

or as a file, `flwr run . --run-config conf/<preset>.toml` (written by `python -m
pfedgm_app.presets --write`). Each has an `-offline` twin that reads
`<ancestor>/shared/data/<folder>` (`dataset='shared:cifar100'`); EMNIST's reads real EMNIST
ByClass (62 classes), only its official test split (116 images per client at 1000 clients; the
paper's are about 814). `num-supernodes` is the federation size the preset needs.

{presets.markdown_table()}
"""


# What leaves a device ---------------------------------------------------------------------

# Two rounds (LG-FedAvg's warm-up round, then its own), every client trains in each; short.
REPLY_RUN = {**TINY, "fraction-train": 1.0}
PARTS = ("generator", "head", "convolutions")


def record_replies(data: Path, workdir: Path) -> tuple[dict[str, list], dict]:
    """Every method through the real ClientApp handlers (`pfedgm_engine.inprocess`, two
    clients of `data`, two rounds): {method: [(node id, message type, {record name: record})]}
    of every reply, and {method: its model}."""
    replies: dict[str, list] = defaultdict(list)
    client_app = inprocess.app_component("clientapp")
    models = {}
    for name in METHODS:

        def recording(msg, context, name=name):
            reply = client_app(msg, context)
            if not reply.has_error():
                content = dict(reply.content.items())  # record name: record
                replies[name].append((context.node_id, msg.metadata.message_type, content))
            return reply

        cfg = {**REPLY_RUN, "method": name, "dataset": str(data), "output-dir": str(workdir / name)}
        summary, _ = inprocess.run_inprocess(cfg, 2, client_app=recording)
        if summary["num-clients-evaluated"] != 2:
            raise RuntimeError(f"{name}: {summary['num-clients-evaluated']} clients of 2")
        method = get_method(name)
        models[name] = method.plugin(method.settings()).build_model((1, 28, 28), 10)
    return replies, models


def _parts(model, keys: set[str]) -> str:
    """Array keys as the whole model parts they make up: "generator, head"."""
    names, left = [], set(keys)
    for part in PARTS:
        if (part_keys := set(model.part_keys(part))) and part_keys <= left:
            names.append(part)
            left -= part_keys
    if left:
        raise ValueError(f"arrays that are no whole model part: {sorted(left)}")
    return ", ".join(names) or "nothing"


def _names(keys) -> str:
    return ", ".join(f"`{k}`" for k in keys)


def leaves_device_block(replies: dict[str, list], models: dict) -> str:
    """The table of what each method's replies hold, from the replies it sent."""

    def metrics(sent: list, kind: str) -> set[str]:
        return {k for _, kind_, content in sent if kind_ == kind for k in content["metrics"]}

    kinds = ("query", "train", "train.personalize")
    common = {
        k: sorted(set.intersection(*(metrics(s, k) for s in replies.values()))) for k in kinds
    }
    lines = [
        f"`query` (every method): metrics {_names(common['query'])}.",
        "",
        "| `method` | `train`: arrays | `train`: extras | `train`: metrics besides "
        f"{_names(common['train'])} | `train.personalize`: metrics besides "
        f"{_names(common['train.personalize'])} |",
        "|---|---|---|---|---|",
    ]
    for name, sent in replies.items():
        by_kind = defaultdict(list)
        for _, kind, content in sent:
            by_kind[kind].append(content)
        arrays = []  # per round, in order: LG-FedAvg sends other parts after its warm-up
        for content in by_kind["train"]:
            part = _parts(models[name], set(content["arrays"]))
            if part not in arrays:
                arrays.append(part)
        extras = sorted({k for c in by_kind["train"] for k in c.get("extras", ())})
        train = sorted(metrics(sent, "train") - set(common["train"]))
        final = sorted(metrics(sent, "train.personalize") - set(common["train.personalize"]))
        if metrics(sent, "query") != set(common["query"]):
            raise ValueError(f"{name}: its query reply differs from the other methods'")
        cells = [", then ".join(arrays), _names(extras), _names(train), _names(final)]
        lines.append(f"| `{name}` | " + " | ".join(c or "-" for c in cells) + " |")
    return "\n".join(lines)


def privacy_page(block: str) -> str:
    return f"""# What leaves a device

{GENERATED}

A SuperNode sends the ServerApp only its replies, and they hold only arrays (model parameters,
and FedPAC's statistics in `extras`) and numeric metrics: no images, labels, features or
per-sample values. Parameters a method keeps (FedPer's head, Ditto's personal model, ...) stay
on the device. pFedGM sends phi (`generator`), psi (`head.mu`, `head.b`) and nu (`head.A`) with
counts (`num-examples`, `num-test`, `num-classes-present`): never images, features or
prototypes (its prototypes are computed and used on the client). FedPAC, by its design, sends
class prototypes (`protos`, class means of its features) and its head. Per reply type, as the
real ClientApp handlers sent them (every method, two MNIST clients, two rounds):

{block}

LG-FedAvg sends the whole model in its warm-up rounds, then the convolutions only. The
personalized model each device evaluated in the final personalize round is saved on the device
(`model-dir`, [outputs.md](outputs.md#personalized-models-on-the-devices)) and never sent: no
array of a saved model file is in any of its method's replies. TLS
([../deploy/README.md](../deploy/README.md#secure-deployment-tls-and-supernode-authentication))
protects these values in transit; the ServerApp sees them in the clear (there is no secure
aggregation). `tests/test_deploy_security.py` records the replies again, checks that each
holds only whole model parts of their parameters' shapes and per-class statistics, that no
array of the devices' saved models is among them, and compares this page with them.
"""


def pages() -> dict[str, str]:
    """The pages that need no data: {file name: text}."""
    return {
        "run-config.md": run_config_page(),
        "methods.md": methods_page(),
        "presets.md": presets_page(),
    }


def default_data() -> Path:
    shared = os.environ.get("PFEDGM_SHARED_DATA") or ROOT.parent / "shared" / "data"
    return Path(shared) / "mnist"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", nargs="?", type=Path, default=DOCS, help="folder (docs/)")
    parser.add_argument(
        "--data", type=Path, default=default_data(), help="the local MNIST copy (parquet)"
    )
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    written = pages()
    for name, text in written.items():
        (args.out / name).write_text(text)
    if not (args.data / "train.parquet").exists():
        print(
            f"wrote {sorted(written)}; privacy.md NOT written: no {args.data}/train.parquet "
            "(give --data)",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory(prefix="pfedgm-reference-") as workdir:
        replies, models = record_replies(args.data, Path(workdir))
    (args.out / "privacy.md").write_text(privacy_page(leaves_device_block(replies, models)))
    print(f"wrote {sorted([*written, 'privacy.md'])} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
