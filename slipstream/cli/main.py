"""The ``slipstream`` command: ``run``, ``explain`` and ``checkpoints`` (built on click).

Examples::

    slipstream run job.py --parallelism 4 --checkpoint-dir /var/lib/job/chk
    slipstream run job.py --restore latest          # or --restore /var/lib/job/chk/chk-000042
    slipstream explain job.py --format mermaid
    slipstream checkpoints verify /var/lib/job/chk
"""

from __future__ import annotations

import contextlib
import sys

import click

from slipstream.cli.checkpoints import checkpoints
from slipstream.cli.launch import ExplainContext, JobStopped, PlanShown, RunContext, Settings, run_script
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
    return " ".join(["slipstream run", script, *options, "--restore", savepoint])


@main.command()
@SCRIPT
@PARALLELISM
@click.option("--restore", metavar="latest|PATH",
              help="Resume from a checkpoint or savepoint: 'latest' (the newest complete one in the "
                   "checkpoint directory) or its path.")
@click.option("--checkpoint-dir", type=click.Path(file_okay=False),
              help="Where the job's checkpoints go (the script's own setting overrides it).")
@SCRIPT_ARGS
def run(script: str, parallelism: int | None, restore: str | None, checkpoint_dir: str | None,
        script_args: tuple[str, ...]) -> None:
    """Run SCRIPT (a job file) as __main__; arguments after `--` are its own.

    Ctrl-C stops the job gracefully: with checkpointing enabled it takes a savepoint and prints
    how to resume from it; a second Ctrl-C stops at once. The exit code is then 130.
    """
    settings = Settings(parallelism, checkpoint_dir)
    try:
        run_script(script, list(script_args), RunContext(settings), restore)
    except JobStopped as stopped:
        if stopped.savepoint is not None:
            click.echo(f"Savepoint written: {stopped.savepoint}", err=True)
            click.echo(f"Resume with: {_resume_hint(script, settings, stopped.savepoint)}", err=True)
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


main.add_command(checkpoints)
