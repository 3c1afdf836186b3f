// mm_f16.cu — matmul instances for F16 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_F16, f16)
