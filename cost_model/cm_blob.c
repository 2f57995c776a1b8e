/* cost_model/cm_blob.c -- a model as bytes, in the records store, and pre-training.
**
** Blob layout (little-endian), CM_BLOB_FORMAT:
**    0  "ATCM"                    magic
**    4  u32 blob version          BLOB_VERSION
**    8  u32 feature version       CM_FEATURE_VERSION of the build that trained it
**   12  u32 number of features    CM_N_FEATS of that build
**   16  u32 objective             cm_objective
**   20  u32 number of boosters    1..CM__MAX_BASE; their scores add up
**   24  u64 records               records the model was trained on
**   32  u64 payload bytes         sum of the boosters' sizes
**   40  8 bytes                   first 8 bytes of SHA-256 of bytes [0, 40) and the payload
**   48  for each booster: u64 size, then XGBoost's UBJSON model of that size
** Anything that does not check out is refused before XGBoost sees it: a wrong magic,
** size or checksum is "corrupt" (AT_ECORRUPT); another blob or feature version, or another
** number of features, is "mismatched" (AT_EVERSION). */
#include "cost_model/cost_model_int.h"

#include <stdio.h>
#include <string.h>

#define BLOB_VERSION 1
#define HEADER 48

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 0; i < 4; i++)
        v |= (uint32_t)p[i] << (8 * i);
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void checksum(const uint8_t *blob, size_t n, uint8_t out[8])
{
    at_sha256 s;
    uint8_t h[32];
    at_sha256_init(&s);
    at_sha256_update(&s, blob, 40);
    at_sha256_update(&s, blob + HEADER, n - HEADER);
    at_sha256_final(&s, h);
    memcpy(out, h, 8);
}

at_err cm_model_save(const cm_model *m, void **blob, size_t *n)
{
    BoosterHandle hs[CM__MAX_BASE + 1];
    const char *raw[CM__MAX_BASE + 1];
    bst_ulong len[CM__MAX_BASE + 1];
    char *copies[CM__MAX_BASE + 1];
    int nb = 0;
    size_t total = HEADER;
    uint8_t *b, *p;
    at_err err = AT_OK;
    *blob = NULL;
    *n = 0;
    for (int i = 0; i < cm__model_n_base(m); i++)
        hs[nb++] = cm__model_base(m, i);
    if (cm__model_boost(m))
        hs[nb++] = cm__model_boost(m);
    if (nb == 0)
        return AT_EINVAL; /* warm-up: nothing learned yet */
    if (nb > CM__MAX_BASE) {
        at_log_warn("cost model: a chain of %d boosters is longer than a blob holds (%d); "
                    "pre-train a new model from the store instead", nb, CM__MAX_BASE);
        return AT_EINVAL;
    }
    memset(copies, 0, sizeof copies);
    for (int i = 0; i < nb && err == AT_OK; i++) {
        /* the buffer belongs to the booster until its next call: copy it now */
        if (XGBoosterSaveModelToBuffer(hs[i], "{\"format\": \"ubj\"}", &len[i], &raw[i]) != 0) {
            err = cm__xgb_fail(NULL, 0, "saving a model");
            break;
        }
        if ((copies[i] = at_malloc(len[i] ? len[i] : 1)) == NULL) {
            err = AT_ENOMEM;
            break;
        }
        memcpy(copies[i], raw[i], len[i]);
        total += 8 + len[i];
    }
    if (err == AT_OK && (b = at_malloc(total)) == NULL)
        err = AT_ENOMEM;
    if (err != AT_OK) {
        for (int i = 0; i < nb; i++)
            at_free(copies[i]);
        return err;
    }
    memcpy(b, "ATCM", 4);
    put32(b + 4, BLOB_VERSION);
    put32(b + 8, CM_FEATURE_VERSION);
    put32(b + 12, CM_N_FEATS);
    put32(b + 16, (uint32_t)cm_model_params(m)->objective);
    put32(b + 20, (uint32_t)nb);
    put64(b + 24, (uint64_t)cm_model_n_records(m));
    put64(b + 32, (uint64_t)(total - HEADER));
    p = b + HEADER;
    for (int i = 0; i < nb; i++) {
        put64(p, len[i]);
        memcpy(p + 8, copies[i], len[i]);
        p += 8 + len[i];
        at_free(copies[i]);
    }
    checksum(b, total, b + 40);
    *blob = b;
    *n = total;
    return AT_OK;
}

