"""What `flwr build` ships with every run: the app package and pyproject.toml, nothing else (the
command line, the paper's tooling and the in-process engine are packages of their own)."""

from __future__ import annotations

import subprocess
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow  # flwr build in a subprocess
def test_the_fab_holds_the_app_and_no_results_docs_benchmarks_tests_or_data(tmp_path):
    subprocess.run(["flwr", "build", "--app", str(ROOT)], cwd=tmp_path, check=True,
                   capture_output=True)  # fmt: skip
    (fab,) = tmp_path.glob("*.fab")
    names = zipfile.ZipFile(fab).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {".info", "pyproject.toml", "pfedgm_app"}, sorted(tops)
    assert all(n.endswith(".py") for n in names if n.startswith("pfedgm_app/"))
    packaged = {n for n in names if n.startswith("pfedgm_app/")}
    sources = {str(p.relative_to(ROOT)) for p in (ROOT / "pfedgm_app").rglob("*.py")}
    assert packaged == {s for s in sources if "__pycache__" not in s}
