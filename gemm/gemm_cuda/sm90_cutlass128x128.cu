// CUTLASS cooperative 128x128 kernel on fp8 operands, stream-K scheduler: the launcher's choice for
// a long K whose last wave of 128x128 tiles is partial and not worth the tile kernels' own split.
#include "sm90_cutlass_kernel.cuh"
FP8GEMM_SM90_CUTLASS_KERNEL(cutlass128x128, false)
