"""Where an analysis runs.

One process or torchrun (distributed), the life of its result file (lifecycle), the compile caches
(compile_cache), the device's memory (devices), what a run computed on: torch, CPU kernels, threads and device
(machine), the host's freed memory kept for reuse (memory), the progress shown (progress), and a training run's
TensorBoard scalars (tensorboard).
"""
