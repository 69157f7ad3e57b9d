"""viewing: ``tarkit view``, a web page over shards, served on this machine.

Which samples and how they are reached (:mod:`.samples`: by position through the
indexes, :mod:`.indexed`, or read in order, :mod:`.streamed`), the pages of them that the
browser asks for (:mod:`.pages`), what each field is and is served as (:mod:`.fields`),
the ``tarkit stats`` summary read in the background (:mod:`.summary`) and the HTTP server
that guards them (:mod:`.server`); the page itself is ``static/`` (plain HTML, CSS and a
script that puts every value in the document as text). Nothing here decodes a field to
show it but a TIFF or PPM image made PNG, and no shard's bytes run as a script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..format.samples import SkipLog
from ..storage import display_name
from .pages import PER_PAGE, Pages, check_settings
from .samples import ViewedSamples, open_samples
from .server import ViewServer
from .summary import Summary

__all__ = ["PER_PAGE", "ViewServer", "ViewedSamples", "open_samples", "open_view"]


def open_view(
    sources: Sequence[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    where: str | None = None,
    per_page: int = PER_PAGE,
    classes: str | None = None,
    strict: bool = False,
    skips: SkipLog | None = None,
    report: Callable[[str], None] | None = None,
) -> ViewServer:
    """A server of the page over the samples ``sources`` name (shards, brace patterns, a
    manifest, a directory; local or remote), listening on ``host``:``port`` (0: a free
    one) when this returns; the caller runs ``serve_forever()`` and then
    ``server_close()`` and ``close()``.

    The page shows ``per_page`` samples at a time, those the ``--where`` expression
    ``where`` keeps when given (the user can change it), class fields named from
    ``classes`` (default: ``classes.json`` beside the shards or the manifest), and the
    ``tarkit stats`` summary. Members the reader skips are counted in ``skips`` (with
    ``strict``, they are errors).

    Raises :class:`~tarkit.errors.UsageError` for stdin, a malformed expression, or an
    address it cannot listen on, and :class:`~tarkit.errors.TarkitError` for a source
    that cannot be opened.
    """
    from ..processing.stats import dataset_class_names

    check_settings(where, per_page)  # the user's mistakes before any shard is opened
    samples = open_samples(sources, strict=strict, skips=skips)
    try:
        source = sources[0] if len(sources) == 1 else list(sources)
        names = dataset_class_names(source, samples.places(), classes)
        shown = ", ".join(display_name(s) for s in sources)
        pages = Pages(samples, source=shown, class_names=names, where=where, per_page=per_page)
        summary = Summary(sources, classes=classes, strict=strict)
        return ViewServer(pages, summary, host=host, port=port, report=report)
    except BaseException:
        samples.close()
        raise
