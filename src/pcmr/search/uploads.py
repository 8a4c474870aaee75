"""Uploaded images of ``pcmr serve`` (:mod:`pcmr.search.service`): the multipart body read at most
``max_upload_bytes`` (plus the form's framing) before a 413, the pixel count checked from the image's
header before it is decoded, and decoding bounded by a :class:`DecodeBudget` (uploads decoded at once and
their pixels in total). Every refusal is a :class:`RequestRefused` with its HTTP status.

Needs the ``search`` extra (python-multipart, through Starlette).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import io
import threading
from collections.abc import AsyncGenerator, Iterator
from typing import Any

import torch
from PIL import Image, UnidentifiedImageError

from pcmr.data.images import pil_to_pixels

__all__ = ["DecodeBudget", "FORM_OVERHEAD_BYTES", "LARGE_DECODE_PIXELS", "RequestRefused", "decode_upload",
           "read_upload", "release_memory"]

#: bytes of multipart framing (boundaries, part headers) read beyond ``max_upload_bytes`` before a 413
FORM_OVERHEAD_BYTES = 16 * 2**10


class RequestRefused(Exception):
    """A request refused with HTTP ``status`` and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


async def read_upload(request: Any, max_bytes: int) -> tuple[str | None, bytes]:
    """The file name and bytes of the multipart field ``file`` of ``request``. The body is read chunk by
    chunk and refused (413) as soon as it exceeds ``max_bytes`` plus :data:`FORM_OVERHEAD_BYTES` (or
    when its declared ``Content-Length`` does), so an oversized upload is never read, spooled or
    written to disk whole."""
    from starlette.datastructures import UploadFile
    from starlette.formparsers import MultiPartException, MultiPartParser

    cap = max_bytes + FORM_OVERHEAD_BYTES
    too_large = RequestRefused(413, f"upload is larger than {max_bytes} bytes")
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise too_large
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > cap:
            raise too_large

    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise RequestRefused(422, "file: field required (send the image as the multipart form field 'file')")

    async def replay() -> AsyncGenerator[bytes, None]:
        yield bytes(body)

    parser = MultiPartParser(request.headers, replay(), max_files=1, max_fields=16)
    parser.spool_max_size = cap  # the (capped) file part stays in memory: no temporary file on disk
    try:
        form = await parser.parse()
    except MultiPartException as err:
        raise RequestRefused(400, f"the upload is not a valid multipart form ({err.message})") from None
    try:
        upload = form.get("file")
        if not isinstance(upload, UploadFile):
            raise RequestRefused(422, "file: field required (send the image as the multipart form field 'file')")
        data = await upload.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise too_large
        return upload.filename, data
    finally:
        await form.close()


class DecodeBudget:
    """Room for decoding uploads: at most ``slots`` at once and ``pixels`` pixels in total (one image
    larger than that still runs, alone). :meth:`take` waits up to ``timeout_s`` for room, then refuses
    with 503; after a large decode the freed memory is handed back to the system (:func:`release_memory`)."""

    def __init__(self, slots: int, pixels: int, timeout_s: float) -> None:
        if slots < 1 or pixels < 1:
            raise ValueError(f"max_concurrent_decodes and max_decode_pixels must be positive, got {slots}, {pixels}")
        self.slots, self.pixels, self.timeout_s = slots, pixels, timeout_s
        self.running = self.in_flight = 0
        self.peak_in_flight = 0  # the most pixels ever decoding at once (read by the tests)
        self._cond = threading.Condition()

    @contextlib.contextmanager
    def take(self, pixels: int) -> Iterator[None]:
        with self._cond:
            fits = self._cond.wait_for(lambda: self.running < self.slots and (
                self.running == 0 or self.in_flight + pixels <= self.pixels), timeout=self.timeout_s)
            if not fits:
                raise RequestRefused(503, "the server is busy decoding other images; try again in a moment")
            self.running += 1
            self.in_flight += pixels
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)
        try:
            yield
        finally:
            with self._cond:
                self.running -= 1
                self.in_flight -= pixels
                self._cond.notify_all()
            if pixels >= LARGE_DECODE_PIXELS:
                release_memory()


#: a decode at least this large hands its freed memory back to the system afterwards
LARGE_DECODE_PIXELS = 1_000_000


def release_memory() -> None:
    """Hand freed heap memory back to the system (glibc ``malloc_trim``; a no-op elsewhere): the buffers of a
    large decode are freed in the decoding thread's arena, which glibc otherwise keeps for that thread."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)


@functools.cache
def _malloc_trim() -> Any:
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


def decode_upload(data: bytes, max_pixels: int, image_size: int, budget: DecodeBudget | None = None) -> torch.Tensor:
    """An uploaded image -> model-ready pixels ``[3, S, S]`` (:func:`pcmr.data.images.pil_to_pixels`, the
    preprocessing of image-file queries). Its width x height is read from the header and refused (413)
    above ``max_pixels`` before anything is decoded; the decode then waits for room in ``budget``; data
    Pillow cannot decode is refused (415)."""
    if not data:
        raise RequestRefused(400, "the uploaded file is empty")
    try:
        with Image.open(io.BytesIO(data)) as image:  # reads the header only
            width, height = image.size
            if width * height > max_pixels:
                raise RequestRefused(413, f"the uploaded image has {width} x {height} = {width * height:,} pixels; "
                                       f"this server decodes at most {max_pixels:,}")
        # decoded under the budget, and every decoded buffer freed (the image closed) before room is given back
        with budget.take(width * height) if budget is not None else contextlib.nullcontext(), \
                Image.open(io.BytesIO(data)) as image:
            return pil_to_pixels(image, image_size)
    except Image.DecompressionBombError:
        raise RequestRefused(413, f"the uploaded image has too many pixels to decode safely (at most "
                               f"{max_pixels:,})") from None
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError):
        raise RequestRefused(415, "the uploaded file is not an image this server can read; upload a PNG, JPEG, "
                               "GIF, BMP or WebP file") from None
