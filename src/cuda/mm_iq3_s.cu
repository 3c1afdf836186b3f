// mm_iq3_s.cu — matmul instances for IQ3_S (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ3_S, iq3_s)
