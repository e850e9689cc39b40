"""The options of every analysis, as frozen dataclasses that the CLI and Python callers fill in.

This package imports no torch (the CLI declares its options from it). Each analysis has one class —
:class:`~landscape.options.surface.SurfaceOptions`, :class:`~landscape.options.hessian.HessianOptions`,
:class:`~landscape.options.hessian.SpectrumOptions`, :class:`~landscape.options.fourier.FourierOptions` —
whose defaults and choices are the library's constants, declared once here, and whose ``__post_init__``
validates every value (finite numbers, known choices) before anything runs.
"""
