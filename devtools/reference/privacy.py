"""docs/privacy.md: what leaves a device, from the replies the real ClientApp handlers send
(every method in process through `pfedgm_engine.inprocess`, two clients, two rounds), so that
the page states what the code sends rather than what it is meant to send.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pfedgm_engine.inprocess as inprocess
from devtools.same_numbers import TINY
from pfedgm_app.methods import METHODS, get_method

from . import GENERATED

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
    """docs/privacy.md around `block`, the table `leaves_device_block` made from the replies."""
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
