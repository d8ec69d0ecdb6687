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

from pfedgm_app.paper.flwr_cli import run_app
from pfedgm_app.run_folder import RunFolder

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
    assert summary["num-clients-evaluated"] == len(folder.read_clients()) == 4  # every client
    global_model = summary["ablation-mean-accuracy"]["acc-global"]
    assert 0 <= global_model <= 100
    # Dir(0.5) label skew: the personalized heads fit each client's own classes
    assert summary["mean-accuracy"] > global_model + 5, summary


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


def test_the_examples_readme_lists_every_argument_of_the_phases_with_its_default():
    from pfedgm_app.phases import personalize, train_round

    rows = {}
    for line in _checklist().splitlines():
        if cells := re.fullmatch(r"\| `(\w+)` \| (.+?) \| (.+?) \| .+ \|", line):
            rows[cells[1]] = (cells[2], cells[3])
    for column, function in enumerate((train_round, personalize)):
        keyword = {name: p.default for name, p in inspect.signature(function).parameters.items()
                   if p.kind is p.KEYWORD_ONLY}  # fmt: skip
        assert {n for n, cells in rows.items() if cells[column] != "-"} == set(keyword)
        for name, default in keyword.items():
            assert rows[name][column] == f"`{default!r}`", (function.__name__, name)


def _imports_after(statement: str) -> set[str]:
    code = f"import sys; {statement}; print(' '.join(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return {m.split(".")[0] for m in out.stdout.split()}


@pytest.mark.slow  # fresh interpreters
def test_strategies_need_only_flwr_and_numpy_and_the_client_api_only_torch():
    server = _imports_after("import pfedgm_app.strategies, pfedgm_app.replies")
    assert "torch" not in server and "flwr" in server
    client = _imports_after("import pfedgm_app.phases, pfedgm_app.gaussian")
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
    for name in ("pyproject.toml", "README.md"):
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
    assert {"pfedgm_app/phases.py", "pfedgm_app/strategies/pfedgm.py"} <= set(names)
    assert not [n for n in names if n.startswith(("tests/", "examples/", "benchmarks/"))]


@pytest.mark.slow  # fresh interpreters
def test_the_library_imports_no_dataset_plotting_or_paper_module():
    """Another Flower project imports the strategies and the client phases: neither pulls in
    datasets, pyarrow, matplotlib nor the paper package."""
    for statement in ("import pfedgm_app.strategies", "import pfedgm_app.phases"):
        code = f"import sys; {statement}; print(' '.join(sys.modules))"
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True).stdout.split()  # fmt: skip
        tops = {m.split(".")[0] for m in out}
        assert not {"datasets", "flwr_datasets", "pyarrow", "matplotlib"} & tops, statement
        assert not [m for m in out if m.startswith("pfedgm_app.paper")], statement


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
    assert not [m for m in full if m.startswith("pfedgm_app.paper")]
