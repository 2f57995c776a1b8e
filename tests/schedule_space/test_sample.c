/* tests/schedule_space/test_sample.c -- the tile-size sampler (ss__sample_lengths).
**
** Tile sizes are drawn uniformly from the ordered factorizations of a loop's extent whose
** innermost factor is bounded (as Ansor does).  The sampler counts the factorizations of
** every divisor of the extent once; these tests hold it to a plain recursive count written
** here (the same draw for the same seed, so a run replays exactly as before the table), to
** uniformity (chi-square over every factorization), to the cap, and to extents with many
** divisors or large powers of two, which the recursive count took seconds on. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>
#include <time.h>

#include "schedule_space/schedule_space.h"
#include "schedule_space/ss_int.h"

/* ---- the reference: a plain recursive count over every d = 1..n ---- */

static int64_t ref_count(int64_t n, int k, int64_t cap)
{
    int64_t c = 0;
    if (k == 1)
        return n <= cap ? 1 : 0;
    for (int64_t d = 1; d <= n; d++)
        if (n % d == 0)
            c += ref_count(n / d, k - 1, cap);
    return c;
}

static void ref_nth(int64_t n, int k, int64_t cap, int64_t idx, int64_t *out)
{
    if (k == 1) {
        out[0] = n;
        return;
    }
    for (int64_t d = 1; d <= n; d++) {
        int64_t c;
        if (n % d != 0)
            continue;
        c = ref_count(n / d, k - 1, cap);
        if (idx < c) {
            out[0] = d;
            ref_nth(n / d, k - 1, cap, idx, out + 1);
            return;
        }
        idx -= c;
    }
}

static void check_lengths(int64_t extent, int n, int64_t cap, const int64_t *len)
{
    int64_t p = 1;
    for (int i = 0; i < n; i++) {
        if (len[i] < 1)
            fail_msg("extent %lld: length %d is %lld", (long long)extent, i, (long long)len[i]);
        p *= len[i];
    }
    if (extent % p != 0)
        fail_msg("extent %lld: the lengths multiply to %lld, not a divisor", (long long)extent,
                 (long long)p);
    if (len[n - 1] > cap)
        fail_msg("extent %lld: innermost %lld over the cap %lld", (long long)extent,
                 (long long)len[n - 1], (long long)cap);
}

/* The same draws as the reference for the same seed, on extents and caps of every kind. */
static void test_same_draws_as_reference(void **unused)
{
    static const int64_t extents[] = {1, 2, 7, 12, 56, 64, 96, 100, 210, 1024};
    static const int64_t caps[] = {1, 4, 16, 64};
    (void)unused;
    for (size_t e = 0; e < sizeof extents / sizeof *extents; e++)
        for (int n = 1; n <= 4; n++)
            for (size_t c = 0; c < sizeof caps / sizeof *caps; c++) {
                at_rng a, b;
                int64_t len[SS_MAX_SPLIT], want[SS_MAX_SPLIT + 1], total;
                total = ref_count(extents[e], n + 1, caps[c]);
                at_rng_seed(&a, 100 + (uint64_t)e);
                at_rng_seed(&b, 100 + (uint64_t)e);
                for (int i = 0; i < 50; i++) {
                    int ok = ss__sample_lengths(extents[e], n, caps[c], &a, len);
                    if (total == 0) {
                        assert_int_equal(ok, 0);
                        break;
                    }
                    assert_int_equal(ok, 1);
                    ref_nth(extents[e], n + 1, caps[c],
                            (int64_t)at_rng_below(&b, (uint64_t)total), want);
                    for (int k = 0; k < n; k++)
                        if (len[k] != want[k + 1])
                            fail_msg("extent %lld into %d, cap %lld, draw %d: length %d is %lld, "
                                     "the reference says %lld", (long long)extents[e], n + 1,
                                     (long long)caps[c], i, k, (long long)len[k],
                                     (long long)want[k + 1]);
                    check_lengths(extents[e], n, caps[c], len);
                }
            }
}

