"""`pfedgm`: the app's one command. A thin click layer over plain functions (`check`, `flwr_cli`,
`default_run`, `predict`, `superlink`, `supernode`), each imported when its command runs, so
that `pfedgm check` imports neither torch nor flwr. The paper's tables have their own command,
`pfedgm-paper` (the package `pfedgm_paper`, which builds on this one).

    pfedgm check --run-config "method='fedavg' num-server-rounds=50"
    pfedgm run                     # the smoke run
    pfedgm run --run-config "preset='smoke' output-dir='/abs/out'" \
        --federation-config "num-supernodes=4"
    pfedgm predict /abs/out/models/client-0.safetensors examples/images/
    pfedgm superlink stop
    pfedgm supernode stop --port 9094

Bad input: one line per problem on stderr, exit 2.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn

import click

from pfedgm_app.runconfig.common import RunConfig
from pfedgm_app.runconfig.settings import ConfigError

RUN_CONFIG_HELP = (
    'the run-config as `flwr run` takes it: "key=value ..." (TOML values, strings quoted) '
    "or a TOML file; may be repeated"
)
PASS_THROUGH = {"ignore_unknown_options": True, "help_option_names": []}  # --help goes on too


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """pFedGM on Flower: check a run-config, run it, predict with a client's model, stop the
    managed SuperLink or SuperNodes (the paper's tables: `pfedgm-paper`)."""


@main.command(short_help="Validate a run-config here, before any simulation.")
@click.option(
    "--run-config", "-c", "run_config", multiple=True, metavar="CONFIG", help=RUN_CONFIG_HELP
)
def check(run_config: tuple[str, ...]) -> None:
    """Check a run-config here, before any simulation: keys (a misspelt one with the nearest
    valid key), types, bounds, presets, a local dataset path, the output-dir. Exit 2 with one
    line per problem, 0 with one "ok" line."""
    cfg = _checked(run_config)
    out = cfg.output_dir or "(a fresh folder)"
    click.echo(
        f"ok: method={cfg.method} dataset={cfg.dataset} "
        f"num-server-rounds={cfg.num_server_rounds} output-dir={out}"
    )


@main.command(short_help="Check, submit and follow a run; exit 1 when it failed.")
@click.argument("app_dir", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.argument("superlink", required=False)
@click.option(
    "--run-config", "-c", "run_config", multiple=True, metavar="CONFIG", help=RUN_CONFIG_HELP
)
@click.option(
    "--federation-config",
    multiple=True,
    metavar="CONFIG",
    help='the federation as `flwr run` takes it: "num-supernodes=4 ..."',
)
@click.option(
    "--stream/--no-stream", default=True, show_default=True, help="show the run's log as it runs"
)
def run(
    app_dir: Path | None,
    superlink: str | None,
    run_config: tuple[str, ...],
    federation_config: tuple[str, ...],
    stream: bool,
) -> None:
    """Check the run-config (exit 2 on problems, nothing submitted), submit the run through
    `flwr run` (APP_DIR: the app's project folder, by default this one's; SUPERLINK: a
    connection of $FLWR_HOME/config.toml, by default the local simulation) and follow it to
    its end. Exit 0 when it completed, with its result and where its files are; 1 when it did
    not, the app's line saying why last. Without --run-config: the smoke protocol on the local
    data copy where there is one (`default_run`). The local SuperLink gets the environment a
    run needs, and is restarted when it was started with another (`default_run.run_env`)."""
    from .default_run import default_run, run_env, superlink_ready
    from .federation_args import connection_problem, federation_config_problems
    from .flwr_cli import APP_DIR, failure, follow, outcome, submit, unfinished_runs
    from .superlink import flwr_home

    app_dir = (app_dir or APP_DIR).resolve()
    if not (app_dir / "pyproject.toml").is_file():
        _refuse([f"APP_DIR {app_dir}: no pyproject.toml; give the app's project folder"])
    if not run_config:
        run_config, default_federation = map(tuple, default_run(Path.cwd()))
        federation_config = federation_config or (() if superlink else default_federation)
        click.echo(f"pfedgm run: {' '.join(run_config)} (no --run-config: the smoke run)")
    if superlink is None:  # the simulation's keys; a named connection: it must exist
        problems = federation_config_problems(federation_config)
    else:
        problems = [p for p in [connection_problem(superlink, flwr_home())] if p]
    if problems:
        _refuse(problems)
    # the run-config's keys are this app's; another app (APP_DIR) checks its own
    cfg = _checked(run_config) if app_dir == APP_DIR.resolve() else None
    env = run_env(os.environ)
    try:
        if superlink is None and (
            note := superlink_ready(flwr_home(), env, lambda: unfinished_runs(env))
        ):
            click.echo(f"pfedgm run: {note}")
        run_id = submit(app_dir, run_config, federation_config, superlink, env)
    except (RuntimeError, ValueError) as exc:  # not submitted; ValueError: no flwr on PATH
        click.echo(f"pfedgm run: {exc}", err=True)
        sys.exit(1)
    click.echo(f"pfedgm run: run {run_id} submitted")
    try:
        output_dir = Path(cfg.output_dir) if cfg is not None and cfg.output_dir else None
        status = follow(run_id, superlink, env, output_dir=output_dir, show_log=stream)
    except KeyboardInterrupt:
        click.echo(f"pfedgm run: run {run_id} goes on; `flwr stop {run_id}` stops it", err=True)
        sys.exit(130)
    click.echo(f"pfedgm run: run {run_id} {status}")
    if status != "finished:completed":
        click.echo(failure(run_id, superlink, env), err=True)
        sys.exit(1)
    if cfg is not None and cfg.output_dir:
        click.echo(f"pfedgm run: {outcome(Path(cfg.output_dir))}")


@main.command(context_settings=PASS_THROUGH, short_help="Classify images with a client's model.")
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def predict(args: tuple[str, ...]) -> None:
    """MODEL IMAGES...: each image's class with a client's saved model, without Flower (as
    `python -m pfedgm_app.client.predict`; `pfedgm predict --help` for its options)."""
    from pfedgm_app.client import predict as predict_module

    sys.exit(predict_module.main(list(args)))


@main.group(short_help="The managed SuperLink: stop.")
def superlink() -> None:
    """The managed SuperLink that `flwr run` starts in the background and leaves running."""


@superlink.command(short_help="Stop this FLWR_HOME's managed SuperLink.")
def stop() -> None:
    """Stop the managed SuperLink of this FLWR_HOME (default ~/.flwr) and everything it
    started; other FLWR_HOMEs' and other users' are left alone. The next `flwr run` starts a
    fresh one, with the environment of that moment."""
    from .superlink import flwr_home, stop_local_superlink

    home = flwr_home()
    if count := stop_local_superlink(home):
        click.echo(f"stopped the managed SuperLink of {home} ({count} processes)")
    else:
        click.echo(f"no managed SuperLink of {home} is running")


@main.group(short_help="This user's SuperNodes on this machine: list, stop.")
def supernode() -> None:
    """This user's SuperNodes (`flower-supernode`) on this machine. Stopped by PID alone, a
    SuperNode leaves its SuperExec and ClientApp processes running for a while; `stop` ends
    them together."""


@supernode.command("list", short_help="This user's running SuperNodes.")
def supernode_list() -> None:
    """One line per SuperNode of this user: PID, Runtime API port (--port), SuperLink address
    and node config, to choose the ones to stop."""
    from .supernode import supernodes

    for node in supernodes():
        click.echo(node.describe())


@supernode.command("stop", short_help="Stop SuperNodes and everything they started.")
@click.argument("pids", nargs=-1, type=int)
@click.option("--port", "ports", multiple=True, type=int, help="the SuperNode's --port")
@click.option("--superlink", "superlinks", multiple=True, help="every SuperNode dialling it")
@click.option("--all", "everything", is_flag=True, help="every SuperNode of this user")
def supernode_stop(
    pids: tuple[int, ...], ports: tuple[int, ...], superlinks: tuple[str, ...], everything: bool
) -> None:
    """Stop SuperNodes of this user, named by PID, Runtime API port (--port, default 9094) or
    SuperLink address (--superlink HOST:PORT, as the SuperNodes were given it), or --all,
    with every process each started (SuperExec, ClientApps) and every SuperExec started
    beside one with --parent-pid; SIGTERM first, so that each leaves its SuperLink, then
    SIGKILL for what is left after 10 s. Other users' processes are never touched. Without a
    name: the SuperNodes there are, and exit 2."""
    from .supernode import select, stop_supernodes, supernodes

    running = supernodes()
    if not (pids or ports or superlinks or everything):
        _refuse(
            [node.describe() for node in running]
            + ["pfedgm supernode stop: name SuperNodes (PID, --port, --superlink) or --all"]
        )
    ours = {node.pid for node in running}
    if strangers := [pid for pid in pids if pid not in ours]:
        _refuse([f"pfedgm supernode stop: {pid} is no SuperNode of yours" for pid in strangers])
    chosen = select(running, set(pids), set(ports), set(superlinks), everything)
    if not chosen:
        click.echo("no SuperNode of yours matches")
    counts = stop_supernodes(chosen)  # together: each takes seconds to leave its SuperLink
    for node in chosen:
        click.echo(f"stopped SuperNode {node.describe()} ({counts[node.pid]} processes)")


def _checked(run_config: tuple[str, ...]) -> RunConfig:
    """The run's common settings when `run_config` passes `check.check`; else its problems,
    one line each, and exit 2."""
    from .check import check as check_run_config
    from .check import preset_notices, read_run_config

    try:
        given = read_run_config(run_config)
        problems, cfg = check_run_config(given)
    except ConfigError as exc:
        problems, cfg = [str(exc)], None
    if problems or cfg is None:
        _refuse(problems)
    for line in preset_notices(given):  # said, not refused: the run is what the preset says
        click.echo(line, err=True)
    return cfg


def _refuse(problems: list[str]) -> NoReturn:
    for line in problems:
        click.echo(line, err=True)
    sys.exit(2)


if __name__ == "__main__":  # python -m pfedgm_cli.commands, as the `pfedgm` command
    main()
