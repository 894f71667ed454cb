"""The ``slipstream`` command: ``run``, ``explain`` and ``checkpoints`` (built on click).

Examples::

    slipstream run job.py --parallelism 4 --checkpoint-dir /var/lib/job/chk
    slipstream run job.py --parallelism 4 --workers 2     # subtasks on two worker processes
    slipstream run job.py --restore latest          # or --restore /var/lib/job/chk/chk-000042
    slipstream run job.py --ui 8081                 # the web view on http://127.0.0.1:8081/
    slipstream stop /var/lib/job/chk                # from another terminal: stop with a savepoint
    slipstream explain job.py --format mermaid
    slipstream checkpoints verify /var/lib/job/chk
"""

from __future__ import annotations

import contextlib
import sys

import click

from slipstream.cli.checkpoints import checkpoints
from slipstream.cli.control import SAVEPOINT_DIR, ControlFile, stop_job
from slipstream.cli.launch import ExplainContext, JobStopped, PlanShown, RunContext, Settings, run_script
from slipstream.runtime.checkpoint.recovery import LATEST
from slipstream.runtime.plan_formats import FORMATS

INTERRUPTED = 130
"""The exit code after Ctrl-C (128 + SIGINT), whether the job stopped with a savepoint or at once."""

SCRIPT = click.argument("script", type=click.Path(exists=True, dir_okay=False))
SCRIPT_ARGS = click.argument("script_args", nargs=-1, type=click.UNPROCESSED)
PARALLELISM = click.option("--parallelism", "-p", type=click.IntRange(min=1),
                           help="Default parallelism of the job's environments (the script's own "
                                "set_parallelism overrides it, as with flink run -p).")


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Run slipstream jobs, show their plans, and look after their checkpoints."""


def _resume_hint(script: str, settings: Settings, savepoint: str) -> str:
    options = [f"--parallelism {settings.parallelism}"] if settings.parallelism else []
    options += [f"--checkpoint-dir {settings.checkpoint_dir}"] if settings.checkpoint_dir else []
    options += [f"--workers {settings.workers}"] if settings.workers else []
    return " ".join(["slipstream run", script, *options, "--restore", savepoint])


@main.command()
@SCRIPT
@PARALLELISM
@click.option("--restore", metavar="latest|PATH",
              help="Resume from a checkpoint or savepoint: 'latest' (the newest complete one in the "
                   "checkpoint directory, or in ./slipstream-savepoints, where Ctrl-C saves a job "
                   "without one) or its path.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False),
              help="Where the job's checkpoints go (the script's own setting overrides it).")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Run the job's subtasks on N worker processes (Flink's local.number-taskmanager; "
                   "the script's own configure(workers=...) overrides it).")
@click.option("--ui", "ui_port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve a web view of the running job (its plan, throughput, backlog, checkpoints) "
                   "on http://127.0.0.1:PORT/ (0: a free port, printed).")
@click.option("--metrics-port", type=click.IntRange(0, 65535), metavar="PORT",
              help="Serve the job's metrics for Prometheus on http://127.0.0.1:PORT/metrics.")
@SCRIPT_ARGS
def run(script: str, parallelism: int | None, restore: str | None, checkpoint_dir: str | None,
        workers: int | None, ui_port: int | None, metrics_port: int | None, script_args: tuple[str, ...]) -> None:
    """Run SCRIPT (a job file) as __main__; arguments after `--` are its own.

    Ctrl-C (or `slipstream stop` from elsewhere) stops the job gracefully: with checkpointing
    enabled it takes a savepoint and prints how to resume from it; a second Ctrl-C stops at once.
    The exit code is then 130.
    """
    if restore == LATEST and checkpoint_dir is None:
        # Ctrl-C keeps the savepoints of a job without a checkpoint directory there: resume the newest
        checkpoint_dir = SAVEPOINT_DIR
    settings = Settings(parallelism, checkpoint_dir, ui_port, metrics_port, workers)
    control = ControlFile(script)
    try:
        run_script(script, list(script_args), RunContext(settings, control), restore)
    except JobStopped as stopped:
        resume = _resume_hint(script, settings, stopped.savepoint) if stopped.savepoint is not None else None
        control.stopped(stopped.savepoint, resume)
        if stopped.savepoint is not None:
            click.echo(f"Savepoint written: {stopped.savepoint}", err=True)
            click.echo(f"Resume with: {resume}", err=True)
        else:
            click.echo("The job stopped without a savepoint.", err=True)
        sys.exit(INTERRUPTED)
    except KeyboardInterrupt:
        click.echo("Interrupted (no job was running).", err=True)
        sys.exit(INTERRUPTED)


@main.command()
@SCRIPT
@click.option("--format", "format_", type=click.Choice(FORMATS), default="text", show_default=True,
              help="text (as env.explain()), json (a document, see slipstream.runtime.plan_formats), "
                   "mermaid or dot (pictures).")
@PARALLELISM
@SCRIPT_ARGS
def explain(script: str, format_: str, parallelism: int | None, script_args: tuple[str, ...]) -> None:
    """Print the plan of the first job SCRIPT submits, without running it (what the script itself
    prints goes to stderr, so the plan alone is on stdout)."""
    try:
        with contextlib.redirect_stdout(sys.stderr):
            run_script(script, list(script_args), ExplainContext(format_, Settings(parallelism)))
    except PlanShown as shown:
        click.echo(shown.plan)
        return
    raise click.ClickException(f"{script} ran to its end without submitting a job "
                               "(no execute(), execute_async() or execute_and_collect() call)")


@main.command()
@click.argument("directory", default=SAVEPOINT_DIR, type=click.Path(file_okay=False))
@click.option("--timeout", type=click.FloatRange(min=0), default=600, show_default=True,
              help="Seconds to wait for the job to take its savepoint and exit.")
def stop(directory: str, timeout: float) -> None:
    """Stop the job `slipstream run` runs with DIRECTORY as its checkpoint directory (default:
    slipstream-savepoints, where a job without one keeps its savepoints): it takes a savepoint,
    as on Ctrl-C, and this prints how to resume from it."""
    record = stop_job(directory, timeout)
    if record.get("savepoint"):
        click.echo(f"Savepoint written: {record['savepoint']}")
        click.echo(f"Resume with: {record['resume']}")
    elif record["state"] == "FINISHED":
        click.echo(f"The job of {record['script']} finished by itself before it was stopped.")
    else:
        raise click.ClickException(f"the job of {record['script']} stopped without a savepoint "
                                   "(it does not checkpoint, or was stopped at once)")


main.add_command(checkpoints)
