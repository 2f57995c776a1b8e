/* tests/fuzz/fuzz_wire.c -- libFuzzer target: at_wire_decode on any bytes, without a
** session (every message type, the sandbox's included).  A frame that decodes must encode
** again, and the encoding must decode to the same type. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "common/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    at_wire_msg m, again;
    at_buf b;
    char err[256];
    if (at_wire_decode(NULL, data, size, &m, err, sizeof err) != AT_OK) {
        at_wire_msg_fini(&m);
        return 0;
    }
    at_buf_init(&b);
    if (at_wire_encode(NULL, &m, &b) == AT_OK) {
        if (at_wire_decode(NULL, b.data, b.len, &again, err, sizeof err) != AT_OK ||
            again.type != m.type)
            abort(); /* what we accept we must be able to send */
        at_wire_msg_fini(&again);
    }
    at_buf_fini(&b);
    at_wire_msg_fini(&m);
    return 0;
}
