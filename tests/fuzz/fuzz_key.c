/* tests/fuzz/fuzz_key.c -- libFuzzer target: the fleet key file parser. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    at_wire_key k;
    int hex = 0;
    if (at_wire_key_parse((const char *)data, size, &k) != AT_OK) return 0;
    for (size_t i = 0; i < size; i++) {
        char c = (char)data[i];
        hex += (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    }
    if (hex != 64) abort(); /* a key is exactly 64 hex digits, with nothing but blanks around */
    return 0;
}
