"""Opening a path beneath a folder without ever leaving it: a run's workspace holds what
its commands made, symlinks too, and a command running beside a file tool may swap a
folder for a link between any check and any open. So no path is checked and then opened:
each is opened relative to the folder's own descriptor, with the kernel refusing to leave
it at any component (`openat2` with RESOLVE_BENEATH, Linux 5.6 and later), or, where the
kernel lacks it, one component at a time with O_NOFOLLOW (then no link is followed at all).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import functools
import os
import platform
import stat
import uuid
from collections.abc import Iterator
from pathlib import PurePosixPath

# openat2(2): the same number on every architecture Linux added it to after 5.6.
SYS_OPENAT2 = 437
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08


class Outside(PermissionError):
    """A path that leads out of its folder (through a link), or through something that is
    not a folder."""


class _OpenHow(ctypes.Structure):
    _fields_ = (
        ("flags", ctypes.c_uint64),
        ("mode", ctypes.c_uint64),
        ("resolve", ctypes.c_uint64),
    )


@functools.cache
def _libc() -> ctypes.CDLL | None:
    if platform.system() != "Linux":
        return None
    return ctypes.CDLL(None, use_errno=True)


_openat2_works = True


def _openat2(folder: int, path: str, flags: int, mode: int) -> int | None:
    """`openat2` beneath `folder`; None if this kernel has no openat2."""
    global _openat2_works
    libc = _libc()
    if libc is None or not _openat2_works:
        return None
    mode = mode if flags & os.O_CREAT else 0  # openat2 takes a mode only to create
    how = _OpenHow(flags | os.O_CLOEXEC, mode, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
    fd = int(
        libc.syscall(
            SYS_OPENAT2,
            ctypes.c_int(folder),
            ctypes.c_char_p(os.fsencode(path)),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
    )
    if fd >= 0:
        return fd
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EPERM) and _openat2_works:  # old kernel, or seccomp
        _openat2_works = False
        return None
    if code == errno.EXDEV:
        raise Outside(errno.EXDEV, f"'{path}' leads outside its folder")
    raise OSError(code, os.strerror(code), path)


def _parts(path: str) -> list[str]:
    parts = list(PurePosixPath(path).parts)
    if not parts or parts[0] == "/" or ".." in parts:
        raise Outside(errno.EXDEV, f"'{path}' is not a path inside its folder")
    return [p for p in parts if p != "."]


def _walk(folder: int, parts: list[str], flags: int, mode: int) -> int:
    """Open `parts` beneath `folder` one component at a time, following no link."""
    current = os.dup(folder)
    try:
        for part in parts[:-1]:
            try:
                step = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=current)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Outside(exc.errno, f"'{part}' is a link or not a folder") from None
                raise
            os.close(current)
            current = step
        try:
            return os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=current)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Outside(exc.errno, f"'{parts[-1]}' is a link") from None
            raise
    finally:
        os.close(current)


def open_beneath(folder: int, path: str, flags: int, mode: int = 0o644) -> int:
    """A descriptor of `path` opened beneath the folder descriptor `folder`; raises Outside
    if the path would leave it (FileNotFoundError and the like as `open` does)."""
    parts = _parts(path)
    fd = _openat2(folder, "/".join(parts), flags, mode)
    return fd if fd is not None else _walk(folder, parts, flags, mode)


def folder_beneath(folder: int, path: str, *, create: bool = False) -> int:
    """A descriptor of the folder `path` beneath `folder` (made, with its parents, if
    `create`); raises Outside if it would leave it or is not a folder."""
    current = os.dup(folder)
    try:
        for part in _parts(path) if path not in ("", ".") else []:
            try:
                step = open_beneath(current, part, os.O_RDONLY | os.O_DIRECTORY)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=current)
                step = open_beneath(current, part, os.O_RDONLY | os.O_DIRECTORY)
            except NotADirectoryError:
                raise Outside(errno.ENOTDIR, f"'{part}' is not a folder") from None
            os.close(current)
            current = step
        return current
    except BaseException:
        os.close(current)
        raise


@contextlib.contextmanager
def opened_folder(path: os.PathLike[str] | str) -> Iterator[int]:
    """A descriptor of the folder `path` itself, for the block."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)


def read_beneath(root: os.PathLike[str] | str, path: str, limit: int) -> tuple[bytes, int]:
    """Up to `limit` bytes of the regular file `path` beneath `root`, and its size."""
    with opened_folder(root) as folder:
        fd = open_beneath(folder, path, os.O_RDONLY | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(errno.EISDIR, f"'{path}' is not a file")
        return f.read(limit), info.st_size


def exists_beneath(root: os.PathLike[str] | str, path: str) -> bool:
    """Whether `path` names something beneath `root` (a link leading out does not count)."""
    try:
        with opened_folder(root) as folder:
            os.close(open_beneath(folder, path, os.O_PATH))
    except (FileNotFoundError, NotADirectoryError, Outside):
        return False
    return True


def split(path: str) -> tuple[str, str]:
    """`path`'s folder (relative, "" for the top) and its last component."""
    parts = _parts(path)
    return "/".join(parts[:-1]), parts[-1]


def kind_of(folder: int, name: str) -> str | None:
    """What `name` in `folder` is, its link unfollowed: "file", "link", "folder", "other",
    or None (nothing)."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISLNK(mode):
        return "link"
    return "folder" if stat.S_ISDIR(mode) else "other"


def replace_in(folder: int, name: str, data: bytes) -> None:
    """Put `data` at `name` in `folder` atomically: a fresh file beside it (made exclusively,
    so no planted link is followed), then renamed over it. A retry never sees half a file."""
    temporary = f".{name}.{uuid.uuid4().hex[:8]}.tmp"
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(temporary, flags, 0o644, dir_fd=folder)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(temporary, name, src_dir_fd=folder, dst_dir_fd=folder)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary, dir_fd=folder)


def read_in(folder: int, name: str) -> bytes:
    """The whole regular file `name` in `folder`, its link unfollowed."""
    fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=folder)
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise IsADirectoryError(errno.EISDIR, f"'{name}' is not a file")
        return f.read()
