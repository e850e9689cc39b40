"""What a Result shows of itself: a short repr, an HTML view, tables (pandas) and an xarray dataset, per kind.

Every registered kind is built small from the plot tests' arrays (tests/plot_results.py), each array with the
axes docs/schema.md gives it, once read from a file and once held in memory (as the Python API returns it).
"""

import base64
import itertools
import sys

import h5py
import numpy as np
import pytest
from helpers import tiny_resnet_checkpoint
from plot_results import axes_of, well_formed, write_result

import landscape
from landscape.analyses.registry import analysis_of, kinds
from landscape.errors import LandscapeError
from landscape.store.read import read_result
from landscape.store.result import ResultFile

pd = pytest.importorskip("pandas")
xr = pytest.importorskip("xarray")

#: a connect file's barriers attribute, as the run writes it at its end
BARRIERS = {
    "line": {"train": {"loss": 1.0, "loss_at": 0.5, "error": 0.25, "error_at": 0.5}},
    "curve": {"train": {"loss": 0.1, "loss_at": 0.25, "error": 0.05, "error_at": 0.75}},
}
#: a hessian file's trace group, as the run writes it
TRACE = {"estimate": 11.0, "stderr": 0.5773502691896258, "method": "hutchinson", "n_matvec": 3}


def _arrays(kind):
    arrays, attrs = well_formed(kind)
    if kind == "connect":
        attrs["barriers"] = BARRIERS
    if kind == "hessian":  # with --per-block
        n = 3
        arrays.update(
            {
                "blocks/names": np.array(["stem", "layer1", "fc"]),
                "blocks/kinds": np.array(["stem", "conv", "other"]),
                "blocks/depth": np.linspace(0, 1, n),
                "blocks/top_eigenvalue": np.array([1.0, 5.0, 2.0]),
                "blocks/trace": np.array([3.0, 9.0, 4.0]),
                "blocks/trace_stderr": np.array([0.1, 0.2, 0.3]),
                "blocks/residual": np.array([1e-4, 2e-4, 3e-4]),
                "blocks/size": np.array([10, 200, 30]),
                "blocks/done": np.ones(n, bool),
            }
        )
    if kind == "sharpness":
        arrays["base_loss"] = np.array([0.5, 0.6, 0.7])
    if kind == "fourier":  # every band done: the file is complete, as the one held in memory
        arrays["noise/done"] = np.ones(3, bool)
    return arrays, attrs


def _from_file(tmp_path, kind):
    arrays, attrs = _arrays(kind)
    groups = {"trace": TRACE} if kind == "hessian" else {}
    return read_result(write_result(tmp_path / f"{kind}.h5", kind, arrays, axes=True, group_attrs=groups, **attrs))


def _in_memory(kind):
    """The same result written through the store into a file held in memory, as the Python API returns it."""
    arrays, attrs = _arrays(kind)
    f = ResultFile.memory(kind, attrs)
    for name, data in arrays.items():
        f.write(name, data, axes=axes_of(kind, name))
    if kind == "hessian":
        f.set_attrs(TRACE, at="trace")
    f.mark_complete()
    held = f.snapshot()
    f.close()
    return held


@pytest.fixture(params=kinds())
def kind(request):
    return request.param


@pytest.fixture(params=["file", "memory"])
def result(request, tmp_path, kind):
    return _from_file(tmp_path, kind) if request.param == "file" else _in_memory(kind)


def test_the_repr_is_a_few_lines_with_the_kind_the_summary_and_every_array_s_shape(result, kind):
    text = repr(result)
    assert len(text) < 1500 and len(text.splitlines()) <= 10, text
    assert text.splitlines()[0].startswith(f"<landscape.Result {kind}, complete")
    assert analysis_of(kind).title in text.splitlines()[1]
    for name, arr in result.arrays.items():
        axes = axes_of(kind, name)
        shape = "(" + ", ".join(f"{a}: {n}" for a, n in zip(axes, arr.shape)) + ")" if axes else str(arr.shape)
        grouped = name.partition("/")[0] + "/: " if "/" in name else None
        assert f"{name} {shape}" in text or (grouped and grouped in text), (name, text)


def test_a_surface_held_in_memory_shows_its_directions_in_one_entry(tmp_path):
    arrays, attrs = well_formed("surface")
    params = {f"directions/{d}/layer{i}.weight": np.ones((64, 64)) for d in "xy" for i in range(12)}
    held = _in_memory_of("surface", {**arrays, **params}, attrs)
    text = repr(held)
    assert len(text) < 1500 and "directions/: 24 arrays, 98304 values" in text and "<memory>" in text


def _in_memory_of(kind, arrays, attrs):
    f = ResultFile.memory(kind, attrs)
    for name, data in arrays.items():
        f.write(name, data, axes=axes_of(kind, name))
    f.mark_complete()
    held = f.snapshot()
    f.close()
    return held


