// mm_iq4_xs.cu — matmul instances for IQ4_XS (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ4_XS, iq4_xs)
