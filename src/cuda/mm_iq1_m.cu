// mm_iq1_m.cu — matmul instances for IQ1_M (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ1_M, iq1_m)
