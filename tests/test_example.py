"""pFedGM in another Flower project (`examples/quickstart-pfedgm`): its own backbone and data,
our strategy and client API, through `flwr run`; the example's README is its code; the
package's public parts import only what they promise and build into a wheel."""

from __future__ import annotations

import inspect
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from pfedgm_app.records.run_folder import RunFolder
from pfedgm_cli.flwr_cli import run_app

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "quickstart-pfedgm"


@pytest.mark.e2e
def test_example_project_runs_pfedgm_and_personalization_beats_its_global_model(
    flower_env, tmp_path, cifar10
):
    import pyarrow.parquet as pq

    data = tmp_path / "cifar10"  # every k-th row of the shared copy: a quick data load
    data.mkdir()
    for split, rows in (("train", 2400), ("test", 400)):
        table = pq.read_table(cifar10 / f"{split}.parquet")
        every = table.num_rows // rows
        pq.write_table(table.take(list(range(0, every * rows, every))), data / f"{split}.parquet")
    cfg = {"data-dir": str(data), "samples-per-client": 500, "num-server-rounds": 3,
           "local-epochs": 1, "output-dir": str(tmp_path / "out")}  # fmt: skip
    run = run_app(cfg, 4, flower_env, timeout=900, app_dir=EXAMPLE)
    assert run.ok, run.log[-3000:]
    summary, folder = run.summary, RunFolder(tmp_path / "out")
    # `PFedGM(fraction_train=q)`, every other option its default: no message the ClientApp
    # cannot answer, no reply dropped, no client failed
    assert summary["failures"] == [] and summary["dropped-replies"] == []
    assert summary["num-clients-evaluated"] == len(folder.read_clients()) == 4  # every client
    assert [r["round"] for r in folder.read_rounds()] == [1, 2, 3]  # the app's files
    assert folder.global_model.exists() and folder.read_config()["num-clients"] == 4
    global_model = summary["ablation-mean-accuracy"]["acc-global"]
    assert 0 <= global_model <= 100
    # Dir(0.5) label skew: the personalized heads fit each client's own classes
    assert summary["mean-accuracy"] > global_model + 5, summary


@pytest.mark.e2e
def test_pfedgm_run_of_a_clientapp_without_the_personalize_handler_fails_before_round_1(
    flower_env, tmp_path, cifar10
):
    """The example with its `@app.train("personalize")` handler removed, through `pfedgm run
    APP_DIR`: no round trains, the exit is 1, and the last line names the decorator to add."""
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("outputs", "__pycache__"))
    client = app / "pfedgm_example" / "client_app.py"
    code = client.read_text()
    client.write_text(code[: code.index('@app.train("personalize")')])
    cfg = f"data-dir='{cifar10}' num-server-rounds=2 output-dir='{tmp_path / 'out'}'"
    cmd = [sys.executable, "-m", "pfedgm_cli.commands", "run", str(app), "--run-config", cfg]
    done = subprocess.run(cmd, env=flower_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True, timeout=600)  # fmt: skip
    assert done.returncode == 1, done.stdout[-3000:]
    assert "[ROUND 1" not in done.stdout
    last = done.stdout.strip().splitlines()[-1]
    assert last.startswith("pFedGM app: the ClientApp of node"), last
    assert 'add `@app.train("personalize")`' in last, last


def _example_server_app():
    """The example's ServerApp object, imported from its folder (it is not installed here)."""
    import importlib

    sys.path.insert(0, str(EXAMPLE))
    try:
        return importlib.import_module("pfedgm_example.server_app").app
    finally:
        sys.path.remove(str(EXAMPLE))


def _node(fail_round: int = 0):
    """A SuperNode of the example without data or training: a train reply moves every array
    by 0.01 (a round that is `fail_round` raises, as a client whose loss went NaN), a
    personalize reply reports accuracy 0.5 + 0.1 * its partition id on 10 test samples."""
    from flwr.app import MessageType

    from pfedgm_app.protocol.replies import personalize_reply, received, train_reply

    def answer(msg, context):
        pid = context.node_config["partition-id"]
        arrays, config = received(msg)  # the handler check's empty probe raises here: passes
        if msg.metadata.message_type == MessageType.TRAIN:
            if config["server-round"] == fail_round:
                raise ValueError("a train reply has non-finite metrics ['loss']")
            state = {k: v + 0.01 for k, v in arrays.to_torch_state_dict().items()}
            return train_reply(msg, state, {"num-examples": 10, "loss": 1.0 + pid})
        return personalize_reply(msg, {"accuracy": 0.5 + 0.1 * pid, "acc-global": 0.3,
                                       "num-test": 10})  # fmt: skip

    return answer


