// mm_q5_0.cu — matmul instances for Q5_0 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q5_0, q5_0)
