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


def noise_block(rounds: tuple[int, ...] = (50, 200), sampled: int = 30) -> str:
    """The noise a target epsilon costs (delta 1e-5, no amplification), by Flower's
    accountant: z, and the std it adds to each coordinate of the mean step at C = 1."""
    from pfedgm_app.strategies.privacy import noise_for_epsilon

    lines = [
        "| target epsilon | " + " | ".join(f"z, {r} rounds" for r in rounds)
        + f" | noise std per coordinate at C = 1, m = {sampled}, {rounds[0]} rounds |",
        "|---|" + "---|" * (len(rounds) + 1),
    ]  # fmt: skip
    for epsilon in (8, 4, 2, 1):
        z = [noise_for_epsilon(epsilon, r, 1e-5) for r in rounds]
        cells = [f"{v:.2f}" for v in z] + [f"{z[0] / sampled:.3f}"]
        lines.append(f"| {epsilon} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def outside_block() -> str:
    """What each strategy's clients send outside a DP run's epsilon (`outside_privacy`)."""
    users: dict[type, list[str]] = defaultdict(list)
    for name in METHODS:
        users[get_method(name).strategy_class()].append(f"`{name}`")
    return "\n".join(
        f"  - `{s.__name__}` ({', '.join(names)}): {s.outside_privacy}."
        for s, names in sorted(users.items(), key=lambda item: item[0].__name__)
    )


def shared_coordinates() -> int:
    """The parameters of pFedGM's CIFAR model: the coordinates of its step."""
    method = get_method("pfedgm")
    model = method.plugin(method.settings()).build_model((3, 32, 32), 10)
    return sum(p.numel() for p in model.parameters())


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

## Client-level differential privacy

Off by default. With `dp-epsilon` (a target) or `dp-noise` (z), a run is DP-FedAvg (McMahan
et al. 2018) on every method's shared arrays, pFedGM's phi, psi and nu included:

```bash
pfedgm run --run-config "preset='cifar10-dir05' dp-epsilon=8 num-server-rounds=50 \\
  output-dir='$PWD/outputs/dp8'" --federation-config "num-supernodes=100"
```

- **What is protected, from whom.** Each round every sampled client's step (its shared arrays
  minus those sent, L2 over all of them) is clipped to `dp-clip` (C), the m sampled clients
  weigh 1/m each whatever they claim, and Gaussian noise of std z C / m joins the mean
  (Flower's `DifferentialPrivacyServerSideFixedClipping`, `strategies/privacy.py`). The
  global model of every round is (epsilon, delta)-DP for any one client's whole data, and
  so is each personalized model toward every client but its own (whose data it holds). This
  is central DP: the ServerApp still sees each reply in the clear, so it must be trusted;
  what the DP protects against is everyone who sees the models after it (other clients,
  whoever gets a checkpoint or the final model).
- **Every sampled round releases.** The arrays released are the method's shared ones, fixed
  before round 1; a client whose training failed adds a zero step, and a round in which
  every reply failed releases the noise alone and counts it. A model left as it was would
  tell that no client trained, an event of the clients' data that no noise covers.
- **The count.** Flower's `RdpAccountant` (install `pip install -e ".[dp]"`), each round one
  Gaussian release of sensitivity C, without amplification by sampling (Flower's model for
  its fixed-clipping wrappers): the epsilon holds whichever clients were sampled, and is
  larger than an amplified count would give. `rounds.jsonl` holds `dp-epsilon` after each
  round, `summary.json` a `privacy` entry (epsilon, delta, releases, z, C, the accountant and
  what is outside), and the run's last lines say it. The noise comes from numpy's global
  generator, as in Flower's wrappers: not from the run's seed, and not cryptographically
  secure (Mironov 2012 shows what floating-point noise can leak).
- **Outside the guarantee**, sent in the clear as without DP:

{outside_block()}

- **What it costs in noise** (Flower's accountant; the paper's CIFAR protocol samples m = 30
  of 100 clients a round):

{noise_block()}

  pFedGM's CIFAR model has {shared_coordinates():,} parameters, so a step of length C has about
  C / {round(shared_coordinates() ** 0.5)} per coordinate, whatever C: the signal-to-noise
  ratio per coordinate is m / (z sqrt(d)), which C does not change. At 100 clients the noise
  of any of these epsilons outweighs the mean step on every coordinate; C sets only how far the
  noise moves the model each round.
- **Refused before round 1** (`pfedgm check`): `dp-noise` with `dp-epsilon`, a target that
  would need z above 10^4, an `aggregation` other than `mean` (a robust aggregator's output
  depends on every reply: no sensitivity C / m), `min-nodes` (the population must be fixed),
  pFedGM's `covariance-average` or `bias-average` readings other than the arrays as sent, a
  method that sends nothing (`local`: it releases nothing), and a missing `dp-accounting`.
- **With the robustness bounds**: under DP the clip is the bound. `clip-ratio` and `pull-bound`
  clip against the round's median, which couples every reply to the others and would break
  the sensitivity C / m; DP's fixed C bounds each reply's influence to C / m without
  detection ([robustness.md](robustness.md#differential-privacy-and-the-bounds)).
- `dp-clip-quantile` (gamma > 0) moves C each round toward the gamma-quantile of the steps'
  norms (Andrew et al. 2021), its count noised from the same budget. Flower 1.42's own adaptive
  wrappers are not used: they move C away from the quantile
  ([upstream/adaptive-clipping.md](upstream/adaptive-clipping.md)).
- **What the noise costs each method**, and how C was chosen per method on validation:
  [notes/dp-noise-cost.md](notes/dp-noise-cost.md).
"""
