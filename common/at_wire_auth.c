/* common/at_wire_auth.c -- the fleet key (files, ids), HMAC-SHA256 and session keys.
**
** The key file holds 64 hex characters (32 random bytes from getrandom) and a newline and
** must not be readable by group or others.  The session key of one connection is
** HMAC(fleet key, "at-fleet session v1" || client nonce || tracker nonce): both sides
** contribute a fresh nonce, so a recorded session's frames are useless in another one.
** docs/security.md describes the handshake and key rotation. */
#include "common/wire.h"

#include <errno.h>
#include <fcntl.h>
#include <mbedtls/md.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

/* HMAC-SHA256 (RFC 2104) through mbed TLS's md layer.  It fails only for a NULL digest
** type or out of memory, neither of which SHA-256 in a static build can be: on failure the
** output is all zeros, which verifies nothing (no peer's tag is zero by chance). */
void at_hmac_sha256(const uint8_t *key, size_t key_n, const void *p, size_t n, uint8_t out[32])
{
    static const uint8_t none = 0;
    const mbedtls_md_info_t *md = mbedtls_md_info_from_type(MBEDTLS_MD_SHA256);
    if (md == NULL ||
        mbedtls_md_hmac(md, key_n ? key : &none, key_n, n ? p : (const void *)&none, n, out) != 0)
        memset(out, 0, 32);
}

at_err at_wire_random(void *p, size_t n)
{
    uint8_t *b = p;
    while (n > 0) {
        ssize_t got = getrandom(b, n, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return AT_EIO;
        }
        b += got;
        n -= (size_t)got;
    }
    return AT_OK;
}

void at_wire_key_from_bytes(const uint8_t k[32], at_wire_key *out)
{
    static const char label[] = "at-fleet-key-id";
    uint8_t h[32];
    at_sha256 s;
    memcpy(out->k, k, 32);
    at_sha256_init(&s);
    at_sha256_update(&s, label, sizeof label - 1);
    at_sha256_update(&s, k, 32);
    at_sha256_final(&s, h);
    memcpy(out->id, h, AT_WIRE_KEYID_BYTES);
}

void at_wire_key_id_hex(const at_wire_key *key, char out[2 * AT_WIRE_KEYID_BYTES + 1])
{
    static const char hx[] = "0123456789abcdef";
    for (int i = 0; i < AT_WIRE_KEYID_BYTES; i++) {
        out[2 * i] = hx[key->id[i] >> 4];
        out[2 * i + 1] = hx[key->id[i] & 15];
    }
    out[2 * AT_WIRE_KEYID_BYTES] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

at_err at_wire_key_parse(const char *text, size_t n, at_wire_key *out)
{
    uint8_t k[32];
    size_t i = 0, got = 0;
    while (i < n && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r'))
        i++;
    for (; got < 64 && i < n; i++, got++) {
        int v = hexval(text[i]);
        if (v < 0) return AT_EINVAL;
        if (got % 2 == 0)
            k[got / 2] = (uint8_t)(v << 4);
        else
            k[got / 2] |= (uint8_t)v;
    }
    if (got != 64) return AT_EINVAL;
    for (; i < n; i++)
        if (text[i] != ' ' && text[i] != '\t' && text[i] != '\n' && text[i] != '\r')
            return AT_EINVAL;
    at_wire_key_from_bytes(k, out);
    memset(k, 0, sizeof k);
    return AT_OK;
}

at_err at_wire_key_load(const char *path, at_wire_key *out, char *errmsg, size_t n)
{
    char buf[256];
    struct stat st;
    ssize_t got;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    at_err err;

    if (fd < 0) {
        snprintf(errmsg, n, "cannot open key file %s: %s", path, strerror(errno));
        return AT_EIO;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(errmsg, n, "key file %s is not a regular file", path);
        close(fd);
        return AT_EIO;
    }
    if (st.st_mode & (S_IRWXG | S_IRWXO)) {
        snprintf(errmsg, n,
                 "key file %s may be read by others (mode %03o): run "
                 "'chmod 600 %s'",
                 path, (unsigned)(st.st_mode & 0777), path);
        close(fd);
        return AT_EAUTH;
    }
    got = read(fd, buf, sizeof buf);
    close(fd);
    if (got < 0) {
        snprintf(errmsg, n, "cannot read key file %s: %s", path, strerror(errno));
        return AT_EIO;
    }
    err = at_wire_key_parse(buf, (size_t)got, out);
    memset(buf, 0, sizeof buf);
    if (err != AT_OK)
        snprintf(errmsg, n,
                 "key file %s does not hold a key (64 hex characters, as "
                 "'tracker init-fleet' writes)",
                 path);
    return err;
}

at_err at_wire_key_generate(const char *path, at_wire_key *out, char *errmsg, size_t n)
{
    static const char hx[] = "0123456789abcdef";
    uint8_t k[32];
    char text[66];
    int fd;

    if (at_wire_random(k, sizeof k) != AT_OK) {
        snprintf(errmsg, n, "getrandom failed: %s", strerror(errno));
        return AT_EIO;
    }
    for (int i = 0; i < 32; i++) {
        text[2 * i] = hx[k[i] >> 4];
        text[2 * i + 1] = hx[k[i] & 15];
    }
    text[64] = '\n';
    text[65] = 0;
    fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        snprintf(errmsg, n, "cannot create key file %s: %s", path, strerror(errno));
        memset(k, 0, sizeof k);
        return errno == EEXIST ? AT_EEXIST : AT_EIO;
    }
    if (write(fd, text, 65) != 65 || fsync(fd) != 0) {
        snprintf(errmsg, n, "cannot write key file %s: %s", path, strerror(errno));
        close(fd);
        unlink(path);
        memset(k, 0, sizeof k);
        return AT_EIO;
    }
    close(fd);
    if (out) at_wire_key_from_bytes(k, out);
    memset(k, 0, sizeof k);
    memset(text, 0, sizeof text);
    return AT_OK;
}

void at_wire_session_init(at_wire_session *s, int is_client)
{
    memset(s, 0, sizeof *s);
    s->is_client = is_client;
}

void at_wire_session_key(at_wire_session *s, const at_wire_key *key,
                         const uint8_t client_nonce[AT_WIRE_NONCE_BYTES],
                         const uint8_t tracker_nonce[AT_WIRE_NONCE_BYTES])
{
    static const char label[] = "at-fleet session v1";
    uint8_t msg[sizeof label - 1 + 2 * AT_WIRE_NONCE_BYTES];
    memcpy(msg, label, sizeof label - 1);
    memcpy(msg + sizeof label - 1, client_nonce, AT_WIRE_NONCE_BYTES);
    memcpy(msg + sizeof label - 1 + AT_WIRE_NONCE_BYTES, tracker_nonce, AT_WIRE_NONCE_BYTES);
    at_hmac_sha256(key->k, 32, msg, sizeof msg, s->skey);
    s->keyed = 1;
}
