// mm_iq1_s.cu — matmul instances for IQ1_S (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ1_S, iq1_s)
