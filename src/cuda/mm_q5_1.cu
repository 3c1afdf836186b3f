// mm_q5_1.cu — matmul instances for Q5_1 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q5_1, q5_1)
