// mm_iq4_nl.cu — matmul instances for IQ4_NL (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ4_NL, iq4_nl)
