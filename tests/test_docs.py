"""The documentation: the reference pages under docs/ are what the code generates now, every
run-config key has its one meaning, every relative link leads somewhere, and the README stays
a door (short, pointing at the rest)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from devtools import results_md
from devtools.reference import COMMAND
from devtools.reference.registry_pages import pages
from pfedgm_app.methods import METHODS, markdown_table, settings_groups

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES = [
    ROOT / "README.md",
    ROOT / "RESULTS.md",
    ROOT / "REPRODUCING.md",
    ROOT / "deploy" / "README.md",
    ROOT / "benchmarks" / "README.md",
    ROOT / "examples" / "quickstart-pfedgm" / "README.md",
    *sorted(DOCS.rglob("*.md")),
]


@pytest.mark.parametrize("name", sorted(pages()))
def test_reference_pages_are_current(name):
    """docs/run-config.md, methods.md and presets.md equal what the registry, the settings
    groups (defaults, bounds, meanings) and the presets give now (docs/privacy.md:
    test_deploy_security)."""
    path = DOCS / name
    assert path.exists() and path.read_text() == pages()[name], (
        f"docs/{name} is out of date: run `{COMMAND}`"
    )


@pytest.mark.parametrize("page", results_md.PAGES, ids=lambda p: p.name)
def test_rendered_tables_in_the_pages_are_the_rendered_files(page):
    """RESULTS.md's tables come from `pfedgm-paper render`: each block equals its file."""
    text = page.read_text()
    assert text == results_md.spliced(text), (
        f"{page.name} is out of date: run `{results_md.COMMAND}`"
    )


def test_a_block_takes_its_files_text(tmp_path):
    (tmp_path / "t.md").write_text("| a |\n")
    page = "x\n<!-- rendered: t.md -->\nold\n<!-- end rendered -->\ny\n"
    assert results_md.spliced(page, tmp_path) == (
        "x\n<!-- rendered: t.md -->\n| a |\n<!-- end rendered -->\ny\n"
    )


def test_every_run_config_key_has_a_one_line_meaning():
    """Each settings field declares its key's meaning (`doc=`), one line of the table."""
    meanings = {k: m for group in settings_groups() for k, m in group.meanings().items()}
    missing = sorted(k for k, m in meanings.items() if not m.strip())
    assert missing == [], f"give these keys' fields a doc= (config.setting, at_least): {missing}"
    assert [k for k, m in meanings.items() if "\n" in m] == [], "one line each"


def test_the_method_table_has_one_row_per_registered_method():
    assert markdown_table().count("\n| `") == len(METHODS)


def _anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def _links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if not re.match(r"[a-z]+:", t)]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_and_heading(page):
    assert page.exists(), page
    broken = []
    for link in _links(page):
        target, _, anchor = link.partition("#")
        path = (page.parent / target).resolve() if target else page
        if not path.exists():
            broken.append(link)
        elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
            broken.append(link)
    assert broken == [], f"{page.relative_to(ROOT)}: broken links {broken}"


# Where a page may name a file by its base name: the folders the code lives in.
CODE_FOLDERS = ("", *sorted({
    str(p.parent.relative_to(ROOT))
    for top in ("pfedgm_app", "pfedgm_cli", "pfedgm_paper", "pfedgm_engine", "devtools",
                "benchmarks", "tests", "examples")
    for p in (ROOT / top).rglob("*.py") if "__pycache__" not in p.parts
}))  # fmt: skip


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_a_page_names_exists(page):
    """A file named in backquotes (`experiment.py`, `pfedgm_app/server/rounds.py`, `.ci/run.sh`)
    is one of this project's, and a `file.py:name` a function, class or assignment of it: a
    rename or a removal that leaves a page behind fails here.
    Flower's own files, named by the upstream proposals (docs/upstream), are not ours."""
    if "upstream" in page.parts:
        pytest.skip("names Flower's files")
    named = re.findall(r"`([\w./-]+\.(?:py|sh|toml))(?::(\w+))?`", page.read_text())
    missing, undefined = [], []
    for name, symbol in named:
        found = [ROOT / folder / name for folder in CODE_FOLDERS] + [page.parent / name]
        path = next((p for p in found if p.exists()), None)
        if path is None:
            missing.append(name)
        elif symbol and not re.search(rf"^\s*(def|class)\s+{symbol}\b|^{symbol}\s*[:=]",
                                      path.read_text(), flags=re.M):  # fmt: skip
            undefined.append(f"{name}:{symbol}")
    assert not missing, f"{page.relative_to(ROOT)} names files that do not exist: {missing}"
    assert not undefined, f"{page.relative_to(ROOT)} names what its file lacks: {undefined}"


def test_the_readme_is_a_door():
    """At most 250 lines: what the app is, how to install, run, check and test it, a map of the
    rooms, and links to the rest; CI runs its test command (.ci/run)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 250
    assert "\npython -m pytest -q\n" in readme
    for page in ("docs/run-config.md", "docs/methods.md", "docs/presets.md", "deploy/README.md"):
        assert f"]({page}" in readme, page
    paths = re.findall(r"^\| `([\w./*-]+/[\w./*-]*)`", readme, flags=re.M)  # the map: rooms
    rooms = {f"pfedgm_app/{p.parent.name}/" for p in (ROOT / "pfedgm_app").glob("*/__init__.py")}
    assert sorted(rooms - set(paths)) == [], "a room of the app is missing from the map"
    assert [p for p in paths if not list(ROOT.glob(p.rstrip("/")))] == [], "update the map"


def test_the_api_reference_covers_every_module_the_docs_and_the_example_import():
    """A module another project is shown importing (`from pfedgm_app.X import ...` in the
    example project, its README, or a page of docs/) has its page in docs/api."""
    from devtools import api

    sources = [*sorted((ROOT / "examples" / "quickstart-pfedgm").rglob("*.py")), *PAGES]
    imported = {
        m
        for path in sources
        for m in re.findall(r"from (pfedgm_app[\w.]*) import", path.read_text())
    }
    assert (
        "pfedgm_app.records.run_outputs" in imported
        and "pfedgm_app.client.personal_model" in imported
    )
    assert sorted(imported - set(api.MODULES)) == [], "add them to devtools/api.py's MODULES"


@pytest.mark.slow  # pdoc renders the modules
def test_the_api_reference_is_current():
    """docs/api is pdoc's rendering of the library's modules with the versions it records;
    with other versions installed, the rendering may differ without the code having changed."""
    from devtools import api

    recorded = json.loads((api.API / "versions.json").read_text())
    if recorded != api.versions():
        pytest.skip(f"docs/api was written with {recorded}, this environment has {api.versions()}")
    assert not api.stale(), f"docs/api is out of date: run `{api.COMMAND}`"
    page = (api.API / "pfedgm_app" / "strategies.html").read_text()
    assert "navigator_keys" in page and "covariance_keys" in page
