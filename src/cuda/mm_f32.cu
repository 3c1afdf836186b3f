// mm_f32.cu — matmul instances for F32 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_F32, f32)
