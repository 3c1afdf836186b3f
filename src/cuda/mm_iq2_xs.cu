// mm_iq2_xs.cu — matmul instances for IQ2_XS (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ2_XS, iq2_xs)
