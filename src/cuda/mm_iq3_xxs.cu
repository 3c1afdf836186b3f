// mm_iq3_xxs.cu — matmul instances for IQ3_XXS (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_IQ3_XXS, iq3_xxs)
