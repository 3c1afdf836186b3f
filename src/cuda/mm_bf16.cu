// mm_bf16.cu — matmul instances for BF16 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_BF16, bf16)
