"""What pyproject.toml says is true. Every third-party package the code imports is declared: by
its own name, or as an extra asked for by name (`flwr[simulation]` brings Ray). A package that
arrives only through another one's requirements (click through flwr) leaves with that package's
next release. The imports of the wheel's packages (the app, the command line, the paper's
tooling, the engine) are in `dependencies` (an import whose absence the code handles, `except
ImportError`, may be in an extra instead); the tools' (devtools, benchmarks, tests) in
`dependencies` or an extra. The lint's `ignore` names only selected rules.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import PackageNotFoundError, packages_distributions, requires
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
RUNTIME = ("pfedgm_app", "pfedgm_cli", "pfedgm_paper", "pfedgm_engine")  # what the wheel carries
TOOLS = ("devtools", "benchmarks", "tests")  # run from a checkout


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalized (PEP 503)."""
    return re.sub(r"[-_.]+", "-", re.match(r"\s*[A-Za-z0-9][\w.-]*", requirement)[0]).lower()


def _declared(requirements: list[str]) -> set[str]:
    """The distributions `requirements` name, with those their named extras add."""
    names = set()
    for requirement in requirements:
        names.add(_name(requirement))
        extras = re.match(r"\s*[\w.-]+\s*\[([^\]]*)\]", requirement)
        for extra in extras[1].split(",") if extras else []:
            try:
                theirs = requires(_name(requirement)) or []
            except PackageNotFoundError:
                continue
            marker = re.compile(rf"extra\s*==\s*[\"']{re.escape(extra.strip())}[\"']")
            names |= {_name(r) for r in theirs if marker.search(r)}
    return names


DEPENDENCIES = _declared(PYPROJECT["project"]["dependencies"])
ANY = DEPENDENCIES.union(
    *(_declared(r) for r in PYPROJECT["project"]["optional-dependencies"].values())
)


def _imports(path: Path) -> list[tuple[str, bool]]:
    """(top-level module, optional) of each absolute import of `path`; optional: inside a
    `try` that handles ImportError."""
    found = []

    def visit(node: ast.AST, optional: bool) -> None:
        if isinstance(node, ast.Try):
            caught = {ast.unparse(h.type) for h in node.handlers if h.type is not None}
            guarded = optional or bool(caught & {"ImportError", "ModuleNotFoundError"})
            for child in node.body:
                visit(child, guarded)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, optional)
            return
        if isinstance(node, ast.Import):
            found.extend((a.name.split(".")[0], optional) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], optional))
        for child in ast.iter_child_nodes(node):
            visit(child, optional)

    visit(ast.parse(path.read_text()), False)
    return found


def _third_party(module: str, path: Path) -> bool:
    """Neither the standard library nor this repository's own (a package or module at its
    root, beside `path`, or an example project's)."""
    if module in sys.stdlib_module_names or module == "__future__":
        return False
    places = [ROOT, path.parent, *(ROOT / "examples").glob("*/")]
    return not any((p / module).is_dir() or (p / f"{module}.py").is_file() for p in places)


def _undeclared(folders: tuple[str, ...], runtime: bool) -> list[str]:
    distributions = packages_distributions()
    missing = []
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for module, optional in _imports(path):
                if not _third_party(module, path):
                    continue
                names = {_name(d) for d in distributions.get(module, [module])}
                allowed = DEPENDENCIES if runtime and not optional else ANY
                if not names & allowed:
                    missing.append(f"{path.relative_to(ROOT)}: {module} ({', '.join(names)})")
    return sorted(set(missing))


def test_every_package_the_app_imports_is_a_declared_dependency():
    assert _undeclared(RUNTIME, runtime=True) == []


def test_every_package_the_tools_import_is_declared_in_dependencies_or_an_extra():
    assert _undeclared(TOOLS, runtime=False) == []


def test_the_lint_ignores_only_rules_it_selects():
    lint = PYPROJECT["tool"]["ruff"]["lint"]
    selected = lint["select"] + lint.get("extend-select", [])
    ignored = lint.get("ignore", []) + lint.get("extend-ignore", [])
    assert [r for r in ignored if not r.startswith(tuple(selected))] == []
