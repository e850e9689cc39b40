"""landscape: loss surfaces, Hessian spectra and Fourier spectra of feature maps of vision networks.

One function per analysis, each taking a model (an ``nn.Module``, a checkpoint path or a
:class:`~landscape.core.source.ModelSource`), its data (a dataset spec, a ``DataLoader`` or a list of batches)
and the same options as the command line, and returning the result (written to ``out=`` when given)::

    import landscape
    surface = landscape.surface(model, loader, x="-1:1:21", y="-1:1:21")
    top = landscape.hessian(model, loader, top_k=5)["eigenvalues"]

They are listed by the analysis registry (:func:`landscape.analyses.registry.analyses`, each entry's ``api``).
A :class:`~landscape.store.read.Result` shows itself in a few lines (and as HTML in Jupyter) and gives its
kind's figures (``.plot()``), tables (``.table()``) and arrays with their axes (``.to_xarray()``).
The lower-level pieces stay public for those who compose their own: :class:`Objective`,
:class:`HessianOperator`, :func:`lanczos`, :func:`create_model`, :func:`read_result`, ... (loaded on first use,
so that ``import landscape`` imports no torch).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from landscape.errors import LandscapeError
from landscape.version import __version__

if TYPE_CHECKING:  # what a type checker sees of the names loaded on first use (none is imported at run time)
    from landscape.analyses.align.run import align as align
    from landscape.analyses.connect.run import connect as connect
    from landscape.analyses.curvature.run import curvature as curvature
    from landscape.analyses.fourier.run import fourier as fourier
    from landscape.analyses.hessian.density import spectral_density as spectral_density
    from landscape.analyses.hessian.lanczos import lanczos as lanczos
    from landscape.analyses.hessian.operator import HessianOperator as HessianOperator
    from landscape.analyses.hessian.operators import curvature_operator as curvature_operator
    from landscape.analyses.hessian.run import hessian as hessian
    from landscape.analyses.hessian.run import spectrum as spectrum
    from landscape.analyses.hessian.trace import trace as trace
    from landscape.analyses.lesion.run import lesion as lesion
    from landscape.analyses.sharpness.run import sharpness as sharpness
    from landscape.analyses.similarity.run import similarity as similarity
    from landscape.analyses.surface.run import surface as surface
    from landscape.analyses.trajectory.run import trajectory as trajectory
    from landscape.core.objective import Objective as Objective
    from landscape.core.regularizer import Regularizer as Regularizer
    from landscape.core.source import ModelSource as ModelSource
    from landscape.data.loading import load_dataset as load_dataset
    from landscape.models.checkpoint import load_model as load_model
    from landscape.models.registry import create_model as create_model
    from landscape.models.registry import list_models as list_models
    from landscape.plot import plot_files as plot_files
    from landscape.plot.report import write_report as write_report
    from landscape.store.read import Result as Result
    from landscape.store.read import read_result as read_result

#: the lower-level pieces offered at the top: name -> "module:attribute"
PIECES = {
    "Objective": "landscape.core.objective:Objective",
    "Regularizer": "landscape.core.regularizer:Regularizer",
    "ModelSource": "landscape.core.source:ModelSource",
    "HessianOperator": "landscape.analyses.hessian.operator:HessianOperator",
    "curvature_operator": "landscape.analyses.hessian.operators:curvature_operator",
    "lanczos": "landscape.analyses.hessian.lanczos:lanczos",
    "spectral_density": "landscape.analyses.hessian.density:spectral_density",
    "trace": "landscape.analyses.hessian.trace:trace",
    "create_model": "landscape.models.registry:create_model",
    "list_models": "landscape.models.registry:list_models",
    "load_model": "landscape.models.checkpoint:load_model",
    "load_dataset": "landscape.data.loading:load_dataset",
    "read_result": "landscape.store.read:read_result",
    "Result": "landscape.store.read:Result",
    "plot_files": "landscape.plot:plot_files",
    "write_report": "landscape.plot.report:write_report",
}


def _analysis_functions() -> dict[str, str]:
    """Each registered analysis's Python function: its name -> ``"module:function"``."""
    from landscape.analyses.registry import analyses

    return {a.api.partition(":")[2]: a.api for a in analyses() if a.api}


def __getattr__(name: str) -> Any:
    """The analyses' functions and the lower-level pieces, imported when first asked for."""
    ref = _analysis_functions().get(name) or PIECES.get(name)
    if ref is None:
        raise AttributeError(f"module 'landscape' has no attribute {name!r}")
    module, _, attribute = ref.partition(":")
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    """Every name the package offers, the lazily loaded ones included."""
    return sorted({*__all__, *_analysis_functions()})


__all__ = ["LandscapeError", "__version__", *PIECES]
