"""One file system seam for sources, sinks and checkpoint storage: local paths or fsspec URLs.

:func:`resolve` says which file system a path lives on and gives the path in its normal
form. Plain paths and ``file://`` URIs are local files: absolute paths, the built-in
``open``, ``os.replace`` and fsync, exactly as fast and as safe as without this seam. Any
other scheme (``s3://``, ``gs://``, ``memory://``, ...) goes through `fsspec
<https://filesystem-spec.readthedocs.io>`_ (``pip install 'slipstream[s3]'`` for S3), and the
URL stays the path's name in positions, part files and messages. Credentials and endpoints
come from fsspec's own configuration (``FSSPEC_S3_ENDPOINT_URL``, ``fsspec.config.conf``) or
the store's usual environment variables.

What a commit guarantees differs, and the callers are written for both:

* **local**: a file is written and fsynced under a temporary name, renamed into place
  (atomic) and its directory fsynced, so after a crash the file is either absent or whole;
* **object stores**: an object appears whole or not at all once its upload completes (a PUT,
  or a completed multipart upload), and is durable then; a "rename" is a copy and a delete,
  so only the copy is atomic. Commit points are therefore single uploads under the final
  name (a checkpoint's manifest, put last, as Flink commits a checkpoint by its metadata
  file) and copies that are repeated until they are known to be done (a ``FileSink`` part:
  copied from its hidden in-progress object to its final name, again on restore while the
  in-progress object still exists).
"""

from __future__ import annotations

import errno
import os
import posixpath
import shutil
from collections.abc import Callable
from typing import Any, BinaryIO

from slipstream.errors import DiskFullError, InvalidProgramError

__all__ = ["FileSystem", "RemoteFileSystem", "apply_fsspec_settings", "copy_directory", "filesystem_of",
           "fsspec_settings", "normalize", "resolve"]


