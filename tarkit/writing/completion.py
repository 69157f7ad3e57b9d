"""What follows a complete shard or a complete set, for
:class:`~tarkit.writing.shard_writer.ShardWriter` and the cluster run
(:mod:`tarkit.writing.cluster`) alike: the ``post`` command run on each shard in place
(:func:`run_post`), and ``mode="overwrite"``'s putting the new set in place of the old
once it is whole (:func:`put_in_place`)."""

from __future__ import annotations

import os
from collections.abc import Callable

from ..errors import OutputError
from ..format.manifest import ShardInfo
from ..storage import StorageOptions, describe_exit, move_file, remove_file


def run_post(post: str | Callable[[str], object], path: str) -> None:
    """Run the post command for a finished shard; raise :class:`OutputError` if it fails.

    A string is a bash command with every ``{}`` replaced by the shell-quoted path (the
    path is also in ``TARKIT_SHARD``); a callable is called with the path.
    """
    if callable(post):
        post(path)
        return
    import shlex
    import subprocess

    command = post.replace("{}", shlex.quote(path))
    env = dict(os.environ, TARKIT_SHARD=path)
    try:
        status = subprocess.run(["bash", "-c", command], env=env).returncode
    except OSError as exc:
        raise OutputError(f"{path}: cannot run the post command: {exc.strerror}") from None
    if status != 0:
        raise OutputError(f"{path}: post command {describe_exit(status)}: {command}")


def put_in_place(
    pending: list[str], shards: list[ShardInfo], replaced: list[str],
    post: str | Callable[[str], object] | None, storage_options: StorageOptions | None,
) -> None:  # fmt: skip
    """``mode="overwrite"``, once the new set is complete: give the ``pending`` files the
    names of ``shards``, remove the ``replaced`` files the new set does not reuse, then
    run ``post`` on each shard."""
    for name, shard in zip(pending, shards, strict=True):
        move_file(name, shard.url, storage_options)
    new = {shard.url for shard in shards}
    for url in replaced:
        if url not in new:
            remove_file(url, storage_options)
    if post is not None:
        for shard in shards:
            run_post(post, shard.url)


__all__ = ["put_in_place", "run_post"]
