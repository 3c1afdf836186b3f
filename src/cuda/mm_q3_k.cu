// mm_q3_k.cu — matmul instances for Q3_K (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q3_K, q3_k)
