"""NumPy ``.npz``: every field stored under its own name (the guide's point record, docs/scan.md).

Written chunk by chunk, with the memory of one chunk, in one of two ways:

- **in place** (when the writer is told the most points there can be, as a scan
  does, and the file system keeps holes): each field's ``.npy`` member gets a region
  of the archive as large as the most points could fill, and chunks are written
  straight to their places; the unused ends of the regions are sparse holes, which
  closing cuts out of the file (``fallocate`` collapse-range, on ext4 and XFS), so
  every byte is written once. The CRC-32 that zip needs is kept as the chunks go.
  Where the file system cannot collapse ranges, closing copies the members into a
  fresh file instead.
- **spooled** (no bound given, or no holes, as on FAT): the fields go to raw files,
  copied into the archive when it is closed.

Either way the archive is an uncompressed zip64 that ``numpy.load`` reads.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import io
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
from numpy.typing import NDArray

from ..pointcloud import FieldSpec, PointCloud
from .atomic import atomic_path
from .spool import SpooledWriter, bytes_view
from .stamp import archive_time

__all__ = ["NpzWriter", "crc32_combine", "read_npz", "savez"]

_BLOCK = 16 * 2**20
_ZIP64 = 0xFFFFFFFF
_VERSION = 45  # zip64
_NPY_HEADER = 256  # bytes reserved for each member's .npy header (a multiple of 64)
_COLLAPSE_RANGE = 0x08  # FALLOC_FL_COLLAPSE_RANGE


def _gf2_times(matrix: list[int], vector: int) -> int:
    total, row = 0, 0
    while vector:
        if vector & 1:
            total ^= matrix[row]
        vector >>= 1
        row += 1
    return total


def _gf2_square(matrix: list[int]) -> list[int]:
    return [_gf2_times(matrix, matrix[n]) for n in range(32)]


@functools.cache
def _zero_bytes_operators() -> tuple[list[int], ...]:
    """The CRC's operators that carry it over ``2**k`` zero bytes, ``k = 0..63`` (made once
    a process: squaring them again for every member was 14 % of a 100-frame sequence's
    CPU)."""
    operator = [0xEDB88320] + [1 << n for n in range(31)]  # one zero bit
    for _ in range(3):  # two, four, eight zero bits: one zero byte
        operator = _gf2_square(operator)
    powers = [operator]
    for _ in range(63):
        powers.append(_gf2_square(powers[-1]))
    return tuple(powers)


def crc32_combine(crc1: int, crc2: int, length2: int) -> int:
    """CRC-32 of ``a + b`` from ``crc32(a)``, ``crc32(b)`` and ``len(b)``.

    zlib's method: ``crc1`` is carried over ``length2`` zero bytes by the CRC's
    one-zero-byte operator (a 32x32 matrix over GF(2)) raised to the power ``length2``,
    the product of its powers ``2**k`` for the bits ``k`` of ``length2`` (made once by
    repeated squaring, :func:`_zero_bytes_operators`), then ``crc2`` is added.
    """
    if length2 >= 1 << 64:
        raise ValueError(f"crc32_combine: a length of 2^64 bytes or more ({length2})")
    for operator in _zero_bytes_operators():
        if length2 <= 0:
            break
        if length2 & 1:
            crc1 = _gf2_times(operator, crc1)
        length2 >>= 1
    return crc1 ^ crc2


def _npy_header(dtype: np.dtype, shape: tuple[int, ...]) -> bytes:
    """A version 2.0 ``.npy`` header of exactly ``_NPY_HEADER`` bytes."""
    text = repr(
        {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    )
    body = text.ljust(_NPY_HEADER - 12 - 1).encode("latin1") + b"\n"
    if len(body) != _NPY_HEADER - 12:
        raise ValueError(f"npy header too long for {dtype} {shape}")
    return b"\x93NUMPY\x02\x00" + struct.pack("<I", len(body)) + body


def _dos_time(when: tuple[int, int, int, int, int, int]) -> tuple[int, int]:
    year, month, day, hour, minute, second = when
    clock = (hour << 11) | (minute << 5) | (second // 2)
    return clock, ((year - 1980) << 9) | (month << 5) | day


def savez(file: str | Path | io.BufferedIOBase, **arrays: NDArray) -> None:
    """``np.savez`` (uncompressed, no pickles) with every member stamped with
    :func:`archive_time`: the same arrays give the same bytes."""
    with zipfile.ZipFile(file, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, value in arrays.items():
            member = zipfile.ZipInfo(f"{name}.npy", date_time=archive_time())
            with zf.open(member, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)


def _local_header(member: bytes, crc: int, size: int) -> bytes:
    clock, date = _dos_time(archive_time())
    fixed = (0x04034B50, _VERSION, 0, 0, clock, date, crc, _ZIP64, _ZIP64, len(member), 20)
    return struct.pack("<IHHHHHIIIHH", *fixed) + member + struct.pack("<HHQQ", 1, 16, size, size)


def _central_directory(entries: list[tuple[bytes, int, int, int]], start: int) -> bytes:
    """Central directory and zip64 end records of members (name, crc, size, offset)
    stored from ``start`` on."""
    clock, date = _dos_time(archive_time())
    out = io.BytesIO()
    for member, crc, size, offset in entries:
        fixed = (_VERSION, _VERSION, 0, 0, clock, date, crc, _ZIP64, _ZIP64, len(member), 28)
        out.write(struct.pack("<IHHHHHHIIIHH", 0x02014B50, *fixed))
        out.write(struct.pack("<HHHII", 0, 0, 0, 0, _ZIP64))
        out.write(member + struct.pack("<HHQQQ", 1, 24, size, size, offset))
    cd_size, n = out.tell(), len(entries)
    end = start + cd_size
    out.write(
        struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, _VERSION, _VERSION, 0, 0, n, n, cd_size, start)
    )
    out.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
    out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, _ZIP64, _ZIP64, 0))
    return out.getvalue()


def _pwrite_all(fd: int, data: memoryview, offset: int) -> None:
    while len(data):
        n = os.pwrite(fd, data, offset)  # releases the GIL
        data, offset = data[n:], offset + n


_libc: Any = None


def _collapse(fd: int, offset: int, length: int) -> None:
    """Cut ``length`` bytes out of a file at ``offset`` (both block multiples); what
    follows moves down. Raises OSError where the file system cannot."""
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]
    if _libc.fallocate(fd, _COLLAPSE_RANGE, offset, length) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def _holes_are_free(folder: Path) -> bool:
    """Whether the file system keeps unwritten parts of a file as holes (no disk used).

    FAT and exFAT, for one, would fill the regions' unused ends with zeros."""
    import tempfile

    try:
        with tempfile.TemporaryFile(dir=folder) as probe:
            os.pwrite(probe.fileno(), b"\0", 4 * 2**20)
            return os.fstat(probe.fileno()).st_blocks * 512 < 2**20
    except OSError:
        return False


