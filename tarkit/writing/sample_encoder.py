"""SampleEncoder: samples into the raw tar bytes of a shard, one after another, with the
one check between neighbours (no two adjacent samples with one key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..errors import SampleError
from ..format.samples import Sample, same_key_error
from ..format.tar_writer import default_mtime


class SampleEncoder:
    """Turns samples into the raw tar bytes of their members, one sample after another.

    A :class:`Sample` read by the reader is copied byte for byte; a dict is encoded by
    field extension with deterministic headers (:func:`~tarkit.format.encoding.encode_sample`).
    A sample with the key of the one before raises :class:`~tarkit.errors.SampleError`:
    every reader would merge the two, across shards too when they are read in order.

    >>> encoder = SampleEncoder(mtime=0)
    >>> len(encoder.encode({"__key__": "a", "txt": "x"}))
    1024
    >>> encoder.encode({"__key__": "a", "txt": "y"})
    Traceback (most recent call last):
    ...
    tarkit.errors.SampleError: dataset: sample 'a' follows a sample with the same key, and readers would merge the two: give every sample a key of its own
    """

    def __init__(self, mtime: int | None = None) -> None:
        self.mtime = default_mtime() if mtime is None else mtime
        self._previous: Sample | Mapping[str, Any] | None = None
        self._previous_key: Any = None

    def encode(self, sample: Sample | Mapping[str, Any]) -> bytes | None:
        """The raw bytes of ``sample``'s members; None for a sample without members."""
        if isinstance(sample, Sample) and not sample.fields:  # (fields: members unmade)
            return None
        self.admit(sample)
        if isinstance(sample, Sample):
            return sample.raw
        from ..format.encoding import encode_sample

        return encode_sample(sample, mtime=self.mtime)

    def admit(self, sample: Sample | Mapping[str, Any]) -> None:
        """Check that ``sample`` may follow the sample before it, and remember it."""
        key = sample.key if type(sample) is Sample else key_of(sample)
        if key == self._previous_key and self._previous is not None:
            previous = self._previous
            if isinstance(previous, Sample) and isinstance(sample, Sample):
                raise same_key_error(previous, sample)
            raise repeated_key(key)
        self._previous, self._previous_key = sample, key


def repeated_key(key: Any, where: str = "") -> SampleError:
    """The error of a sample that follows a sample with the same key (``where``, such as
    ``"item 4: "``, says which)."""
    return SampleError(
        f"{where}sample {key!r} follows a sample with the same key, and readers would "
        "merge the two: give every sample a key of its own",
        source="dataset",
    )


def key_of(sample: Sample | Mapping[str, Any]) -> Any:
    """The key of a :class:`Sample` or of a sample dict (its ``__key__``)."""
    return sample.key if isinstance(sample, Sample) else sample.get("__key__")