def _run_example(out: Path, fail_round: int = 0, grids: list | None = None) -> None:
    """The example's ServerApp over 3 in-process SuperNodes (`_node`), 2 rounds, into `out`;
    its grid (what was sent) appended to `grids`."""
    from flwr.app import Context, RecordDict

    from pfedgm_engine.inprocess import InProcessGrid

    cfg = {"num-server-rounds": 2, "fraction-train": 1.0, "local-epochs": 1, "data-dir": "",
           "samples-per-client": 0, "output-dir": str(out)}  # fmt: skip
    grid = InProcessGrid(cfg, 3, client_app=_node(fail_round))
    if grids is not None:
        grids.append(grid)
    _example_server_app()(grid, Context(1, 0, {}, RecordDict(), cfg))


def test_the_examples_serverapp_writes_the_apps_files(tmp_path, task_identity):
    """The example's ServerApp writes its run's folder as the app's does, in its format
    (`run_outputs.RunOutputs`): config, rounds, the final global model, clients, the summary
    last; a second run into the finished folder is refused before any message."""
    import torch

    from pfedgm_app.records.initial_model import load_state
    from pfedgm_app.records.plots import EVAL_MEAN
    from pfedgm_app.runconfig.settings import ConfigError

    _run_example(tmp_path / "out")
    folder = RunFolder(tmp_path / "out")
    summary = folder.read_summary()
    assert summary["num-clients"] == summary["num-clients-evaluated"] == 3
    assert summary["rounds"] == 2 and summary["strategy"] == "PFedGM"
    assert summary["mean-accuracy"] == pytest.approx(60.0)  # percent, as the app's
    assert summary["ablation-mean-accuracy"] == {"acc-global": pytest.approx(30.0)}
    assert summary["dropped-replies"] == [] and summary["rounds-without-update"] == {}
    rows = folder.read_clients()
    assert sorted(r["accuracy"] for r in rows) == pytest.approx([50.0, 60.0, 70.0])
    assert all(r["num-test"] == 10 for r in rows)
    rounds = folder.read_rounds()
    assert [r["round"] for r in rounds] == [1, 2] and rounds[0]["loss"] == pytest.approx(2.0)
    assert rounds[-1][EVAL_MEAN] == pytest.approx(60.0)  # the final evaluation, last round
    config = folder.read_config()
    assert config["num-clients"] == 3 and config["output-dir"] == str(tmp_path / "out")
    from pfedgm_example.task import Net  # imported by the run above

    torch.manual_seed(0)  # the example's initial model, moved 0.01 in each of 2 rounds
    start = Net().state_dict()
    final = load_state(folder.global_model)
    assert list(final) == list(start)
    assert all(torch.allclose(final[k], start[k] + 0.02) for k in start)
    grids = []
    with pytest.raises(ConfigError, match="already holds a finished run"):
        _run_example(tmp_path / "out", grids=grids)
    assert grids[0].starts == []  # refused before any message
    assert folder.read_summary()["seconds-total"] == summary["seconds-total"]  # untouched


def test_the_examples_run_records_a_failed_round_and_sets_a_stopped_runs_files_aside(
    tmp_path, task_identity
):
    RunFolder(tmp_path).rounds.write_text('{"round": 1}\n')  # a stopped run's
    _run_example(tmp_path, fail_round=1)
    summary = RunFolder(tmp_path).read_summary()
    assert list(summary["rounds-without-update"]) == ["1"]
    assert len(summary["dropped-replies"]) == 3 and "non-finite" in summary["dropped-replies"][0]
    assert [r["round"] for r in RunFolder(tmp_path).read_rounds()] == [1, 2]
    (kept,) = tmp_path.glob("unfinished-*")
    assert (kept / "rounds.jsonl").read_text() == '{"round": 1}\n'


def _checklist() -> str:
    text = (EXAMPLE / "README.md").read_text()
    return text[text.index("## Coming from quickstart-pytorch") :]


def test_the_examples_readme_is_its_code():
    """Every code block of the example's checklist appears verbatim in the example project,
    whose end-to-end run above proves it works."""
    sources = "\n".join(p.read_text() for p in sorted(EXAMPLE.rglob("*.py")))
    sources += (EXAMPLE / "pyproject.toml").read_text()
    blocks = re.findall(r"```(?:python|toml)\n(.*?)```", _checklist(), flags=re.S)
    assert len(blocks) >= 5
    for block in blocks:
        assert block in sources, f"README block not in examples/quickstart-pfedgm:\n{block}"