class _InPlaceNpz:
    """The in-place layout (see the module docstring) of an archive of ``capacity``
    points at most."""

    def __init__(self, path: Path, spec: FieldSpec, capacity: int) -> None:
        self.path = path
        self._atomic = atomic_path(path)
        self._tmp = self._atomic.__enter__()
        self._fd = os.open(self._tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        self.block = max(os.fstat(self._fd).st_blksize, 4096)
        self.count = 0
        self.fields = []  # (name, dtype, shape, member, region start, data start, item bytes)
        start = 0
        for name, (dtype, shape) in spec.items():
            member = f"{name}.npy".encode()
            item = np.dtype(dtype).itemsize * int(np.prod(shape, dtype=np.int64))
            data = start + 30 + len(member) + 20 + _NPY_HEADER
            self.fields.append((name, np.dtype(dtype), shape, member, start, data, item))
            start = -(-(data + capacity * item) // self.block) * self.block
        self.capacity = capacity
        self.crc = [0] * len(self.fields)

    def write(self, chunk: PointCloud) -> None:
        n = len(chunk)
        if self.count + n > self.capacity:
            raise RuntimeError(f"more points than the {self.capacity:,} the archive was made for")
        for k, (name, _, _, _, _, data, item) in enumerate(self.fields):
            view = bytes_view(chunk.fields[name])
            _pwrite_all(self._fd, view, data + self.count * item)
            self.crc[k] = zlib.crc32(view, self.crc[k])
        self.count += n

    def close(self) -> list[Path]:
        try:
            ends, entries = [], []
            for k, (_, dtype, shape, member, start, data, item) in enumerate(self.fields):
                head = _npy_header(dtype, (self.count, *shape))
                payload = self.count * item
                size = _NPY_HEADER + payload
                crc = crc32_combine(zlib.crc32(head), self.crc[k], payload)
                local = _local_header(member, crc, size)
                _pwrite_all(self._fd, memoryview(local + head), start)
                ends.append(data + payload)
                entries.append((member, crc, size, start))
            os.ftruncate(self._fd, ends[-1])
            try:
                self._cut_holes(ends, entries)
            except OSError as exc:
                if exc.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS, errno.EPERM):
                    raise
                self._copy_out(ends, entries)
            end = os.lseek(self._fd, 0, os.SEEK_END)
            _pwrite_all(self._fd, memoryview(_central_directory(entries, end)), end)
            os.close(self._fd)
            self._fd = -1
        except BaseException as exc:
            self.abort(exc)
            raise
        self._atomic.__exit__(None, None, None)
        return [self.path]

    def _cut_holes(self, ends: list[int], entries: list) -> None:
        """Collapse each region's unused end (last region first, so the offsets of the
        ones before stay put); entries get their final offsets."""
        starts = [e[3] for e in entries]
        cut = [0] * len(entries)
        for k in range(len(entries) - 2, -1, -1):
            aligned = -(-ends[k] // self.block) * self.block
            gap = starts[k + 1] - aligned
            if gap > 0:
                _collapse(self._fd, aligned, gap)
                cut[k] = gap
        shift = 0
        for k, (member, crc, size, start) in enumerate(entries):
            entries[k] = (member, crc, size, start - shift)
            shift += cut[k]

    def _copy_out(self, ends: list[int], entries: list) -> None:
        """Where holes cannot be cut: copy the members, end to end, into a new file."""
        packed = self._tmp.with_name(self._tmp.name + ".pack")
        fd = os.open(packed, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            offset = 0
            for k, (member, crc, size, start) in enumerate(entries):
                length = ends[k] - start
                done = 0
                while done < length:
                    n = os.copy_file_range(self._fd, fd, length - done, start + done)
                    if n == 0:
                        raise OSError(errno.EIO, f"{self._tmp}: copying the archive stopped")
                    done += n
                entries[k] = (member, crc, size, offset)
                offset += length
            os.replace(packed, self._tmp)
        except BaseException:
            os.close(fd)
            packed.unlink(missing_ok=True)
            raise
        os.close(self._fd)
        self._fd = fd

    def abort(self, exc: BaseException | None = None) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        err = exc if exc is not None else RuntimeError("aborted")
        self._atomic.__exit__(type(err), err, None)


class NpzWriter(SpooledWriter):
    """Chunked writer of ``.npz`` files.

    ``meta["max_points"]``, when given, bounds the points to come and selects the
    in-place layout; without it the fields are spooled.
    """

    def __init__(self, path: Path, spec: FieldSpec, meta: dict) -> None:
        capacity = meta.get("max_points")
        direct = capacity is not None and _holes_are_free(path.parent)
        self._direct = _InPlaceNpz(path, spec, int(capacity)) if direct else None
        if self._direct is None:
            super().__init__(path, spec, meta)
        self.path = path

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk."""
        if self._direct is not None:
            self._direct.write(chunk)
        else:
            super().write(chunk)

    def abort(self) -> None:
        """Drop everything written so far."""
        if self._direct is not None:
            self._direct.abort()
        else:
            super().abort()

    def close(self) -> list[Path]:
        """Finish the archive and rename it into place."""
        if self._direct is not None:
            return self._direct.close()
        spool = self.spool
        spool.flush()
        try:
            with atomic_path(self.path) as tmp, zipfile.ZipFile(tmp, "w", allowZip64=True) as zf:
                for name, (dtype, shape) in spool.dtypes.items():
                    header = {
                        "descr": np.lib.format.dtype_to_descr(dtype),
                        "fortran_order": False,
                        "shape": (spool.count, *shape),
                    }
                    member = zipfile.ZipInfo(f"{name}.npy", date_time=archive_time())
                    with zf.open(member, "w", force_zip64=True) as out:
                        np.lib.format.write_array_header_2_0(out, header)
                        with open(spool.path(name), "rb") as raw:
                            while block := raw.read(_BLOCK):
                                out.write(block)
        finally:
            spool.remove()
        return [self.path]


def read_npz(path: str | Path) -> PointCloud:
    """Read a cloud written by :class:`NpzWriter`."""
    with np.load(path) as data:
        return PointCloud({k: data[k] for k in data.files})
