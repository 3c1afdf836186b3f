// mm_q8_0.cu — matmul instances for Q8_0 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q8_0, q8_0)
