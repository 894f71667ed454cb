"""``slipstream checkpoints list|inspect|verify``: a job's checkpoint directory, without the job.

``verify`` reads every checkpoint exactly as a restore does
(:meth:`~slipstream.runtime.checkpoint.storage.CheckpointStorage.read_verified`: the manifest's
own checksum and format, the files it lists, each file's size and SHA-256) and says which can be
restored. What needs the job itself — that its operators match the checkpoint's fingerprint,
that each operator accepts its state — is checked when the job restores.
"""

from __future__ import annotations

import datetime
import os
import re

import click

from slipstream.errors import CorruptCheckpointError, InvalidProgramError
from slipstream.filesystem import FileSystem, resolve
from slipstream.runtime.checkpoint.manifest import MANIFEST_NAME, Manifest
from slipstream.runtime.checkpoint.storage import CheckpointStorage

_CHECKPOINT = re.compile(r"^chk-(\d+)$")
DIRECTORY = click.argument("directory")


def _open(directory: str) -> tuple[CheckpointStorage, list[int]]:
    """The storage and the checkpoint ids DIRECTORY means: every checkpoint of a checkpoint storage
    directory, or the one checkpoint a ``chk-N`` directory is; a local path or a URL (``s3://``)."""
    try:
        fs, path = resolve(directory, "DIRECTORY")
    except InvalidProgramError as error:
        raise click.BadParameter(str(error)) from None
    if not fs.is_dir(path):
        raise click.BadParameter(f"directory '{directory}' does not exist")
    match = _CHECKPOINT.match(os.path.basename(path))
    if match:
        return CheckpointStorage(os.path.dirname(path), fs=fs), [int(match.group(1))]
    storage = CheckpointStorage(path, fs=fs)
    return storage, storage.checkpoint_ids()


def _manifest(fs: FileSystem, path: str) -> Manifest:
    return Manifest.decode(fs.read_file(os.path.join(path, MANIFEST_NAME)), path)


def _size(fs: FileSystem, path: str) -> int:
    return sum(fs.size(os.path.join(path, name)) for name in fs.listdir(path)
               if fs.is_file(os.path.join(path, name)))


def _when(ms: float) -> str:
    return datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _human(size: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


@click.group()
def checkpoints() -> None:
    """List, inspect and verify the checkpoints in a checkpoint directory."""


@checkpoints.command("list")
@DIRECTORY
def list_checkpoints(directory: str) -> None:
    """One line per checkpoint: id, time taken, size on disk, complete or not."""
    storage, ids = _open(directory)
    if not ids:
        click.echo(f"no checkpoints in {storage.directory}")
        return
    click.echo(f"{'CHECKPOINT':<12} {'TAKEN':<24} {'SIZE':>10}  COMPLETE")
    for checkpoint_id in ids:
        path = storage.path_of(checkpoint_id)
        complete = storage.is_complete(checkpoint_id)
        try:
            taken = _when(_manifest(storage.fs, path).created_ms if complete else storage.fs.modified_ms(path))
            state = "yes" if complete else "no (no manifest)"
        except CorruptCheckpointError:
            taken, state = _when(storage.fs.modified_ms(path)), "damaged manifest"
        click.echo(f"{os.path.basename(path):<12} {taken:<24} {_human(_size(storage.fs, path)):>10}  {state}")


@checkpoints.command()
@DIRECTORY
def inspect(directory: str) -> None:
    """Show a checkpoint's manifest: job, fingerprint, operators and their files, sizes and checksums.

    DIRECTORY is a checkpoint (chk-N) or a checkpoint directory (its newest complete checkpoint).
    """
    storage, ids = _open(directory)
    complete = [i for i in ids if storage.is_complete(i)]
    if not complete:
        raise click.ClickException(f"no complete checkpoint in {directory}")
    path = storage.path_of(complete[-1])
    try:
        manifest = _manifest(storage.fs, path)
    except CorruptCheckpointError as error:
        raise click.ClickException(str(error)) from None
    click.echo(f"checkpoint {manifest.checkpoint_id}: {path}")
    click.echo(f"  job: {manifest.job_name}")
    click.echo(f"  job fingerprint: {manifest.job_fingerprint}")
    click.echo(f"  taken: {_when(manifest.created_ms)}   mode: {manifest.mode}")
    click.echo(f"  operators ({len(manifest.operators)}):")
    for uid, entry in sorted(manifest.operators.items()):
        click.echo(f"    {uid}  {entry.kind}  parallelism {entry.parallelism}  "
                   f"max parallelism {entry.max_parallelism}")
        for index, subtask in enumerate(entry.subtasks):
            names = [f["file"] for f in subtask.keyed_states] + \
                [name for name in (subtask.keyed, subtask.operator, subtask.timers) if name]
            groups = f"  key groups {subtask.key_groups[0]}..{subtask.key_groups[1] - 1}" \
                if subtask.key_groups else ""
            click.echo(f"      subtask {index}{groups}: {', '.join(names) or 'no state'}")
            for number, layer in enumerate(subtask.keyed_deltas, 1):
                click.echo(f"        then changes {number}: {', '.join(f['file'] for f in layer)}")
    for title, files in (("files", manifest.files), ("shared files", manifest.shared)):
        click.echo(f"  {title} ({len(files)}, {_human(sum(f['size'] for f in files.values()))}):")
        for name, info in sorted(files.items()):
            click.echo(f"    {name}  {info['size']} bytes  sha256 {info['sha256']}")


@checkpoints.command()
@DIRECTORY
def verify(directory: str) -> None:
    """Re-check every checkpoint's checksums and say which can be restored (exit 1 when none can)."""
    storage, ids = _open(directory)
    restorable = []
    for checkpoint_id in ids:
        path = storage.path_of(checkpoint_id)
        name = os.path.basename(path)
        if not storage.is_complete(checkpoint_id):
            click.echo(f"{name}: INCOMPLETE (no manifest: its writer stopped before finishing it)")
            continue
        try:
            checkpoint = storage.read_verified(path, None)
        except CorruptCheckpointError as error:
            click.echo(f"{name}: DAMAGED: {error}")
            continue
        restorable.append(path)
        click.echo(f"{name}: OK ({len(checkpoint.manifest.files)} files and {len(checkpoint.manifest.shared)} "
                   "shared files, checksums match)")
    if not restorable:
        click.echo(f"no checkpoint in {directory} can be restored", err=True)
        raise SystemExit(1)
    click.echo(f"restorable: {', '.join(os.path.basename(p) for p in restorable)}; "
               f"--restore latest uses {restorable[-1]}")
