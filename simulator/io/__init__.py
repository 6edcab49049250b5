"""Every file the simulator writes or reads. Point clouds: one module per format, chosen
by the file's extension (``open_writer``, ``write``, ``read``); beside them the atomic
writes (``atomic``), the SemanticKITTI label codec (``labels``), pose files (``poses``),
dataset layouts (``layouts``) and where a sequence's frames go (``frames``).

Every writer takes the cloud chunk by chunk (``open_writer(...).write(chunk)``, then
``close()``), so a survey of any length is written with bounded memory, and writes
to a temporary name beside the target that is renamed into place only when
complete: an interrupted run never leaves a partial file under the target's name.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..constants import OUTPUT_SUFFIXES
from ..errors import OutputError
from ..pointcloud import FieldSpec, PointCloud
from .kitti import KittiWriter
from .las import LasWriter
from .npz import NpzWriter
from .open3d_io import Open3DWriter

__all__ = [
    "FORMATS",
    "ChunkWriter",
    "check_space",
    "check_writable",
    "open_writer",
    "write",
]


class ChunkWriter(Protocol):
    """What every format's writer does."""

    def write(self, chunk: PointCloud) -> None:
        """Append a chunk of points."""

    def close(self) -> list[Path]:
        """Finish, rename into place, and return the files written."""

    def abort(self) -> None:
        """Drop everything; leave no file behind."""


#: Writer class by lower-case file extension.
FORMATS: dict[str, type] = {
    ".npz": NpzWriter,
    ".pcd": Open3DWriter,
    ".ply": Open3DWriter,
    ".las": LasWriter,
    ".laz": LasWriter,
    ".bin": KittiWriter,
}
assert tuple(FORMATS) == OUTPUT_SUFFIXES  # the command's help names them without importing us


def _writer_class(path: Path) -> type:
    cls = FORMATS.get(path.suffix.lower())
    if cls is None:
        raise OutputError(
            f"{path}: unknown output format {path.suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(FORMATS)}"
        )
    return cls


def check_writable(path: str | Path) -> None:
    """Fail early, before any work, if ``path`` has an unknown format or cannot be written.

    Creates the parent directory if needed.
    """
    path = Path(path)
    _writer_class(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"{path}: cannot create the output directory ({exc.strerror})") from None
    if path.is_dir():
        raise OutputError(f"{path}: is a directory; expected a file name")
    probe = path.parent / f".{path.name}.probe"
    try:
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise OutputError(
            f"{path}: the output directory is not writable ({exc.strerror})"
        ) from None


#: Bytes a point takes on disk by format (upper bounds), and how many times it is written
#: while the file is made (spooled formats hold a spool and the file at the end).
_BYTES_PER_POINT = {".npz": 40, ".pcd": 40, ".ply": 40, ".las": 44, ".laz": 44, ".bin": 20}
_COPIES = {".npz": 2, ".pcd": 2, ".ply": 2}


def check_space(paths: list[Path], points: int, diagnostics: bool = False) -> None:
    """Fail before any work if the outputs of ``points`` points cannot fit on their disks.

    The estimate is an upper bound (every pulse a return; diagnostics add 45 bytes).
    """
    import shutil

    need: dict[Path, int] = {}
    for path in paths:
        ext = Path(path).suffix.lower()
        per_point = _BYTES_PER_POINT.get(ext, 40) + (45 if diagnostics and ext == ".npz" else 0)
        folder = Path(path).parent
        need[folder] = need.get(folder, 0) + points * per_point * _COPIES.get(ext, 1)
    for folder, needed in need.items():
        free = shutil.disk_usage(folder).free
        if needed > free:
            raise OutputError(
                f"{folder}: not enough free space: the output may need up to "
                f"{needed / 2**30:,.1f} GiB, {free / 2**30:,.1f} GiB are free"
            )


class _Guarded:
    """A writer whose I/O errors become :class:`OutputError` and abort it cleanly."""

    def __init__(self, path: Path, inner: ChunkWriter) -> None:
        self.path = path
        self.inner = inner

    def _fail(self, exc: OSError) -> OutputError:
        self.inner.abort()
        return OutputError(f"{self.path}: writing failed ({exc.strerror or exc})")

    def write(self, chunk: PointCloud) -> None:
        try:
            self.inner.write(chunk)
        except OSError as exc:
            raise self._fail(exc) from None

    def close(self) -> list[Path]:
        try:
            return self.inner.close()
        except OSError as exc:
            raise self._fail(exc) from None

    def abort(self) -> None:
        self.inner.abort()


def open_writer(path: str | Path, spec: FieldSpec, meta: dict[str, Any]) -> ChunkWriter:
    """Open a chunked writer; the format follows the extension of ``path``.

    Parameters
    ----------
    path : str or Path
        ``.npz``, ``.pcd``, ``.ply``, ``.las``, ``.laz`` or ``.bin`` (KITTI; a
        SemanticKITTI ``.label`` file is written beside it).
    spec : FieldSpec
        The fields of the chunks to come (``PointCloud.spec``).
    meta : dict
        Scan facts (``intensity_max`` is used by KITTI; ``max_points``, the most points
        the chunks can add up to, lets npz write them in place).
    """
    path = Path(path)
    cls = _writer_class(path)
    check_writable(path)
    try:
        return _Guarded(path, cls(path, spec, meta))
    except OSError as exc:
        raise OutputError(f"{path}: cannot be opened for writing ({exc.strerror})") from None


def write(cloud: PointCloud, path: str | Path) -> list[Path]:
    """Write a whole cloud; the format follows the extension of ``path``.

    Returns
    -------
    list of Path
        The files written.
    """
    writer = open_writer(path, cloud.spec, {**cloud.meta, "max_points": len(cloud)})
    try:
        writer.write(cloud)
    except BaseException:
        writer.abort()
        raise
    return writer.close()
