/* common/at_hash.c -- SHA-256 through mbed TLS (the library nng already links for TLS, and
** the aarch64 agent statically), and FNV-1a for in-memory tables.
**
** SHA-256 names workload keys, records, cost-model blobs and content hashes, and carries the
** fleet's HMAC (at_wire_auth.c): the digests are the standard ones, so stores and peers made
** with the project's own implementation before (common/at_sha256.c until 2026-12) read the
** same (tests/common/test_common.c and tests/fleet/test_wire.c hold its vectors). */
#include "common.h"

#include <mbedtls/version.h>
#include <string.h>

#if MBEDTLS_VERSION_MAJOR >= 3
#define SHA256_STARTS mbedtls_sha256_starts
#define SHA256_UPDATE mbedtls_sha256_update
#define SHA256_FINISH mbedtls_sha256_finish
#else
#define SHA256_STARTS mbedtls_sha256_starts_ret
#define SHA256_UPDATE mbedtls_sha256_update_ret
#define SHA256_FINISH mbedtls_sha256_finish_ret
#endif

/* mbed TLS's software SHA-256 cannot fail; its return codes are for hardware back ends. */
void at_sha256_init(at_sha256 *s)
{
    mbedtls_sha256_init(&s->c);
    (void)SHA256_STARTS(&s->c, 0);
}

void at_sha256_update(at_sha256 *s, const void *p, size_t n)
{
    if (n) (void)SHA256_UPDATE(&s->c, p, n);
}

void at_sha256_final(at_sha256 *s, uint8_t out[32])
{
    (void)SHA256_FINISH(&s->c, out);
    mbedtls_sha256_free(&s->c);
}

void at_sha256_hex(const void *p, size_t n, size_t n_bytes, char *hex)
{
    static const char digits[] = "0123456789abcdef";
    at_sha256 s;
    uint8_t d[32];
    size_t i;
    if (n_bytes > 32) n_bytes = 32;
    at_sha256_init(&s);
    at_sha256_update(&s, p, n);
    at_sha256_final(&s, d);
    for (i = 0; i < n_bytes; i++) {
        hex[2 * i] = digits[d[i] >> 4];
        hex[2 * i + 1] = digits[d[i] & 15];
    }
    hex[2 * n_bytes] = 0;
}

uint64_t at_hash64(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    while (n--) {
        h ^= *p++;
        h *= 0x100000001b3ull;
    }
    return h;
}
