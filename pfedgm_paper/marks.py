"""The lines under a rendered table that qualify its cells: the marks a cell may carry
(another protocol than the paper's †, read from a `--beside` folder ‡, rounds in which every
reply failed §, replies the influence bound scaled ¶) and the rows read from another row's
runs; and the Markdown head every table under a rendered one shares."""

from __future__ import annotations

from collections.abc import Iterator

from .cells import Cell
from .rows import Row, Table

OTHER_PROTOCOL = " †"  # the cell's runs depart from the paper's protocol (`protocol_lines`)
BESIDE = " ‡"  # the cell was read from a `--beside` folder (`beside_line`)
IDLE = " §"  # in some rounds every reply failed: no client trained (`idle_lines`)
BOUNDED = " ¶"  # the influence bound scaled some replies (`bound_lines`)


def header(columns: tuple[str, ...]) -> list[str]:
    """A Markdown table's head: an empty corner, then `columns`."""
    return ["| | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]


def by_row(table: Table, cells: dict[tuple[str, str], Cell]) -> Iterator[tuple[Row, str, Cell]]:
    """(row, column, cell) of each cell, in the table's row order: the order of the lines."""
    for row in table.rows:
        for (name, column), cell in cells.items():
            if name == row.name:
                yield row, column, cell


def idle_lines(table: Table, cells: dict[tuple[str, str], Cell]) -> list[str]:
    """One line per cell whose runs had rounds in which every reply failed: how many, and a
    DP run's epsilon spent (below its target where rounds released nothing)."""
    lines = []
    for row, column, cell in by_row(table, cells):
        if not cell.idle_rounds:
            continue
        spent = f", epsilon {cell.epsilon:.2f} spent" if cell.epsilon is not None else ""
        lines.append(
            f"{IDLE.strip()} {row.label}, {column}: every reply failed in {cell.idle_rounds} "
            f"of {cell.rounds * len(cell.seeds)} rounds, no client's step in the model{spent}."
        )
    return lines


def scaled(cell: Cell) -> bool:
    """Whether the influence bound scaled any reply of the cell's runs."""
    return any(b is not None and b.scaled for b in cell.bounded.values())


def bound_lines(table: Table, cells: dict[tuple[str, str], Cell]) -> list[str]:
    """One line per cell whose runs had replies scaled by the influence bound: how many of
    its replies each seed's bound clipped (and scaled to the pull bound), and which seeds ran
    without a bound; its figures are then not plain averaging's."""
    lines = []
    for row, column, cell in by_row(table, cells):
        if not scaled(cell):
            continue
        parts, without = [], []
        for seed, b in sorted(cell.bounded.items()):
            if b is None:
                without.append(str(seed))
                continue
            if b.scaled:
                pulled = f" and scaled {b.pulled:,} to the pull bound" if b.pulled else ""
                done = f"clipped {b.clipped:,}{pulled} of {b.replies:,} replies "
                done += f"({100 * b.scaled / max(b.replies, 1):.1f} %)"
            else:
                done = f"scaled none of {b.replies:,} replies"
            parts.append(f"{done} in seed {seed} (clip-ratio {b.clip_ratio:g})")
        tail = f"; seed {', '.join(without)} ran without it" if without else ""
        lines.append(
            f"{BOUNDED.strip()} {row.label}, {column}: the influence bound "
            + "; ".join(parts)
            + tail
            + "."
        )
    return lines


def beside_line(cells: dict[tuple[str, str], Cell]) -> list[str]:
    """Which `--beside` folders the marked cells come from; [] when every cell is --out's."""
    found = sorted({str(cell.source) for cell in cells.values() if cell.source})
    return [f"{BESIDE.strip()} read from {', '.join(found)} (`--beside`)."] if found else []


def protocol_lines(cells: dict[tuple[str, str], Cell], columns: tuple[str, ...]) -> list[str]:
    """One line per column whose cells' runs depart from the paper's protocol, saying how:
    their figures are not the paper's experiment, and none of them is set in bold."""
    lines = []
    for column in columns:
        found = []
        for (_, col), cell in cells.items():
            found += [d for d in cell.differences if col == column and d not in found]
        if found:
            lines.append(
                f"{OTHER_PROTOCOL.strip()} {column}: another protocol than the "
                f"paper's: {', '.join(found)}."
            )
    return lines


def read_as_lines(table: Table, cells: dict[tuple[str, str], Cell]) -> list[str]:
    """One line per shown row that reads another metric of another row's runs (FedAvg's final
    accuracy from FedAvgFT's runs, `rows.RUNS_AS`; the adaptation modes from pFedGM's)."""
    shown = {name for name, _ in cells}
    return [
        f"{row.label}: read from the `{row.run}` runs' `{row.metric}`."
        for row in table.rows
        if row.name in shown and row.metric != "accuracy" and row.run != row.name
    ]
