// mm_iq2_s.cu — matmul instances for IQ2_S (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ2_S, iq2_s)
