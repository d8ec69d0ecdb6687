"""`pfedgm_paper.published` against the paper's LaTeX: every number, read from the tables'
rows, and nothing more; its keys are the app's preset names and client types."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from pfedgm_app.data.corruptions import CORRUPTIONS
from pfedgm_app.runconfig.presets import PRESETS
from pfedgm_paper.published import PUBLISHED

TEX = Path(__file__).resolve().parents[2] / "shared/paper/pfedgm-paper.tex"
CELL = re.compile(r"(\d+\.\d+)(?: \((\d+(?:\.\d+)?)\))?")  # "86.56 (12)" or "64.91"
# Commands whose arguments are layout, not data; then \rgba{std} -> "(std)"; then markup.
LAYOUT = re.compile(
    r"\\makecell\{[^{}]*\}|\\(?:rowcolor|cellcolor|rgbb|addlinespace|\w*rule|multirow)"
    r"(?:\[[^\]]*\]|\([^)]*\)|\{[^{}]*\})*"
)
MARKUP = re.compile(r"\\(?:underline|textbf|multicolumn\{\d\}\{c\})|[{}$]")


def tex_rows(label: str) -> list[tuple[list[str], list[tuple[float, float | None]]]]:
    """The rows of the table labelled `label`: (its text cells, its numeric cells)."""
    if not TEX.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{TEX} is missing")
        pytest.skip(f"{TEX} is not here")
    text = TEX.read_text()
    start = text.rindex(r"\begin{table", 0, text.index(rf"\label{{{label}}}"))
    body = LAYOUT.sub("", text[start : text.index(r"\end{table", start)])
    body = MARKUP.sub("", re.sub(r"\\rgba\{([^{}]*)\}", r" (\1)", body))
    rows = []
    for chunk in body.split(r"\\"):
        cells = [" ".join(c.split()) for c in chunk.split("&")]
        found = [CELL.fullmatch(c) for c in cells]
        numbers = [(float(m[1]), float(m[2]) if m[2] else None) for m in found if m]
        rows.append(([c for c, m in zip(cells, found, strict=True) if not m], numbers))
    return rows


def method(name: str) -> str:
    """The app's name of a method as the paper writes it ("LG-FedAvg"; "FedBAU", a typo)."""
    key = name.lower().replace("-", "")
    return "fedbabu" if key == "fedbau" else key


def by_row(label: str, columns: list[str], key) -> dict:
    """`{key(text cells): {column: cell}}` for the rows of `label` that hold numbers."""
    return {
        key(texts): dict(zip(columns, numbers, strict=True))
        for texts, numbers in tex_rows(label)
        if numbers
    }


def transposed(label: str, key) -> dict:
    """As `by_row`, for a table whose header row names the methods: `{method: {key: cell}}`."""
    header = [method(c) for c in tex_rows(label)[0][0][1:]]
    out: dict = {}
    for row, cells in by_row(label, header, key).items():
        for m, cell in cells.items():
            out.setdefault(m, {})[row] = cell
    return out


def columns(table: str) -> list[str]:
    return list(next(iter(PUBLISHED[table].values())))


TYPES = {"original clients": "original", "clean": "clean"} | {
    c.split("_")[0]: c for c in CORRUPTIONS
}


def from_tex() -> dict:
    """PUBLISHED as read from the LaTeX."""

    def last(texts):
        return method(texts[-1])

    adaptation = [(t, n) for t, n in tex_rows("tab:adaptation") if n]
    assert len(adaptation) == 6 and all(len(n) == 9 for _, n in adaptation)  # 8 + Acc. Avg.
    return {
        "standard": by_row("tab:standard", columns("standard"), last),
        "corruption": by_row("tab:corruption", columns("corruption"), last),
        "generalization": transposed("tab:generalize", lambda t: TYPES[t[-1].lower()]),
        "moderate": by_row("tab:client", columns("moderate"), last),
        "runtime": transposed("tab:Time", lambda t: t[-1].lower().replace("-", "") + "-dir05"),
        "adaptation": {
            ("na", "fa", "ga")[adaptation[i][0].index(r"\checkmark")]: {
                c: (m, s)
                for c, (m, s) in zip(
                    columns("adaptation"),
                    adaptation[i][1][:8] + adaptation[i + 3][1][:8],
                    strict=True,
                )
            }
            for i in range(3)
        },
        "decoupling": by_row(
            "tab:decope",
            columns("decoupling"),
            lambda t: {"G.M.": "gm", "G.M. - C.": "gm-c", "G.M. + D.": "gm-d"}[t[-1]],
        ),
    }


def test_every_published_number_is_the_papers():
    tex = from_tex()
    assert list(tex) == list(PUBLISHED)
    for table, rows in PUBLISHED.items():
        assert rows == tex[table], table  # every row, column and number; no more, no fewer


def test_published_keys_are_the_apps_names():
    presets = {t: columns(t) for t in PUBLISHED if t != "generalization"}
    assert all(c in PRESETS for cs in presets.values() for c in cs)
    assert set(columns("generalization")) == {"original", "clean", *CORRUPTIONS}
    methods = set(PUBLISHED["standard"])
    for table in ("corruption", "generalization", "moderate", "runtime"):
        assert set(PUBLISHED[table]) <= methods, table
    # The paper's own consistency: pFedGM is GA and G.M. + D. (means; the latter its 100C cells)
    assert PUBLISHED["adaptation"]["ga"] == {
        c: (m, None)
        for t in ("standard", "corruption")
        for c, (m, _) in PUBLISHED[t]["pfedgm"].items()
    }
    assert PUBLISHED["decoupling"]["gm-d"] == {
        c: PUBLISHED["corruption"]["pfedgm"][c] for c in columns("decoupling")
    }
