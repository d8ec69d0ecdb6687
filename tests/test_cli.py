"""`pfedgm`, the app's one command: `check` refuses a bad run-config in one line per problem
(exit 2) before anything runs, and imports neither torch nor flwr; `run` submits nothing
then, and exits by how the run ended; `predict`, `paper` and `superlink stop` do what their
own entry points do."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from pfedgm_app.methods import METHODS
from pfedgm_app.methods.base import ClientPlugin
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_app.strategies import PersonalizedFedAvg
from pfedgm_cli import flwr_cli
from pfedgm_cli.check import check, read_run_config
from pfedgm_cli.commands import main
from pfedgm_cli.flwr_cli import APP_DIR


@pytest.fixture(autouse=True)
def _online(monkeypatch):
    """Hub ids pass `check` here (CI runs offline, where they would not: the test of that
    sets HF_HUB_OFFLINE itself)."""
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)


def pfedgm(*args: str):
    return CliRunner().invoke(main, list(args))


def refused(*args: str) -> list[str]:
    """The lines of a `pfedgm` call that must exit 2."""
    result = pfedgm(*args)
    assert result.exit_code == 2, result.output
    return result.stderr.splitlines()


def test_check_accepts_the_defaults_and_every_preset():
    result = pfedgm("check")
    assert result.exit_code == 0 and result.output.startswith("ok: method=pfedgm"), result.output
    assert len(result.output.splitlines()) == 1
    for name in PRESETS:
        assert check({"preset": name})[0] == [], name
    assert pfedgm("check", "--run-config", "preset='cifar100-dir01'").exit_code == 0


def test_every_preset_is_a_conf_file_check_takes_as_it_is():
    """`conf/<preset>.toml`, one per preset and no other, as the registry writes it
    (`python -m devtools.reference`): a stale file fails here. Each passes `check` alone, as
    Flower takes a run-config file, with the preset's keys."""
    from pathlib import Path

    from pfedgm_app.runconfig.presets import conf_file

    conf = Path(APP_DIR) / "conf"
    assert sorted(p.stem for p in conf.glob("*.toml")) == sorted(PRESETS)
    for name, preset in PRESETS.items():
        path = conf / f"{name}.toml"
        assert path.read_text() == conf_file(preset), f"{path} is stale"
        problems, cfg = check(read_run_config([str(path)]))
        assert problems == [] and cfg is not None, (name, problems)
        for key, value in preset.keys.items():
            assert getattr(cfg, key.replace("-", "_"), value) == value, (name, key)


def test_a_key_given_at_its_default_that_a_preset_replaces_is_said_in_one_line():
    result = pfedgm("check", "--run-config", "preset='smoke-offline' num-server-rounds=200")
    assert result.exit_code == 0 and "num-server-rounds=2 " in result.stdout
    (line,) = result.stderr.splitlines()
    assert "num-server-rounds=200" in line and "conf/smoke-offline.toml" in line
    result = pfedgm("check", "--run-config", "preset='smoke-offline' num-server-rounds=7")
    assert result.stderr == "" and "num-server-rounds=7 " in result.stdout  # given: it wins


# `--run-config` values as Flower's examples and docs write them, and this app's own.
RUN_CONFIGS = [
    ["num-server-rounds=5 learning-rate=0.05"],  # quickstart-pytorch's README
    ["num-server-rounds=3", "fraction-train=0.5"],  # the option given twice
    ['model-name="resnet18" use-wandb=true local-epochs=2'],
    ["method='fedavg' output-dir=\"/a b\" lambda=0.5", "resume=true"],
    ["classes='0,1,2' dirichlet-alpha=1e-1 weight-decay=5e-4 eval-every=0"],
    ["a.b=1 a.c='x'"],  # a dotted key: a nested table, flattened
    ["lr=-0.5 seed=+3"],
]


@pytest.mark.parametrize("values", RUN_CONFIGS, ids=lambda v: " ".join(v)[:30])
def test_check_reads_the_run_config_as_flower_does(values):
    """Pinned to Flower's own reading (`flwr run`'s parser): a Flower upgrade that reads
    `--run-config` otherwise fails here, not in a user's run."""
    from flwr.common.config import parse_config_args

    assert read_run_config(values) == parse_config_args(values)


def test_check_reads_a_toml_run_config_as_flower_does(tmp_path):
    from flwr.common.config import parse_config_args

    toml = tmp_path / "run.toml"
    toml.write_text('method = "ditto"\nditto-mu = 2.0\n[extra]\nkey = 1\n')
    assert read_run_config([str(toml)]) == parse_config_args([str(toml)])
    toml.write_text('method = "ditto"\nditto-mu = 2.0\n')
    assert read_run_config([str(toml)]) == {"method": "ditto", "ditto-mu": 2.0}
    assert pfedgm("check", "--run-config", str(toml)).exit_code == 0