/* 64 into 4 loops: 84 ordered factorizations (2^6 into 4 parts: C(9,3)), each drawn about
** 20000 / 84 times; chi-square over the 84 cells stays far below 83 + 6 sd. */
static void test_uniform(void **unused)
{
    enum { N = 20000, CELLS = 7 * 7 * 7 };
    static int hits[CELLS];
    at_rng rng;
    int n_cells = 0;
    double chi = 0, expect;
    (void)unused;
    memset(hits, 0, sizeof hits);
    at_rng_seed(&rng, 9);
    for (int i = 0; i < N; i++) {
        int64_t len[3];
        int l[3];
        assert_int_equal(ss__sample_lengths(64, 3, 64, &rng, len), 1);
        check_lengths(64, 3, 64, len);
        for (int k = 0; k < 3; k++)
            for (l[k] = 0; (1 << l[k]) < len[k]; l[k]++)
                ;
        hits[(l[0] * 7 + l[1]) * 7 + l[2]]++;
    }
    for (int a = 0; a < 7; a++)
        for (int b = 0; a + b < 7; b++)
            for (int c = 0; a + b + c < 7; c++)
                n_cells++;
    assert_int_equal(n_cells, 84);
    assert_int_equal(ref_count(64, 4, 64), 84);
    expect = (double)N / n_cells;
    for (int a = 0; a < 7; a++)
        for (int b = 0; b < 7; b++)
            for (int c = 0; c < 7; c++) {
                int h = hits[(a * 7 + b) * 7 + c];
                if (a + b + c >= 7) {
                    assert_int_equal(h, 0); /* not a factorization of 64 */
                    continue;
                }
                chi += (h - expect) * (h - expect) / expect;
            }
    if (chi > 83 + 6 * 12.9)
        fail_msg("the draws are not uniform: chi-square %.1f over 84 cells", chi);
}

/* Extents the recursive count could not afford: 2^30 into 8 loops, 720720 (240 divisors)
** into 8, a prime, each draw well-formed and the whole test fast. */
static void test_large_extents(void **unused)
{
    static const int64_t extents[] = {(int64_t)1 << 30, 720720, 2147483647, 4096 * 4096};
    clock_t t0 = clock();
    at_rng rng;
    (void)unused;
    at_rng_seed(&rng, 4);
    for (size_t e = 0; e < sizeof extents / sizeof *extents; e++)
        for (int i = 0; i < 200; i++) {
            int64_t len[SS_MAX_SPLIT];
            int n = 1 + i % (SS_MAX_SPLIT - 1);
            assert_int_equal(ss__sample_lengths(extents[e], n, 64, &rng, len), 1);
            check_lengths(extents[e], n, 64, len);
        }
    /* about 0.1 s in the sanitizer build; the recursive count took minutes */
    if ((double)(clock() - t0) / CLOCKS_PER_SEC > 20)
        fail_msg("800 draws took %.1f s", (double)(clock() - t0) / CLOCKS_PER_SEC);
}

/* Mutating the tile sizes of a prime extent of ten million (issue 14, item 4): each
** mutation looked for divisors by trying every number up to the extent (57 s before the
** first trial); by pairs up to its square root it is instant.  And a fused loop may not run
** more than 2^31 - 1 times (loop variables are int32): two reduce axes of 65536 stay
** apart. */
static void test_prime_and_huge_extents(void **unused)
{
    static const char *const texts[] = {
        "input A[10000019] float32\nB[i:1] = sum[k:10000019](A[k])\n",
        "input A[65536] float32\nB[i:1] = sum[k:65536, j:65536](A[k] * A[j])\n",
    };
    clock_t t0 = clock();
    ss_hw hw;
    at_rng rng;
    (void)unused;
    ss_hw_cpu(&hw, 2, 32, 32 << 10, 512 << 10);
    at_rng_seed(&rng, 9);
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        ss_dag *dag;
        ss_space *sp;
        char err[256];
        int n_ok = 0, n_sampled = 0;
        assert_int_equal(ss_dag_parse(texts[t], strlen(texts[t]), &dag, err, sizeof err), AT_OK);
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        for (int i = 0; i < 20; i++) {
            ss_state *st = NULL, *m = NULL;
            if (ss_space_sample(sp, &rng, &st) != AT_OK)
                continue;
            n_sampled++;
            for (int k = 0; k < 50; k++) {
                at_err e = ss_space_mutate(sp, st, &rng, SS_MUT_TILE_SIZE, &m);
                assert_true(e == AT_OK || e == AT_ESCHED);
                if (e == AT_OK) {
                    n_ok++;
                    ss_state_free(m);
                }
            }
            /* no loop of the state runs 2^31 times or more */
            for (int s = 0; s < st->n_stages; s++)
                for (int l = 0; l < st->stages[s].n_leaves; l++)
                    assert_true(st->stages[s].ivars[st->stages[s].leaves[l]].extent <
                                2147483648ll);
            ss_state_free(st);
        }
        /* some draws are programs; a tile move may have nowhere to go (a prime, or the
        ** 2^32 fused reduction the rfactor sketch cannot make any more) */
        assert_true(n_sampled > 0);
        (void)n_ok;
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
    if ((double)(clock() - t0) / CLOCKS_PER_SEC > 20)
        fail_msg("sampling and 2,000 mutations took %.1f s",
                 (double)(clock() - t0) / CLOCKS_PER_SEC);
}

