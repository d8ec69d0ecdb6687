"""Bad input gets one clear error before any work starts."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, fields
from pathlib import Path

import pytest

from pfedgm_app.data import load_pool, min_partition_size, resolve_dataset
from pfedgm_app.methods import METHODS, parse_run_config, run_config_keys, settings_groups
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_app.runconfig.settings import ConfigError, Settings, above, at_least
from tests.conftest import SHARED_DATA

ROOT = Path(__file__).parents[1]


def test_defaults_are_the_papers():
    """Defaults: SGD lr 0.01, momentum 0.5, wd 5e-4, batch 50, 5 epochs, lambda 1, q 0.3, ..."""
    c, method, gm = parse_run_config({})
    assert (c.learning_rate, c.momentum, c.weight_decay, c.batch_size) == (0.01, 0.5, 5e-4, 50)
    assert (c.local_epochs, gm.lambda_, c.fraction_train, method.name) == (5, 1.0, 0.3, "pfedgm")
    assert (gm.personal_epochs, gm.personal_learning_rate) == (5, 0.05)
    assert (gm.lbfgs_learning_rate, gm.lbfgs_max_iter, gm.lbfgs_cycles) == (0.05, 10, 5)
    # baselines as tuned in the paper (Ditto mu 1, FedPAC lambda 1, pFedMe lambda 5)
    keys = run_config_keys()
    assert (keys["ditto-mu"], keys["fedpac-lambda"], keys["pfedme-lambda"]) == (1.0, 1.0, 5.0)


def test_pyproject_declares_exactly_the_registered_keys_with_their_defaults():
    """[tool.flwr.app.config] (where Flower reads the keys) equals what the registry declares:
    a method's settings added or changed without pyproject.toml fails here."""
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    declared, registered = declared["config"], run_config_keys()
    assert sorted(set(registered) - set(declared)) == [], "add these keys to pyproject.toml"
    assert sorted(set(declared) - set(registered)) == [], "pyproject.toml has unknown keys"
    assert {k: v for k, v in declared.items() if v != registered[k]} == {}, "defaults differ"
    cfg, method, settings = parse_run_config(declared)
    assert cfg == RunConfig() and settings == method.settings()