class FileSystem:
    """Local files with the durability steps spelled out (write, fsync, rename, fsync directory).

    :class:`RemoteFileSystem` overrides what differs on fsspec's file systems; the checkpoint
    crash-point tests subclass this one to fail after the n-th durable step.
    """

    local = True
    """Whether paths name files of this machine (which the built-in ``open`` and pyarrow read)."""
    atomic_rename = True
    """Whether :meth:`rename` replaces its target in one atomic step."""

    # -- paths ---------------------------------------------------------------------------------------
    def normalize(self, path: str) -> str:
        """``path`` in the one form used to name it: absolute, without ``file://``."""
        return os.path.abspath(path[len("file://"):] if path.startswith("file://") else path)

    def join(self, base: str, relative: str) -> str:
        """``relative`` (``/``-separated, ``.`` for ``base`` itself) under ``base``."""
        return os.path.normpath(os.path.join(base, relative))

    def owns(self, path: str) -> bool:
        """Whether ``path`` lies on this file system (a local path or a ``file://`` URI)."""
        return "://" not in path or path.startswith("file://")

    # -- writing -------------------------------------------------------------------------------------
    def makedirs(self, path: str, private: bool = True) -> None:
        """Create ``path`` (and parents); ``private``: for the user alone, mode 0700."""
        if not private:
            os.makedirs(path, exist_ok=True)
            return
        os.makedirs(path, mode=0o700, exist_ok=True)
        os.chmod(path, 0o700)

    def write_file(self, path: str, data: bytes | memoryview, what: str = "checkpoint file") -> None:
        """Write ``data`` to a new file and fsync it; ENOSPC becomes :class:`DiskFullError`."""
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            try:
                self._write_all(fd, data)
                self._fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            if exc.errno == errno.ENOSPC:
                raise DiskFullError(path, what, exc) from exc
            raise

    def _write_all(self, fd: int, data: bytes | memoryview) -> None:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]

    def _fsync(self, fd: int) -> None:
        os.fsync(fd)

    def publish_file(self, path: str, data: bytes, temp_name: str, what: str) -> None:
        """Make ``path`` appear holding ``data``, whole or not at all even across a crash: written
        and fsynced as ``temp_name`` beside it, the directory fsynced, renamed, fsynced again."""
        directory = os.path.dirname(path)
        temp = os.path.join(directory, temp_name)
        self.write_file(temp, data, what=what)
        self.fsync_dir(directory)
        self.rename(temp, path)
        self.fsync_dir(directory)

    def open_output(self, path: str) -> BinaryIO:
        """A new file to stream bytes into; finish it with :meth:`close_durably`."""
        return open(path, "wb")  # noqa: SIM115 - the caller closes it with close_durably

    def close_durably(self, stream: BinaryIO) -> None:
        """Flush, fsync and close a stream from :meth:`open_output`."""
        stream.flush()
        os.fsync(stream.fileno())
        stream.close()

    def rename(self, source: str, target: str) -> None:
        """Atomically move ``source`` to ``target`` (replacing it)."""
        os.replace(source, target)

    def fsync_dir(self, path: str) -> None:
        """Make the directory entries of ``path`` (created, renamed, deleted files) durable."""
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def remove(self, path: str) -> None:
        os.unlink(path)

    def remove_tree(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    # -- reading -------------------------------------------------------------------------------------
    def open_input(self, path: str) -> BinaryIO:
        """``path`` opened for reading bytes (seekable)."""
        return open(path, "rb")  # noqa: SIM115 - the caller closes it

    def read_file(self, path: str) -> bytes:
        with open(path, "rb") as handle:
            return handle.read()

    def listdir(self, path: str) -> list[str]:
        """The names in directory ``path``, sorted."""
        return sorted(os.listdir(path))

    def exists(self, path: str) -> bool:
        return os.path.exists(path)

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(path)

    def is_file(self, path: str) -> bool:
        return os.path.isfile(path)

    def size(self, path: str) -> int:
        return os.path.getsize(path)

    def modified_ms(self, path: str) -> float:
        return os.stat(path).st_mtime * 1000

    def find_files(self, root: str, hidden: Callable[[str], bool]) -> list[tuple[str, str]]:
        """Every file under ``root`` (``root`` itself when it is a file) whose name and directories
        are not ``hidden``, as its path and its ``/``-separated path relative to ``root``."""
        if self.is_file(root):
            return [(root, os.curdir)]
        found = []
        for directory, subdirectories, names in os.walk(root):
            subdirectories[:] = sorted(d for d in subdirectories if not hidden(d))
            for name in names:
                if not hidden(name):
                    path = os.path.join(directory, name)
                    found.append((path, os.path.relpath(path, root)))
        return found


_LOCAL = FileSystem()


class RemoteFileSystem(FileSystem):
    """A file system of fsspec (``s3://``, ``gs://``, ``memory://``, ...), paths named by full URLs.

    There is no fsync: an upload that returned is durable. :meth:`rename` is a copy then a
    delete (atomic only in that the copy appears whole), so :meth:`publish_file` uploads under
    the final name instead, and sinks commit by copies they repeat until the source is gone.
    Listings bypass fsspec's listing cache: files written by other processes must be seen.
    """

    local = False
    atomic_rename = False

    def __init__(self, protocol: str, implementation: type[Any]) -> None:
        self.protocol = protocol
        self._implementation = implementation
        self._instance: Any = None

    @property
    def _fs(self) -> Any:
        """The fsspec file system, made on first use (making one may connect to the store)."""
        if self._instance is None:
            import fsspec
            self._instance = fsspec.filesystem(self.protocol)  # with fsspec's configured options
        return self._instance

    def normalize(self, path: str) -> str:
        return self._url(self._implementation._strip_protocol(path).rstrip("/"))

    def join(self, base: str, relative: str) -> str:
        return base if relative == os.curdir else f"{base.rstrip('/')}/{relative}"

    def owns(self, path: str) -> bool:
        return path.startswith(f"{self.protocol}://")

    def _url(self, stripped: str) -> str:
        return f"{self.protocol}://{stripped}"

    def makedirs(self, path: str, private: bool = True) -> None:
        self._fs.makedirs(path, exist_ok=True)  # who may read is the store's access policy

    def write_file(self, path: str, data: bytes | memoryview, what: str = "checkpoint file") -> None:
        self._fs.pipe_file(path, bytes(data))

    def publish_file(self, path: str, data: bytes, temp_name: str, what: str) -> None:
        self.write_file(path, data, what=what)  # one upload: the object appears whole or not at all

    def open_output(self, path: str) -> BinaryIO:
        stream: BinaryIO = self._fs.open(path, "wb")
        return stream

    def close_durably(self, stream: BinaryIO) -> None:
        stream.close()  # completes the upload

    def rename(self, source: str, target: str) -> None:
        self._fs.copy(source, target)
        self._fs.rm_file(source)

    def fsync_dir(self, path: str) -> None:
        """Nothing to do: object stores have no directory entries to make durable."""

    def remove(self, path: str) -> None:
        self._fs.rm_file(path)

    def remove_tree(self, path: str) -> None:
        try:
            self._fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass

    def open_input(self, path: str) -> BinaryIO:
        stream: BinaryIO = self._fs.open(path, "rb")
        return stream

    def read_file(self, path: str) -> bytes:
        data: bytes = self._fs.cat_file(path)
        return data

    def listdir(self, path: str) -> list[str]:
        self._fs.invalidate_cache(path)
        try:
            entries = self._fs.ls(path, detail=False)
        except FileNotFoundError:
            return []
        return sorted({posixpath.basename(entry.rstrip("/")) for entry in entries})

    def exists(self, path: str) -> bool:
        self._fs.invalidate_cache(posixpath.dirname(path))
        return bool(self._fs.exists(path))

    def is_dir(self, path: str) -> bool:
        self._fs.invalidate_cache(path)
        return bool(self._fs.isdir(path))

    def is_file(self, path: str) -> bool:
        self._fs.invalidate_cache(posixpath.dirname(path))
        return bool(self._fs.isfile(path))

    def size(self, path: str) -> int:
        return int(self._fs.size(path))

    def modified_ms(self, path: str) -> float:
        try:
            return float(self._fs.modified(path).timestamp() * 1000)
        except (NotImplementedError, FileNotFoundError, IsADirectoryError):
            return 0.0

    def find_files(self, root: str, hidden: Callable[[str], bool]) -> list[tuple[str, str]]:
        if self.is_file(root):
            return [(root, os.curdir)]
        self._fs.invalidate_cache(root)
        base = self._fs._strip_protocol(root).rstrip("/")
        found = []
        for stripped in self._fs.find(root, detail=False):
            relative = posixpath.relpath(stripped, base)
            if not any(hidden(part) for part in relative.split("/")):
                found.append((self._url(stripped), relative))
        return found


_REMOTE: dict[str, RemoteFileSystem] = {}


def _protocol(path: str) -> str | None:
    """The scheme of a URL other than ``file://``; None for a local path."""
    if "://" not in path or path.startswith("file://"):
        return None
    return path.split("://", 1)[0]


def filesystem_of(path: str, what: str = "path") -> FileSystem:
    """The file system ``path`` lives on; a clear error when its scheme cannot be served."""
    protocol = _protocol(path)
    if protocol is None:
        return _LOCAL
    if protocol not in _REMOTE:
        _REMOTE[protocol] = RemoteFileSystem(protocol, _fsspec_implementation(protocol, path, what))
    return _REMOTE[protocol]


def _fsspec_implementation(protocol: str, path: str, what: str) -> type[Any]:
    try:
        import fsspec
    except ImportError:
        raise InvalidProgramError(f"{what} {path!r}: URLs other than file:// need fsspec "
                                  "(pip install 'slipstream[remote]', or 'slipstream[s3]' for s3://)") from None
    try:
        implementation: type[Any] = fsspec.get_filesystem_class(protocol)
        return implementation
    except ValueError:
        raise InvalidProgramError(f"{what} {path!r}: fsspec knows no file system '{protocol}://'") from None
    except ImportError as error:
        raise InvalidProgramError(f"{what} {path!r}: the file system '{protocol}://' needs a package that "
                                  f"is not installed ({error})") from None


def resolve(path: str | os.PathLike[str], what: str = "path") -> tuple[FileSystem, str]:
    """The file system of ``path`` and ``path`` in its normal form (see :meth:`FileSystem.normalize`).

    Examples:
        >>> fs, path = resolve("file:///tmp/out/../in")
        >>> path, fs.atomic_rename
        ('/tmp/in', True)
        >>> resolve("memory://bucket/in/")[1]
        'memory:///bucket/in'
    """
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise InvalidProgramError(f"{what} needs a path, got {path!r}")
    text = os.fspath(path)
    fs = filesystem_of(text, what)
    return fs, fs.normalize(text)


def normalize(path: str | os.PathLike[str], what: str = "path") -> str:
    """``path`` in its normal form: absolute if local, a full URL otherwise."""
    return resolve(path, what)[1]


def copy_directory(source: str, target: str) -> None:
    """Copy the files directly in directory ``source`` (as a checkpoint holds) into a new directory
    ``target``, each written durably; the two may lie on different file systems."""
    source_fs, target_fs = filesystem_of(source), filesystem_of(target)
    target_fs.makedirs(target)
    for name in source_fs.listdir(source):
        target_fs.write_file(os.path.join(target, name), source_fs.read_file(os.path.join(source, name)),
                             what="savepoint file")
    target_fs.fsync_dir(target)


def fsspec_settings() -> dict[str, Any] | None:
    """What this process set in ``fsspec.config.conf`` (credentials, endpoints), for a worker process
    to apply (:func:`apply_fsspec_settings`); None when fsspec was never imported here."""
    import sys
    if "fsspec" not in sys.modules:
        return None
    import copy

    import fsspec
    return copy.deepcopy(dict(fsspec.config.conf))


def apply_fsspec_settings(settings: dict[str, Any] | None) -> None:
    """Make this process's fsspec configuration the driver's (:func:`fsspec_settings`)."""
    if settings is None:
        return
    import fsspec
    fsspec.config.conf.clear()
    fsspec.config.conf.update(settings)
