// mm_q4_k.cu — matmul instances for Q4_K (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q4_K, q4_k)
