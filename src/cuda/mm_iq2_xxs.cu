// mm_iq2_xxs.cu — matmul instances for IQ2_XXS (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ2_XXS, iq2_xxs)
