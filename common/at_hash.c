/* common/at_hash.c -- SHA-256 through mbed TLS (the library nng already links for TLS, and
** the aarch64 agent statically), and a fast 64-bit hash for in-memory tables.
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

/* In-memory hashing (tables, and the agent's check that a kernel left its inputs alone, over
** megabytes per job): 64-bit words in four independent lanes, so that the multiplies
** overlap, then the tail and MurmurHash3's finaliser.  FNV-1a, a byte at a time, ran at
** 0.72 GB/s here (Zen 3, a 16 MB buffer); this at 6.2 GB/s.  Values differ between byte
** orders: they are never stored or sent. */
static uint64_t rd64(const uint8_t *p)
{
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return w;
}

static uint64_t mix(uint64_t h, uint64_t w)
{
    h ^= w * 0x9e3779b97f4a7c15ull;
    h = h << 31 | h >> 33;
    return h * 0xc2b2ae3d27d4eb4full;
}

uint64_t at_hash64(const void *data, size_t n)
{
    const uint8_t *p = data;
    uint64_t a = 0xcbf29ce484222325ull, b = 0x84222325cbf29ce4ull, c = 0x100000001b3ull,
             d = 0x9e3779b97f4a7c15ull, h, w = 0;
    size_t len = n;
    for (; n >= 32; p += 32, n -= 32) {
        a = mix(a, rd64(p));
        b = mix(b, rd64(p + 8));
        c = mix(c, rd64(p + 16));
        d = mix(d, rd64(p + 24));
    }
    h = mix(mix(mix(mix((uint64_t)len, a), b), c), d);
    for (; n >= 8; p += 8, n -= 8)
        h = mix(h, rd64(p));
    if (n > 0) {
        memcpy(&w, p, n);
        h = mix(h, w);
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ h >> 33;
}
