// mm_q2_k.cu — matmul instances for Q2_K (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q2_K, q2_k)
