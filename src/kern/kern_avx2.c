/* kern_avx2.c — the x86 kernels of kern_x86.h compiled for AVX2 + FMA + F16C (see kern.h). */
#define KERN_FILL kern_fill_avx2
#include "kern/kern_x86.h"