def test_a_method_registered_once_is_known_everywhere():
    """Every registered method parses, has a client plug-in and a strategy, and its settings'
    keys are declared once; a method's settings group checks its own bounds."""
    for name, method in METHODS.items():
        _, parsed, settings = parse_run_config({"method": name})
        assert parsed is method and isinstance(settings, method.settings)
        assert method.plugin().settings == settings

    @dataclass(frozen=True)
    class Toy(Settings):
        prefix = "toy"
        rate: float = above(0, 0.1)
        steps: int = at_least(1, 3)

    assert Toy.keys() == {"toy-rate": 0.1, "toy-steps": 3}
    with pytest.raises(ConfigError, match="toy-steps must be >= 1, got 0"):
        Toy.from_run_config({"toy-steps": 0}).validate(RunConfig())
    with pytest.raises(ConfigError, match="toy-rate must be float"):
        Toy.from_run_config({"toy-rate": "fast"})


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"method": "fedfoo"}, "unknown method"),
        ({"dirichlet-alpha": 0.0}, "dirichlet-alpha must be > 0"),
        ({"dirichlet-alpha": -1.0}, "dirichlet-alpha must be > 0"),
        ({"fraction-train": 0.0}, "fraction-train must be > 0"),
        ({"fraction-train": 1.5}, "fraction-train must be <= 1"),
        ({"num-server-rounds": 0}, "num-server-rounds=0 trains nothing: give initial-model"),
        ({"num-server-rounds": -1}, "num-server-rounds must be >= 0"),
        ({"local-epochs": 0}, "local-epochs must be >= 1"),
        ({"learning-rate": 0.0}, "learning-rate must be > 0"),
        ({"lambda": -1.0}, "lambda must be >= 0"),
        ({"ditto-mu": -1.0}, "ditto-mu must be >= 0"),
        ({"fedpac-lambda": -0.5}, "fedpac-lambda must be >= 0"),
        ({"fedpac-head-learning-rate": 0.0}, "fedpac-head-learning-rate must be > 0"),
        ({"pfedme-lambda": -5.0}, "pfedme-lambda must be >= 0"),
        ({"pfedme-inner-steps": 0}, "pfedme-inner-steps must be >= 1"),
        ({"pfedme-tolerance": -1e-3}, "pfedme-tolerance must be >= 0"),
        ({"pfedfda-cv-folds": 1}, "pfedfda-cv-folds must be >= 2"),
        ({"fedrep-head-epochs": 0}, "fedrep-head-epochs must be >= 1"),
        ({"finetune-part": "body"}, "finetune-part must be 'model' or 'head'"),
        ({"lgfedavg-warmup-fraction": 1.0}, "lgfedavg-warmup-fraction must be < 1"),
        ({"pfedme-local-batches": -1}, "pfedme-local-batches must be >= 0"),
        ({"batch-size": 2.5}, "batch-size must be int"),
        ({"device": "tpu"}, "device must be"),
        ({"protocol": "fewshot"}, "protocol must be one of"),
        ({"protocol": "generalization", "corruption": "50C"}, "leave corruption='none'"),
        ({"eval-every": -1}, "eval-every must be >= 0"),
        ({"no-such-key": 1}, "unknown run-config key"),
        ({"navigator-std": -0.1}, "navigator-std must be >= 0"),
        ({"navigator-std": 1000.0}, "navigator-std must be <= 100"),
        ({"adaptation": "lbfgs"}, "adaptation must be one of"),
        ({"decoupling": "gm+d"}, "decoupling must be one of"),
        ({"personalized-objective": "no"}, "personalized-objective must be true or false"),
        ({"validation-fraction": 1.0}, "validation-fraction must be <= 0.9"),
        ({"validation-fraction": -0.1}, "validation-fraction must be >= 0"),
        ({"prototype-step": "fast"}, "prototype-step must be one of"),
        ({"objective-scale": "total"}, "objective-scale must be one of"),
        ({"navigator-lr-scale": 0.0}, "navigator-lr-scale must be > 0"),
        ({"head-weight-decay": "mu,W"}, "head-weight-decay names ['W']"),
        ({"covariance-average": "variance"}, "covariance-average must be one of"),
        ({"bias-average": "geometric"}, "bias-average must be one of"),
        ({"rc-input": "after"}, "rc-input must be one of"),
        ({"lbfgs-line-search": "wolfe"}, "lbfgs-line-search must be one of"),
        ({"personal-batch-size": -1}, "personal-batch-size must be >= 0"),
    ],
)
def test_bad_values_raise_clear_errors(override, message):
    with pytest.raises(ConfigError, match=None) as err:
        parse_run_config(override)
    assert message in str(err.value)


