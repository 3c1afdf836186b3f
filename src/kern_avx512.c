/* kern_avx512.c — the x86 kernels of kern_x86.h compiled for AVX-512 F/BW/VL/DQ + VNNI:
 * 512-bit float kernels, VNNI dpbusd for the signed int8 dot, EVEX encodings elsewhere
 * (see kern.h). */
#define KERN_FILL kern_fill_avx512
#include "kern_x86.h"
