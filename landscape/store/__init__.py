"""Where results are kept: safe files and writer locks, and the HDF5 result files.

- :mod:`landscape.store.files`: atomic writing, the one rule for replacing an output, writer locks, OS errors.
- :mod:`landscape.store.attrs`: how attributes are encoded, and the identity that decides a resume.
- :mod:`landscape.store.h5`: opening only self-contained HDF5 files; a clean release after a failed write.
- :mod:`landscape.store.result`: :class:`ResultFile`, a result file open for a run (create, resume, write).
- :mod:`landscape.store.read`: :func:`read_result` into a :class:`Result`, and :func:`describe`.
- :mod:`landscape.store.json_view`: a result file as strict JSON for scripts (``landscape info --json``).
"""

from landscape.store.attrs import identity_of
from landscape.store.read import Result, describe, read_result
from landscape.store.result import ResultFile, open_result

__all__ = ["Result", "ResultFile", "describe", "identity_of", "open_result", "read_result"]
