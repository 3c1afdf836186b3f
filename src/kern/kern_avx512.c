/* kern_avx512.c — the x86 kernels of kern_x86.h compiled for AVX-512 F/BW/VL/DQ + VNNI:
 * 512-bit float kernels, the 512-bit quantised mat-vecs of kern_x86_512.h, VNNI for the int8
 * dots, EVEX encodings elsewhere (see kern.h). */
#define KERN_FILL kern_fill_avx512
#include "kern/kern_x86.h"
