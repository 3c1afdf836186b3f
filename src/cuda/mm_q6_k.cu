// mm_q6_k.cu — matmul instances for Q6_K (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q6_K, q6_k)
