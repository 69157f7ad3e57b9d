"""Build the optional compiled member scanner (tarkit/format/_scan.c); the rest of the
project is configured in pyproject.toml. Without a C compiler or Python's headers the
build leaves the extension out and tarkit runs its pure-Python reader
(tarkit/format/scanner.py says why C and how it is chosen)."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "tarkit/format/_scan.c"
# The built module carries a hash of its source, so a test can tell a stale build.
SOURCE_HASH = hashlib.sha256((Path(__file__).parent / SOURCE).read_bytes()).hexdigest()[:16]

setup(
    ext_modules=[
        Extension(
            "tarkit.format._scan",
            [SOURCE],
            define_macros=[("TARKIT_SCAN_SOURCE", f'"{SOURCE_HASH}"')],
            optional=True,
        )
    ]
)
