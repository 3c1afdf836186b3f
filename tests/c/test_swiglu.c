/* test_swiglu.c — the shared exp and SiLU of src/base/swiglu.h against double-precision libm:
 *   - swiglu_exp within 2 ulp of e^x (the header's claim) at ~2.3 million floats spread over its
 *     whole finite range (every 997th bit pattern from -104 to 88.72, both signs), subnormal results
 *     included (their ulp is 2^-149);
 *   - the edges: NaN stays NaN, +inf past 88.75 (e^88.75 > FLT_MAX), 0 below -104, e^0 = 1 exactly;
 *   - swiglu_silu within 4 ulp of x / (1 + e^-x) in double for x >= -88.72 (one more rounding for the add and
 * the divide: 2 ulp of the exp, then at most half an ulp each, 4 leaves room without hiding a wrong constant,
 * which costs thousands of ulp), and swiglu(g, u) == swiglu_silu(g) * u. The bit-for-bit agreement with the
 * GPU is tests/cuda/test_cuda_ops.c's. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "base/swiglu.h"

static float from_bits(uint32_t b) {
    float f;
    memcpy(&f, &b, sizeof f);
    return f;
}

static uint32_t to_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, sizeof b);
    return b;
}

/* |got - want| in units of the float spacing at want (2^-149 for subnormal results). */
static double ulps(float got, double want) {
    const double a = fabs(want);
    int e;
    frexp(a, &e); /* a = m * 2^e, m in [0.5, 1) */
    double ulp = ldexp(1.0, e - 24);
    if (ulp < ldexp(1.0, -149)) ulp = ldexp(1.0, -149);
    return fabs((double)got - want) / ulp;
}

/* Every 997th float from bit pattern lo to hi: exp where e^x is finite (x <= 88.72), silu where e^-x
 * is (x >= -88.72: below, e^-x is +inf and silu returns -0 where the true value is a tiny normal
 * number, as libm's expf would give too). */
static void sweep(uint32_t lo, uint32_t hi, double *worst_exp, double *worst_silu, float *at_exp,
                  float *at_silu) {
    for (uint64_t b = lo; b <= hi; b += 997) {
        const float x = from_bits((uint32_t)b);
        if (x <= 88.72f) {
            const double ue = ulps(swiglu_exp(x), exp((double)x));
            if (ue > *worst_exp) *worst_exp = ue, *at_exp = x;
        }
        if (x < -88.72f) continue;
        const double s = (double)x / (1.0 + exp(-(double)x));
        const double us = ulps(swiglu_silu(x), s);
        if (us > *worst_silu) *worst_silu = us, *at_silu = x;
    }
}

int main(void) {
    double we = 0, ws = 0;
    float ae = 0, as = 0;
    sweep(0, to_bits(88.75f), &we, &ws, &ae, &as);            /* +0 .. 88.75 */
    sweep(0x80000000u, to_bits(-104.0f), &we, &ws, &ae, &as); /* -0 .. -104 */
    printf("  swiglu_exp: worst %.3f ulp (x = %.9g); swiglu_silu: worst %.3f ulp (x = %.9g)\n", we, ae, ws,
           as);
    CHECK(we <= 2.0, "swiglu_exp is %.3f ulp from e^x at x = %.9g", we, ae);
    CHECK(ws <= 4.0, "swiglu_silu is %.3f ulp from x / (1 + e^-x) at x = %.9g", ws, as);

    CHECK(isnan(swiglu_exp(NAN)), "exp(NaN) = %g", swiglu_exp(NAN));
    CHECK(isinf(swiglu_exp(88.76f)) && swiglu_exp(88.76f) > 0, "exp(88.76) = %g", swiglu_exp(88.76f));
    CHECK(isinf(swiglu_exp(INFINITY)), "exp(inf) = %g", swiglu_exp(INFINITY));
    CHECK(swiglu_exp(88.7f) < INFINITY && swiglu_exp(88.7f) > 3.0e38f, "exp(88.7) = %g", swiglu_exp(88.7f));
    CHECK(swiglu_exp(-104.5f) == 0.0f && swiglu_exp(-INFINITY) == 0.0f, "exp(-104.5) = %g",
          swiglu_exp(-104.5f));
    CHECK(swiglu_exp(-103.0f) > 0.0f, "exp(-103) = %g (a subnormal, not 0)", swiglu_exp(-103.0f));
    CHECK(swiglu_exp(0.0f) == 1.0f && swiglu_exp(-0.0f) == 1.0f, "exp(0) = %.9g", swiglu_exp(0.0f));
    CHECK(swiglu_silu(0.0f) == 0.0f, "silu(0) = %g", swiglu_silu(0.0f));
    CHECK(swiglu_silu(100.0f) == 100.0f, "silu(100) = %.9g", swiglu_silu(100.0f));
    CHECK(swiglu_silu(-200.0f) == -0.0f, "silu(-200) = %g", swiglu_silu(-200.0f));
    int same = 0;
    for (int i = 0; i < 1000; i++) {
        const float g = -12.0f + 0.0247f * (float)i, u = 0.75f - 0.0013f * (float)i;
        same += to_bits(swiglu(g, u)) == to_bits(swiglu_silu(g) * u);
    }
    CHECK(same == 1000, "swiglu(g, u) != swiglu_silu(g) * u at %d of 1000", 1000 - same);
    return check_done("test_swiglu");
}