/* ss_state_hash, the search's identity of a program, agrees with ss_state_print: over
** random states and one mutation of each kind of a fused convolution (cache
** stages, inlined epilogue, attached stages) and a matmul, two states hash alike exactly
** when they print alike, and a JSON round trip keeps the hash. */
static void test_state_hash(void **unused)
{
    static const char *const texts[] = {
        "input X[1, 16, 14, 14] float32\nconst W[32, 16, 3, 3] float32\nconst b[32] float32\n"
        "P[n:1, c:16, h:16, w:16] = select(h >= 1 && h < 15 && w >= 1 && w < 15, "
        "X[n, c, h - 1, w - 1], 0.0)\n"
        "C[n:1, k:32, h:14, w:14] = sum[c:16, r:3, s:3](P[n, c, h + r, w + s] * W[k, c, r, s])\n"
        "D[n:1, k:32, h:14, w:14] = max(C[n, k, h, w] + b[k], 0.0)\n",
        "input A[64, 32] float32\nconst B[32, 48] float32\n"
        "C[i:64, j:48] = sum[k:32](A[i, k] * B[k, j])\n",
    };
    enum { N = 160 };
    ss_hw hw;
    at_rng rng;
    (void)unused;
    ss_hw_cpu(&hw, 2, 32, 32 << 10, 512 << 10);
    at_rng_seed(&rng, 17);
    for (size_t t = 0; t < sizeof texts / sizeof *texts; t++) {
        ss_dag *dag;
        ss_space *sp;
        ss_state *st[N];
        char *text[N], err[256];
        uint64_t h[N];
        int n = 0, n_same = 0;
        assert_int_equal(ss_dag_parse(texts[t], strlen(texts[t]), &dag, err, sizeof err), AT_OK);
        assert_int_equal(ss_space_new(dag, &hw, NULL, &sp, err, sizeof err), AT_OK);
        while (n < N) {
            ss_state *x = NULL, *m = NULL;
            if (ss_space_sample(sp, &rng, &x) != AT_OK)
                continue;
            st[n++] = x;
            /* mutations make near neighbours; every fifth state again, rebuilt from its
            ** steps (the same program, another object) */
            for (int k = 0; k < SS_N_MUTATIONS && n < N; k++)
                if (ss_space_mutate(sp, x, &rng, k, &m) == AT_OK)
                    st[n++] = m;
            if (n < N && n % 5 == 0) {
                at_buf b;
                at_buf_init(&b);
                ss_state_to_json(x, &b);
                assert_int_equal(ss_state_from_json(dag, b.data, b.len, &st[n], err, sizeof err),
                                 AT_OK);
                n++;
                at_buf_fini(&b);
            }
        }
        for (int i = 0; i < N; i++) {
            at_buf b;
            ss_state *back;
            at_buf_init(&b);
            ss_state_print(st[i], &b);
            text[i] = at_buf_take(&b);
            h[i] = ss_state_hash(st[i]);
            at_buf_init(&b);
            ss_state_to_json(st[i], &b);
            assert_int_equal(ss_state_from_json(dag, b.data, b.len, &back, err, sizeof err), AT_OK);
            assert_true(ss_state_hash(back) == h[i]);
            ss_state_free(back);
            at_buf_fini(&b);
        }
        for (int i = 0; i < N; i++)
            for (int j = i + 1; j < N; j++) {
                int same = strcmp(text[i], text[j]) == 0;
                n_same += same;
                if (same != (h[i] == h[j]))
                    fail_msg("states %d and %d: texts %s, hashes %s", i, j,
                             same ? "equal" : "differ", h[i] == h[j] ? "equal" : "differ");
            }
        /* both sides of the equivalence were exercised */
        assert_true(n_same > 0);
        for (int i = 0; i < N; i++) {
            at_free(text[i]);
            ss_state_free(st[i]);
        }
        ss_space_free(sp);
        ss_dag_unref(dag);
    }
}

static void test_refusals(void **unused)
{
    at_rng rng;
    int64_t len[SS_MAX_SPLIT];
    (void)unused;
    at_rng_seed(&rng, 1);
    assert_int_equal(ss__sample_lengths(0, 2, 64, &rng, len), 0);
    assert_int_equal(ss__sample_lengths(-4, 2, 64, &rng, len), 0);
    assert_int_equal(ss__sample_lengths(64, 0, 64, &rng, len), 0);
    assert_int_equal(ss__sample_lengths(64, SS_MAX_SPLIT, 64, &rng, len), 0);
    assert_int_equal(ss__sample_lengths(64, 2, 0, &rng, len), 0); /* no innermost fits */
    /* under a failing allocator (the first or the second allocation): no draw, no leak */
    for (size_t k = 0; k < 2; k++) {
        long live = at_test_live_allocs();
        at_test_alloc_limit(k);
        assert_int_equal(ss__sample_lengths(4096, 4, 64, &rng, len), 0);
        at_test_alloc_limit(SIZE_MAX);
        assert_int_equal(at_test_live_allocs(), live);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_draws_as_reference),
        cmocka_unit_test(test_uniform),
        cmocka_unit_test(test_large_extents),
        cmocka_unit_test(test_prime_and_huge_extents),
        cmocka_unit_test(test_state_hash),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
