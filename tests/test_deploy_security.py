"""Security: who may join a deployment, and what leaves a device.

A secure deployment on loopback, as deploy/README.md's "Secure deployment" runs it:
certificates from `deploy/make-certs.sh`, a SuperLink serving TLS with
`--enable-supernode-auth`, device keys registered with `flwr supernode register`; only
registered devices may join and train. And, for every method, the replies its ClientApp
actually sends, against docs/privacy.md (`tests/test_methods.py` checks the plug-ins' `Reply`
below the messages).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from flwr.app import Array, ArrayRecord, MetricRecord
from safetensors import safe_open

from devtools.deployment import start_deployment
from devtools.reference.privacy import leaves_device_block, privacy_page
from pfedgm_app.methods import METHODS
from pfedgm_app.protocol import wire
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_calls import flwr_json, offline_env
from pfedgm_cli.flwr_cli import run_app
from pfedgm_cli.superlink import stop_local_superlink

ROOT = Path(__file__).resolve().parents[1]
# One short round: the run shows that registered devices train over TLS, not what they learn.
TINY = {"method": "fedavg", "num-server-rounds": 1, "local-epochs": 1, "pool-size": 1500,
        "fraction-train": 1.0, "client-threads": 1, "min-nodes": 2}  # fmt: skip


def _make_certs(out: Path, devices: int) -> None:
    made = subprocess.run([str(ROOT / "deploy" / "make-certs.sh"), str(out), str(devices)],
                          capture_output=True, text=True)  # fmt: skip
    assert made.returncode == 0, made.stderr


@pytest.mark.skipif(shutil.which("openssl") is None, reason="deploy/make-certs.sh needs openssl")
def test_make_certs_writes_what_the_superlink_and_supernodes_read(tmp_path):
    """The CA signs a server certificate for 127.0.0.1 and localhost; each device key is what
    Flower 1.42 loads (`load_ssh_*`: OpenSSH format, a NIST curve); private keys are 0600."""
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.serialization import (
        load_ssh_private_key,
        load_ssh_public_key,
    )

    _make_certs(tmp_path, 2)
    verify = [
        "openssl",
        "verify",
        "-CAfile",
        str(tmp_path / "ca.crt"),
        str(tmp_path / "server.crt"),
    ]
    verified = subprocess.run(verify, capture_output=True, text=True)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    cert = x509.load_pem_x509_certificate((tmp_path / "server.crt").read_bytes())
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    assert names.get_values_for_type(x509.DNSName) == ["localhost"]
    for i in range(2):
        key = load_ssh_private_key((tmp_path / f"device-{i}").read_bytes(), None)
        public = load_ssh_public_key((tmp_path / f"device-{i}.pub").read_bytes())
        assert isinstance(key, ec.EllipticCurvePrivateKey) and key.curve.name == "secp384r1"
        assert key.public_key() == public
    for private in ("ca.key", "server.key", "device-0", "device-1"):
        assert (tmp_path / private).stat().st_mode & 0o777 == 0o600, private
    assert not (tmp_path / "device-2").exists()


def test_supernode_authentication_needs_tls_and_started_nodes(tmp_path):
    """Flower refuses `--enable-supernode-auth` without TLS: so does `start_deployment`, before
    it starts anything; and it registers only SuperNodes it starts."""
    with pytest.raises(ValueError, match="needs TLS"):
        start_deployment(tmp_path, ["partition-id=0 num-partitions=1"], {}, registered=[0])
    with pytest.raises(ValueError, match="not started"):
        start_deployment(tmp_path, ["partition-id=0 num-partitions=1"], {}, certs=tmp_path,
                         registered=[1])  # fmt: skip


@pytest.mark.e2e
@pytest.mark.skipif(shutil.which("openssl") is None, reason="deploy/make-certs.sh needs openssl")
def test_tls_deployment_admits_registered_supernodes_only(tmp_path, mnist):
    """Three SuperNodes over TLS, two with registered keys: the third is refused by the
    SuperLink (its process exits with Flower's connection error and is never given a node id,
    so no message can reach it), and the two registered ones train and are evaluated through
    `flwr run` (`min-nodes=2` starts the run with them)."""
    certs = tmp_path / "certs"
    _make_certs(certs, 3)
    home = tmp_path / "flwr-home"
    env = {**offline_env(home), "OMP_NUM_THREADS": "1"}
    nodes = [f"partition-id={i} num-partitions=3" for i in range(3)]
    deployment = start_deployment(home, nodes, env, certs=certs, registered=[0, 1])
    cfg = {**TINY, "dataset": str(mnist), "output-dir": str(tmp_path / "out")}
    try:
        run = run_app(cfg, 2, env, timeout=300, federation=deployment.federation)
        # SuperNode 2, whose key was never registered, gave up long before the run ended
        returncode = deployment.processes[3].wait(timeout=60)
        listed = subprocess.run(
            ["flwr", "supernode", "list", deployment.federation, "--format", "json"],
            env=env, capture_output=True, text=True,
        )  # fmt: skip
    finally:
        deployment.stop()
        stop_local_superlink(home)  # in case a CLI call started a managed one there
    log = (home / "supernode-2.log").read_text()
    assert returncode != 0 and "Failed to activate SuperNode" in log, log
    assert "SuperNode ID" not in log, log  # never had a node id, so never pulled a message
    for i in (0, 1):
        assert "SuperNode ID" in (home / f"supernode-{i}.log").read_text()
    assert "https://127.0.0.1" in (home / "superlink.log").read_text()  # TLS, not plain HTTP
    assert run.ok, run.log[-3000:]
    assert run.summary["num-clients-evaluated"] == 2, run.summary
    clients = RunFolder(tmp_path / "out").read_clients()
    assert sorted(row["partition-id"] for row in clients) == [0, 1], clients
    nodes = flwr_json(listed.stdout)["nodes"]
    assert [n["status"] for n in nodes] == ["online", "online"], nodes  # the refused one: absent


def _fingerprint(array) -> tuple:
    return array.shape, str(array.dtype), array.tobytes()


FEDPAC_EXTRAS = {"head.weight", "head.bias", wire.PROTOS, wire.CLASS_COUNTS, wire.VARIANCE,
                 wire.H_REF}  # fmt: skip


@pytest.mark.slow  # every method through the ClientApp handlers
def test_what_leaves_a_device_is_what_docs_privacy_says(every_method_run):
    """Every method through the real ClientApp (`pfedgm_engine.inprocess`, MNIST, two clients,
    two rounds): each reply holds only arrays and numeric metrics; a train reply's arrays are whole
    model parts (each array of its parameter's shape), the parts the method declares, plus
    FedPAC's declared statistics, none with the client's number of samples as a dimension (no
    images, features or labels). pFedGM sends phi (`generator`), psi (`head.mu`, `head.b`), nu
    (`head.A`) and counts: no prototypes. No array of the personalized model a device saved is
    in any reply. docs/privacy.md is the page these replies make."""
    workdir, replies, models = every_method_run
    for name, method in METHODS.items():
        model = models[name]
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        sizes = {(node, k): int(c["metrics"][k]) for node, kind, c in replies[name]
                 if kind == "query" for k in (wire.NUM_EXAMPLES, wire.NUM_TEST)}  # fmt: skip
        declared = {k for part in method.sends for k in model.part_keys(part)}
        last_round = [c for _, kind, c in replies[name] if kind == "train"][-2:]  # 2 clients
        for node, kind, content in replies[name]:
            counts = {n for (i, _), n in sizes.items() if i == node}
            for record_name, record in content.items():
                assert isinstance(record, (ArrayRecord, MetricRecord)), (name, record_name)
            for key, value in content.get("metrics", {}).items():
                values = value if isinstance(value, list) else [value]
                assert all(isinstance(v, (int, float)) for v in values), (name, key, value)
                assert len(values) <= 3, (name, key)  # a scalar, or [C, H, W]
            for record_name in set(content) - {"metrics"}:
                assert kind == "train" and record_name in ("arrays", "extras"), (name, kind)
                for key, array in content[record_name].items():
                    assert isinstance(array, Array), (name, key)
                    if record_name == "arrays":  # model parameters, of their own shapes
                        assert tuple(array.shape) == shapes[key], (name, key)
                    else:  # statistics: per class or per client, never per sample
                        assert not counts & set(array.shape), (name, key, array.shape, counts)
        for content in last_round:
            assert set(content["arrays"]) == declared, name
            assert set(content.get("extras", {})) == (FEDPAC_EXTRAS if name == "fedpac" else set())
        saved = sorted(RunFolder(workdir / name).models.glob("client-*.safetensors"))
        assert len(saved) == 2, name
        sent = {_fingerprint(array.numpy()) for _, _, content in replies[name]
                for record in content.values() if isinstance(record, ArrayRecord)
                for array in record.values()}  # fmt: skip
        for path in saved:
            with safe_open(path, framework="np") as f:
                kept = {k: _fingerprint(f.get_tensor(k)) for k in f.keys()}
            assert not {k for k, v in kept.items() if v in sent}, (name, path.name)
    pfedgm = {k for _, kind, c in replies["pfedgm"] if kind == "train" for k in c["arrays"]}
    generator = set(models["pfedgm"].part_keys("generator"))
    assert pfedgm == generator | {"head.mu", "head.b", "head.A"}  # phi, psi, nu
    page = privacy_page(leaves_device_block(replies, models))
    assert (ROOT / "docs" / "privacy.md").read_text() == page, (
        "docs/privacy.md is out of date: run `python -m devtools.reference`"
    )