def _table(text: str) -> dict[str, tuple[str, str]]:
    """{name: (its cell for the first function, for the second)} of a README table's rows."""
    rows = {}
    for line in text.splitlines():
        if cells := re.fullmatch(r"\| `(\w+)` \| (.+?) \| (.+?) \| .+ \|", line):
            rows[cells[1]] = (cells[2], cells[3])
    return rows


def test_the_examples_readme_lists_every_argument_of_the_phases_with_its_default():
    """Both tables: the keywords of `train_round` and `personalize`, and the fields of their
    options (`Phase1Options`, `Phase2Options`, each phase's default `options`)."""
    from dataclasses import fields

    from pfedgm_app.learning.phases import Phase1Options, Phase2Options, personalize, train_round

    above, below = _checklist().split("| field of `options` |")
    tables = _table(above), _table(below.split("\n\n")[0])  # the keywords', the options'
    for column, (function, cls) in enumerate(((train_round, Phase1Options),
                                              (personalize, Phase2Options))):  # fmt: skip
        parameters = inspect.signature(function).parameters
        assert parameters["options"].default == cls()
        keyword = {n: p.default for n, p in parameters.items() if p.kind is p.KEYWORD_ONLY}
        options = {f.name: f.default for f in fields(cls)}
        for rows, defaults in zip(tables, (keyword, options), strict=True):
            assert {n for n, cells in rows.items() if cells[column] != "-"} == set(defaults)
            for name, default in defaults.items():
                assert rows[name][column] == f"`{default!r}`", (function.__name__, name)


def _imports_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {m.split(".")[0] for m in out.stdout.split()}


@pytest.mark.slow  # fresh interpreters
def test_strategies_need_only_flwr_and_numpy_and_the_client_api_only_torch():
    server = _imports_after("import pfedgm_app.strategies, pfedgm_app.protocol.replies")
    assert "torch" not in server and "flwr" in server
    client = _imports_after("import pfedgm_app.learning.phases, pfedgm_app.learning.gaussian")
    assert "flwr" not in client and "torch" in client
    assert not {"datasets", "flwr_datasets", "torchvision"} & (server | client)


@pytest.mark.slow  # a wheel build
def test_the_package_builds_a_wheel_another_project_can_depend_on(tmp_path):
    import pfedgm_app

    assert re.fullmatch(r"\d+\.\d+\.\d+.*", pfedgm_app.__version__)
    source = tmp_path / "source"  # a copy: setuptools writes build/ into the tree it builds
    shutil.copytree(
        ROOT / "pfedgm_app", source / "pfedgm_app", ignore=shutil.ignore_patterns("__pycache__")
    )
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, source / name)
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        str(tmp_path),
        str(source),
    ]
    subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("pfedgm_app-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert f"Version: {pfedgm_app.__version__}" in meta and "Requires-Dist: flwr" in meta
    assert "License-Expression: Apache-2.0" in meta and "License-File: LICENSE" in meta
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert {"pfedgm_app/learning/phases.py", "pfedgm_app/strategies/pfedgm.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "examples/", "benchmarks/"))]


@pytest.mark.slow  # fresh interpreters
def test_the_library_imports_no_dataset_plotting_or_paper_module():
    """Another Flower project imports the strategies and the client phases: neither pulls in
    datasets, pyarrow, matplotlib nor the paper package."""
    for statement in ("import pfedgm_app.strategies", "import pfedgm_app.learning.phases"):
        code = f"import sys; {statement}; print(' '.join(sys.modules))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
        tops = {m.split(".")[0] for m in out}
        assert not {"datasets", "flwr_datasets", "pyarrow", "matplotlib"} & tops, statement
        assert not [m for m in out if m.startswith("pfedgm_paper")], statement


@pytest.mark.slow  # a fresh interpreter
def test_the_apps_clientapp_imports_no_dataset_library_until_it_decodes():
    """A deployment starts a fresh ClientApp process per message; one whose client is in the
    disk cache must not pay the seconds `datasets` / flwr-datasets take to import."""
    client = _imports_after("import pfedgm_app.client_app")
    assert "torch" in client
    heavy = {"datasets", "flwr_datasets", "pyarrow", "matplotlib", "safetensors", "PIL"}
    assert not heavy & client
    full = subprocess.run([sys.executable, "-c", "import sys, pfedgm_app.client_app; "
                           "print(' '.join(sys.modules))"], capture_output=True, text=True,
                          check=True).stdout.split()  # fmt: skip
    assert not [m for m in full if m.startswith("pfedgm_paper")]
