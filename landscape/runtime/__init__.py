"""Where an analysis runs.

One process or torchrun (distributed), the life of its result file (lifecycle), and the compile caches
(compile_cache).
"""
