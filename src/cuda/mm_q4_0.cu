// mm_q4_0.cu — matmul instances for Q4_0 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q4_0, q4_0)
