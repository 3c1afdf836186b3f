// mm_q5_k.cu — matmul instances for Q5_K (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_Q5_K, q5_k)
