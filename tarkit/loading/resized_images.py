"""Image fields decoded at the size training asks for: ``decode="rgb8", resize="224x224:crop"``.

A JPEG is decoded straight to the smallest of 1/2, 1/4 or 1/8 of its size that is still
at least the size it is resized to (libjpeg's DCT scaling, which Pillow exposes as
``Image.draft``): the inverse DCT and the colour conversion then run on 1/4, 1/16 or 1/64
of the pixels, and the resize that follows starts from a smaller image. It is then
resized as ``tarkit shard --resize`` resizes (:func:`~tarkit.format.encoding.resize_image`,
Lanczos), to the size reckoned from its full size, so that it ends exactly as a full
decode and the same resize would: the same size, mode, dtype and layout, with pixels a
little different (the PSNR is in docs/loading.md). Other formats (PNG, WebP…) have no
reduced decode in Pillow: they are decoded whole, then resized, pixel for pixel as the
full path. EXIF orientation is not applied, as webdataset's decode does not apply it.

The image is converted to the spec's mode (``l``, ``rgb``, ``rgba``) before it is resized
and to the spec's type after, by webdataset's rule (its ``ImageHandler``): a PIL image, a
numpy array (``uint8``, or ``float32`` in 0…1) of H×W×C (H×W for ``l``), or a torch tensor
of C×H×W.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np
import torch
from webdataset.autodecode import IMAGE_EXTENSIONS, imagespecs

from ..format.encoding import resize_image, resized_size

Size = tuple[int, int, str]  # width, height and mode, as parse_resize gives them


class ResizedImageHandler:
    """A webdataset decode handler: image fields (by extension, as webdataset's image
    handler takes them) decoded to ``spec`` at ``size``; other fields None (the next
    handler's). ``reduced=False`` decodes every image whole: the reference that the
    reduced decode is measured against. ``spec`` must be one of webdataset's
    ``imagespecs`` (KeyError otherwise)."""

    def __init__(self, spec: str, size: Size, *, reduced: bool = True) -> None:
        self.spec = spec
        self.kind, self.dtype, mode = imagespecs[spec]
        self.mode = mode.upper()
        self.size = size
        self.reduced = reduced
        self.extensions = frozenset(IMAGE_EXTENSIONS)

    def __call__(self, key: str, data: bytes) -> Any:
        if key.rpartition(".")[2].lower() not in self.extensions:
            return None
        image = decode_resized(data, self.size, self.mode, reduced=self.reduced)
        if self.kind == "pil":
            return image
        result: Any = np.asarray(image)
        if self.dtype == "float":
            result = result.astype(np.float32) / 255.0
        if self.kind == "torch":
            return torch.from_numpy(
                (result.transpose(2, 0, 1) if result.ndim == 3 else result).copy()
            )
        return result


def decode_resized(data: bytes, size: Size, mode: str, *, reduced: bool = True) -> Any:
    """The PIL image of ``data`` in ``mode`` (``L``, ``RGB``, ``RGBA``), resized to ``size``
    by :func:`~tarkit.format.encoding.resize_image`; a JPEG decoded reduced (above) unless
    ``reduced`` is False. Pillow's error goes through for data it cannot decode.

    >>> from PIL import Image
    >>> photo = io.BytesIO()
    >>> Image.new("RGB", (640, 480), "teal").save(photo, "JPEG")
    >>> decode_resized(photo.getvalue(), (64, 64, "crop"), "RGB").size
    (64, 64)
    """
    from PIL import Image

    width, height, how = size
    with Image.open(io.BytesIO(data)) as opened:
        full_size, scale = opened.size, 1
        if reduced:  # None but for JPEG; never below the size resized to
            drafted = opened.draft(None, resized_size(full_size, width, height, how))
            if drafted is not None:  # the box of the full image in the reduced one
                scale = round(full_size[0] / drafted[1][2])
        opened.load()
        image = opened.convert(mode)
    return resize_image(image, width, height, how, full_size=full_size, scale=scale)
