"""The full-precision gallery on disk: ``mean.npy`` / ``logvar.npy`` read row by row with plain file reads.

A compressed ANN index (IVF-PQ) keeps a few bytes per item in memory; the exact re-scoring of its
candidates needs the items' Gaussians. :class:`GalleryStore` keeps them in two numpy ``.npy`` files
(``mean [N, D]`` and, for Gaussians, ``logvar [N, D]`` or ``[N, 1]``), read with plain file reads:
only the rows asked for are read (the operating system's page cache keeps the hot ones, shared and
evictable), so a 10M x 256 gallery (10 GiB in float16) is served from a process of well under
1 GiB of its own. The files are opened with ``numpy.load(..., mmap_mode="r")`` only to read their
headers and check their shapes; streaming the whole store (:meth:`GalleryStore.chunks`), reading
candidate rows (:meth:`GalleryStore.rows`) and writing use ``read``/``pread``/``write``, so they
keep one chunk in memory.

``float16`` halves the files; its rounding (relative error at most ``2^-11`` per entry) changes
scores by about ``1e-3`` relative, far below the gaps that decide a top-10 on real embeddings
(docs/search.md gives the measured effect). Written row chunk by row chunk (:class:`StoreWriter`),
so a store of any size is built with one chunk in memory; a store becomes visible under its final
name only when complete (``pcmr.atomic.write_folder``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from pcmr.atomic import atomic_write_json, write_folder
from pcmr.gaussian import Gaussian

__all__ = ["GalleryStore", "StoreWriter", "write_store"]

STORE_FORMAT = "pcmr-gallery-store"
STORE_META = "store.json"
DTYPES = {"float16": np.float16, "float32": np.float32}
READ_THREADS = 4  # concurrent preads of candidate rows (measured: 2x the rows/s of one thread, cold cache)
PARALLEL_READ_ROWS = 4096  # fewer rows are read by the calling thread alone
_POOL: list[ThreadPoolExecutor] = []


def _reader_pool() -> ThreadPoolExecutor:
    if not _POOL:
        _POOL.append(ThreadPoolExecutor(READ_THREADS, thread_name_prefix="pcmr-store"))
    return _POOL[0]


class StoreWriter:
    """Fills the ``.npy`` files of a store of ``num`` rows chunk by chunk (see :func:`write_store`)."""

    def __init__(self, folder: Path, num: int, dim: int, logvar_width: int | None, dtype: str) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"store dtype must be one of {list(DTYPES)}, got {dtype!r}")
        if logvar_width not in (None, 1, dim):
            raise ValueError(f"logvar width must be None (points), 1 or D={dim}, got {logvar_width}")
        self.folder, self.num, self.dim, self.dtype = folder, num, dim, dtype
        self.logvar_width = logvar_width
        self.mean = _npy_writer(folder / "mean.npy", DTYPES[dtype], (num, dim))
        self.logvar = None if logvar_width is None else _npy_writer(folder / "logvar.npy", DTYPES[dtype],
                                                                    (num, logvar_width))
        self.filled = 0

    def append(self, chunk: Gaussian) -> None:
        """Write the next ``chunk.num`` rows."""
        if chunk.dim != self.dim:
            raise ValueError(f"chunk has D={chunk.dim}, the store D={self.dim}")
        width = None if chunk.logvar is None else chunk.logvar.shape[1]
        if width != self.logvar_width:
            raise ValueError(f"chunk logvar width {width} does not match the store's {self.logvar_width}")
        stop = self.filled + chunk.num
        if stop > self.num:
            raise ValueError(f"the store holds {self.num} rows; this chunk would end at row {stop}")
        dtype = DTYPES[self.dtype]
        for handle, tensor in ((self.mean, chunk.mean), (self.logvar, chunk.logvar)):
            if handle is None or tensor is None:
                continue
            try:
                handle.write(np.ascontiguousarray(tensor.detach().cpu().float().numpy(), dtype=dtype).tobytes())
            except OSError as err:  # a full disk: name the file being written
                err.filename = err.filename or handle.name
                raise
        self.filled = stop

    def close(self) -> None:
        if self.filled != self.num:
            raise ValueError(f"the store was given {self.filled} rows, expected {self.num}")
        for handle in (self.mean, self.logvar):
            if handle is not None:
                handle.flush()
                os.fsync(handle.fileno())
                handle.close()
        atomic_write_json(self.folder / STORE_META, {"format": STORE_FORMAT, "version": 1, "num": self.num,
                                                     "dim": self.dim, "logvar_width": self.logvar_width,
                                                     "dtype": self.dtype})


def _npy_writer(path: Path, dtype: Any, shape: tuple[int, int]) -> Any:
    """A ``.npy`` file opened for appending rows: the header, then raw C-order rows (plain writes, so
    writing a store does not keep its pages mapped into the process)."""
    handle = open(path, "wb")  # noqa: SIM115 - closed by StoreWriter.close
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": shape}
    np.lib.format.write_array_header_2_0(handle, header)
    return handle


def write_store(path: str | os.PathLike[str], chunks: Iterator[Gaussian] | list[Gaussian], num: int, dim: int,
                logvar_width: int | None, dtype: str = "float16") -> GalleryStore:
    """Write the Gaussians of ``chunks`` (in order, ``num`` rows in all) as a store folder at ``path``."""

    def write(folder: Path) -> None:
        writer = StoreWriter(folder, num, dim, logvar_width, dtype)
        for chunk in chunks:
            writer.append(chunk)
        writer.close()

    write_folder(path, write)
    return GalleryStore.open(path)


class GalleryStore:
    """A gallery of Gaussians on disk; see the module docstring.

    ``rows(indices)`` gives a float32 :class:`~pcmr.gaussian.Gaussian` of the requested rows (any shape
    of indices flattened); ``chunks(size)`` iterates over the whole store in order.
    """

    def __init__(self, path: Path, mean: np.ndarray, logvar: np.ndarray | None, info: dict[str, Any]) -> None:
        self.path, self.mean, self.logvar, self.info = path, mean, logvar, info

    @classmethod
    def open(cls, path: str | os.PathLike[str]) -> GalleryStore:
        """Open a store folder; a missing or inconsistent file raises one error naming it."""
        root = Path(path)
        meta = root / STORE_META
        if not meta.is_file():
            raise FileNotFoundError(f"{meta} not found; {root} is not a complete gallery store")
        try:
            info = json.loads(meta.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as err:
            raise ValueError(f"{meta}: not valid JSON ({err})") from None
        if not isinstance(info, dict) or info.get("format") != STORE_FORMAT:
            raise ValueError(f"{meta}: field 'format' must be {STORE_FORMAT!r}")
        try:
            mean = np.load(root / "mean.npy", mmap_mode="r", allow_pickle=False)
            logvar = None if info.get("logvar_width") is None else np.load(
                root / "logvar.npy", mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as err:
            raise ValueError(f"{root}: the store's .npy files cannot be read ({err})") from None
        expected = (int(info.get("num", -1)), int(info.get("dim", -1)))
        if mean.shape != expected or (logvar is not None and logvar.shape != (expected[0], info["logvar_width"])):
            raise ValueError(f"{root}: mean.npy {mean.shape} / logvar.npy {None if logvar is None else logvar.shape} "
                             f"do not match {meta.name} (num, dim = {expected}); the store is damaged")
        return cls(root, mean, logvar, info)

    @property
    def num(self) -> int:
        return int(self.mean.shape[0])

    @property
    def dim(self) -> int:
        return int(self.mean.shape[1])

    @property
    def is_point(self) -> bool:
        return self.logvar is None

    def rows(self, indices: Tensor | np.ndarray, *, need_logvar: bool = True) -> Gaussian:
        """float32 Gaussians of the rows ``indices`` (flattened, each in ``[0, N)``). Each distinct row
        is read once with ``os.pread``, in sorted order, and returned in the order asked;
        ``need_logvar=False`` reads the means only (point Gaussians, enough for scores of the means
        such as cosine). Plain reads, not the memory map: a page fault on a mapping brings its
        neighbouring pages in too (fault-around), so 20,000 random rows of a 10M store grew the
        process by 3.8 GB through the map and by 44 MB through ``pread``."""
        flat = np.asarray(indices.reshape(-1).cpu() if isinstance(indices, Tensor) else indices,
                          dtype=np.int64).reshape(-1)
        if flat.size and (flat.min() < 0 or flat.max() >= self.num):
            raise IndexError(f"row indices must lie in [0, {self.num}), got [{flat.min()}, {flat.max()}]")
        unique, inverse = np.unique(flat, return_inverse=True)
        order = torch.from_numpy(inverse.reshape(-1))
        mean = torch.from_numpy(_pread_rows(self.mean, unique))[order]
        if self.logvar is None or not need_logvar:
            return Gaussian.point(mean)
        return Gaussian(mean, torch.from_numpy(_pread_rows(self.logvar, unique))[order])

    def chunks(self, size: int = 65_536, *, need_logvar: bool = True) -> Iterator[tuple[int, Gaussian]]:
        """``(start, Gaussian)`` of consecutive row blocks of at most ``size`` rows, as float32
        (point Gaussians of the means alone with ``need_logvar=False``)."""
        for start in range(0, self.num, size):
            stop = min(start + size, self.num)
            mean = torch.from_numpy(_read_rows(self.mean, start, stop))
            logvar = None if self.logvar is None or not need_logvar else torch.from_numpy(
                _read_rows(self.logvar, start, stop))
            yield start, Gaussian(mean, logvar)

    def load(self) -> Gaussian:
        """The whole store in memory as float32 (small galleries and tests only)."""
        return self.rows(np.arange(self.num))


def _read_rows(array: Any, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a memory-mapped ``.npy`` array as float32, read with plain file reads
    (sequential streaming then leaves no pages mapped into the process; the page cache keeps them)."""
    width = array.shape[1]
    with open(str(array.filename), "rb") as handle:
        handle.seek(array.offset + start * width * array.dtype.itemsize)
        raw = np.fromfile(handle, dtype=array.dtype, count=(stop - start) * width)
    return raw.reshape(stop - start, width).astype(np.float32)


def _pread_rows(array: Any, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (sorted, distinct) of a memory-mapped ``.npy`` array as float32, one ``os.pread``
    each."""
    width = array.shape[1]
    row_bytes = width * array.dtype.itemsize
    fd = os.open(str(array.filename), os.O_RDONLY)

    def read(part: np.ndarray) -> bytes:
        return b"".join([os.pread(fd, row_bytes, array.offset + int(r) * row_bytes) for r in part])

    try:
        if len(rows) < PARALLEL_READ_ROWS:
            data = read(rows)
        else:  # os.pread releases the GIL: a few threads overlap the waits for uncached pages
            data = b"".join(_reader_pool().map(read, np.array_split(rows, READ_THREADS)))
    finally:
        os.close(fd)
    if len(data) != len(rows) * row_bytes:
        raise ValueError(f"{array.filename}: short read; the store file is truncated")
    return np.frombuffer(data, dtype=array.dtype).reshape(len(rows), width).astype(np.float32)
