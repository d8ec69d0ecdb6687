"""The library's API reference, generated from the docstrings by pdoc into docs/api/.

    python -m devtools.api

Every public name of the modules another Flower project uses (`MODULES`), with its parameters
(`navigator_keys`, `covariance_keys`, ... of the strategies included) and its docstring.
`docs/api/versions.json` records the versions the pages were written with; tests/test_docs.py
regenerates them and fails when they differ, where those versions are installed.
"""

from __future__ import annotations

import json
import platform
import sys
import tempfile
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api"
MODULES = (
    "pfedgm_app.strategies",  # the server side: PFedGM, PersonalizedFedAvg, FedPAC, pFedFDA
    "pfedgm_app.learning.phases",  # the client side: train_round (Phase 1), personalize (Phase 2)
    "pfedgm_app.runconfig.readings",  # the phases' options (Phase1Options, Phase2Options)
    "pfedgm_app.learning.phase_data",
    "pfedgm_app.learning.gaussian",
    "pfedgm_app.learning.adaptation",
    "pfedgm_app.protocol.replies",
    "pfedgm_app.protocol.wire",  # the message types, record names and metric keys both sides use
    "pfedgm_app.data.partitioner",
    "pfedgm_app.records.run_outputs",  # a ServerApp's run folder, written as the app writes its own
    "pfedgm_app.records.run_folder",  # RunFolder: the files of a run, named and read back
    "pfedgm_app.client.personal_model",  # a device's personalized model: saved, loaded, checked
    "pfedgm_cli.flwr_cli",  # run_app: `flwr run` from Python, followed to its end
)
COMMAND = "python -m devtools.api"


def versions() -> dict[str, str]:
    """What the pages depend on besides the code: the renderer, the inherited classes, Python."""
    # markupsafe escapes the quotes of defaults and pygments colours signatures: both change pages
    names = ("pdoc", "markupsafe", "pygments", "flwr", "torch", "flwr-datasets")
    found = {name: version(name) for name in names}
    return {**found, "python": ".".join(platform.python_version_tuple()[:2])}


def write(to: Path = API) -> list[Path]:
    """The pages of `MODULES` and `versions.json` into `to`; returns the files written."""
    import pdoc
    import pdoc.render

    pdoc.render.configure(docformat="markdown", search=False, show_source=False)
    to.mkdir(parents=True, exist_ok=True)
    pdoc.pdoc(*MODULES, output_directory=to)
    for page in to.rglob("*.html"):  # a default like APP_DIR: the same pages from any clone
        page.write_text(page.read_text().replace(str(ROOT), "&lt;checkout&gt;"))
    (to / "versions.json").write_text(json.dumps(versions(), indent=2, sort_keys=True) + "\n")
    return sorted(p for p in to.rglob("*") if p.is_file())


def stale() -> list[str]:
    """The pages of docs/api that differ from a fresh rendering (names, relative to it)."""
    with tempfile.TemporaryDirectory() as tmp:
        fresh = Path(tmp)
        write(fresh)
        names = {str(p.relative_to(fresh)) for p in fresh.rglob("*") if p.is_file()}
        names |= {str(p.relative_to(API)) for p in API.rglob("*") if p.is_file()}
        return sorted(
            n
            for n in names
            if not (API / n).is_file()
            or not (fresh / n).is_file()
            or (API / n).read_bytes() != (fresh / n).read_bytes()
        )


if __name__ == "__main__":
    for path in write():
        print(path.relative_to(ROOT))
    sys.exit(0)