def test_a_result_from_a_file_and_one_held_in_memory_show_the_same(tmp_path, kind):
    on_disk, held = _from_file(tmp_path, kind), _in_memory(kind)
    assert repr(on_disk).splitlines()[1:] == repr(held).splitlines()[1:]
    assert on_disk.summary() == held.summary() and on_disk.numbers() == held.numbers()
    assert on_disk.tables() == held.tables()
    for name in on_disk.tables():
        pd.testing.assert_frame_equal(on_disk.table(name), held.table(name))
    a, b = on_disk.to_xarray(), held.to_xarray()
    assert list(a.data_vars) == list(b.data_vars) and dict(a.sizes) == dict(b.sizes)


def test_the_html_view_holds_the_summary_escaped_and_the_main_figure_as_an_embedded_png(result, kind):
    page = result._repr_html_()
    assert page.startswith("<div") and page.rstrip().endswith("</div>")
    src = page.split("<img src='data:image/png;base64,", 1)[1].split("'", 1)[0]
    assert base64.b64decode(src).startswith(b"\x89PNG\r\n\x1a\n")
    assert result.summary().replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in page


def test_the_html_view_escapes_every_text_and_says_why_an_unfinished_file_has_no_figure(tmp_path):
    arrays, attrs = well_formed("surface")
    done = np.zeros_like(arrays["done"])
    arrays.update(done=done, loss=np.full(done.shape, np.nan), accuracy=np.full(done.shape, np.nan))
    path = write_result(
        tmp_path / "a<b>&c.h5", "surface", arrays, axes=True, **{**attrs, "model": "<script>x</script>"}
    )
    page = read_result(path)._repr_html_()
    assert "<script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "a<b>" not in page and "a&lt;b&gt;&amp;c.h5" in page
    assert "<img" not in page and "no figure:" in page


def test_summary_and_numbers_are_the_registry_s(result, kind):
    item = analysis_of(kind)
    assert result.summary() == item.summary(result)
    assert result.numbers() == (dict(item.numbers(result)) if item.numbers else {})


def test_to_xarray_has_the_schema_s_axes_as_dimensions_and_the_arrays_as_values(result, kind):
    ds = result.to_xarray()
    named = [n for n in result.arrays if axes_of(kind, n) is not None]
    assert named and sorted(ds.data_vars) == sorted(named)
    for name in named:
        var = ds[name]
        assert [d.rpartition("/")[2] for d in var.dims] == axes_of(kind, name), name
        assert var.shape == result[name].shape
        np.testing.assert_array_equal(var.values, result[name])
    for axis, path in analysis_of(kind).coords.items():
        if path in result and axis in ds.coords:
            np.testing.assert_array_equal(ds[axis].values, result[path])
    assert ds.attrs["kind"] == kind and ds.attrs["model"] == "toy"


def test_to_xarray_names_a_dimension_of_two_lengths_by_each_array_s_group(tmp_path):
    ds = _from_file(tmp_path, "hessian").to_xarray()  # density: 1 probe, trace: 3 probes
    assert ds["density/nodes"].dims == ("density/probe", "node") and ds["trace/samples"].dims == ("trace/probe",)
    assert ds.sizes["density/probe"] == 1 and ds.sizes["trace/probe"] == 3
    assert ds["eigenvalues"].dims == ("pair",)


def _expected_rows(result, kind, table):
    """The table's rows by brute force: every combination of its axes, each column's value at it."""
    coords = analysis_of(kind).coords
    held = [c for c in table.columns if c in result]
    sizes = {}
    for c in held:
        sizes.update(zip(axes_of(kind, c), result[c].shape))
    rows = []
    for position in itertools.product(*(range(sizes[a]) for a in table.axes)):
        at = dict(zip(table.axes, position))
        index = tuple(result[coords[a]][at[a]] if a in coords and coords[a] in result else at[a] for a in table.axes)
        values = {c.rpartition("/")[2]: result[c][tuple(at[a] for a in axes_of(kind, c))] for c in held}
        rows.append((index, values))
    return rows


def test_every_table_of_every_kind_holds_the_arrays_values_row_by_row(result, kind):
    declared = analysis_of(kind).tables
    assert result.tables(), f"{kind} offers no table"
    for name in result.tables():
        table, frame = declared[name], result.table(name)
        if table.rows is not None:
            continue
        expected = _expected_rows(result, kind, table)
        assert list(frame.index.names) == list(table.axes) and len(frame) == len(expected)
        assert list(frame.columns) == list(expected[0][1])
        for (index, values), (label, row) in zip(expected, frame.iterrows()):
            assert (label if isinstance(label, tuple) else (label,)) == index
            for column, value in values.items():
                assert row[column] == value or (np.isnan(value) and np.isnan(row[column])), (name, column)
    first = result.tables()[0]
    pd.testing.assert_frame_equal(result.table(), result.table(first))


