/* test_slot_plan.c — the slot estimate of `redlite serve --parallel auto` and `redlite info`
 * (serve/slot_plan.h): what a slot costs on the host and on a device, and how many fit: the first
 * slot plus what 80 % of the free host memory (and 90 % of the free device memory) holds, at least
 * one, at most SLOT_PLAN_AUTO_MAX. */
#include "base/common.h"
#include "check.h"
#include "serve/slot_plan.h"

#define MIB (1ull << 20)

int main(void) {
    slot_cost c = {.ctx_bytes = 100 * MIB, .rec_bytes = 2 * MIB, .ram_bytes = 30 * MIB, .max_checkpoints = 8};
    /* host: context + (8 checkpoints + the resume point) recurrent states + a RAM-tier state */
    CHECK(slot_plan_host_bytes(&c) == 148 * MIB, "host bytes %llu",
          (unsigned long long)slot_plan_host_bytes(&c));
    CHECK(slot_plan_bytes(&c) == 148 * MIB, "total bytes");
    /* room for exactly two more: 80 % of 370 MiB = 296 MiB = 2 x 148 */
    CHECK(slot_plan_fit(&c, 370 * MIB, 0) == 3, "two more fit: %d", slot_plan_fit(&c, 370 * MIB, 0));
    CHECK(slot_plan_fit(&c, 369 * MIB, 0) == 2, "one byte short of the second: %d",
          slot_plan_fit(&c, 369 * MIB, 0));
    CHECK(slot_plan_fit(&c, 0, 0) == 1, "nothing free: the first slot only");
    CHECK(slot_plan_fit(&c, 1ull << 40, 0) == SLOT_PLAN_AUTO_MAX, "plenty: capped at %d", SLOT_PLAN_AUTO_MAX);
    /* on a device the context is device memory: the host part shrinks, the device bounds too */
    c.device = true;
    CHECK(slot_plan_host_bytes(&c) == 48 * MIB && slot_plan_bytes(&c) == 148 * MIB, "device split");
    CHECK(slot_plan_fit(&c, 1ull << 40, 250 * MIB) == 3, "90 %% of 250 MiB holds two contexts: %d",
          slot_plan_fit(&c, 1ull << 40, 250 * MIB));
    CHECK(slot_plan_fit(&c, 100 * MIB, 1ull << 40) == 2, "the host part bounds too: %d",
          slot_plan_fit(&c, 100 * MIB, 1ull << 40));
    CHECK(slot_plan_fit(&c, 1ull << 40, 0) == 1, "no device memory left: one slot");
    /* a free slot (nothing to count) is not a division by zero */
    slot_cost z = {0};
    CHECK(slot_plan_fit(&z, 0, 0) == SLOT_PLAN_AUTO_MAX, "zero cost");
    CHECK(rl_mem_available() > 0, "MemAvailable read from /proc/meminfo");
    return check_done("test_slot_plan");
}
