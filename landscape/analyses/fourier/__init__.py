"""Fourier analysis of feature maps (docs/analyses.md): Delta log amplitude, high frequency, variance, band noise.

- :mod:`landscape.analyses.fourier.spectrum`: FFT sums of one batch of maps (diagonal, 2D map, radial, variance).
- :mod:`landscape.analyses.fourier.features`: accumulation over batches of every block's map (``FourierProfile``).
- :mod:`landscape.analyses.fourier.noise`: band-limited noise and the accuracy drop per band.
- :mod:`landscape.analyses.fourier.run`: ``run_fourier``, a model source in, an HDF5 result out.
"""

from landscape.analyses.fourier.summary import fourier_numbers, fourier_summary
from landscape.analyses.registry import Analysis, Table, register_analysis
from landscape.options.fourier import FourierOptions

FOURIER = register_analysis(
    Analysis(
        kind="fourier",
        title="Fourier",
        description="Fourier spectra of every block's feature maps, their high-frequency amplitude and variance.",
        summary=fourier_summary,
        numbers=fourier_numbers,
        figures="landscape.plot.fourier",
        options=FourierOptions,
        run="landscape.analyses.fourier.run:run_fourier",
        api="landscape.analyses.fourier.run:fourier",
        command="fourier",
        docs="analyses.md#fourier-analysis-of-feature-maps",
        order=40,
        coords={"frequency": "frequencies", "layer": "layer_names", "band": "noise/frequencies"},
        tables={
            "layers": Table(
                "one block's output (a layer), in forward order",
                axes=("layer",),
                columns=("layer_kinds", "depth", "variance", "high_frequency"),
            ),
            "profiles": Table(
                "one layer at one frequency of the common axis",
                axes=("layer", "frequency"),
                columns=("delta_log_amplitude",),
            ),
            "noise": Table(
                "one band of band-limited noise (--noise-bands)",
                axes=("band",),
                columns=("noise/accuracy", "noise/accuracy_drop", "noise/done"),
            ),
        },
    )
)