INF, NAN = float("inf"), float("nan")


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ({"num-server-rounds": 10**12}, "num-server-rounds must be <= 100000, got 1000000000000"),
        ({"local-epochs": 10**9}, "local-epochs must be <= 10000"),
        ({"batch-size": 10**12}, "batch-size must be <= 1000000"),
        ({"momentum": 50}, "momentum must be < 1, got 50.0"),
        ({"momentum": 1.0}, "momentum must be < 1"),
        ({"weight-decay": INF}, "weight-decay must be a finite number, got inf"),
        ({"weight-decay": 2.0}, "weight-decay must be <= 1"),
        ({"learning-rate": 1e308}, "learning-rate must be <= 100"),
        ({"learning-rate": NAN}, "learning-rate must be a finite number, got nan"),
        ({"seed": 1e30}, "seed must be <= 4294967295"),
        ({"seed": 2**32}, "seed must be <= 4294967295"),
        ({"seed": -1}, "seed must be >= 0"),
        ({"test-fraction": 0.999999999}, "test-fraction must be <= 0.9"),
        ({"test-fraction": 0.0}, "test-fraction must be > 0"),
        ({"validation-fraction": 0.95}, "validation-fraction must be <= 0.9"),
        ({"round-timeout": -1}, "round-timeout must be > 0, got -1.0"),
        ({"round-timeout": INF}, "round-timeout must be a finite number"),
        ({"node-wait-timeout": -5}, "node-wait-timeout must be > 0"),
        ({"node-wait-timeout": INF}, "node-wait-timeout must be a finite number"),
        ({"node-wait-timeout": 1e9}, "node-wait-timeout must be <= 10000000.0"),
        ({"dirichlet-alpha": INF}, "dirichlet-alpha must be a finite number"),
        ({"dirichlet-alpha": 1e7}, "dirichlet-alpha must be <= 1000000.0"),
        ({"min-train-samples": 10**8}, "min-train-samples must be <= 10000000"),
        ({"pool-size": 10**10}, "pool-size must be <= 1000000000"),
        ({"eval-every": 10**6}, "eval-every must be <= 100000"),
        ({"client-threads": 10**5}, "client-threads must be <= 4096"),
        ({"messages-in-flight": 10**7}, "messages-in-flight must be <= 1000000"),
        ({"min-nodes": 10**7}, "min-nodes must be <= 1000000"),
        # the methods' keys, checked whichever method runs
        ({"lambda": 1e9}, "lambda must be <= 10000.0"),
        ({"lambda": NAN}, "lambda must be a finite number"),
        ({"personal-epochs": 10**6}, "personal-epochs must be <= 10000"),
        ({"personal-learning-rate": 1e3}, "personal-learning-rate must be <= 100"),
        ({"lbfgs-learning-rate": INF}, "lbfgs-learning-rate must be a finite number"),
        ({"lbfgs-max-iter": 10**6}, "lbfgs-max-iter must be <= 10000"),
        ({"lbfgs-cycles": 10**6}, "lbfgs-cycles must be <= 10000"),
        ({"navigator-lr-scale": 1e6}, "navigator-lr-scale must be <= 1000.0"),
        ({"ditto-mu": INF}, "ditto-mu must be a finite number"),
        ({"fedpac-lambda": 1e5}, "fedpac-lambda must be <= 10000.0"),
        ({"fedpac-head-epochs": 10**5}, "fedpac-head-epochs must be <= 10000"),
        ({"fedpac-head-learning-rate": 1e3}, "fedpac-head-learning-rate must be <= 100"),
        ({"fedrep-head-epochs": 10**5}, "fedrep-head-epochs must be <= 10000"),
        ({"fedrep-refit-epochs": 10**5}, "fedrep-refit-epochs must be <= 10000"),
        ({"finetune-epochs": 10**5}, "finetune-epochs must be <= 10000"),
        ({"pfedme-lambda": NAN}, "pfedme-lambda must be a finite number"),
        ({"pfedme-inner-steps": 10**5}, "pfedme-inner-steps must be <= 10000"),
        ({"pfedme-personal-learning-rate": 101.0}, "pfedme-personal-learning-rate must be <= 100"),
        ({"pfedme-tolerance": INF}, "pfedme-tolerance must be a finite number"),
        ({"pfedme-local-batches": 10**7}, "pfedme-local-batches must be <= 1000000"),
        ({"pfedfda-cv-folds": 101}, "pfedfda-cv-folds must be <= 100"),
        ({"lgfedavg-warmup-fraction": NAN}, "lgfedavg-warmup-fraction must be a finite number"),
    ],
)
def test_every_key_has_an_upper_bound_and_a_finite_value(override, message):
    """A value that would overflow, stall or never end is refused at parse time (before any
    data is loaded), in one line that names the key."""
    with pytest.raises(ConfigError) as err:
        parse_run_config(override)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_every_numeric_key_declares_both_bounds_and_each_bound_is_accepted():
    """No number without a lower and an upper bound; the values on an inclusive bound parse."""
    on_bounds = {}
    for group in settings_groups():
        for f in fields(group):
            if type(f.default) in (int, float):
                key = group.key(f.name)
                assert {"min", "gt"} & set(f.metadata), f"{key} has no lower bound"
                assert {"max", "lt"} & set(f.metadata), f"{key} has no upper bound"
                if "max" in f.metadata:
                    on_bounds[key] = f.metadata["max"]
                elif "min" in f.metadata:
                    on_bounds[key] = f.metadata["min"]
    assert on_bounds["seed"] == 2**32 - 1 and on_bounds["test-fraction"] == 0.9
    no_dp = {"dp-noise": 0.0, "dp-epsilon": 0.0}
    parse_run_config({**on_bounds, **no_dp})
    fixed = {"min-nodes": 0}  # DP counts a fixed federation; the noise or its target, not both
    parse_run_config({**on_bounds, **fixed, "dp-epsilon": 0.0})
    parse_run_config({**on_bounds, **fixed, "dp-noise": 0.0})


