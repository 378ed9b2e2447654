"""The BLAS thread pool while `optimize` runs: one thread.

The pipeline's numpy work is many small arrays (the cost model's batches, the reference
interpreter's runs of twins and rewritten programs): a second OpenBLAS thread gains little on
them and waits for the first, spinning. That costs CPU time, and on a busy machine, where the
waiting thread is preempted, wall time: DenseNet-121 on npu, 2 cores shared by several runs,
spent 91.8 CPU s with numpy's default two BLAS threads and 82.5 with one (the same report).

`one_thread()` limits the BLAS libraries numpy loaded to one thread for the duration of a
`with` block and gives the caller's setting back after it (a notebook's own numpy work keeps
its threads). It needs `threadpoolctl` (a dependency); where that is missing it does nothing.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def one_thread():
    """BLAS on one thread inside the block (`threadpoolctl.threadpool_limits`)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:              # optional at run time: the pipeline's results do not depend on it
        yield
        return
    with threadpool_limits(limits=1, user_api="blas"):
        yield
