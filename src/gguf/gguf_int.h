/* gguf_int.h — private to the GGUF module (gguf.c: parser and index; gguf_meta.c: getters and
 * array readers; gguf_write.c: the writer). Not part of the public API in gguf.h. */
#ifndef RL_GGUF_INT_H
#define RL_GGUF_INT_H

#include <stdint.h>

#include "gguf/gguf.h"

/* Wire size of a fixed-size value type; 0 for string / array / unknown. */
uint64_t gguf_fixed_size(uint32_t t);
/* Decode one fixed-size scalar at p (validated memory) into v. */
void gguf_decode_scalar(gguf_type t, const uint8_t *p, gguf_value *v);

#endif
