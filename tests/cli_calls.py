"""`pfedgm` called in process, for the CLI's tests: its result, or the lines it refuses with."""

from __future__ import annotations

from click.testing import CliRunner

from pfedgm_cli.commands import main


def pfedgm(*args: str):
    return CliRunner().invoke(main, list(args))


def refused(*args: str) -> list[str]:
    """The lines of a `pfedgm` call that must exit 2."""
    result = pfedgm(*args)
    assert result.exit_code == 2, result.output
    return result.stderr.splitlines()
