"""The package's version, a leaf: it imports nothing, so any layer may read it without importing the package's face.

``pyproject.toml`` reads it from here without importing anything (``[tool.setuptools.dynamic]``), and
``landscape.__version__`` is this value.
"""

__version__ = "0.1.0"
