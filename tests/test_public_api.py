"""The app uses Flower's public API only: every `flwr` import of every module of `pfedgm_app`
(read as source, not imported; imports inside functions and under TYPE_CHECKING count too)
names a public app module, and a name it takes from one is among that module's `__all__`.
A private module (`flwr.server...`, `flwr.proto...`, `flwr.supercore...`) can change or go
in any Flower release, and its objects are not the app's to patch.

The engine beside the app, `pfedgm_engine` (`inprocess.py` and the modules it uses), runs the
ServerApp and ClientApps in one process as Flower's simulation engine does, and needs the
runtime names listed in `ENGINE_NAMES` (pinned: a new one fails here); no FAB carries it
(`tests/test_fab.py`)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pfedgm_app"

# Flower's public app surface. `flwr` itself: `flwr.__version__` (recorded with each run).
PUBLIC = ("flwr", "flwr.app", "flwr.clientapp", "flwr.serverapp", "flwr.serverapp.strategy",
          "flwr.common")  # fmt: skip


def flwr_imports(path: Path) -> list[tuple[int, str, str | None]]:
    """(line, module, name or None for `import module`) of each `flwr` import in `path`."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.lineno, node.module, a.name) for a in node.names]
    return [f for f in found if f[1] == "flwr" or f[1].startswith("flwr.")]


def not_public(module: str, name: str | None) -> str | None:
    """Why importing `name` from `module` (or `module` itself) leaves Flower's public
    surface; None when it does not."""
    if module not in PUBLIC:
        return f"{module} is not one of {', '.join(PUBLIC)}"
    if name is None or name == "__version__" and module == "flwr":
        return None
    exported = getattr(importlib.import_module(module), "__all__", None)
    if exported is not None and name not in exported:
        return f"{module}.{name} is not in {module}.__all__"
    return None


def test_the_walk_finds_every_flwr_import(tmp_path):
    source = tmp_path / "m.py"
    source.write_text(
        "import flwr\nimport flwr_datasets\nfrom flwr.app import Message\n"
        "from . import flwr\nfrom typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
        "    from flwr.supercore.run import Run\n"
        "def f():\n    import flwr.server.superlink as s\n"
    )
    assert flwr_imports(source) == [(1, "flwr", None), (3, "flwr.app", "Message"),
                                    (7, "flwr.supercore.run", "Run"),
                                    (9, "flwr.server.superlink", None)]  # fmt: skip
    assert not_public("flwr.app", "Message") is None
    assert not_public("flwr.common", "log") is None
    assert not_public("flwr.serverapp.strategy", "FedAvg") is None
    assert "not one of" in not_public("flwr.supercore.run", "Run")
    assert "not one of" in not_public("flwr.common.logger", "log")
    assert "not in flwr.serverapp.__all__" in not_public("flwr.serverapp", "grid")


ENGINE = sorted((PACKAGE.parent / "pfedgm_engine").glob("*.py"))
ENGINE_NAMES = {("flwr.clientapp.client_app", "ClientAppException"),
                ("flwr.clientapp.client_app", "LoadClientAppError"),
                ("flwr.common.constant", "ErrorCode"), ("flwr.supercore.run", "Run"),
                ("flwr.supercore.task_identity", "TaskIdentity")}  # fmt: skip


def test_pfedgm_app_imports_only_flowers_public_api():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert PACKAGE / "server_app.py" in modules and PACKAGE / "strategies" / "window.py" in modules
    private = [
        f"{path.relative_to(PACKAGE.parent)}:{line}: {why}"
        for path in modules
        for line, module, name in flwr_imports(path)
        if (why := not_public(module, name))
    ]
    assert not private, "\n".join(private)


def test_the_in_process_engine_takes_only_its_pinned_engine_names():
    assert PACKAGE.parent / "pfedgm_engine" / "inprocess.py" in ENGINE
    taken = {
        (module, name)
        for path in ENGINE
        for _, module, name in flwr_imports(path)
        if not_public(module, name)
    }
    assert taken == ENGINE_NAMES
