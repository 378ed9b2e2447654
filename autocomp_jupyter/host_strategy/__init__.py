"""What host C runs for each kernel, read from its accesses: the one analysis the C generator
(`codegen/c`) writes code from and the host model (`accel/host_model.py`) times, so that the
model times the code that runs. It sits below both layers and imports only the IR.

A kernel's statement takes the first strategy that fits, in this order (`codegen/c/kernel.py`
dispatches; `HostModel` asks the same questions):

- `contraction.packed_contraction`: a contraction `O += A * B` the host runs as a packed GEMM,
  then, of those:
  - `rows.direct_rows`: one row (M = 1: a depthwise conv, a GEMV) as direct rows, each output
    a dot product (`dots`), or in vector form (`depthwise.vector_rows`,
    `depthwise.channel_blocks`), or plain rows;
  - `winograd.winograd`: a 3x3 stride-1 convolution as Winograd F(2x2, 3x3);
  - else the packed GEMM itself: its shape, microkernel and cache blocks (`gemm`), how it reads
    its operands and what packing costs (`operands`), the work units threads share
    (`partition`), the elementwise statements its store applies (`epilogue`);
- `rows.window_rows`: a window reduction (pooling) as direct rows;
- else the schedule's loop nest.

`access` holds what all of them read: offsets and bounds of affine accesses, and the kernels
whose point order is fixed.
"""