def test_a_client_size_for_any_test_fraction_is_computed_not_searched():
    """`min_partition_size` equals the search it replaces (the smallest n whose train split
    keeps min-train-samples), and answers at once at the largest bounds."""

    def searched(m: int, f: float) -> int:
        n = m
        while n - math.ceil(f * n) < m:
            n += 1
        return n

    for m in (1, 2, 7, 50, 63, 101, 999):
        for f in (1e-9, 0.1, 0.2, 0.25, 1 / 3, 0.5, 0.7, 0.9):
            assert min_partition_size(m, f) == searched(m, f), (m, f)
    n = min_partition_size(10**7, 0.9)
    assert n - math.ceil(0.9 * n) >= 10**7 > n - 1 - math.ceil(0.9 * (n - 1))


def test_unknown_dataset_and_missing_path():
    with pytest.raises(ConfigError, match="unknown dataset"):
        resolve_dataset("someone/some-dataset")
    with pytest.raises(ConfigError, match="does not exist"):
        resolve_dataset("/nonexistent/cifar10")


def test_unreachable_hub_says_how_to_use_a_local_copy(monkeypatch):
    """With the hub unreachable (offline mode), the error names the local-path fix."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr("datasets.config.HF_HUB_OFFLINE", True, raising=False)
    with pytest.raises(ConfigError) as err:
        load_pool("uoft-cs/cifar10")
    assert "could not load hub dataset 'uoft-cs/cifar10'" in str(err.value)
    assert "local path" in str(err.value)


def test_wrong_image_shape_is_rejected(tmp_path):
    """A folder of 16x16 images has no generator: refused before training."""
    import datasets
    import numpy as np
    from PIL import Image

    images = [Image.fromarray(np.zeros((16, 16, 3), dtype=np.uint8)) for _ in range(4)]
    features = datasets.Features(
        {"img": datasets.Image(), "label": datasets.ClassLabel(names=["a", "b"])}
    )
    ds = datasets.Dataset.from_dict({"img": images, "label": [0, 1, 0, 1]}, features=features)
    ds.to_parquet(str(tmp_path / "train.parquet"))
    with pytest.raises(ConfigError, match="shape"):
        load_pool(str(tmp_path))


def test_every_preset_parses_by_name_and_sets_its_keys():
    for name, preset in PRESETS.items():
        assert preset.num_supernodes >= 4
        cfg, _, _ = parse_run_config({"preset": name})
        for key, value in preset.keys.items():
            assert cfg.to_run_config()[key] == value, (name, key)


def test_offline_presets_find_their_data_here(cifar10, cifar100, emnist, tinyimagenet):
    for name in PRESETS:
        if name.endswith("-offline"):
            cfg, _, _ = parse_run_config({"preset": name})
            assert Path(resolve_dataset(cfg.dataset)).parent == SHARED_DATA, name


def test_a_preset_fills_the_defaults_and_a_key_given_wins():
    defaults = run_config_keys()
    given = {**defaults, "preset": "cifar100-dir01", "method": "fedpac", "fraction-train": 0.5}
    cfg, method, _ = parse_run_config(given)
    assert (cfg.dataset, cfg.dirichlet_alpha, cfg.fraction_train) == ("uoft-cs/cifar100", 0.1, 0.5)
    assert method.name == "fedpac" and cfg.preset == "cifar100-dir01"
    with pytest.raises(ConfigError, match="unknown preset 'cifar1000'"):
        parse_run_config({"preset": "cifar1000"})
    with pytest.raises(ConfigError, match="no <ancestor>/shared/data/nowhere"):
        resolve_dataset("shared:nowhere")
