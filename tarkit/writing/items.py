"""The per-item work of :func:`~tarkit.shard_dataset`: a dataset item becomes samples
(:func:`default_sample`, or the caller's ``to_sample``: one sample or several, see
:func:`returned_samples`), each sample the raw bytes of its tar members
(:class:`ItemEncoder`, giving an :class:`EncodedItem`); an item that fails becomes an
:class:`ItemFailure` that names it and carries its error back intact. An item's samples
are all encoded, and held together, before any is written: an item that fails part-way
leaves none in the shards. Whoever runs it — this process, DataLoader workers, Ray tasks
— gets the same bytes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import CarriedError, InputError, SampleError
from ..format.encoding import ImageTransform, encode_sample
from ..format.samples import raw_key
from .huggingface import FieldNames
from .sample_encoder import repeated_key

ToSample = Callable[[Any, int], Mapping[str, Any] | Iterable[Mapping[str, Any]]]
Point = tuple[int, int]  # a place in the item order: (position, sample of the item there)


def default_sample(
    item: Any, index: int, *, image_ext: str = "png", fields: FieldNames | None = None
) -> dict[str, Any]:
    """The sample dict for a dataset item when no ``to_sample`` is given.

    A dict is used as it is, but for the entries ``fields`` renames (or, mapped to None,
    leaves out); ``__key__`` defaults to the index as ``%09d``. A pair
    ``(x, label)``, as torchvision datasets return, becomes ``x`` under a field chosen by
    its type (a PIL image: ``image_ext``, lossless PNG by default; a numpy array: ``npy``;
    a tensor: ``pth``; str: ``txt``; bytes: ``bin``; dict or list: ``json``) and the
    label under ``cls`` (an int) or by the same rule.

    >>> default_sample(("hello", 3), 7)
    {'__key__': '000000007', 'txt': 'hello', 'cls': 3}
    >>> default_sample({"text": "hi", "id": 4}, 0, fields={"text": "txt", "id": None})
    {'txt': 'hi', '__key__': '000000000'}
    """
    key = f"{index:09d}"
    if isinstance(item, Mapping):
        if fields:
            renamed = ((fields.get(name, name), value) for name, value in item.items())
            sample = {name: value for name, value in renamed if name is not None}
        else:
            sample = dict(item)
        sample.setdefault("__key__", key)
        return sample
    if isinstance(item, (tuple, list)) and len(item) == 2:
        value, label = item
        value_field = _field_for(value, image_ext)
        label_field = "cls" if _is_int(label) else _field_for(label, image_ext)
        if value_field is not None and label_field is not None and value_field != label_field:
            return {"__key__": key, value_field: value, label_field: label}
    raise SampleError(
        f"item {index} is a {type(item).__name__}: give a dict, an (x, label) pair, "
        "or a to_sample function that returns a dict of fields",
        source="dataset",
    )


def returned_samples(result: Any, index: int) -> Iterator[Mapping[str, Any]]:
    """The samples ``to_sample`` returned for item ``index``, in its order: the one place
    that says what ``to_sample`` may return. A dict is one sample; a list or tuple of
    dicts, or an iterator of them (a generator), is zero, one or several samples.

    Raises :class:`~tarkit.errors.SampleError` naming the item for anything else (None,
    a str, a list holding something that is not a dict), when it is met: an iterator is
    read lazily, so an error it raises part-way propagates as it is.

    >>> [s["__key__"] for s in returned_samples([{"__key__": "a"}, {"__key__": "b"}], 4)]
    ['a', 'b']
    >>> list(returned_samples(None, 4))
    Traceback (most recent call last):
    ...
    tarkit.errors.SampleError: dataset: item 4: to_sample returned None: it must return a sample dict (with '__key__'), or a list or generator of them ([] for none)
    """
    if isinstance(result, Mapping):
        return iter([result])
    if isinstance(result, (list, tuple, Iterator)):
        return _checked(result, index)
    what = "None" if result is None else f"a {type(result).__name__}"
    raise SampleError(
        f"item {index}: to_sample returned {what}: it must return a sample dict (with "
        "'__key__'), or a list or generator of them ([] for none)",
        source="dataset",
    )


def _checked(samples: Iterable[Any], index: int) -> Iterator[Mapping[str, Any]]:
    for number, sample in enumerate(samples):
        if not isinstance(sample, Mapping):
            raise SampleError(
                f"item {index}: to_sample's sample {number} is a {type(sample).__name__}, "
                "not a dict of fields (with '__key__')",
                source="dataset",
            )
        yield sample


def _is_int(value: object) -> bool:
    import numbers

    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _field_for(value: object, image_ext: str) -> str | None:
    module = type(value).__module__
    if module.startswith("PIL."):
        return image_ext
    if module == "numpy":
        return "npy"
    if module.startswith("torch"):
        return "pth"
    if isinstance(value, str):
        return "txt"
    if isinstance(value, (bytes, bytearray)):
        return "bin"
    if isinstance(value, (dict, list)):
        return "json"
    if _is_int(value):
        return "cls"
    return None


class ItemFailure(CarriedError):
    """An error raised by one item: the item's index, where it came from (``source``,
    when the dataset says) and the error, carried back intact (see
    :class:`~tarkit.errors.CarriedError`)."""

    def __init__(self, index: int, exc: BaseException, source: str = "") -> None:
        super().__init__(exc)
        self.index = index
        self.source = source

    def exception(self) -> BaseException:
        """The error to raise: a tarkit error as it was, anything else as
        :class:`~tarkit.errors.InputError` naming the item."""
        return self.raised(lambda text: InputError(f"item {self.index}: {text}", source="dataset"))


class EncodedItem(NamedTuple):
    """An item's samples as the raw bytes of their tar members, in the order
    ``to_sample`` gave them (none, one or several), with the keys of the first and last."""

    samples: tuple[bytes, ...]
    first_key: str | None = None
    last_key: str | None = None

    def key(self, number: int) -> str | None:
        """The key of sample ``number`` as stored in a shard (None when there is none)."""
        return raw_key(self.samples[number]) if 0 <= number < len(self.samples) else None


class ItemEncoder:
    """The per-item work: item → samples → raw tar members. Runs in the workers (a
    DataLoader's, a Ray cluster's), so it is picklable with its dataset."""

    def __init__(self, dataset: Any, to_sample: ToSample | None, mtime: int, quality: int,
                 image_ext: str, transform: ImageTransform,
                 fields: FieldNames | None = None) -> None:  # fmt: skip
        self.dataset = dataset
        self.to_sample = to_sample
        self.mtime = mtime
        self.quality = quality
        self.image_ext = image_ext
        self.transform = transform
        self.fields = fields

    def encode(self, index: int, item: Any) -> EncodedItem | ItemFailure:
        """Item ``index``'s samples, encoded; or its failure (a sample that cannot be
        encoded, two samples of the item with one key, a generator that raises)."""
        try:
            if self.to_sample is None:
                one = default_sample(item, index, image_ext=self.image_ext, fields=self.fields)
                key = one["__key__"]
                return EncodedItem((self._raw(one, index),), key, key)
            encoded: list[bytes] = []
            keys: set[str] = set()
            first = key = None
            for sample in returned_samples(self.to_sample(item, index), index):
                encoded.append(self._raw(sample, index))
                key = sample["__key__"]
                if key in keys:
                    raise SampleError(
                        f"item {index}: to_sample gave two samples with the key {key!r}: "
                        "give every sample a key of its own",
                        source="dataset",
                    )
                keys.add(key)
                if first is None:
                    first = key
            return EncodedItem(tuple(encoded), first, key)
        except Exception as exc:
            return ItemFailure(index, exc, self.source_of(index))

    def _raw(self, sample: Mapping[str, Any], index: int) -> bytes:
        """The tar members of one sample of item ``index``, its images transformed."""
        if self.transform.active:
            sample = self.transform.sample(sample, f"item {index}")
        return encode_sample(sample, mtime=self.mtime, quality=self.quality)

    def follows(self, previous_key: str | None, first_key: str | None,
                index: int) -> ItemFailure | None:  # fmt: skip
        """The failure of item ``index`` when its first sample has the key of the sample
        written just before it (readers would merge the two); else None."""
        if first_key is None or first_key != previous_key:
            return None
        return ItemFailure(index, repeated_key(first_key, f"item {index}: "),
                           self.source_of(index))  # fmt: skip

    def source_of(self, index: int) -> str:
        """Where item ``index`` comes from, when the dataset says (``item_source``)."""
        source_of = getattr(self.dataset, "item_source", None)
        if source_of is None:
            return ""
        try:
            return str(source_of(index))
        except Exception:  # a dataset's own bug must not hide the item's error
            return ""

    def __call__(self, indices: Sequence[int]) -> list[EncodedItem | ItemFailure]:
        """Load and encode the items at ``indices`` of a map-style dataset."""
        results: list[EncodedItem | ItemFailure] = []
        for index in indices:
            try:
                item = self.dataset[index]
            except Exception as exc:
                results.append(ItemFailure(index, exc, self.source_of(index)))
                continue
            results.append(self.encode(index, item))
        return results


class DatasetFactory:
    """The dataset ``function(*args)`` returns, made again wherever it is unpickled.

    Sent to a Ray cluster, a dataset object travels whole (every path, every row) and
    must make sense on every node; a factory travels as the call, and each node makes its
    own dataset (imports ``function``'s module, which must be importable there, and calls
    it): a Hugging Face dataset is then loaded, or read from its cache, on each node.
    ``steps`` are functions applied to the dataset in turn after it is made (module-level
    functions, for the same reason). It reads as the dataset it makes (``len``, indexing,
    ``classes``, ``item_source``), and makes it on first use.

    >>> squares = DatasetFactory(lambda n: [i * i for i in range(n)], 4)
    >>> len(squares), squares[3]
    (4, 9)
    """

    def __init__(self, function: Callable[..., Any], *args: Any,
                 steps: tuple[Callable[[Any], Any], ...] = ()) -> None:  # fmt: skip
        self.function = function
        self.args = args
        self.steps = steps
        self._made: Any = None

    @property
    def dataset(self) -> Any:
        """The dataset, made on first use."""
        if self._made is None:
            made = self.function(*self.args)
            for step in self.steps:
                made = step(made)
            self._made = made
        return self._made

    def then(self, step: Callable[[Any], Any]) -> DatasetFactory:
        """The factory of ``step(dataset)``."""
        return DatasetFactory(self.function, *self.args, steps=(*self.steps, step))

    def __getstate__(self) -> dict[str, Any]:
        return {"function": self.function, "args": self.args, "steps": self.steps}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["function"], *state["args"], steps=state["steps"])  # type: ignore[misc]

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.dataset)

    @property
    def classes(self) -> Any:
        """The class names of the dataset, when it declares them."""
        return getattr(self.dataset, "classes", None)

    def item_source(self, index: int) -> str:
        """Where item ``index`` comes from, when the dataset says."""
        source_of = getattr(self.dataset, "item_source", None)
        return "" if source_of is None else str(source_of(index))
