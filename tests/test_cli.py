"""`pfedgm run` exits by how the run ended; `predict`, `superlink stop` and the entry points."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli import flwr_cli
from pfedgm_cli.flwr_cli import APP_DIR
from tests.cli_calls import pfedgm, refused

pytestmark = pytest.mark.usefixtures("_online")  # hub ids pass `check`


class FakeFlower:
    """Stands in for the `flwr` CLI (`pfedgm_cli.flwr_cli.flwr`): `run` submits run 7, `list`
    says `status`, `log --show` prints `log`; every call is recorded."""

    def __init__(self, status: str = "finished:completed", log: str = "") -> None:
        self.status, self.log, self.calls = status, log, []

    def __call__(self, args, env, check=True, timeout=None):
        self.calls.append(args)
        answers = {
            "run": {"success": True, "run-id": 7},
            "list": {"success": True, "runs": [{"run-id": 7, "status": self.status}]},
        }
        out = self.log if args[0] == "log" else json.dumps(answers[args[0]])
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")


@pytest.fixture
def flower(monkeypatch, tmp_path) -> FakeFlower:
    """A fake `flwr`, and an FLWR_HOME of the test's own: no SuperLink of the user's is seen."""
    monkeypatch.setenv("FLWR_HOME", str(tmp_path / "flwr-home"))
    fake = FakeFlower()
    monkeypatch.setattr(flwr_cli, "flwr", fake)
    monkeypatch.setattr(flwr_cli, "flwr_command", lambda: "true")  # `flwr log` ends at once
    return fake


def test_run_with_a_bad_run_config_submits_nothing(flower):
    lines = refused("run", "--run-config", "num-server-round=5")
    assert lines == ["num-server-round: not a key of this app; did you mean num-server-rounds?"]
    assert flower.calls == []


def test_run_submits_the_options_as_given_and_exits_0_when_the_run_completed(flower, tmp_path):
    run_config = f"preset='smoke' output-dir='{tmp_path / 'out'}'"
    result = pfedgm("run", "-c", run_config, "--federation-config", "num-supernodes=4")
    assert result.exit_code == 0, result.output
    options = ["--run-config", run_config, "--federation-config", "num-supernodes=4"]
    assert flower.calls[0] == ["run", str(APP_DIR), *options, "--format", "json"]
    assert result.output.splitlines()[-1] == (
        f"pfedgm run: no readable summary.json; its files: {tmp_path / 'out'}"
    )
    (tmp_path / "out").mkdir()  # a completed run's summary: its result, then where it is
    summary = {"mean-accuracy": 61.5, "std-accuracy": 7.25, "num-clients-evaluated": 4}
    RunFolder(tmp_path / "out").write_summary(summary)
    result = pfedgm("run", "-c", f"preset='smoke' output-dir='{tmp_path / 'out2'}'")
    assert "pfedgm run: run 7 finished:completed" in result.output
    outcome = flwr_cli.outcome(tmp_path / "out")
    assert (
        outcome
        == f"personalized accuracy 61.50 % (std 7.25) over 4 clients; its files: {tmp_path / 'out'}"
    )


def test_a_bare_run_is_the_smoke_run_from_the_local_copy_into_a_fresh_folder(
    flower, tmp_path, monkeypatch
):
    """No --run-config: the smoke preset's -offline twin (../shared/data is beside this
    checkout), 4 SuperNodes, output under ./outputs, said in the first line."""
    monkeypatch.chdir(tmp_path)
    result = pfedgm("run")
    assert result.exit_code == 0, result.output
    sent = flower.calls[0]
    run_config = sent[sent.index("--run-config") + 1]
    assert run_config.startswith(f"preset='smoke-offline' output-dir='{tmp_path}/outputs/smoke-")
    assert sent[sent.index("--federation-config") + 1] == "num-supernodes=4"
    assert result.output.splitlines()[0].endswith("(no --run-config: the smoke run)")


def test_a_failed_run_exits_1_with_the_apps_line_last(flower):
    flower.status = "finished:failed"
    flower.log = (
        "INFO :      pFedGM app: method=pfedgm, 4 clients, outputs in /x\n"
        "ERROR :      pFedGM app: SuperNode 3 cannot take part: its data is missing\n"
        "Traceback (most recent call last):\n  ...\n"
    )
    result = pfedgm("run")
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[-2:] == [
        "pfedgm run: run 7 finished:failed",
        "pFedGM app: SuperNode 3 cannot take part: its data is missing",
    ]


def test_superlink_stop_with_none_running_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    result = pfedgm("superlink", "stop")
    assert result.exit_code == 0
    assert result.output == f"no managed SuperLink of {tmp_path} is running\n"


def test_predict_is_its_own_command(tmp_path):
    result = pfedgm("predict", str(tmp_path), str(tmp_path))
    assert result.exit_code == 2
    assert result.stderr.startswith(f"predict: {tmp_path}: no client-<id>.safetensors in it")


@pytest.mark.slow  # subprocesses
def test_help_and_module_entry_points_name_themselves_and_write_nothing(tmp_path):
    """`pfedgm predict --help` names its command; `python -m pfedgm_cli.commands` is `pfedgm`;
    `examples/make_images.py --help` prints its usage and writes no image; an unknown preset
    gets the nearest names, not the list of all."""
    from pfedgm_app.runconfig.presets import preset_keys
    from pfedgm_app.runconfig.settings import ConfigError

    def run(*args):
        return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                              cwd=tmp_path, timeout=120)  # fmt: skip

    assert run("-m", "pfedgm_app.client.predict", "--help").stdout.startswith(
        "usage: pfedgm predict"
    )
    assert "check" in run("-m", "pfedgm_cli.commands", "--help").stdout
    made = run(str(APP_DIR / "examples" / "make_images.py"), "--help")
    assert made.stdout.startswith("usage:") and not any(tmp_path.iterdir())
    with pytest.raises(ConfigError, match=r"did you mean cifar100-dir05") as err:
        preset_keys("cifar100-dir5")
    assert "tinyimagenet" not in str(err.value)
