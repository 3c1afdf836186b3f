// mm_mxfp4.cu — matmul instances for MXFP4 (matmul.cuh); one file per type so they compile in parallel.
#include "cuda/matmul.cuh"

MM_INSTANCE(T_MXFP4, mxfp4)
