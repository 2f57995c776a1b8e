/* tests/fuzz/fuzz_session.c -- libFuzzer target: frames against authenticated sessions on
** both ends.  The first byte chooses the end and whether the fuzzer's payload gets a correct
** MAC (so that sequence numbers, types before and after authentication and every body are
** reached, not only the MAC check). */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static at_wire_key key;
    static int init;
    uint8_t cn[32], tn[32], tag[32], *frame;
    at_wire_session s;
    at_wire_msg m;
    char err[256];
    int is_client, sign, authed;
    if (!init) {
        uint8_t k[32];
        memset(k, 0x5a, sizeof k);
        at_wire_key_from_bytes(k, &key);
        init = 1;
    }
    if (size < 2) return 0;
    is_client = data[0] & 1;
    sign = (data[0] >> 1) & 1;
    authed = (data[0] >> 2) & 1;
    data++;
    size--;
    memset(cn, 1, sizeof cn);
    memset(tn, 2, sizeof tn);
    at_wire_session_init(&s, is_client);
    at_wire_session_key(&s, &key, cn, tn);
    s.authed = authed;
    s.recv_seq = (data[0 % (size ? size : 1)] & 7);
    if ((frame = malloc(size + 32)) == NULL) return 0;
    memcpy(frame, data, size);
    if (sign) { /* a correct tag for this payload, from the other end's direction */
        char dir = is_client ? 'T' : 'C';
        uint8_t *msg = malloc(size + 1);
        if (msg == NULL) {
            free(frame);
            return 0;
        }
        msg[0] = (uint8_t)dir;
        memcpy(msg + 1, data, size);
        at_hmac_sha256(s.skey, 32, msg, size + 1, tag);
        memcpy(frame + size, tag, 32);
        free(msg);
        size += 32;
    }
    if (at_wire_decode(&s, frame, size, &m, err, sizeof err) == AT_OK &&
        (m.type == AT_WIRE_T_SBX_BATCH || m.type == AT_WIRE_T_SBX_EVENT))
        abort(); /* sandbox messages never pass a network session */
    at_wire_msg_fini(&m);
    free(frame);
    return 0;
}
