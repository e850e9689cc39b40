"""The Hessian beside its approximations (``landscape curvature``): spectra, densities, angles and distances.

- :mod:`~landscape.analyses.curvature.distances`: principal angles between eigenspaces, the spectral distance by
  Lanczos and the Frobenius distance by Hutchinson.
- :func:`~landscape.analyses.curvature.run.run_curvature`: a model source in, an HDF5 result out, resumable by row.
"""

from landscape.analyses.curvature.summary import curvature_numbers, curvature_summary
from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.options.curvature import CurvatureOptions

CURVATURE = register_analysis(
    Analysis(
        kind="curvature",
        title="Curvature operators",
        description="The Hessian beside its Gauss-Newton, empirical Fisher, residual and K-FAC: spectra and distances.",
        summary=curvature_summary,
        numbers=curvature_numbers,
        figures="landscape.plot.curvature",
        options=CurvatureOptions,
        run="landscape.analyses.curvature.run:run_curvature",
        api="landscape.analyses.curvature.run:curvature",
        command="curvature",
        docs="analyses.md#curvature-operators",
        order=25,
        coords={
            "operator": "operators",
            "approximation": "approximations",
            "eigenvalue": "density/grid",
            "block": "blocks/names",
        },
        tables={
            "distances": Table(
                "one approximation A: its relative distances ||H - A|| / ||H|| from the Hessian",
                axes=("approximation",),
                columns=(
                    "distance/spectral",
                    "distance/spectral_converged",
                    "distance/frobenius",
                    "distance/frobenius_stderr",
                    "distance/done",
                ),
            ),
            "eigenpairs": Table(
                "one of the top-k eigenpairs of one operator, and its principal angle with the Hessian's",
                axes=("operator", "pair"),
                columns=("spectra/eigenvalues", "spectra/residuals", "spectra/converged", "spectra/angles"),
            ),
            "blocks": Table(
                "one diagonal block and one approximation: the block's relative distances",
                axes=("block", "approximation"),
                columns=(
                    "blocks/kinds",
                    "blocks/size",
                    "blocks/spectral",
                    "blocks/spectral_converged",
                    "blocks/frobenius",
                    "blocks/frobenius_stderr",
                    "blocks/done",
                ),
            ),
        },
    )
)
