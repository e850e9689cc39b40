"""Files: safe writing and writer locks (files), the HDF5 result files (result)."""
