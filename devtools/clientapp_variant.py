"""This app with another ClientApp, as a project folder `flwr run` takes: the app's own
pyproject.toml, renamed, whose clientapp component is one module written beside it (a hostile
or a late client built on the app's handlers). The ServerApp and the run-config keys stay the
app's; the FAB carries that one module, which imports the installed app. A helper of the
repository (tests, benchmarks), not of the app.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def clientapp_variant(folder: Path, module: str, source: str) -> Path:
    """`folder` (created) holding the app's pyproject.toml, named `pfedgm-<module>`, whose
    ClientApp is `<module>:app`, written from `source`."""
    text = (ROOT / "pyproject.toml").read_text()
    text = text.replace('name = "pfedgm-app"', f'name = "pfedgm-{module}"')
    text = text.replace('clientapp = "pfedgm_app.client_app:app"', f'clientapp = "{module}:app"')
    text = text.replace('fab-include = ["pfedgm_app/**/*.py"]', f'fab-include = ["{module}.py"]')
    components = tomllib.loads(text)["tool"]["flwr"]["app"]["components"]
    if components["clientapp"] != f"{module}:app":
        raise RuntimeError("pyproject.toml's clientapp component moved: update clientapp_variant")
    folder.mkdir()
    (folder / "pyproject.toml").write_text(text)
    (folder / f"{module}.py").write_text(source)
    return folder
