"""`pfedgm run` refuses a misspelt `--federation-config` key or SUPERLINK name before anything is
submitted, in one line naming the nearest valid one."""

from __future__ import annotations

import os
import re
import subprocess

from click.testing import CliRunner

from pfedgm_cli.commands import main
from pfedgm_cli.federation_args import (
    SIMULATION_KEYS,
    connection_problem,
    federation_config_problems,
)
from pfedgm_cli.flwr_calls import flwr_command


def test_a_misspelt_federation_config_key_is_named_as_given_with_the_nearest():
    problems = federation_config_problems(["num-supernode=4 client-resources-num-cpus=1"])
    assert problems == [
        "--federation-config num-supernode: not a key of Flower's simulation; "
        "did you mean num-supernodes?"
    ]
    assert federation_config_problems(["num-supernodes=4", "verbose=true"]) == []
    assert "one of num-supernodes," in federation_config_problems(["colour=2"])[0]


def test_a_misspelt_connection_lists_the_connections(tmp_path):
    (tmp_path / "config.toml").write_text(
        '[superlink]\ndefault = "local"\n[superlink.local]\naddress = ":local:"\n'
        '[superlink.my-federation]\naddress = "127.0.0.1:9093"\ninsecure = true\n'
    )
    assert connection_problem("my-federation", tmp_path) is None
    line = connection_problem("my-federaton", tmp_path)
    assert line == (
        f"SUPERLINK my-federaton: not a connection of {tmp_path / 'config.toml'}; did you mean "
        "my-federation? its connections: local, my-federation (deploy/README.md adds one)"
    )
    assert connection_problem("any", tmp_path / "no-home-yet") is None  # Flower writes one


def test_pfedgm_run_refuses_them_before_submitting(tmp_path, monkeypatch):
    monkeypatch.setenv("FLWR_HOME", str(tmp_path))
    (tmp_path / "config.toml").write_text('[superlink]\n[superlink.local]\naddress = ":local:"\n')
    runner = CliRunner()
    result = runner.invoke(main, ["run", "--federation-config", "num-supernode=4"])
    assert result.exit_code == 2 and "did you mean num-supernodes?" in result.output
    result = runner.invoke(main, ["run", ".", "locl"])
    assert result.exit_code == 2 and "did you mean local?" in result.output


def test_the_keys_are_those_of_flowers_simulation_config_command(tmp_path):
    """SIMULATION_KEYS against the options of `flwr federation simulation-config --help`
    (Flower's CLI, the public face of those keys): a Flower upgrade that changes them fails
    here."""
    env = {**os.environ, "FLWR_HOME": str(tmp_path), "COLUMNS": "200", "NO_COLOR": "1"}
    cmd = [flwr_command(), "federation", "simulation-config", "--help"]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60).stdout
    options = set(re.findall(r"--([a-z0-9-]+)", re.sub(r"\x1b\[[0-9;]*m", "", out)))
    assert options - {"format", "help"} == set(SIMULATION_KEYS), out
