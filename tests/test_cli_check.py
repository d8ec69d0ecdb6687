"""`pfedgm check`: a bad run-config refused one line per problem, without torch or flwr."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pfedgm_app.methods import METHODS
from pfedgm_app.methods.base import ClientPlugin
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_app.strategies import PersonalizedFedAvg
from pfedgm_cli.check import check, read_run_config
from pfedgm_cli.flwr_cli import APP_DIR
from tests.cli_calls import pfedgm, refused

pytestmark = pytest.mark.usefixtures("_online")  # hub ids pass `check`


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
