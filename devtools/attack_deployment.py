"""The attacks of `bounded_attacks` in a loopback deployment: a SuperLink and one SuperNode
process per client on this machine, the attackers' ClientApp the app's own handlers whose
replies they tamper with (`clientapp_variant`), run through `flwr run` as a user would.
`benchmarks/bench_influence.py --deployment` tables them beside their in-process twins.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from devtools import bounded_attacks
from devtools.attacks import ATTACKS, RUN
from devtools.clientapp_variant import clientapp_variant
from devtools.deployment import start_deployment
from pfedgm_cli.flwr_calls import offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink

# attack -> (the tamper's expression in `bounded_attacks`, the hook before training, if any)
DEPLOYED = {
    "reversed-9": ("reversed_claiming(9.0)", None),
    "reversed-100": ("reversed_claiming(100.0)", None),
    "random-bound": ("random_at_bound", None),
    "max-harm": ("max_harm", None),
    "a-little-1": ("a_little(1.0)", None),
    "a-little-1.5": ("a_little(1.5)", None),
    "label-flip": ("lambda msg, reply, context: None", "label_flip"),
    "fixed-push": ("fixed_push", None),
}

CLIENT = """

from flwr.clientapp import ClientApp

from pfedgm_app import client_app as honest

app = ClientApp()
ATTACKERS, TAMPER, BEFORE = {attackers}, {tamper}, {before}


def _tampered(handler, msg, context):
    attacker = int(context.node_config["partition-id"]) in ATTACKERS
    if attacker and BEFORE is not None:
        BEFORE(msg, context)
    reply = handler(msg, context)
    if attacker and not reply.has_error():
        TAMPER(msg, reply, context)
    return reply


@app.query()
def query(msg, context):
    return _tampered(honest.query, msg, context)


@app.train()
def train(msg, context):
    return _tampered(honest.train, msg, context)


@app.train("personalize")
def personalize(msg, context):
    return _tampered(honest.personalize, msg, context)
"""


def client_source(name: str) -> str:
    """The attack's ClientApp module: `bounded_attacks` itself, then the tampering app."""
    tamper, before = DEPLOYED[name]
    return Path(bounded_attacks.__file__).read_text() + CLIENT.format(
        attackers=set(ATTACKS[name].attackers), tamper=tamper, before=before
    )


def run_deployed(name: str, dataset: Path, out: Path, nodes: int, **keys: Any) -> dict:
    """The summary of attack `name` on `nodes` SuperNode processes (clients' data: partitions
    of `dataset`), with RUN, the attack's keys and `keys`; raises RuntimeError with the log's
    end where the run did not complete."""
    attack = ATTACKS[name]
    config = {**RUN, **attack.run, **keys, "dataset": str(dataset), "output-dir": str(out)}
    with tempfile.TemporaryDirectory(prefix="pfedgm-deployed-") as folder:
        home, work = Path(folder) / "flwr", Path(folder) / "app"
        env = offline_env(home)
        app_dir = clientapp_variant(work, "attacked", client_source(name))
        configs = [f"partition-id={i} num-partitions={nodes}" for i in range(nodes)]
        deployment = start_deployment(home, configs, env)
        try:
            done = run_app(config, nodes, env, timeout=1800, app_dir=app_dir,
                           federation=deployment.federation)  # fmt: skip
        finally:
            deployment.stop()
            stop_local_superlink(home)
    if not done.ok:
        raise RuntimeError(f"{name} on {nodes} SuperNodes: {done.status}\n{done.log[-3000:]}")
    return done.summary
