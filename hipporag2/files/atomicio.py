"""Crash-safe file writes: every artefact appears whole or not at all.

A file is written to a temp name beside its target (same folder, so the rename
cannot cross file systems), flushed and fsynced, renamed over the target, and the
folder is fsynced so the rename itself survives a power cut. A process killed at
any point leaves either the old file or the new one, plus at most a stray
`*.tmp-PID` file that `remove_stale_temps` cleans up.

A write the operating system refuses (no space left, permission denied, a read-only
file system, a path through a file) raises `StorageError`: the path, what was being
written, why, and the bytes it needed where known, which the CLI prints as one line
(exit 2). The temp file is removed, so the target still holds its previous version
(or nothing): a full disk never leaves a half-written artefact under a real name.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Optional

TMP_MARK = ".tmp-"

# errno -> the words a user needs; other errors keep the system's own text
_REASONS = {
    errno.ENOSPC: "no space left on the file system",
    errno.EDQUOT: "disk quota exceeded",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
    errno.EROFS: "read-only file system",
    errno.ENOTDIR: "a folder on the path is a file",
    errno.EEXIST: "a file is in the way of a folder",
    errno.EISDIR: "the path is a folder",
}


class StorageError(OSError):
    """The operating system refused to write an artefact. One line, naming the path,
    what was being written, why, and how many bytes it needed where known; the CLI
    prints it and exits with status 2 (`hipporag2.cli.user_errors`)."""

    def __init__(self, path: Path | str, what: str, cause: OSError, needed: Optional[int] = None):
        super().__init__(cause.errno, cause.strerror or str(cause), str(path))
        self.path, self.what, self.needed, self.cause = Path(path), what, needed, cause

    def __str__(self) -> str:
        reason = _REASONS.get(self.errno or 0, self.strerror or str(self.cause))
        detail = ""
        if self.errno in (errno.ENOSPC, errno.EDQUOT):
            free = free_bytes(self.path)
            need = f"needs {self.needed:,} bytes, " if self.needed is not None else ""
            detail = f" ({need}{free:,} bytes free)" if free is not None else (f" ({need.rstrip(', ')})" if need else "")
        elif self.errno in (errno.ENOTDIR, errno.EEXIST):
            blocker = _file_in_the_way(self.path)
            detail = f" ({blocker} is a file)" if blocker is not None else ""
        if not self.what:  # an error of someone else's I/O: read or write, we do not know
            return f"{self.path}: {reason}{detail}"
        verb = "create" if self.what.endswith("folder") else "write"
        return f"cannot {verb} {self.what} {self.path}: {reason}{detail}"


def os_error_line(exc: OSError) -> Optional[str]:
    """The one line for an OSError the user's machine caused (space, permissions, a file
    in the way of a folder), raised by a writer outside this module (a lock file, a
    library's own mkdir); None for any other error, which stays a bug report."""
    if isinstance(exc, StorageError):
        return str(exc)
    if exc.errno not in _REASONS:
        return None
    name = exc.filename if exc.filename is not None else "?"
    return str(StorageError(name, "", exc))


@contextmanager
def os_errors_exit() -> Iterator[None]:
    """For a console script's main: an OSError of the user's machine (`os_error_line`)
    ends the command with one line on stderr and exit status 2, not a traceback."""
    try:
        yield
    except OSError as e:
        line = os_error_line(e)
        if line is None:
            raise
        import sys

        print(f"error: {line}", file=sys.stderr)
        sys.exit(2)


def free_bytes(path: Path | str) -> Optional[int]:
    """Bytes free to this user on the file system of `path` (its nearest existing folder)."""
    p = Path(path)
    while not p.is_dir() and p != p.parent:
        p = p.parent
    try:
        st = os.statvfs(p)
    except OSError:
        return None
    return st.f_bavail * st.f_frsize


def _file_in_the_way(path: Path) -> Optional[Path]:
    for p in [path, *path.parents][::-1]:
        if p.exists() and not p.is_dir():
            return p
    return None


def storage_error(exc: OSError, path: Path | str, what: str, needed: Optional[int] = None) -> OSError:
    """`exc` as a StorageError about `path` (one already is: kept as it is)."""
    if isinstance(exc, StorageError):
        return exc
    return StorageError(path, what, exc, needed)


@contextmanager
def guarded(path: Path | str, what: str, needed: Optional[int] = None) -> Iterator[None]:
    """OSErrors raised inside become StorageError about `path`: for writers that do not
    go through this module's functions (numpy into an index folder, a sqlite file)."""
    try:
        yield
    except OSError as e:
        raise storage_error(e, path, what, needed) from None


def make_dirs(path: Path | str, what: str = "folder") -> Path:
    """`mkdir -p`, with a refusal as StorageError naming the folder."""
    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise StorageError(path, what, e) from None
    return path


def tmp_path(path: Path) -> Path:
    return path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")


def fsync_dir(path: Path | str) -> None:
    """Make a rename inside `path` durable (a no-op where folders cannot be opened)."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextmanager
def _replacing(path: Path | str, mode: str, what: str = "file", needed: Optional[int] = None, **open_kw) -> Iterator[IO]:
    """A temp file beside `path` to write; on success it is fsynced and renamed over
    `path` (then the folder is fsynced), on any error removed, leaving `path` as it was.
    An OSError comes out as StorageError (`what` names the artefact)."""
    path = Path(path)
    tmp = tmp_path(path)
    f = None
    try:
        with open(tmp, mode, **open_kw) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        _unlink_quietly(tmp)
        if isinstance(e, OSError):
            if needed is None and f is not None:
                try:
                    needed = f.tell()  # what a streamed write had got to: at least this much
                except (OSError, ValueError):
                    pass
            raise storage_error(e, path, what, needed) from None
        raise
    fsync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink(missing_ok=True)
    except OSError:
        pass  # a read-only folder: there is no temp file to remove either


def write_bytes(path: Path | str, data: bytes, what: str = "file") -> None:
    with _replacing(path, "wb", what, len(data)) as f:
        f.write(data)


def write_text(path: Path | str, text: str, what: str = "file") -> None:
    write_bytes(path, text.encode("utf-8"), what)


def write_json(path: Path | str, obj: Any, indent: int | None = 2, what: str = "file") -> None:
    write_text(path, json.dumps(obj, indent=indent, ensure_ascii=False), what)


def write_jsonl(path: Path | str, rows: Iterable[Any], what: str = "file") -> None:
    write_lines(path, (json.dumps(row, ensure_ascii=False) for row in rows), what)


def write_lines(path: Path | str, lines: Iterable[str], what: str = "file") -> None:
    """Lines already encoded (e.g. JSON made by `result_lines`), each followed by a newline."""
    with _replacing(path, "w", what, encoding="utf-8") as f:
        for line in lines:
            f.write(line + "\n")


def sha256_file(path: Path | str) -> str:
    """The file's sha256, hashed in one call over a read-only mapping of it.

    hashlib lets go of the GIL while it hashes a large buffer, so one call over the
    whole file runs beside other Python threads from start to end; hashing 1 MB reads
    in a loop needs the GIL back after every chunk, and waits for it behind a thread
    in a long C call (json parsing index.json while the index's files are checked)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size < (1 << 20):
            h.update(f.read())
        else:
            import mmap

            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
                h.update(m)
    return h.hexdigest()


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temps(folder: Path | str, prefix: str = "", any_pid: bool = False) -> int:
    """Delete `PREFIX*.tmp-PID` files/folders in `folder` left by killed writers.

    With `any_pid=False` only those whose process is gone on this machine; pass
    `any_pid=True` when the caller holds the lock that every writer of these names
    takes (then every such temp is a leftover, whichever host wrote it).
    """
    import shutil

    folder = Path(folder)
    n = 0
    if not folder.is_dir():
        return 0
    for p in folder.iterdir():
        name = p.name
        if TMP_MARK not in name or not name.startswith(prefix):
            continue
        pid = name.rsplit(TMP_MARK, 1)[1]
        if not pid.isdigit() or (not any_pid and _pid_alive(int(pid))):
            continue
        try:
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p)
            else:
                p.unlink()
            n += 1
        except OSError:
            pass
    return n


# ---- fault injection for crash tests ---------------------------------------------------
# HIPPORAG2_CRASH_AT="name" or "name:N" kills this process with SIGKILL the N-th time
# (default 1st) execution passes `crash_point("name")`. Unset (always, outside tests),
# a crash point is one dictionary lookup.
_crash_hits: dict = {}


def _crash_target() -> tuple[str, int] | None:
    spec = os.environ.get("HIPPORAG2_CRASH_AT")
    if not spec:
        return None
    name, _, n = spec.partition(":")
    return name, int(n) if n.isdigit() else 1


def crash_hit(name: str) -> bool:
    """Count a pass through crash point `name`; True when this pass is the one to crash
    at (the caller may then leave something half-done and call `crash_now()`)."""
    target = _crash_target()
    if target is None or target[0] != name:
        return False
    _crash_hits[name] = _crash_hits.get(name, 0) + 1
    return _crash_hits[name] == target[1]


def crash_now() -> None:
    import signal

    os.kill(os.getpid(), signal.SIGKILL)


def crash_point(name: str) -> None:
    if crash_hit(name):
        crash_now()


# ---- append-only checkpoint files ---------------------------------------------------


def read_checkpoint_lines(path: Path | str, header: Any, accept: Callable[[Any, int], Optional[list]]) -> Optional[list]:
    """The items of an append-only JSONL checkpoint (a header line, then one line per
    finished piece of work, each appended with flush + fsync).

    Lines are read while each parses and `accept(obj, items_so_far)` returns its items
    (None stops): a line torn by a kill mid-write, or one of another run, ends the
    read and the file is cut back to what was accepted. Returns None, having removed
    the file, when it is absent or its header is not `header`."""
    path = Path(path)
    if not path.is_file():
        return None
    with open(path, "rb") as f:
        lines = f.read().split(b"\n")
    items: list = []
    good_bytes, ok = 0, False
    for n, line in enumerate(lines[:-1]):  # what follows the last newline is torn
        try:
            obj = json.loads(line)
        except (ValueError, UnicodeDecodeError):
            break
        if n == 0:
            if obj != header:
                break
            ok = True
        else:
            got = accept(obj, len(items)) if isinstance(obj, dict) else None
            if got is None:
                break
            items.extend(got)
        good_bytes += len(line) + 1
    if not ok:
        path.unlink(missing_ok=True)
        return None
    with open(path, "r+b") as f:  # drop a torn or foreign tail
        f.truncate(good_bytes)
        f.flush()
        os.fsync(f.fileno())
    return items


class CheckpointLog:
    """The writing side of `read_checkpoint_lines`: the header goes first when the file
    is new, then each line is appended with flush + fsync, so a kill loses at most the
    line being written. `torn_crash` names a crash point (tests) that dies halfway
    through a line, to prove the reader cuts it off."""

    def __init__(self, path: Path | str, header: Any, torn_crash: Optional[str] = None, what: str = "checkpoint"):
        self.path, self.header, self.torn_crash, self.what = Path(path), header, torn_crash, what
        self._f: Optional[IO[bytes]] = None

    def write(self, obj: Any) -> str:
        """Append one line (after the header, if the file is new); returns its JSON text."""
        self.write_header()
        return self._line(obj)

    def write_text(self, text: str) -> str:
        """`write` of a line already encoded: `text` must be what json.dumps(obj,
        ensure_ascii=False) gives for the object it stands for (`result_lines`)."""
        self.write_header()
        return self._text(text)

    def write_header(self) -> None:
        """Open the file for appending (once); write the header first when the file is new."""
        if self._f is None:
            new = not self.path.is_file()
            make_dirs(self.path.parent)
            with guarded(self.path, self.what):
                self._f = open(self.path, "ab", buffering=0)  # unbuffered: a failed append holds nothing back
            if new:
                self._line(self.header)

    def _line(self, obj: Any) -> str:
        return self._text(json.dumps(obj, ensure_ascii=False))

    def _text(self, text: str) -> str:
        """Every line, the header included, is a pass through the `torn_crash` point."""
        data = text.encode("utf-8") + b"\n"
        if self.torn_crash and crash_hit(self.torn_crash):
            self._append(data[: len(data) // 2])
            crash_now()
        self._append(data)
        return text

    def _append(self, data: bytes) -> None:
        """All of `data` or none of it: a refused write (a full disk) is cut off again,
        so the file ends with its last whole line, and raised as StorageError."""
        end = self._f.seek(0, os.SEEK_END)
        try:
            view = memoryview(data)
            while view:
                n = self._f.write(view)
                view = view[n:]
            os.fsync(self._f.fileno())
        except OSError as e:
            try:
                os.ftruncate(self._f.fileno(), end)
            except OSError:
                pass  # a torn last line is what the reader cuts off anyway
            self.close()
            raise storage_error(e, self.path, self.what, len(data)) from None

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def remove(self) -> None:
        self.close()
        self.path.unlink(missing_ok=True)
        fsync_dir(self.path.parent)