#define FAIL(code, ...)                                                                    \
    do {                                                                                   \
        if (errmsg && errmsg_size)                                                         \
            snprintf(errmsg, errmsg_size, __VA_ARGS__);                                    \
        err = code;                                                                        \
        goto fail;                                                                         \
    } while (0)

at_err cm_model_load(cm_model *m, const void *blob, size_t n, char *errmsg, size_t errmsg_size)
{
    const uint8_t *b = blob, *p;
    BoosterHandle hs[CM__MAX_BASE];
    int nb = 0, want;
    uint8_t sum[8];
    uint64_t payload;
    at_err err = AT_OK;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if (blob == NULL || n < HEADER || memcmp(b, "ATCM", 4) != 0)
        FAIL(AT_ECORRUPT, "corrupt cost model: not a cost-model blob (%zu bytes, no ATCM "
             "header)", n);
    if (get32(b + 4) != BLOB_VERSION)
        FAIL(AT_EVERSION, "mismatched cost model: blob version %u, this build reads version %d",
             get32(b + 4), BLOB_VERSION);
    if (get32(b + 8) != CM_FEATURE_VERSION || get32(b + 12) != CM_N_FEATS)
        FAIL(AT_EVERSION, "mismatched cost model: trained on feature version %u (%u features), "
             "this build computes version %d (%d features)", get32(b + 8), get32(b + 12),
             CM_FEATURE_VERSION, CM_N_FEATS);
    want = (int)get32(b + 20);
    payload = get64(b + 32);
    if (want < 1 || want > CM__MAX_BASE)
        FAIL(AT_ECORRUPT, "corrupt cost model: %d boosters", want);
    if (payload != n - HEADER)
        FAIL(AT_ECORRUPT, "corrupt cost model: %zu bytes, the header says %llu "
             "(truncated or padded)", n, (unsigned long long)(payload + HEADER));
    checksum(b, n, sum);
    if (memcmp(sum, b + 40, 8) != 0)
        FAIL(AT_ECORRUPT, "corrupt cost model: checksum mismatch");
    p = b + HEADER;
    for (int i = 0; i < want; i++) {
        uint64_t len;
        bst_ulong nf = 0;
        if ((size_t)(b + n - p) < 8 || (len = get64(p)) > (uint64_t)(b + n - p - 8))
            FAIL(AT_ECORRUPT, "corrupt cost model: booster %d overruns the blob", i);
        if (XGBoosterCreate(NULL, 0, &hs[nb]) != 0) {
            err = cm__xgb_fail(errmsg, errmsg_size, "creating a booster");
            goto fail;
        }
        nb++;
        if (XGBoosterLoadModelFromBuffer(hs[nb - 1], p + 8, (bst_ulong)len) != 0) {
            const char *e = XGBGetLastError();
            FAIL(AT_ECORRUPT, "corrupt cost model: XGBoost refuses booster %d: %.200s", i,
                 e ? e : "?");
        }
        if (XGBoosterGetNumFeature(hs[nb - 1], &nf) != 0 || nf != CM_N_FEATS)
            FAIL(AT_EVERSION, "mismatched cost model: booster %d has %llu features, this "
                 "build computes %d", i, (unsigned long long)nf, CM_N_FEATS);
        p += 8 + len;
    }
    if (p != b + n)
        FAIL(AT_ECORRUPT, "corrupt cost model: %zu bytes after the last booster",
             (size_t)(b + n - p));
    if (cm_model_params(m)->n_threads > 0) {
        char v[32];
        snprintf(v, sizeof v, "%d", cm_model_params(m)->n_threads);
        for (int i = 0; i < nb; i++)
            XGBoosterSetParam(hs[i], "nthread", v);
    }
    if ((err = cm__model_set_base(m, hs, nb, (int64_t)get64(b + 24))) != AT_OK)
        goto fail;
    return AT_OK;
fail:
    for (int i = 0; i < nb; i++)
        XGBoosterFree(hs[i]);
    return err;
}

