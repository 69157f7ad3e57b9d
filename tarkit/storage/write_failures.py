"""What a failed write says: the one place where errors from writes become messages.

Every file tarkit writes — outputs (:class:`~tarkit.storage.StagedFile`, uploads staged
in ``$TMPDIR``), stdout, tarsort's runs, the sample files of tarproc and ``tarkit map
-c``, the shard cache — turns an OSError into :func:`write_failure`'s
:class:`~tarkit.errors.OutputError` where the bytes are written, so the message says the
file system that is full, which need not be the destination's: ``no space left on the
file system of $TMPDIR (/tmp, 0 B free)`` while the output's disk has room.
"""

from __future__ import annotations

import errno
import os
import stat

from ..errors import OutputError
from ..sizes import format_size


def write_failure(
    name: str, exc: OSError, directory: str | None = None, action: str = "write failed"
) -> OutputError:
    """The error to raise when writing ``name``, a file in ``directory``, raised ``exc``.

    A full file system (ENOSPC), a quota (EDQUOT) or a size limit (EFBIG) names the file
    system (:func:`file_system_of`): the one that filled need not be the destination's,
    since an upload is staged in ``$TMPDIR`` and tarproc writes each sample there. Any
    other error, and one whose ``directory`` is unknown (None: stdout, a device), says
    ``action`` with the system's words.

    >>> str(write_failure("out.tar", OSError(errno.EIO, "Input/output error"), "."))
    'out.tar: write failed: Input/output error'
    """
    code = exc.errno
    if directory is None or code not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return OutputError(f"{name}: {action}: {exc.strerror or exc}")
    where = file_system_of(directory)
    if code == errno.ENOSPC:
        cause = f"no space left on the file system of {where}"
    elif code == errno.EDQUOT:
        cause = f"disk quota exceeded on the file system of {where}"
    else:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        if limit != resource.RLIM_INFINITY:
            cause = f"file size limit reached ({format_size(limit)}, ulimit -f)"
        else:
            cause = f"file too large for the file system of {where}"
    return OutputError(f"{name}: {action}: {cause}")


def file_system_of(directory: str) -> str:
    """The file system of ``directory`` as a failed write names it: the path (``$TMPDIR``
    and its path when the directory lies on the temporary directory's file system, below
    it), the mount point when it is another, and the space left.

    The temporary directory is ``$TMPDIR``, else ``/tmp``, as written: not
    ``tempfile.gettempdir()``, which passes over a directory it cannot write a file in,
    as a full one.

    >>> file_system_of("/").startswith("/ (")
    True
    """
    path = os.path.realpath(directory)
    temporary = os.path.realpath(os.environ.get("TMPDIR") or "/tmp")
    label = ""
    mount = _mount_point(path)
    if path.startswith(temporary.rstrip(os.sep) + os.sep) and mount == _mount_point(temporary):
        path = temporary  # what the user can change: $TMPDIR, not tarkit's directory there
    if path == temporary:
        label = "$TMPDIR " if os.environ.get("TMPDIR") else "the temporary directory "
    details = []
    if mount is not None and mount != path:
        details.append(f"mounted at {mount}")
    try:
        info = os.statvfs(path)
        details.append(f"{format_size(info.f_bavail * info.f_frsize)} free")
    except OSError:
        pass
    if label:
        return f"{label}({', '.join([path, *details])})"
    return f"{path} ({', '.join(details)})" if details else path


def _mount_point(path: str) -> str | None:
    """The mount point of the file system holding ``path`` (None when it cannot be told)."""
    try:
        device = os.stat(path).st_dev
        while path != os.path.dirname(path):
            parent = os.path.dirname(path)
            if os.stat(parent).st_dev != device:
                return path
            path = parent
    except OSError:
        return None
    return path


def descriptor_failure(name: str, fd: int, exc: OSError) -> OutputError:
    """:func:`write_failure` for a write to the open descriptor ``fd`` (stdout: 1), which
    names the file system when ``fd`` is a regular file (``> file``), not a device."""
    directory = None
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            directory = os.path.dirname(os.readlink(f"/proc/self/fd/{fd}"))
    except OSError:
        pass
    return write_failure(name, exc, directory)
