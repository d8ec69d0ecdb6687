"""A run from a stored global model (`initial-model`): what cannot work is refused in one line
before any message (the files, the stored run's method and classes) or, against the model the
clients' data gives, before any train or personalize message; with `num-server-rounds=0` a run
is the personalize round alone. The model is safetensors: a legacy torch pickle is refused,
never loaded, and `pfedgm-paper collect` converts a finished run's."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest
import torch
from flwr.app import ArrayRecord

from pfedgm_app.methods import get_method, parse_run_config
from pfedgm_app.records import initial_model
from pfedgm_app.records.initial_model import load_state
from pfedgm_app.records.results import RunWriter
from pfedgm_app.records.run_folder import RunFolder
from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError
from pfedgm_app.server.experiment import starting_model
from pfedgm_engine.inprocess import run_inprocess
from pfedgm_paper import cli, records

MNIST, CIFAR = (1, 28, 28), (3, 32, 32)


def _stored_run(folder, method="pfedgm", shape=MNIST, classes=10, **keys):
    """A finished run's global model and config.json, as `results.RunWriter` writes them."""
    cfg = RunConfig(method=method, dataset="ylecun/mnist", **keys)
    folder.mkdir(parents=True)
    stored = RunFolder(folder)
    RunWriter(folder).save_weights(_arrays(cfg, shape, classes, seed=1))
    stored.write_config({**cfg.to_run_config(), "num-clients": 2})
    return folder


def _arrays(cfg, shape, classes, seed=0):
    method = get_method(cfg.method)
    return ArrayRecord(
        starting_model(RunConfig(seed=seed), method.plugin(), shape, classes).state_dict()
    )


def _cfg(**keys) -> RunConfig:
    """The run-config of a run with no rounds; `keys` as fields (initial_model=...)."""
    return parse_run_config({"num-server-rounds": 0,
                             **{k.replace("_", "-"): v for k, v in keys.items()}})[0]  # fmt: skip


def test_the_stored_model_replaces_the_random_one_array_by_array(tmp_path):
    stored = _stored_run(tmp_path / "run")
    for given in (stored, RunFolder(stored).global_model):  # the folder or the file
        cfg = _cfg(initial_model=str(given), dataset="ylecun/mnist")
        initial = initial_model.read(cfg)
        arrays = initial_model.fit(initial, _arrays(cfg, MNIST, 10))
        saved = load_state(RunFolder(stored).global_model)
        assert list(arrays) == list(saved)
        assert all(torch.equal(torch.from_numpy(arrays[k].numpy()), v) for k, v in saved.items())


@pytest.mark.parametrize(
    ("make", "keys", "message"),
    [
        (lambda d: d, {}, "no file"),
        (lambda d: (_stored_run(d), RunFolder(d).config.unlink(), d)[-1], {},
         "no readable config.json beside global_model.safetensors"),
        (lambda d: _stored_run(d), {"method": "fedavg"},
         "is a pfedgm model and this run's method is fedavg: set method='pfedgm'"),
        (lambda d: _stored_run(d), {"classes": "a,b,c,d,e,f,g,h,i,j"},
         "was trained on the classes of ylecun/mnist (0, 1, 2, 3, 4, ... (10)), this run's are "
         "a, b, c, d, e, ... (10)"),
        (lambda d: (_stored_run(d), RunFolder(d).global_model.write_text("x"), d)[-1], {},
         "is not a readable model"),
    ],
)  # fmt: skip
def test_what_cannot_work_is_refused_before_any_message(tmp_path, make, keys, message):
    given = make(tmp_path / "run")
    cfg = _cfg(initial_model=str(given), dataset="ylecun/mnist", **keys)
    with pytest.raises(ConfigError) as err:
        initial_model.read(cfg)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


@pytest.mark.parametrize(
    ("value", "why"),
    [(float("nan"), "holds NaN or Inf"), (float("-inf"), "holds NaN or Inf"),
     (1e7, "holds values beyond 1e+06 in magnitude")],
    ids=["nan", "inf", "beyond the contract"],
)  # fmt: skip
def test_a_model_whose_values_no_round_could_send_is_refused_naming_the_array(tmp_path, value, why):
    """A diverged run's model (or an altered file), refused in `read`, before any message:
    each client would fail on it, or the server drop every reply, rounds later."""
    stored = RunFolder(_stored_run(tmp_path / "run"))
    state = load_state(stored.global_model)
    name = [k for k, v in state.items() if v.is_floating_point()][-1]
    state[name].view(-1)[0] = value
    initial_model.save_state(state, stored.global_model)
    with pytest.raises(ConfigError) as err:
        initial_model.read(_cfg(initial_model=str(stored.path), dataset="ylecun/mnist"))
    message = str(err.value)
    assert f"{stored.global_model} is not used: array {name!r} {why}" in message, message
    assert "\n" not in message


