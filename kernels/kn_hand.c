/* kernels/kn_hand.c -- hand-written schedules of library operators, used by the demo and
** the benchmarks as the reference of what the code generator can do, and by tests. */
#include "kernels_int.h"

#include <string.h>

static int64_t divisor_le(int64_t n, int64_t cap)
{
    for (int64_t d = cap < n ? cap : n; d > 1; d--)
        if (n % d == 0)
            return d;
    return 1;
}

#define STEP(x)                                                                                \
    do {                                                                                       \
        at_err e_ = (x);                                                                       \
        if (e_ != AT_OK)                                                                       \
            return e_;                                                                         \
    } while (0)

at_err kn_hand_matmul(ss_state *st, const kn_target *t, char *errmsg, size_t errmsg_size)
{
    const ss_op *c;
    int64_t M, N, K, mr, nr, mb, nb, kc, vw;
    if (st->n_steps != 0 || st->n_stages != 3 || st->dag->ops[2].reduce != SS_RED_SUM ||
        st->dag->ops[2].n_axes != 2 || st->dag->ops[2].n_raxes != 1)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_matmul: expects the naive state of a matmul (A, B, C)");
    c = &st->dag->ops[2];
    M = c->axes[0].extent, N = c->axes[1].extent, K = c->axes[2].extent;
    vw = t->vector_bytes / 4;
    /* register tile mr x nr (nr two vectors wide), a block of mb x nb per task, K in
    ** panels of kc */
    mr = divisor_le(M, 8);
    nr = divisor_le(N, 2 * vw);
    mb = divisor_le(M, 64 / mr * mr);
    if (mb % mr)
        mb = mr;
    nb = divisor_le(N, 256);
    if (nb % nr)
        nb = nr;
    kc = divisor_le(K, 256);
    /* 0 A, 1 B, 2 C */
    STEP(ss_state_cache_write(st, 2, "local", errmsg, errmsg_size));   /* 2 C.local, 3 C */
    STEP(ss_state_cache_read(st, 1, "local", 1, (int64_t[]){2}, errmsg, errmsg_size));
    /* 2 B.local, 3 C.local, 4 C */
    STEP(ss_state_split(st, 4, 0, 1, (int64_t[]){mb}, errmsg, errmsg_size));
    STEP(ss_state_split(st, 4, 2, 1, (int64_t[]){nb}, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, 4, 4, (int64_t[]){0, 2, 1, 3}, errmsg, errmsg_size));
    STEP(ss_state_fuse(st, 4, 2, (int64_t[]){0, 1}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, 4, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    if (nb % vw == 0 && nb > vw) {
        STEP(ss_state_split(st, 4, 2, 1, (int64_t[]){vw}, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, 4, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    } else if (nb <= 64) {
        STEP(ss_state_annotate(st, 4, 2, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    }
    STEP(ss_state_compute_at(st, 3, 4, 0, errmsg, errmsg_size));
    /* C.local: k.0 j.0 i.0 k.1 i.1 j.1 */
    STEP(ss_state_split(st, 3, 0, 1, (int64_t[]){mr}, errmsg, errmsg_size));
    STEP(ss_state_split(st, 3, 2, 1, (int64_t[]){nr}, errmsg, errmsg_size));
    STEP(ss_state_split(st, 3, 4, 1, (int64_t[]){kc}, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, 3, 6, (int64_t[]){4, 2, 0, 5, 1, 3}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, 3, 4, SS_ANN_UNROLL, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, 3, 5, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    /* B.local: the kc x nr panel of B, packed at j.0 */
    STEP(ss_state_compute_at(st, 2, 3, 1, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, 2, 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    (void)N;
    (void)K;
    return AT_OK;
}

/* The tuner's first-round matmuls: the structure of the fastest of 1,000 trials on
** matmul 1024^3 (two runs, 499 and 505 GFLOPS at 2 threads on Zen 5; 330 for
** kn_hand_matmul) as a rule.  C.local is written per task in register tiles of mr rows
** x nv vectors (variant 0: 8 x 2), each summed over all of K (k unrolled by 2, the tile's
** accumulators stay in registers) while the task walks its block of mb x 4 tiles from the
** tiles' panel of B (L2) and its rows of A (L1); B is stored in the order the tiles read it
** (layout rewrite, done once) when 'layout_rewrite', else read in place.  Variants 1-3
** change the block (8 x 4, 16 x 8, 16 x 2 tiles): on matmul 1024^3 the four measure within
** the noise of each other (5.0-6.2 ms at 2 threads, four runs); the first round measures all
** of them, so one unlucky measurement does not set the task's start.  Variant 4 is a block
** one tile wide (up to 32 tall): its panel of B is small enough for the kernel to prefetch
** the next block's while it computes (kn_llvm.c, "The next panel"), which a weight that
** comes from memory wants: BERT's 80 x 768 x 3072 feed-forward layer 0.91 ms hot and 1.06
** cold against 0.95 and 1.27 for the 1,500-trial run's best, blocks 2 tiles wide. */
at_err kn_hand_matmul_tiled(ss_state *st, int vector_bytes, int layout_rewrite, int variant,
                            char *errmsg, size_t errmsg_size)
{
    /* the variants: rows per tile, vectors per tile row, tiles per block column and row */
    static const int64_t var[KN_HAND_MATMUL_VARIANTS][4] = {
        {8, 2, 32, 4}, {8, 2, 8, 4}, {8, 2, 16, 8}, {8, 2, 16, 2}, {8, 2, 32, 1}};
    const ss_dag *dag = st->dag;
    const ss_op *c;
    int red = -1, loc, out, epilogue;
    int64_t M, N, K, vw, mr, nv, jt, kr, mb, split_i, split_j;
    /* one sum over k of two operands read at [i, k] and [k, j] or [j, k] (a matmul, a
    ** dense layer), then an elementwise epilogue over [i, j] (a bias, an activation, a
    ** residual add) or none */
    for (int s = 0; s < dag->n_ops; s++)
        if (dag->ops[s].kind == SS_OP_COMPUTE) {
            red = s;
            break;
        }
    c = red >= 0 ? &dag->ops[red] : NULL;
    if (st->n_steps != 0 || c == NULL || c->reduce != SS_RED_SUM || c->n_axes != 2 ||
        c->n_raxes != 1 || dag->n_outputs != 1)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_matmul_tiled: expects the naive state of a matmul (A, B, C) "
                        "or a dense layer with an elementwise epilogue");
    for (int s = red + 1; s < dag->n_ops; s++)
        if (dag->ops[s].kind != SS_OP_COMPUTE || dag->ops[s].reduce != SS_RED_NONE ||
            dag->ops[s].n_axes != 2 || dag->ops[s].axes[0].extent != c->axes[0].extent ||
            dag->ops[s].axes[1].extent != c->axes[1].extent)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                            "kn_hand_matmul_tiled: stage %s after the matmul is not an "
                            "elementwise epilogue over its [i, j]", dag->ops[s].name);
    M = c->axes[0].extent, N = c->axes[1].extent, K = c->axes[2].extent;
    if (variant < 0 || variant >= KN_HAND_MATMUL_VARIANTS)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_matmul_tiled: no variant %d",
                        variant);
    vw = divisor_le(N, vector_bytes >= 4 ? vector_bytes / 4 : 1);
    nv = divisor_le(N / vw, var[variant][1]); /* vectors per tile row */
    jt = divisor_le(N / (vw * nv), var[variant][3]); /* tiles per block row */
    /* 8 x 2 vectors is 16 accumulators: half of AVX-512's 32 registers; with 16 (AVX2),
    ** tiles of half the rows */
    mr = divisor_le(M, vector_bytes >= 64 ? var[variant][0] : var[variant][0] / 2);
    kr = divisor_le(K, 2);
    /* tiles per block column: as many as the variant asks where M allows (the blocks,
    ** M / (mr * mb) x N / (vw * nv * jt) of them, are the parallel tasks).  A block as
    ** tall as M (a dense layer of up to 32 tiles of rows: BERT's 128 positions) reads its
    ** panel of B once: weights streamed from memory once per call, as in a model, where
    ** they are not in the cache. */
    mb = divisor_le(M / mr, var[variant][2]);
    /* the block's accumulators: a matmul's C.local (cache write), or the product itself
    ** when an epilogue follows (inlined into the output, which reads the block) */
    epilogue = red < st->n_stages - 1;
    if (!epilogue) {
        STEP(ss_state_cache_write(st, red, "local", errmsg, errmsg_size));
    } else {
        for (int s = red + 1; s < st->n_stages - 1; s++)
            STEP(ss_state_compute_inline(st, s, errmsg, errmsg_size));
    }
    loc = red;
    out = st->n_stages - 1;
    /* loc's loops: i j k, then i.0 i.1 i.2 i.3, j.0 j.1 j.2 j.3, k.0 k.1 */
    STEP(ss_state_split(st, loc, 2, 1, (int64_t[]){kr}, errmsg, errmsg_size));
    split_j = st->n_steps;
    STEP(ss_state_split(st, loc, 1, 3, (int64_t[]){jt, nv, vw}, errmsg, errmsg_size));
    split_i = st->n_steps;
    STEP(ss_state_split(st, loc, 0, 3, (int64_t[]){mb, 1, mr}, errmsg, errmsg_size));
    /* i.0 j.0 i.1 j.1 k.0 i.2 j.2 k.1 i.3 j.3 */
    STEP(ss_state_reorder(st, loc, 10, (int64_t[]){0, 4, 1, 5, 8, 2, 6, 9, 3, 7}, errmsg,
                          errmsg_size));
    /* the output follows the block: i.0 j.0 i.1 j.1, loc computed at j.0 */
    STEP(ss_state_follow_split(st, out, 1, split_j, 1, errmsg, errmsg_size));
    STEP(ss_state_follow_split(st, out, 0, split_i, 1, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, out, 4, (int64_t[]){0, 2, 1, 3}, errmsg, errmsg_size));
    STEP(ss_state_compute_at(st, loc, out, 1, errmsg, errmsg_size));
    STEP(ss_state_fuse(st, out, 2, (int64_t[]){0, 1}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    if (epilogue && vw > 1) {
        /* the epilogue (an activation's exp or erf) a vector at a time: j.1 -> j.1.0 j.1.1 */
        STEP(ss_state_split(st, out, 2, 1, (int64_t[]){vw}, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, out, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    }
    STEP(ss_state_pragma_unroll(st, loc, 0, 512, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, loc, 9, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (layout_rewrite) {
        /* B: the constant operand read along j (a matmul's B, a dense layer's weight) */
        for (int p = 0; p < red; p++)
            if (dag->ops[p].is_const && ss_op_reads(c, p) &&
                ss_state_layout_rewrite(st, loc, p, NULL, 0) == AT_OK)
                break;
    }
    return AT_OK;
}

at_err kn_hand_elementwise(ss_state *st, const kn_target *t, char *errmsg, size_t errmsg_size)
{
    /* inline every non-output stage that is not a reduction; for each root stage, fuse
    ** the outer loops for parallelism and vectorize the innermost when it fits */
    int64_t vw = t->vector_bytes / 4;
    for (int s = st->n_stages - 1; s >= 0; s--) {
        const ss_op *op = &st->dag->ops[s];
        if (op->kind != SS_OP_COMPUTE)
            continue;
        if (!op->is_output && op->reduce == SS_RED_NONE && op->n_readers == 1) {
            int reader = -1;
            for (int r = s + 1; r < st->n_stages; r++)
                if (ss_op_reads(&st->dag->ops[r], s))
                    reader = r;
            /* inline into elementwise readers only: a reduction would recompute it */
            if (reader > 0 && st->dag->ops[reader].reduce == SS_RED_NONE &&
                ss_state_compute_inline(st, s, NULL, 0) == AT_OK)
                continue;
        }
    }
    for (int s = 0; s < st->n_stages; s++) {
        const ss_op *op = &st->dag->ops[s];
        const ss_stage *sg = &st->stages[s];
        int n_sp = op->n_axes;
        int64_t inner;
        if (op->kind != SS_OP_COMPUTE || sg->loc != SS_LOC_ROOT || n_sp == 0)
            continue;
        inner = sg->ivars[sg->leaves[n_sp - 1]].extent;
        if (op->reduce == SS_RED_NONE && inner % vw == 0 && inner > vw) {
            STEP(ss_state_split(st, s, n_sp - 1, 1, (int64_t[]){vw}, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, s, n_sp, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        } else if (op->reduce == SS_RED_NONE && inner <= 64 && n_sp > 1) {
            STEP(ss_state_annotate(st, s, n_sp - 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        }
        if (n_sp > 1) {
            STEP(ss_state_fuse(st, s, n_sp - 1 > 1 ? n_sp - 1 : 1,
                               (int64_t[]){0, 1, 2, 3, 4, 5, 6, 7}, errmsg, errmsg_size));
        }
        if (st->stages[s].ivars[st->stages[s].leaves[0]].ann == SS_ANN_NONE)
            STEP(ss_state_annotate(st, s, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    }
    return AT_OK;
}

/* The Winograd transforms (the winograd_input and winograd_output operators): the pair of
** a-term reductions S1 -> S2 ("T" -> "V", or "Y1" -> "Y") computed per tile and channel
** block: S2 cache-written, its [p, c.outer] loops fused and parallel, S2.local and S1
** computed inside them with the channels (c.inner, up to 16) vectorized; the padding (the
** input) and the gather back to NHWC with the epilogue (the output) inlined into their
** readers, the last stage parallel over [n, h, w] and vectorized over the channels. */
at_err kn_hand_winograd(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size)
{
    const ss_dag *dag = st->dag;
    int input = ss_dag_find(dag, "V") >= 0 && ss_dag_find(dag, "T") >= 0;
    int s1 = ss_dag_find(dag, input ? "T" : "Y1"), s2 = ss_dag_find(dag, input ? "V" : "Y");
    int64_t vw = vector_bytes >= 4 ? vector_bytes / 4 : 1, C, cv;
    if (st->n_steps != 0 || s1 < 0 || s2 != s1 + 1 || dag->ops[s1].n_axes != 4 ||
        dag->ops[s2].n_axes != 4 || dag->ops[s2].n_raxes != 1 || dag->ops[s1].n_raxes != 1)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_winograd: expects the naive state of a winograd_input or "
                        "winograd_output DAG");
    C = dag->ops[s2].axes[3].extent;
    cv = C % (2 * vw) == 0 ? 2 * vw : C % vw == 0 ? vw : C;
    if (input && ss_dag_find(dag, "pad") >= 0)
        STEP(ss_state_compute_inline(st, ss_dag_find(dag, "pad"), errmsg, errmsg_size));
    /* the output's gather and epilogue: inlined into the last stage */
    for (int s = s2 + 1; s < st->n_stages - 1; s++)
        STEP(ss_state_compute_inline(st, s, errmsg, errmsg_size));
    STEP(ss_state_cache_write(st, s2, "local", errmsg, errmsg_size)); /* s2 local, s2 + 1 */
    /* S2: e f p c -> p c.0 e f c.1; [p, c.0] fused and parallel */
    if (cv < C) {
        STEP(ss_state_split(st, s2 + 1, 3, 1, (int64_t[]){cv}, errmsg, errmsg_size));
        STEP(ss_state_reorder(st, s2 + 1, 5, (int64_t[]){2, 3, 0, 1, 4}, errmsg, errmsg_size));
        STEP(ss_state_fuse(st, s2 + 1, 2, (int64_t[]){0, 1}, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, s2 + 1, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    } else {
        STEP(ss_state_reorder(st, s2 + 1, 4, (int64_t[]){2, 0, 1, 3}, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, s2 + 1, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    }
    STEP(ss_state_annotate(st, s2 + 1, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    STEP(ss_state_compute_at(st, s2, s2 + 1, 0, errmsg, errmsg_size));
    /* S2.local and S1: e f p c | r -> e f p r c, c vectorized; S1 per e of S2.local */
    STEP(ss_state_reorder(st, s2, 5, (int64_t[]){0, 1, 2, 4, 3}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, s2, 4, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    STEP(ss_state_compute_at(st, s1, s2, 0, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, s1, 5, (int64_t[]){0, 1, 2, 4, 3}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, s1, 4, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    STEP(ss_state_pragma_unroll(st, s2 + 1, 0, 16, errmsg, errmsg_size));
    if (!input) {
        /* the last stage: n h w fused and parallel, k split by the vector and vectorized */
        int last = st->n_stages - 1;
        int64_t K = st->stages[last].ivars[st->stages[last].leaves[3]].extent;
        if (K % vw == 0 && K > vw) {
            STEP(ss_state_split(st, last, 3, 1, (int64_t[]){vw}, errmsg, errmsg_size));
            STEP(ss_state_fuse(st, last, 3, (int64_t[]){0, 1, 2}, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, last, 2, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        } else {
            STEP(ss_state_fuse(st, last, 3, (int64_t[]){0, 1, 2}, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, last, 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        }
        STEP(ss_state_annotate(st, last, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    }
    return AT_OK;
}

/* A direct NHWC convolution (the naive state of a conv2d layout=NHWC DAG, any epilogue):
** the output in tiles of wt x kv (wt output columns, kv channels: one vector, wt up to 8,
** so wt vector accumulators), [n, h] fused and parallel; per tile the convolution computes
** every tap (r, s, then the input channels) into the accumulators, w unrolled and k
** vectorized; the padding and the epilogue inlined.  What the sampler rarely draws for a
** depthwise convolution (one input channel per output channel, a memory-bound loop): 0.087
** ms on MobileNetV2's first one (112 x 112 x 32, 2 threads) where 1,500 trials of search
** had found 0.25-0.30.  Variants 1 and 2 take 2 and 3 vectors of channels per tile (wt then
** as many columns as leave 4 of the vector registers free, at most 8): the shapes that the
** search reached from it on MobileNetV2's depthwise convolutions with 1,500 trials (1.3-1.9x
** faster than variant 0 on 6 of its 10).  At stride 1, summing over input channels, the
** padding is not inlined but copied per tile (the rows and columns the tile reads, every
** channel), so that the taps read without bounds checks: on ResNet's 3x3 convolutions
** (2 threads, the best variant) 0.48 -> 0.46 ms at 56x56x64, 0.62 -> 0.48 at 28x28x128,
** 0.59 -> 0.54 at 7x7x512; at stride 2 it was slower (0.29 -> 0.32 ms), and a depthwise
** convolution has no channels to reuse the copy over. */
at_err kn_hand_conv_nhwc(ss_state *st, int vector_bytes, int variant, char *errmsg,
                         size_t errmsg_size)
{
    const ss_dag *dag = st->dag;
    int conv = ss_dag_find(dag, "conv"), pad = ss_dag_find(dag, "pad"), out, nr, tile_pad = 0;
    int64_t vw = vector_bytes >= 4 ? vector_bytes / 4 : 1, K, OW, kv, wt, order[8];
    const ss_op *c = conv >= 0 ? &dag->ops[conv] : NULL;

    if (st->n_steps != 0 || c == NULL || c->kind != SS_OP_COMPUTE || c->reduce != SS_RED_SUM ||
        c->n_axes != 4 || c->n_raxes < 1 || c->n_raxes > 3 || strcmp(c->axes[1].name, "h") != 0 ||
        strcmp(c->axes[2].name, "w") != 0 || strcmp(c->axes[3].name, "k") != 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_conv_nhwc: expects the naive state of an NHWC conv2d DAG");
    for (int s = conv + 1; s < dag->n_ops; s++)
        if (dag->ops[s].kind != SS_OP_COMPUTE || dag->ops[s].reduce != SS_RED_NONE ||
            dag->ops[s].n_axes != 4)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                            "kn_hand_conv_nhwc: stage %s after the convolution is not an "
                            "elementwise epilogue", dag->ops[s].name);
    nr = c->n_raxes;
    K = c->axes[3].extent;
    OW = c->axes[2].extent;
    if (variant < 0 || variant >= KN_HAND_CONV_NHWC_VARIANTS ||
        (variant > 0 && (vw < 2 || K % ((variant + 1) * vw) != 0)))
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_conv_nhwc: no variant %d for %lld output channels", variant,
                        (long long)K);
    if (variant == 0) {
        kv = K % vw == 0 ? vw : K;
        wt = divisor_le(OW, kv <= vw ? 8 : 4);
    } else {
        /* (variant + 1) vectors of channels, columns to fill the register file but 4 (32
        ** registers of 64 bytes, 16 narrower ones) */
        int64_t regs = vector_bytes >= 64 ? 32 : 16;
        kv = (variant + 1) * vw;
        wt = divisor_le(OW, AT_MIN(8, AT_MAX(1, (regs - 4) / (variant + 1))));
    }
    /* the padding per tile (below) where it pays: stride 1, summing over input channels */
    if (pad >= 0 && nr == 3) {
        const ss_op *p = &dag->ops[pad];
        int nhwc_in = p->n_axes == 4 && strcmp(p->axes[3].name, "c") == 0;
        int64_t R = 0, S = 0;
        for (int i = 0; i < nr; i++) {
            if (strcmp(c->axes[4 + i].name, "r") == 0) R = c->axes[4 + i].extent;
            if (strcmp(c->axes[4 + i].name, "s") == 0) S = c->axes[4 + i].extent;
        }
        tile_pad = p->n_axes == 4 && R > 0 && S > 0 &&
                   p->axes[nhwc_in ? 1 : 2].extent == c->axes[1].extent + R - 1 &&
                   p->axes[nhwc_in ? 2 : 3].extent == OW + S - 1;
    }
    if (pad >= 0 && !tile_pad)
        STEP(ss_state_compute_inline(st, pad, errmsg, errmsg_size));
    for (int s = conv + 1; s < st->n_stages - 1; s++)
        STEP(ss_state_compute_inline(st, s, errmsg, errmsg_size));
    if (conv == st->n_stages - 1)
        STEP(ss_state_cache_write(st, conv, "local", errmsg, errmsg_size)); /* conv.local, conv */
    out = st->n_stages - 1;
    /* out: n h w k -> n h w.0 k.0 w.1 k.1 (a split may be whole), [n, h] fused, parallel */
    STEP(ss_state_split(st, out, 2, 1, (int64_t[]){wt}, errmsg, errmsg_size));
    STEP(ss_state_split(st, out, 4, 1, (int64_t[]){kv}, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, out, 6, (int64_t[]){0, 1, 2, 4, 3, 5}, errmsg, errmsg_size));
    STEP(ss_state_fuse(st, out, 2, (int64_t[]){0, 1}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 4, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (wt > 1)
        STEP(ss_state_annotate(st, out, 3, SS_ANN_UNROLL, errmsg, errmsg_size));
    /* the convolution per tile, after the tile loops */
    STEP(ss_state_compute_at(st, conv, out, 2, errmsg, errmsg_size));
    /* conv: n h w k | taps -> n h taps w k; w unrolled, k vectorized */
    order[0] = 0, order[1] = 1;
    for (int i = 0; i < nr; i++)
        order[2 + i] = 4 + i;
    order[2 + nr] = 2, order[3 + nr] = 3;
    STEP(ss_state_reorder(st, conv, 4 + nr, order, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, conv, 3 + nr, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (wt > 1)
        STEP(ss_state_annotate(st, conv, 2 + nr, SS_ANN_UNROLL, errmsg, errmsg_size));
    if (tile_pad) {
        /* the padded input the tile reads (its rows and columns, every channel) copied
        ** once per tile, so that the taps read it without bounds checks */
        int64_t pc;
        STEP(ss_state_compute_at(st, pad, conv, 1, errmsg, errmsg_size));
        pc = st->stages[pad].ivars[st->stages[pad].leaves[3]].extent;
        if (pc <= 64) {
            STEP(ss_state_annotate(st, pad, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        } else if (pc % vw == 0) {
            STEP(ss_state_split(st, pad, 3, 1, (int64_t[]){vw}, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, pad, 4, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        }
    }
    return AT_OK;
}

/* An NCHW convolution (summing over input channels): the padding a pass of its own (n, c, h
** fused and parallel, w vectorized); the output in tiles of kt output channels x a row of
** wt output pixels (n, k.0, h, w.0 fused and parallel); per tile, the sum over c, r, s
** outside a register block of kt x wt accumulators, k unrolled and w vectorized (wt: a
** divisor of the row up to 4 vectors; kt: as many rows of wt as half the register file
** holds).  The structure of the best ResNet conv2d (C=K=64, 56x56, 3x3) 1,000 trials found
** here (410 GFLOPS at 2 threads, Zen 5), which the sampler draws rarely: 64 trials had
** 0.56-0.79 of it; this state measures 305 GFLOPS in the first round. */
at_err kn_hand_conv_nchw(ss_state *st, int vector_bytes, int variant, char *errmsg,
                         size_t errmsg_size)
{
    const ss_dag *dag = st->dag;
    int conv = ss_dag_find(dag, "conv"), pad = ss_dag_find(dag, "pad"), out, nr;
    int64_t vw = vector_bytes >= 4 ? vector_bytes / 4 : 1, K, OW, kt, wt, nregs, order[8];
    const ss_op *c = conv >= 0 ? &dag->ops[conv] : NULL;

    if (st->n_steps != 0 || c == NULL || c->kind != SS_OP_COMPUTE || c->reduce != SS_RED_SUM ||
        c->n_axes != 4 || c->n_raxes < 1 || c->n_raxes > 3 || strcmp(c->axes[1].name, "k") != 0 ||
        strcmp(c->axes[2].name, "h") != 0 || strcmp(c->axes[3].name, "w") != 0 ||
        strcmp(c->axes[4].name, "c") != 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_conv_nchw: expects the naive state of an NCHW conv2d DAG "
                        "(summing over input channels)");
    for (int s = conv + 1; s < dag->n_ops; s++)
        if (dag->ops[s].kind != SS_OP_COMPUTE || dag->ops[s].reduce != SS_RED_NONE ||
            dag->ops[s].n_axes != 4)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                            "kn_hand_conv_nchw: stage %s after the convolution is not an "
                            "elementwise epilogue", dag->ops[s].name);
    if (pad >= 0 && (dag->ops[pad].kind != SS_OP_COMPUTE || dag->ops[pad].n_axes != 4))
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_conv_nchw: the padding stage is not a 4-d copy");
    if (variant < 0 || variant >= KN_HAND_CONV_NCHW_VARIANTS)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_conv_nchw: no variant %d",
                        variant);
    nr = c->n_raxes;
    K = c->axes[1].extent;
    OW = c->axes[3].extent;
    /* variant 0: a row of up to 4 vectors x as many channels as half the register file
    ** holds; 1: half those channels; 2: up to 2 vectors of the row, twice the channels */
    wt = divisor_le(OW, (variant == 2 ? 2 : 4) * vw);
    nregs = vector_bytes >= 64 ? 32 : 16;
    kt = AT_MAX(1, (nregs / 2) / ((wt + vw - 1) / vw));
    kt = divisor_le(K, variant == 1 ? AT_MAX(1, kt / 2) : kt);
    for (int s = conv + 1; s < st->n_stages - 1; s++)
        STEP(ss_state_compute_inline(st, s, errmsg, errmsg_size));
    if (conv == st->n_stages - 1)
        STEP(ss_state_cache_write(st, conv, "local", errmsg, errmsg_size)); /* conv.local, conv */
    out = st->n_stages - 1;
    if (pad >= 0) {
        /* the padding: n c h fused and parallel, w vectorized */
        STEP(ss_state_fuse(st, pad, 3, (int64_t[]){0, 1, 2}, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, pad, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
        STEP(ss_state_annotate(st, pad, 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    }
    /* out: n k h w -> n k.0 h w.0 k.1 w.1, [n, k.0, h, w.0] fused and parallel */
    STEP(ss_state_split(st, out, 3, 1, (int64_t[]){wt}, errmsg, errmsg_size));
    STEP(ss_state_split(st, out, 1, 1, (int64_t[]){kt}, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, out, 6, (int64_t[]){0, 1, 3, 4, 2, 5}, errmsg, errmsg_size));
    STEP(ss_state_fuse(st, out, 4, (int64_t[]){0, 1, 2, 3}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 2, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (kt > 1)
        STEP(ss_state_annotate(st, out, 1, SS_ANN_UNROLL, errmsg, errmsg_size));
    /* the convolution per tile, after the tile loop */
    STEP(ss_state_compute_at(st, conv, out, 0, errmsg, errmsg_size));
    /* conv: n k h w | c r s -> n h c r s k w; k unrolled, w vectorized */
    order[0] = 0, order[1] = 2;
    for (int i = 0; i < nr; i++)
        order[2 + i] = 4 + i;
    order[2 + nr] = 1, order[3 + nr] = 3;
    STEP(ss_state_reorder(st, conv, 4 + nr, order, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, conv, 3 + nr, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (kt > 1)
        STEP(ss_state_annotate(st, conv, 2 + nr, SS_ANN_UNROLL, errmsg, errmsg_size));
    return AT_OK;
}

/* A row-wise operator (softmax, layer norm, a row reduction with its elementwise uses): the
** output stage elementwise over [rows..., j], every other stage a reduction over one axis of
** j's extent or elementwise over [rows..., j], each indexed by the output's rows.  Each row
** is one task's work: the output's row loops fused and parallel, every other stage computed
** at that loop (the row stays in L1 between the stages), each j loop split by the vector
** width with the inner part vectorized; a reduction's j split too, its lanes factored out
** (rfactor) so the partial sums are a vector.  The sampler draws these rarely (a softmax of
** 12 x 128 x 128 ran 0.074 ms after 128 trials). */
at_err kn_hand_rowwise(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size)
{
    const ss_dag *dag = st->dag;
    int out = st->n_stages - 1, k;
    const ss_op *o = &dag->ops[out];
    int64_t vw = vector_bytes >= 4 ? vector_bytes / 4 : 1, J;
    if (st->n_steps != 0 || o->kind != SS_OP_COMPUTE || o->reduce != SS_RED_NONE ||
        o->n_axes < 2 || dag->n_outputs != 1)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_rowwise: expects the naive state of a row-wise operator");
    k = o->n_axes - 1;
    J = o->axes[k].extent;
    for (int s = 0; s < out; s++) {
        const ss_op *p = &dag->ops[s];
        if (p->kind != SS_OP_COMPUTE)
            continue;
        /* the row axes first, then j (elementwise) or one reduced axis of j's extent */
        if (p->n_axes < k || (p->reduce == SS_RED_NONE && p->n_axes != k + 1) ||
            (p->reduce != SS_RED_NONE && (p->n_axes != k || p->n_raxes != 1 ||
                                          p->axes[k].extent != J)) ||
            (p->reduce == SS_RED_NONE && p->axes[k].extent != J))
            return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_rowwise: stage %s is "
                            "not a row's reduction or elementwise stage", p->name);
        for (int d = 0; d < k; d++)
            if (p->axes[d].extent != o->axes[d].extent)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_rowwise: stage %s "
                                "has other rows", p->name);
    }
    if (J < vw || J % vw != 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_rowwise: rows of %lld, not "
                        "a multiple of the vector width %lld", (long long)J, (long long)vw);
    /* each reduction: j in vector-wide parts, the lanes factored out into NAME.rf [rows,
    ** lane] (the partial results of a vector accumulator), reduced over the lanes after */
    for (int s = 0; s < out; s++) {
        const ss_op *p = &dag->ops[s];
        int stage = p->kind == SS_OP_COMPUTE && p->reduce != SS_RED_NONE
                        ? ss_state_find_stage(st, p->name)
                        : -1;
        if (stage < 0)
            continue;
        STEP(ss_state_split(st, stage, k, 1, (int64_t[]){vw}, errmsg, errmsg_size));
        STEP(ss_state_rfactor(st, stage, k + 1, k, errmsg, errmsg_size));
        /* the .rf stage (now at 'stage'): rows, lane, j.0 -> rows, j.0, lane */
        {
            int64_t order[SS_MAX_LEAVES];
            for (int q = 0; q < k; q++)
                order[q] = q;
            order[k] = k + 1;
            order[k + 1] = k;
            STEP(ss_state_reorder(st, stage, k + 2, order, errmsg, errmsg_size));
        }
    }
    out = st->n_stages - 1;
    /* from the output back: a stage read by one stage is computed at that stage's (last)
    ** row loop; one read by several (softmax's exponentials, layer norm's mean) is a pass of
    ** its own, scheduled as the output is */
    for (int s = out; s >= 0; s--) {
        const ss_op *p = &st->dag->ops[s];
        int reader = -1, n_readers = 0, rf = p->tag && strcmp(p->tag, "rfactor") == 0;
        if (p->kind != SS_OP_COMPUTE)
            continue;
        for (int r = s + 1; r < st->n_stages; r++)
            if (ss_op_reads(&st->dag->ops[r], s))
                reader = r, n_readers++;
        if (s < out && n_readers == 1) {
            const ss_stage *rs = &st->stages[reader];
            /* the reader's row loop: the fused one at root, the last one when attached */
            int at = rs->loc == SS_LOC_ROOT ? 0 : k - 1;
            STEP(ss_state_compute_at(st, s, reader, at, errmsg, errmsg_size));
        } else if (p->reduce == SS_RED_NONE) {
            /* rows fused and parallel, j.0 j.1 with j.1 vectorized */
            STEP(ss_state_split(st, s, k, 1, (int64_t[]){vw}, errmsg, errmsg_size));
            if (k > 1) {
                int64_t it[8];
                for (int d = 0; d < k; d++)
                    it[d] = d;
                STEP(ss_state_fuse(st, s, k, it, errmsg, errmsg_size));
            }
            STEP(ss_state_annotate(st, s, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, s, 2, SS_ANN_VECTORIZE, errmsg, errmsg_size));
            continue;
        } else {
            /* a reduction of its own: rows fused and parallel */
            if (k > 1) {
                int64_t it[8];
                for (int d = 0; d < k; d++)
                    it[d] = d;
                STEP(ss_state_fuse(st, s, k, it, errmsg, errmsg_size));
            }
            STEP(ss_state_annotate(st, s, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
            continue;
        }
        /* attached: the vector lanes (an elementwise stage's j.1, a .rf stage's lane loop) */
        if (rf) {
            STEP(ss_state_annotate(st, s, k + 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        } else if (p->reduce == SS_RED_NONE) {
            STEP(ss_state_split(st, s, k, 1, (int64_t[]){vw}, errmsg, errmsg_size));
            STEP(ss_state_annotate(st, s, k + 1, SS_ANN_VECTORIZE, errmsg, errmsg_size));
        }
    }
    return AT_OK;
}

/* A batched product (the batch_matmul operator, or a model's batched MatMul read through
** its transposes) with any elementwise epilogue: one reduction stage with three spatial
** axes, the last one (j) read contiguously by its second operand, and elementwise stages
** after it.  The output in tiles of mr x vw (mr rows of its middle axis, one vector of j),
** its first axis and the tile rows fused and parallel; per tile the product accumulates
** every k into the mr vector registers, the epilogue inlined into the output.  What the
** sampler draws late (BERT-base's probabilities times V: 0.117 ms after 8 trials, 0.060
** after 90). */
at_err kn_hand_bmm(ss_state *st, int vector_bytes, char *errmsg, size_t errmsg_size)
{
    const ss_dag *dag = st->dag;
    int red = -1, out;
    int64_t vw = vector_bytes >= 4 ? vector_bytes / 4 : 1, mr, J;
    const ss_op *c;
    for (int s = 0; s < dag->n_ops; s++)
        if (dag->ops[s].kind == SS_OP_COMPUTE && dag->ops[s].reduce != SS_RED_NONE) {
            if (red >= 0)
                return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                                "kn_hand_bmm: expects one reduction");
            red = s;
        }
    c = red >= 0 ? &dag->ops[red] : NULL;
    if (st->n_steps != 0 || c == NULL || c->reduce != SS_RED_SUM || c->n_axes != 3 ||
        c->n_raxes != 1 || dag->n_outputs != 1)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL,
                        "kn_hand_bmm: expects the naive state of a batched product");
    for (int s = red + 1; s < dag->n_ops; s++)
        if (dag->ops[s].kind != SS_OP_COMPUTE || dag->ops[s].reduce != SS_RED_NONE ||
            dag->ops[s].n_axes != 3)
            return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_bmm: stage %s after the "
                            "product is not an elementwise epilogue", dag->ops[s].name);
    J = c->axes[2].extent;
    if (J % vw != 0)
        return kn__fail(errmsg, errmsg_size, AT_EINVAL, "kn_hand_bmm: the last axis (%lld) is "
                        "not a multiple of the vector width", (long long)J);
    mr = divisor_le(c->axes[1].extent, 8);
    for (int s = red + 1; s < st->n_stages - 1; s++)
        STEP(ss_state_compute_inline(st, s, errmsg, errmsg_size));
    if (red == st->n_stages - 1)
        STEP(ss_state_cache_write(st, red, "local", errmsg, errmsg_size)); /* red.local, red */
    out = st->n_stages - 1;
    /* out: a0 a1 a2 -> a0 a1.0 a2.0 a1.1 a2.1, [a0, a1.0] fused and parallel */
    STEP(ss_state_split(st, out, 1, 1, (int64_t[]){mr}, errmsg, errmsg_size));
    STEP(ss_state_split(st, out, 3, 1, (int64_t[]){vw}, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, out, 5, (int64_t[]){0, 1, 3, 2, 4}, errmsg, errmsg_size));
    STEP(ss_state_fuse(st, out, 2, (int64_t[]){0, 1}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 0, SS_ANN_PARALLEL, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, out, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (mr > 1)
        STEP(ss_state_annotate(st, out, 2, SS_ANN_UNROLL, errmsg, errmsg_size));
    /* the product per tile: a0 a1 a2 k -> a0 k a1 a2, a1 unrolled, a2 vectorized */
    STEP(ss_state_compute_at(st, red, out, 1, errmsg, errmsg_size));
    STEP(ss_state_reorder(st, red, 4, (int64_t[]){0, 3, 1, 2}, errmsg, errmsg_size));
    STEP(ss_state_annotate(st, red, 3, SS_ANN_VECTORIZE, errmsg, errmsg_size));
    if (mr > 1)
        STEP(ss_state_annotate(st, red, 2, SS_ANN_UNROLL, errmsg, errmsg_size));
    return AT_OK;
}
