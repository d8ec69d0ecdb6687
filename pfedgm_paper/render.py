"""A results folder's tables in the paper's layout (Markdown and CSV), the paper's numbers
beside ours, and the paired differences of the table's own method against each other row.

Cells: `mean (std)` over the seeds found (`cells.read_cell`), the best mean of a column in
bold, `-` where no run has finished; under the paired differences, our order of the methods
against the paper's (`order`), and on a subset of the paper's data each method by its
clients' training images (`client_size`). Runtime: minutes of training and personalization, seconds
a round of Phase 1, and that over FedAvg's in the same column (the paper's minutes are for 200
rounds on its machine: the ratios compare, the minutes do not; a round's ratio, not the whole
run's, so that runs of fewer rounds, whose Phase 2 weighs more, compare too).
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

from .cells import Cell, Results, curve, read_cell
from .client_size import size_lines
from .grid import TABLES
from .marks import (
    BESIDE,
    BOUNDED,
    IDLE,
    OTHER_PROTOCOL,
    beside_line,
    bound_lines,
    header,
    idle_lines,
    protocol_lines,
    read_as_lines,
    scaled,
)
from .order import order_lines
from .paired import paired_gap, per_seed
from .published import PUBLISHED
from .rows import Row, Table


def ours_row(table: Table) -> Row:
    """The row the paired differences start from: pFedGM, or the full method of an ablation
    (its last row: GA, WPO, G.M. + D.)."""
    return next((r for r in table.rows if r.name == "pfedgm"), table.rows[-1])


def read_table(out: Results, table: Table) -> dict[tuple[str, str], Cell]:
    """{(row name, column): cell} of the cells with at least one finished run."""
    cells = {}
    for column in table.columns:
        for row in table.rows:
            if (cell := read_cell(out, column, row)) is not None:
                cells[row.name, column] = cell
    return cells


def _paper(table: Table, row: Row, column: str) -> tuple[float, float | None] | None:
    return PUBLISHED.get(table.name, {}).get(row.name, {}).get(column)


def _ratio(cells: dict, row: Row, column: str) -> float | None:
    base = cells.get(("fedavg", column))
    return cells[row.name, column].seconds_per_round / base.seconds_per_round if base else None


def cell_text(table: Table, cells: dict, row: Row, column: str, best: bool) -> str:
    paper = _paper(table, row, column)
    if table.kind == "runtime":
        text = "-"
        if (row.name, column) in cells:
            ratio = _ratio(cells, row, column)
            cell = cells[row.name, column]
            text = f"{cell.minutes:.1f} min, {cell.seconds_per_round:.1f} s a round" + (
                f" ({ratio:.2f}x)" if ratio else ""
            )
        if paper:
            base = _paper(table, Row("fedavg", "", ""), column)
            text += f"<br>paper {paper[0]:.2f}" + (f" ({paper[0] / base[0]:.2f}x)" if base else "")
        return text
    cell = cells.get((row.name, column))
    text = "-" if cell is None else f"{cell.mean:.2f} ({cell.std:.1f})"
    text = f"**{text}**" if best and cell is not None and not cell.differences else text
    text += OTHER_PROTOCOL if cell is not None and cell.differences else ""
    text += BESIDE if cell is not None and cell.source else ""
    text += IDLE if cell is not None and cell.idle_rounds else ""
    text += BOUNDED if cell is not None and scaled(cell) else ""
    if cell is not None and len(cell.seed_means) > 1:  # the seed-to-seed spread
        text += "<br>seeds: " + ", ".join(f"{m:.2f}" for _, m in sorted(cell.seed_means.items()))
    if paper:
        text += f"<br>paper {paper[0]:.2f}" + (
            f" ({_std(paper[1])})" if paper[1] is not None else ""
        )
    return text


def _std(value: float) -> str:
    """A std as the paper prints it: two significant digits (9.4, 13)."""
    return f"{value:.1f}" if value < 10 else f"{value:.0f}"


def shown(table: Table, cells: dict) -> tuple[str, ...]:
    """The columns with a finished run (all of them before any): the Markdown leaves the
    others out, the CSV keeps every cell."""
    return tuple(c for c in table.columns if any(col == c for _, col in cells)) or table.columns


def markdown(out: Results, table: Table) -> str:
    """The table (its columns with runs), then its budget and seeds, then the paired
    differences."""
    cells = read_table(out, table)
    columns = shown(table, cells)
    lines = [f"### {table.caption}", "", *header(columns)]
    for row in table.rows:
        texts = []
        for column in columns:
            means = [c.mean for (r, col), c in cells.items() if col == column]
            best = (row.name, column) in cells and cells[row.name, column].mean == max(means)
            texts.append(cell_text(table, cells, row, column, best and table.kind != "runtime"))
        lines.append(f"| {row.label} | " + " | ".join(texts) + " |")
    lines += ["", budget_line(cells, table.kind), *beside_line(cells), *read_as_lines(table, cells)]
    if idle := idle_lines(table, cells):
        lines += ["", *idle]
    if bound := bound_lines(table, cells):
        lines += ["", *bound]
    if differing := protocol_lines(cells, columns):
        lines += ["", *differing]
    if table.kind != "runtime":
        lines += ["", *paired_lines(table, cells, columns)]
        if order := order_lines(table, cells, columns):
            lines += ["", *order]
        if sizes := size_lines(table, cells, columns):
            lines += ["", *sizes]
        for column in columns:
            lines += round_lines(out, table, column)
    return "\n".join(lines) + "\n"


ACCURACY_CELL = (
    "mean weighted by client test size (std across clients), averaged over seeds; paper: its table"
)
RUNTIME_CELL = (
    "wall minutes (training and personalization), seconds a round of Phase 1 and that over "
    "FedAvg's, averaged over seeds; paper: its table (minutes on its machine)"
)


def budget_line(cells: dict[tuple[str, str], Cell], kind: str = "accuracy") -> str:
    if not cells:
        return "No finished run in this folder yet."
    rounds = sorted({c.rounds for c in cells.values()})
    seeds = sorted({s for c in cells.values() for s in c.seeds})
    uneven = len({tuple(c.seeds) for c in cells.values()}) > 1
    note = " Not every cell has every seed yet: a cell averages the seeds it has." if uneven else ""
    return (
        f"Ours: {'/'.join(map(str, rounds))} rounds (the paper: 200), seeds "
        f"{', '.join(map(str, seeds))}; each cell: "
        f"{RUNTIME_CELL if kind == 'runtime' else ACCURACY_CELL}." + note
    )


def paired_lines(
    table: Table, cells: dict[tuple[str, str], Cell], columns: tuple[str, ...]
) -> list[str]:
    """{ours} - each other row per column: mean over (seed, client) pairs, se, clients up /
    down; with several seeds, each seed's gap too; the paper's gap (its means') beside. Rows
    with no pair are left out."""
    ours = ours_row(table)
    lines = [
        f"{ours.label} minus each row, per client (test-size weighted mean, standard "
        "error, clients up / down; pooled over seeds, then each seed's; the paper's gap "
        "between its two means below):",
        "",
        *header(columns),
    ]
    for row in table.rows:
        if row.name == ours.name:
            continue
        texts = []
        for column in columns:
            a, b = cells.get((ours.name, column)), cells.get((row.name, column))
            gap = paired_gap(a.per_client, b.per_client) if a and b else None
            text = "-" if gap is None else gap.text()
            if a and b and gap is not None and gap.seeds > 1:
                seeds = per_seed(a.per_client, b.per_client)
                text += "<br>seeds: " + ", ".join(f"{g.gap:+.2f}" for g in seeds.values())
            mine, theirs = _paper(table, ours, column), _paper(table, row, column)
            if gap is not None and mine and theirs:
                text += f"<br>paper {mine[0] - theirs[0]:+.2f}"
            texts.append(text)
        if any(t != "-" for t in texts):
            lines.append(f"| {row.label} | " + " | ".join(texts) + " |")
    return lines


def row_curves(
    out: Results, table: Table, column: str
) -> dict[Row, dict[int, tuple[float, float]]]:
    """{row: its curve (`cells.curve`)} for the rows that evaluated along the way; a curve is
    the personalized accuracy, so rows reading another metric (the adaptation modes) have none."""
    return {
        r: c
        for r in table.rows
        if r.metric == "accuracy" and len(c := curve(out, column, r.run)) > 1
    }


def round_lines(out: Results, table: Table, column: str) -> list[str]:
    """The accuracy curves of `column` as a table (rows by rounds), for runs that evaluated
    along the way (`eval-every`): each row's mean over seeds, and beside it the table's own
    method minus that row. Per-round accuracy is kept per run, not per client, so this is a
    difference of means, not a paired one. A lone curve has nothing to be set against (the
    adaptation table's GA is the standard table's pFedGM), so it gives no table."""
    ours = ours_row(table)
    curves = row_curves(out, table, column)
    if len(curves) < 2:
        return []
    rounds = sorted({r for c in curves.values() for r in c})
    mine = curves.get(ours)
    lines = [
        "",
        f"{column}: personalized accuracy at each evaluated round (mean over seeds; "
        f"in parentheses, {ours.label}'s mean minus the row's):",
        "",
        *header(tuple(map(str, rounds))),
    ]
    for row, points in curves.items():
        texts = []
        for r in rounds:
            text = f"{points[r][0]:.2f}" if r in points else "-"
            if mine and row != ours and r in points and r in mine:
                text += f" ({mine[r][0] - points[r][0]:+.2f})"
            texts.append(text)
        lines.append(f"| {row.label} | " + " | ".join(texts) + " |")
    return lines


CSV_FIELDS = (
    "table row label column seeds rounds mean std minutes seconds_per_round paper_mean "
    "paper_std gap_vs_ours gap_se wins losses"
).split()


def csv_text(out: Results, table: Table) -> str:
    cells = read_table(out, table)
    ours = ours_row(table)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, CSV_FIELDS, lineterminator="\n")
    writer.writeheader()
    for row in table.rows:
        for column in table.columns:
            cell, paper = cells.get((row.name, column)), _paper(table, row, column)
            mine = cells.get((ours.name, column))
            gap = (
                paired_gap(mine.per_client, cell.per_client)
                if cell and mine and row.name != ours.name
                else None
            )
            found: dict[str, object] = {
                "table": table.name, "row": row.name, "label": row.label, "column": column
            }  # fmt: skip
            if cell:
                found.update(
                    seeds=" ".join(map(str, cell.seeds)),
                    rounds=cell.rounds,
                    mean=f"{cell.mean:.4f}",
                    std=f"{cell.std:.4f}",
                    minutes=f"{cell.minutes:.2f}",
                    seconds_per_round=f"{cell.seconds_per_round:.2f}",
                )
            if paper:
                found.update(paper_mean=paper[0], paper_std="" if paper[1] is None else paper[1])
            if gap:
                found.update(
                    gap_vs_ours=f"{gap.gap:.4f}",
                    gap_se=f"{gap.se:.4f}",
                    wins=gap.wins,
                    losses=gap.losses,
                )
            writer.writerow(found)
    return buffer.getvalue()


def render(out: Results, to: Path, tables: list[str]) -> list[Path]:
    """Write `<to>/<table>.md` and `.csv` for each table; returns the files written."""
    to.mkdir(parents=True, exist_ok=True)
    written = []
    for name in tables:
        table = TABLES[name]
        for suffix, text in ((".md", markdown(out, table)), (".csv", csv_text(out, table))):
            path = to / f"{name}{suffix}"
            path.write_text(text)
            written.append(path)
    return written