@pytest.mark.parametrize(
    ("run_config", "line"),
    [
        ("num-server-round=5", "num-server-round: not a key of this app; did you mean "
         "num-server-rounds?"),
        ("local-epochs='five'", "local-epochs must be int, got 'five'"),
        ("fraction-train=1.5", "fraction-train must be <= 1, got 1.5"),
        ("adaptation='lbfgs'", "adaptation must be one of ('none', 'finetune', "
         "'finetune-lbfgs'), got 'lbfgs'"),
        ("preset='smoky'", "unknown preset 'smoky'"),
        ("method=fedavg", "method=fedavg: not a TOML value; quote a string: method='fedavg'"),
        ("rounds = 5", "--run-config: 'rounds' is no key=value pair"),
    ],
)  # fmt: skip
def test_check_refuses_a_bad_key_or_value_in_one_line(run_config, line):
    lines = refused("check", "--run-config", run_config)
    assert len(lines) == 1 and lines[0].startswith(line), lines


def test_check_refuses_a_missing_dataset_path_and_a_finished_output_dir(tmp_path):
    missing = tmp_path / "no-such-data"
    lines = refused("check", "-c", f"dataset='{missing}'")
    assert lines == [
        f"dataset: no such path {missing}; give the absolute path of a local copy (parquet "
        "splits or an image folder) or a hub id"
    ]
    finished = tmp_path / "run"
    finished.mkdir()
    RunFolder(finished).write_summary({})
    for extra in ("", " resume=true"):
        lines = refused("check", "-c", f"output-dir='{finished}'{extra}")
        assert len(lines) == 1 and lines[0].startswith(f"output-dir {finished}"), lines
        assert "finished" in lines[0]
    assert pfedgm("check", "-c", f"output-dir='{tmp_path / 'fresh'}'").exit_code == 0


def test_check_refuses_what_the_run_would_not_find_or_would_misplace(tmp_path, monkeypatch):
    """A relative output-dir (the ServerApp resolves it elsewhere), a shared: copy that is not
    above here, a hub id while HF_HUB_OFFLINE is set and the cache lacks it; each in one line
    with what to give instead. The local shared copy and a cached hub id pass."""
    monkeypatch.chdir(tmp_path)
    lines = refused("check", "-c", "output-dir='out'")
    assert lines == [
        "output-dir 'out' is relative: the ServerApp runs in the managed SuperLink's folder, not "
        f"here; give an absolute path, e.g. output-dir='{tmp_path / 'out'}'"
    ]
    assert refused("check", "-c", "dataset='shared:nowhere'")[0].startswith(
        "dataset 'shared:nowhere': no <ancestor>/shared/data/nowhere with parquet files"
    )
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    assert "HF_HUB_OFFLINE is set" in refused("check", "-c", "dataset='uoft-cs/cifar10'")[0]
    (tmp_path / "hf" / "datasets" / "uoft-cs___cifar10").mkdir(parents=True)
    assert pfedgm("check", "-c", "dataset='uoft-cs/cifar10'").exit_code == 0


def test_check_says_every_independent_problem_in_its_own_line(tmp_path):
    lines = refused("check", "-c", "num-server-round=5 seeds=1 lambda=1e9")
    assert lines[:2] == [
        "num-server-round: not a key of this app; did you mean num-server-rounds?",
        "seeds: not a key of this app; did you mean seed?",
    ]
    assert lines[2:] == ["lambda must be <= 10000.0, got 1000000000.0"]
    finished = tmp_path / "run"
    finished.mkdir()
    RunFolder(finished).write_summary({})
    run_config = f"dataset='{tmp_path / 'none'}' output-dir='{finished}'"
    assert [line.split()[0] for line in refused("check", "-c", run_config)] == [
        "dataset:",
        "output-dir",
    ]


def test_every_method_of_the_registry_resolves_to_a_plugin_and_a_strategy():
    """The registry names plug-ins and strategies as strings (it stays torch-free: the test
    below); each name resolves to a class of the app."""
    for method in METHODS.values():
        assert issubclass(method.plugin_class(), ClientPlugin), method.name
        assert issubclass(method.strategy_class(), PersonalizedFedAvg), method.name


def test_check_imports_neither_torch_nor_flwr():
    code = (
        "import sys\n"
        "from pfedgm_cli.commands import main\n"
        "try:\n"
        "    main(['check', '-c', \"method='fedpac' preset='smoke'\"])\n"
        "except SystemExit as exit:\n"
        "    assert exit.code == 0, exit.code\n"
        "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'flwr', 'numpy'}))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    ok = "ok: method=fedpac dataset=uoft-cs/cifar10 num-server-rounds=2 output-dir=(a fresh folder)"
    assert out.stdout.splitlines() == [ok, "[]"]


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
