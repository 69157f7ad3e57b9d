"""Private scratch space on this machine: a file created once, and a tree removed whole.

For the directories a process keeps for itself (a command's workspace, a worker's crash
ledger), never for a location a user names: those go through :mod:`.outputs` and
:mod:`.listing`. A scratch file is made new (mode 0600), never through a link and never
over a file already there; a scratch tree is removed whatever was done to it inside,
such as a directory a command made unwritable.

>>> import os, tempfile
>>> directory = tempfile.mkdtemp()
>>> create_private_file(os.path.join(directory, "sample.txt"), b"hello")
>>> os.makedirs(os.path.join(directory, "locked", "in"))
>>> os.chmod(os.path.join(directory, "locked"), 0o500)
>>> remove_tree(directory)
>>> os.path.exists(directory)
False
"""

from __future__ import annotations

import contextlib
import os
import shutil

_FILE_FLAGS = os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_NOFOLLOW | os.O_CLOEXEC


def create_private_file(path: str, data: bytes | memoryview) -> None:
    """Create the file ``path`` (mode 0600; not if it exists or is a link) holding ``data``.

    Raises :class:`OSError` (``FileExistsError`` for a name already taken)."""
    fd = os.open(path, _FILE_FLAGS, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def remove_tree(directory: str) -> None:
    """Remove a directory and everything in it, even what was made unwritable inside it
    (links are not followed); one already gone is fine, and nothing is raised."""
    try:
        with os.scandir(directory) as entries:
            names = [entry.name for entry in entries]
        for name in names:
            os.unlink(os.path.join(directory, name))
        os.rmdir(directory)
        return
    except FileNotFoundError:
        return
    except OSError:
        pass  # a subdirectory, or permissions changed inside

    # Make every directory below writable again (links are not followed), then remove.
    with contextlib.suppress(OSError):
        os.chmod(directory, 0o700)
    for path, subdirectories, _ in os.walk(directory):
        for name in subdirectories:
            subdirectory = os.path.join(path, name)
            if not os.path.islink(subdirectory):
                with contextlib.suppress(OSError):
                    os.chmod(subdirectory, 0o700)
    shutil.rmtree(directory, ignore_errors=True)
