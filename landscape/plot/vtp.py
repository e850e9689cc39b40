"""ParaView export of a 2D surface (``.vtp``)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np

from landscape.plot.grids import grid_of
from landscape.store.files import WRITTEN_BY, atomic_write
from landscape.store.read import Result
from landscape.version import __version__


def write_vtp(
    result: Result, path: str | Path, *, zmax: float | None = None, log: bool = False, force: bool = False
) -> Path:
    """ParaView export of a 2D surface as ASCII XML PolyData (``.vtp``).

    One point ``(x_i, y_j, z)`` per grid point (index ``j*nx + i``) with ``z = loss`` (log10 with ``log``,
    clipped at ``zmax``), quads between neighbours whose four corners are done, and point arrays ``loss`` and
    ``accuracy``. The file is written atomically (see :func:`landscape.store.files.atomic_write`).

    Args:
        result: a 2D surface result.
        path: the ``.vtp`` file to write.
        zmax: clip ``z`` at this value; ``None``: no clipping.
        log: ``z = log10(loss)``.
        force: replace a file landscape did not write (see :func:`landscape.store.files.check_replaceable`).

    Returns:
        ``path`` as a :class:`~pathlib.Path`.

    Raises:
        LandscapeError: the surface cannot be drawn, or ``path`` cannot be written.
    """
    xs, ys, loss, acc = grid_of(result)
    ny, nx = loss.shape
    z = np.ma.log10(loss) if log else loss
    if zmax is not None:
        z = np.ma.minimum(z, zmax)
    X, Y = np.meshgrid(xs, ys)
    ok = ~np.ma.getmaskarray(z)
    zf = np.ma.filled(z.astype(float), np.nan)
    pts = np.stack([X.ravel(), Y.ravel(), zf.ravel()], 1)
    quads = [
        (j * nx + i, j * nx + i + 1, (j + 1) * nx + i + 1, (j + 1) * nx + i)
        for j in range(ny - 1)
        for i in range(nx - 1)
        if ok[j, i] and ok[j, i + 1] and ok[j + 1, i] and ok[j + 1, i + 1]
    ]

    def text(values: np.ndarray, fmt: str) -> str:
        return " ".join(fmt % v for v in np.asarray(values).ravel())

    root = ET.Element("VTKFile", type="PolyData", version="0.1", byte_order="LittleEndian")
    piece = ET.SubElement(
        ET.SubElement(root, "PolyData"),
        "Piece",
        NumberOfPoints=str(nx * ny),
        NumberOfVerts="0",
        NumberOfLines="0",
        NumberOfStrips="0",
        NumberOfPolys=str(len(quads)),
    )
    pdata = ET.SubElement(piece, "PointData", Scalars="loss")
    for name, arr in (("loss", loss), ("accuracy", acc)):
        da = ET.SubElement(pdata, "DataArray", type="Float64", Name=name, format="ascii")
        da.text = text(np.ma.filled(arr.astype(float), np.nan), "%.10g")
    ET.SubElement(
        ET.SubElement(piece, "Points"), "DataArray", type="Float64", NumberOfComponents="3", format="ascii"
    ).text = text(pts, "%.10g")
    polys = ET.SubElement(piece, "Polys")
    ET.SubElement(polys, "DataArray", type="Int64", Name="connectivity", format="ascii").text = text(
        np.asarray(quads, dtype=np.int64), "%d"
    )
    ET.SubElement(polys, "DataArray", type="Int64", Name="offsets", format="ascii").text = text(
        4 * np.arange(1, len(quads) + 1), "%d"
    )
    root.insert(0, ET.Comment(f" landscape {__version__} ({WRITTEN_BY}) "))
    path = Path(path)
    with atomic_write(path, force=force, kind="surface mesh") as handle:
        ET.ElementTree(root).write(handle, xml_declaration=True, encoding="utf-8")
    return path