@pytest.mark.parametrize(
    ("shape", "classes", "message"),
    [
        (CIFAR, 10, "generator.features.0.weight is ((16, 1, 5, 5), 'float32') there, "
         "((16, 3, 5, 5), 'float32') here"),
        (MNIST, 100, "head.mu is ((10, 128), 'float32') there, ((100, 128), 'float32') here"),
    ],
)  # fmt: skip
def test_a_model_of_other_images_or_classes_does_not_fit_the_clients(tmp_path, shape, classes,
                                                                    message):  # fmt: skip
    cfg = _cfg(initial_model=str(_stored_run(tmp_path / "run")), dataset="ylecun/mnist")
    initial = initial_model.read(cfg)
    with pytest.raises(ConfigError) as err:
        initial_model.fit(initial, _arrays(cfg, shape, classes))
    assert message in str(err.value) and "a pfedgm model of" in str(err.value), str(err.value)


def test_no_rounds_need_an_initial_model():
    with pytest.raises(ConfigError, match="num-server-rounds=0 trains nothing: give initial"):
        parse_run_config({"num-server-rounds": 0})
    with pytest.raises(ConfigError, match="num-server-rounds must be >= 0"):
        parse_run_config({"num-server-rounds": -1})


def _finished(folder: Path, model: str) -> tuple[RunFolder, dict[str, torch.Tensor]]:
    """A finished run's folder and the state dict of its global model, kept as safetensors
    ("safetensors"), as an earlier version's torch pickle ("legacy"), or with a pickle of no
    tensors in its place ("odd")."""
    run = RunFolder(_stored_run(folder))
    run.write_summary({"method": "pfedgm", "output-dir": str(folder)})
    state = load_state(run.global_model)
    if model != "safetensors":
        run.global_model.unlink()
        torch.save(state if model == "legacy" else {"epochs": 5}, run.legacy_global_model)
    return run, state


def test_collect_converts_a_legacy_model_and_copies_a_safetensors_one(tmp_path, capsys):
    """Each finished run's model lands beside its records as safetensors: a legacy pickle's
    tensors identical, in their order; a safetensors one as is; a pickle of no tensors is
    left out with one line naming it, its records copied all the same."""
    out, to = tmp_path / "out", tmp_path / "collected"
    runs = {m: _finished(out / "mnist" / m / "seed0", m) for m in ("safetensors", "legacy", "odd")}
    assert cli.main(["collect", "--out", str(out), "--to", str(to)]) == 0
    kept = {m: RunFolder(to / "mnist" / m / "seed0") for m in runs}
    (source, _), copy = runs["safetensors"], kept["safetensors"].global_model
    assert copy.read_bytes() == source.global_model.read_bytes()
    (source, state), converted = runs["legacy"], load_state(kept["legacy"].global_model)
    assert list(converted) == list(state)
    assert all(torch.equal(converted[k], v) for k, v in state.items())
    assert not kept["legacy"].legacy_global_model.exists()  # no pickle travels
    odd = kept["odd"]
    assert odd.finished and odd.config.exists() and not odd.global_model.exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(runs["odd"][0].legacy_global_model) in err[0], err


def test_collect_leaves_a_model_over_the_committed_size_in_the_runs_folder(
    tmp_path, capsys, monkeypatch
):
    """A results folder is committed: a model over `MAX_KEPT_MODEL` is not copied into it
    (one line names it); the run's own folder keeps it, and the records are copied."""
    out, to = tmp_path / "out", tmp_path / "collected"
    source, _ = _finished(out / "mnist" / "pfedgm" / "seed0", "safetensors")
    monkeypatch.setattr(records, "MAX_KEPT_MODEL", source.global_model.stat().st_size - 1)
    assert cli.main(["collect", "--out", str(out), "--to", str(to)]) == 0
    kept = RunFolder(to / "mnist" / "pfedgm" / "seed0")
    assert kept.finished and not kept.global_model.exists() and source.global_model.exists()
    assert "not collected" in capsys.readouterr().out


@pytest.mark.parametrize("model", ["safetensors", "legacy"])
def test_initial_model_starts_from_a_collected_run_as_saved(tmp_path, model):
    """A collected folder (records with no absolute path, the converted or copied model) is an
    initial-model: its arrays are the run's, array by array."""
    out, to = tmp_path / "out", tmp_path / "collected"
    _, state = _finished(out / "mnist" / "pfedgm" / "seed0", model)
    assert cli.main(["collect", "--out", str(out), "--to", str(to)]) == 0
    cfg = _cfg(initial_model=str(to / "mnist" / "pfedgm" / "seed0"), dataset="ylecun/mnist")
    arrays = initial_model.fit(initial_model.read(cfg), _arrays(cfg, MNIST, 10))
    assert list(arrays) == list(state)
    assert all(torch.equal(torch.from_numpy(arrays[k].numpy()), v) for k, v in state.items())


