// mm_q4_1.cu — matmul instances for Q4_1 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q4_1, q4_1)
