"""The folders show the architecture: each package imports only the rooms below it.

The app package (`pfedgm_app`, all a FAB carries) is rooms on floors; a module imports its own
room and rooms on lower floors, never one above or beside on its floor. Outside the app, the
command line builds on the app, the in-process engine on both, the paper's tooling on all three.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FLOORS = (
    ("pfedgm_app.runconfig", "pfedgm_app.protocol"),  # standard library (+ flwr for replies)
    ("pfedgm_app.learning", "pfedgm_app.strategies"),  # torch / flwr + numpy
    ("pfedgm_app.data",),
    ("pfedgm_app.methods", "pfedgm_app.records"),
    ("pfedgm_app.client", "pfedgm_app.server"),
    ("pfedgm_app.client_app", "pfedgm_app.server_app"),  # the doors
    ("pfedgm_cli",),
    ("pfedgm_engine",),
    ("pfedgm_paper",),
)
ROOMS = {room: floor for floor, rooms in enumerate(FLOORS) for room in rooms}
OURS = ("pfedgm_app", "pfedgm_cli", "pfedgm_engine", "pfedgm_paper")


def room_of(module: str) -> str | None:
    """The room holding `module` (a dotted name), None for the app package's own __init__."""
    parts = module.split(".")
    for n in (2, 1):
        if ".".join(parts[:n]) in ROOMS:
            return ".".join(parts[:n])
    return None


def imports(path: Path, text: str | None = None) -> list[str]:
    """Every module of ours `path` (or `text`, read as if it were `path`) imports, as absolute
    dotted names (names imported from a package that are modules of it counted as those
    modules)."""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    package = parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text() if text is None else text)):
        if isinstance(node, ast.Import):
            found += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            source = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{source}.{alias.name}"
                is_module = (ROOT / child.replace(".", "/")).with_suffix(".py").exists()
                found.append(child if is_module else source)
    return [m for m in found if m.split(".")[0] in OURS]


SOURCES = sorted(p for top in OURS for p in (ROOT / top).rglob("*.py"))


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_a_module_imports_only_its_room_and_the_floors_below(path):
    module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
    here = room_of(module)
    if here is None:
        assert module == "pfedgm_app", f"{module}: in no room; add it to one"
        return
    upward = [
        target
        for target in imports(path)
        if (there := room_of(target)) != here and (there is None or ROOMS[there] >= ROOMS[here])
    ]
    assert not upward, f"{module} (floor {ROOMS[here]}) imports {upward}"


def test_every_package_of_the_app_is_a_room():
    packages = {
        f"pfedgm_app.{p.name}"
        for p in (ROOT / "pfedgm_app").iterdir()
        if (p / "__init__.py").exists()
    }
    modules = {f"pfedgm_app.{p.stem}" for p in (ROOT / "pfedgm_app").glob("*.py")} - {
        "pfedgm_app.__init__"
    }
    assert packages | modules == {r for r in ROOMS if r.startswith("pfedgm_app.")}


def test_an_upward_relative_import_is_found():
    """The walk sees `from ..records import run_folder` in the learning room as the records
    room's module, a floor above: the check above can fail."""
    source = ROOT / "pfedgm_app" / "learning" / "gaussian.py"
    found = imports(source, "from ..records import run_folder\nfrom . import training\n")
    assert found == ["pfedgm_app.records.run_folder", "pfedgm_app.learning.training"]
    assert ROOMS[room_of(found[0])] > ROOMS[room_of("pfedgm_app.learning.gaussian")]