class _SideEffect:
    """Unpickled, it creates `marker`: what a pickle can do beyond holding tensors."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("named", ["the file", "its folder"])
def test_a_legacy_pickle_is_refused_naming_collect_and_never_loaded(tmp_path, monkeypatch,
                                                                    named):  # fmt: skip
    run = RunFolder(_stored_run(tmp_path / "run"))
    run.global_model.unlink()  # an earlier version's run: global_model.pt only
    marker = tmp_path / "unpickled"
    run.legacy_global_model.write_bytes(pickle.dumps(_SideEffect(marker)))
    pickle.loads(run.legacy_global_model.read_bytes())  # the file does run code when unpickled
    assert marker.exists()
    marker.unlink()
    loads: list = []
    monkeypatch.setattr(torch, "load", lambda *a, **k: loads.append(a) or pytest.fail("loaded"))
    given = run.legacy_global_model if named == "the file" else run.path
    with pytest.raises(ConfigError) as err:
        initial_model.read(_cfg(initial_model=str(given), dataset="ylecun/mnist"))
    message = str(err.value)
    assert "pfedgm-paper collect --out" in message and "\n" not in message, message
    assert str(run.legacy_global_model) in message
    assert loads == [] and not marker.exists()


TINY = {"local-epochs": 1, "personal-epochs": 1, "lbfgs-cycles": 1, "pool-size": 600,
        "fraction-train": 1.0, "client-threads": 1}  # fmt: skip


def _recording(kinds):
    from pfedgm_engine.inprocess import app_component

    client_app = app_component("clientapp")

    def recording(msg, context):
        kinds.append(msg.metadata.message_type)
        return client_app(msg, context)

    return recording


def test_a_run_with_no_rounds_only_personalizes_and_a_misfit_sends_nothing(tmp_path, mnist):
    """In process, MNIST: one trained round, then `num-server-rounds=0` from its output: the
    clients are asked who they are, then personalize (no train message); each keeps a model
    that says where its phi came from. A run of other classes from it sends no message."""
    trained = tmp_path / "trained"
    run_inprocess({**TINY, "num-server-rounds": 1, "dataset": str(mnist),
                   "output-dir": str(trained)}, 2)  # fmt: skip
    kinds: list[str] = []
    cfg = {**TINY, "num-server-rounds": 0, "initial-model": str(trained), "dataset": str(mnist),
           "output-dir": str(tmp_path / "joined")}  # fmt: skip
    summary, _ = run_inprocess(cfg, 2, client_app=_recording(kinds))
    assert kinds == ["query"] * 2 + ["train.personalize"] * 2
    assert summary["rounds"] == 0 and summary["num-clients-evaluated"] == 2
    assert summary["rounds-before"] == 1  # the budget behind its model: the stored run's
    collected = tmp_path / "collected"
    records.copy_results(RunFolder(tmp_path / "joined"), collected)
    assert RunFolder(collected).finished and not RunFolder(collected).global_model.exists()
    rows = RunFolder(tmp_path / "joined").read_rounds()
    assert [r["round"] for r in rows] == [0] and "loss" not in rows[0]
    from pfedgm_app.client.personal_model import load

    meta = load(RunFolder(tmp_path / "joined").models / "client-1.safetensors").meta
    assert (meta["rounds"], meta["initial-model"]) == (0, str(trained))
    kinds.clear()
    classes = ",".join(f"c{i}" for i in range(100))
    with pytest.raises(ConfigError, match="was trained on the classes of"):
        run_inprocess({**cfg, "classes": classes, "output-dir": str(tmp_path / "misfit")}, 2,
                      client_app=_recording(kinds))  # fmt: skip
    assert kinds == []


@pytest.mark.parametrize("scale", [0.2, 5.4])
def test_a_rescaled_model_gives_z_times_s_and_starts_a_run_as_any_stored_one(tmp_path, scale):
    from devtools.rescale_features import main

    stored = _stored_run(tmp_path / "run")
    assert main([str(stored), str(tmp_path / "probe"), "--scale", str(scale)]) == 0
    before, after = (
        load_state(f / "global_model.safetensors") for f in (stored, tmp_path / "probe")
    )
    method, cfg = get_method("pfedgm"), RunConfig(dataset="ylecun/mnist")
    models = [starting_model(cfg, method.plugin(), MNIST, 10) for _ in range(2)]
    for model, state in zip(models, (before, after), strict=True):
        model.load_state_dict(state)
    x = torch.randn(8, *MNIST)
    with torch.no_grad():
        z, z_scaled = (m.generator.eval()(x) for m in models)
    assert z.abs().max() > 0
    torch.testing.assert_close(z_scaled, scale * z)
    unchanged = [k for k in before if not k.startswith("generator.features.")]
    assert unchanged and all(torch.equal(before[k], after[k]) for k in unchanged)  # psi, nu
    assert initial_model.read(_cfg(initial_model=str(tmp_path / "probe"), dataset="ylecun/mnist"))


def test_a_scale_that_is_not_positive_is_refused_before_anything_is_written(tmp_path):
    from devtools.rescale_features import main

    with pytest.raises(SystemExit, match="--scale must be > 0"):
        main([str(_stored_run(tmp_path / "run")), str(tmp_path / "probe"), "--scale", "-1"])
    assert not (tmp_path / "probe").exists()
