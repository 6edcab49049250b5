"""Writers of point clouds, one module per format, chosen by the file's extension.

Every writer writes to a temporary file beside the target and renames it into place
when complete, so an interrupted run never leaves a partial file under the target's
name.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..errors import OutputError
from ..pointcloud import PointCloud
from . import kitti, las, npz, open3d_io

__all__ = ["FORMATS", "check_writable", "write"]

Writer = Callable[[PointCloud, Path], list[Path]]

#: Writer by lower-case file extension.
FORMATS: dict[str, Writer] = {
    ".npz": npz.write_npz,
    ".pcd": open3d_io.write_open3d,
    ".ply": open3d_io.write_open3d,
    ".las": las.write_las,
    ".laz": las.write_las,
    ".bin": kitti.write_kitti,
}


def _writer_for(path: Path) -> Writer:
    writer = FORMATS.get(path.suffix.lower())
    if writer is None:
        raise OutputError(
            f"{path}: unknown output format {path.suffix or '(no extension)'!r}; "
            f"expected one of {', '.join(FORMATS)}"
        )
    return writer


def check_writable(path: str | Path) -> None:
    """Fail early, before any work, if ``path`` has an unknown format or cannot be written.

    Creates the parent directory if needed.
    """
    path = Path(path)
    _writer_for(path)
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


def write(cloud: PointCloud, path: str | Path) -> list[Path]:
    """Write a cloud; the format follows the extension of ``path``.

    Parameters
    ----------
    cloud : PointCloud
    path : str or Path
        ``.npz``, ``.pcd``, ``.ply``, ``.las``, ``.laz`` or ``.bin`` (KITTI; a
        SemanticKITTI ``.label`` file is written beside it).

    Returns
    -------
    list of Path
        The files written.
    """
    path = Path(path)
    writer = _writer_for(path)
    check_writable(path)
    try:
        return writer(cloud, path)
    except OSError as exc:
        raise OutputError(f"{path}: writing failed ({exc.strerror or exc})") from None
