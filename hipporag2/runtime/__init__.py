"""The process around a run: signals (`interrupts`), stage timings (`stagetime`), and the
one-off compilation of numba kernels (`warm_kernels`)."""
