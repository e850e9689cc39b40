"""Hessian spectra: the HVP operator, Lanczos top/bottom-k, SLQ density, trace estimators, Paper A's spectra.

- :class:`~landscape.analyses.hessian.operator.HessianOperator`: the weighted, regularised Hessian of an
  ``Objective``; :mod:`~landscape.analyses.hessian.products` makes its products the cheapest way.
- :func:`~landscape.analyses.hessian.lanczos.lanczos`: thick-restart Lanczos with full reorthogonalisation
  (scipy's names); :mod:`~landscape.analyses.hessian.linalg` holds what the solvers share.
- :func:`~landscape.analyses.hessian.density.spectral_density`: stochastic Lanczos quadrature.
- :func:`~landscape.analyses.hessian.trace.trace`: Hutchinson and Hutch++ with a standard error.
- :func:`~landscape.analyses.hessian.spectrum.max_eigenvalue_spectrum`: per-mini-batch top-k, Paper A's
  protocol (grouped with vmap or worker threads by :mod:`~landscape.analyses.hessian.grouped`).
- :func:`~landscape.analyses.hessian.fsdp.fsdp_lanczos`: top eigenpairs of a model sharded with FSDP's
  ``fully_shard``, every Lanczos vector sharded like the parameters (:mod:`~landscape.analyses.hessian.shards`).
- :func:`~landscape.analyses.hessian.run.run_hessian`, :func:`~landscape.analyses.hessian.run.run_spectrum`:
  a model source in, an HDF5 result out.
"""

from landscape.analyses.hessian.summary import hessian_numbers, hessian_summary, spectrum_summary, top_eigenvalue
from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.options.hessian import HessianOptions, SpectrumOptions

HESSIAN = register_analysis(
    Analysis(
        kind="hessian",
        title="Hessian",
        description="Top eigenpairs (Lanczos), spectral density (SLQ) and trace (Hutch++) of the loss Hessian.",
        summary=hessian_summary,
        numbers=hessian_numbers,
        figures="landscape.plot.hessian",
        options=HessianOptions,
        run="landscape.analyses.hessian.run:run_hessian",
        api="landscape.analyses.hessian.run:hessian",
        command="hessian",
        docs="analyses.md#hessian",
        order=20,
        coords={"eigenvalue": "density/grid", "block": "blocks/names"},
        tables={
            "eigenpairs": Table(
                "one eigenpair (Lanczos), eigenvalues ascending",
                axes=("pair",),
                columns=("eigenvalues", "residuals", "converged"),
            ),
            "blocks": Table(
                "one diagonal block of the Hessian (hessian --per-block)",
                axes=("block",),
                columns=(
                    "blocks/kinds",
                    "blocks/depth",
                    "blocks/size",
                    "blocks/top_eigenvalue",
                    "blocks/residual",
                    "blocks/converged",
                    "blocks/eigen_n_matvec",
                    "blocks/trace",
                    "blocks/trace_stderr",
                    "blocks/trace_n_matvec",
                    "blocks/done",
                ),
            ),
        },
    )
)
SPECTRUM = register_analysis(
    Analysis(
        kind="spectrum",
        title="Hessian spectrum",
        description="The top-k Hessian eigenvalues of every mini-batch, pooled (Paper A's max-eigenvalue spectra).",
        summary=spectrum_summary,
        numbers=top_eigenvalue,
        figures="landscape.plot.hessian",
        options=SpectrumOptions,
        run="landscape.analyses.hessian.run:run_spectrum",
        api="landscape.analyses.hessian.run:spectrum",
        command="spectrum",
        docs="analyses.md#per-mini-batch-spectrum",
        order=30,
        tables={
            "batches": Table(
                "one of the top-k eigenvalues (rank, ascending) of one mini-batch",
                axes=("batch", "rank"),
                columns=("eigenvalues", "batch_sizes", "n_matvec", "done"),
            ),
        },
    )
)