def test_the_barriers_of_a_connect_file_are_one_flat_table(tmp_path):
    frame = _from_file(tmp_path, "connect").table("barriers")
    assert list(frame.index.names) == ["path", "split"]
    assert list(frame.columns) == ["loss", "loss_at", "error", "error_at"]
    for (path, split), row in frame.iterrows():
        assert row.to_dict() == BARRIERS[path][split]
    assert len(frame) == 2


def test_the_trace_s_estimate_and_standard_error_are_the_file_s_attributes(tmp_path):
    result = _from_file(tmp_path, "hessian")
    with h5py.File(tmp_path / "hessian.h5", "r") as f:
        estimate, stderr = f["trace"].attrs["estimate"], f["trace"].attrs["stderr"]
    assert result.attr("trace/estimate") == estimate and result.attr("trace/stderr") == stderr
    assert result.attrs_at["trace"]["method"] == "hutchinson" and result.attr("trace/nothing", 7) == 7
    ds = result.to_xarray()
    assert ds.attrs["trace/estimate"] == estimate and ds.attrs["trace/stderr"] == stderr


def test_an_array_s_own_attributes_are_its_variable_s(tmp_path):
    arrays, attrs = well_formed("fourier")
    path = write_result(tmp_path / "f.h5", "fourier", arrays, axes=True, **attrs)
    with h5py.File(path, "a") as f:
        f["frequencies"].attrs["units"] = "pi"
    result = read_result(path)
    assert result.attr("frequencies/units") == "pi" and result.to_xarray()["frequencies"].attrs == {"units": "pi"}


def test_a_table_the_result_lacks_or_the_kind_lacks_is_a_one_line_error(tmp_path):
    arrays, attrs = well_formed("hessian")  # no --per-block
    result = read_result(write_result(tmp_path / "h.h5", "hessian", arrays, axes=True, **attrs))
    assert result.tables() == ["eigenpairs"]
    with pytest.raises(LandscapeError, match="no 'blocks' table .*--per-block") as info:
        result.table("blocks")
    assert "\n" not in str(info.value)
    with pytest.raises(LandscapeError, match="its tables are eigenpairs, blocks"):
        result.table("nothing")
    connect = _from_file(tmp_path, "connect")
    assert connect.tables() == ["line", "barriers"]  # no curve in this file


def test_without_xarray_or_pandas_the_error_names_the_extra(tmp_path, monkeypatch):
    result = _from_file(tmp_path, "sharpness")
    monkeypatch.setitem(sys.modules, "xarray", None)  # what an environment without them imports
    monkeypatch.setitem(sys.modules, "pandas", None)
    for call in (result.to_xarray, result.table):
        with pytest.raises(LandscapeError, match=r"pip install 'landscape\[xarray\]'") as info:
            call()
        assert "\n" not in str(info.value)


def test_the_python_api_s_results_show_little_and_hold_the_trace_s_numbers(tmp_path, monkeypatch):
    _, model = tiny_resnet_checkpoint(tmp_path)
    monkeypatch.chdir(tmp_path)
    grid = {"x": "-1:1:3", "y": "-1:1:3", "samples": 24, "batch_size": 12, "progress": False}
    surface = landscape.surface(model, "digits", store_directions="full", **grid)  # every direction tensor held
    params = [n for n in surface.arrays if n.startswith("directions/")]
    assert len(params) > 8 and len(repr(surface)) < 1500 and f"directions/: {len(params)} arrays" in repr(surface)
    assert surface.to_xarray()["loss"].dims == ("y", "x") and set(surface.plot()) == {
        "contour",
        "contourf",
        "heatmap",
        "3d",
    }
    options = {"top_k": 1, "trace": True, "trace_samples": 6, "samples": 24, "batch_size": 12, "progress": False}
    held = landscape.hessian(model, "digits", **options)
    on_disk = landscape.hessian(model, "digits", out=tmp_path / "h.h5", **options)
    with h5py.File(tmp_path / "h.h5", "r") as f:
        estimate, stderr = f["trace"].attrs["estimate"], f["trace"].attrs["stderr"]
    assert on_disk.attr("trace/estimate") == estimate and on_disk.attr("trace/stderr") == stderr
    assert held.attr("trace/estimate") == pytest.approx(estimate) and held.attr("trace/stderr") == pytest.approx(stderr)
    samples = held["trace/samples"]  # the estimate is their mean, its standard error std / sqrt(n)
    assert estimate == pytest.approx(samples.mean()) and stderr == pytest.approx(
        samples.std(ddof=1) / len(samples) ** 0.5
    )
    assert repr(held).splitlines()[1:] == repr(on_disk).splitlines()[1:]