at_err cm_model_save_store(const cm_model *m, rec_store *st, const char *target, char *errmsg,
                           size_t errmsg_size)
{
    void *blob;
    size_t n;
    at_err err;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    if ((err = cm_model_save(m, &blob, &n)) != AT_OK) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "%s", err == AT_EINVAL ? "the model has learned "
                     "nothing yet (warm-up): nothing to save" : "cannot serialise the model");
        return err;
    }
    err = rec_model_save(st, target, CM_BLOB_FORMAT, CM_FEATURE_VERSION, cm_model_n_records(m),
                         blob, n, NULL);
    if (err != AT_OK && errmsg && errmsg_size)
        snprintf(errmsg, errmsg_size, "saving the model: %s", rec_store_errmsg(st));
    at_free(blob);
    return err;
}

at_err cm_model_load_store(cm_model *m, rec_store *st, const char *target, char *errmsg,
                           size_t errmsg_size)
{
    void *blob = NULL;
    size_t n = 0;
    char format[32];
    int fv = 0;
    int64_t nrec = 0;
    at_err err;
    if (errmsg && errmsg_size)
        errmsg[0] = 0;
    err = rec_model_load(st, target, &blob, &n, format, &fv, &nrec);
    if (err != AT_OK) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, err == AT_ENOTFOUND
                                              ? "the store has no cost model for target '%s'"
                                              : "reading the cost model for target '%s': %s",
                     target, rec_store_errmsg(st));
        return err;
    }
    if (strcmp(format, CM_BLOB_FORMAT) != 0) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "mismatched cost model for target '%s': format '%s', "
                     "this build reads '%s'", target, format, CM_BLOB_FORMAT);
        err = AT_EVERSION;
    } else if (fv != CM_FEATURE_VERSION) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "mismatched cost model for target '%s': trained on "
                     "feature version %d, this build computes version %d", target, fv,
                     CM_FEATURE_VERSION);
        err = AT_EVERSION;
    } else if ((err = cm_model_load(m, blob, n, errmsg, errmsg_size)) != AT_OK && errmsg &&
               errmsg_size) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", errmsg);
        snprintf(errmsg, errmsg_size, "the model of target '%s': %s", target, msg);
    }
    at_free(blob);
    return err;
}

int cm_model_load_or_scratch(cm_model *m, rec_store *st, const char *target)
{
    char msg[512];
    at_err err = cm_model_load_store(m, st, target, msg, sizeof msg);
    if (err == AT_OK) {
        at_log_info("cost model: loaded the model of target '%s' (trained on %lld records)",
                    target, (long long)cm_model_n_records(m));
        return 1;
    }
    if (err == AT_ENOTFOUND)
        at_log_info("cost model: %s; training from scratch", msg);
    else
        at_log_warn("cost model: %s; ignoring it and training from scratch", msg);
    return 0;
}

at_err cm_model_pretrain(cm_model *m, rec_store *st, const rec_filter *f, cm_load_stats *stats,
                         char *errmsg, size_t errmsg_size)
{
    cm_data *d;
    at_err err;
    if ((err = cm_data_new(&d)) != AT_OK)
        return err;
    err = cm_data_load_store(d, st, f, stats, errmsg, errmsg_size);
    if (err == AT_OK && cm_data_count(d) == 0) {
        if (errmsg && errmsg_size)
            snprintf(errmsg, errmsg_size, "the store has no usable record to pre-train on");
        err = AT_ENOTFOUND;
    }
    if (err == AT_OK)
        err = cm_model_fit(m, d, errmsg, errmsg_size);
    cm_data_free(d);
    return err;
}
