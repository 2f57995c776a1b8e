/* tests/models/test_tasks.c -- task extraction from generated ONNX models: the expected
** task lists (shapes, weights, names, FLOPs, workload keys equal to the library
** operators'), the tasks JSONL round trip and its errors, 'tuner tasks', and bad input:
** an unknown opset, an unsupported operator, truncated, corrupt, random, empty and deeply
** nested files, and every allocation failing in turn. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>

#include "kernels/kernels.h"
#include "model_test.h"

#define TUNER(out, err, ...) mt_tuner(out, err, (const char *const[]){__VA_ARGS__, NULL})

static char dir[64];

static int setup(void **unused)
{
    (void)unused;
    mt_mkdtemp(dir);
    mt_make_models(dir, "small_cnn resnet18 mobilenet_v2 transformer tiny_mlp weights_as_inputs "
                        "dynamic_batch bad_opset unsupported_op negative_dim missing_input "
                        "bert_tiny_dyn bert_tiny");
    return 0;
}

static int teardown(void **unused)
{
    (void)unused;
    mt_rmtree(dir);
    return 0;
}

static int layout = MD_LAYOUT_NHWC; /* of load() */
static int winograd = MD_WINOGRAD_OFF; /* of load(): the task lists below are the direct ones */

static md_model *load(const char *name)
{
    char path[PATH_MAX], err[1024];
    md_model *m = NULL;
    at_err e;
    mt_path(path, dir, name);
    e = md_model_load(path, &(md_model_opts){.layout = layout, .winograd = winograd}, &m, err,
                      sizeof err);
    if (e != AT_OK)
        fail_msg("%s: %s (%s)", name, err, at_errname(e));
    return m;
}

/* ---- expected task lists ---- */

typedef struct want {
    const char *desc;   /* the task's desc: library spec [+ fused operators] */
    int weight;
    const char *name;
    double flops;       /* 0: the library operator's (desc is a plain spec) */
} want;

static char specs[64][256];

/* (the convolutions of 3 channels here read the graph input: NHWC ones read it in NCHW) */
static const char *conv(int i, int C, int H, int K, int R, int s, int p, int relu, const char *tail)
{
    snprintf(specs[i], sizeof specs[i],
             "conv2d:%sN=1,C=%d,H=%d,W=%d,K=%d,R=%d,S=%d,sh=%d,sw=%d,ph=%d,pw=%d,dh=1,dw=1,"
             "groups=1,bias=1,relu=%d%s",
             layout != MD_LAYOUT_NHWC ? "" : C <= 4 ? "layout=NHWC,in_layout=NCHW," : "layout=NHWC,",
             C, H, H, K, R, R, s, s, p, p, relu, tail);
    return specs[i];
}

/* A pool's spec in the layout of load(): "max_pool2d:" + [layout=NHWC,] + rest */
static const char *pool(int i, const char *op, const char *rest)
{
    snprintf(specs[i], sizeof specs[i], "%s:%s%s", op,
             layout == MD_LAYOUT_NHWC ? "layout=NHWC," : "", rest);
    return specs[i];
}

static void check_tasks(const md_task_list *tl, const want *w, int n)
{
    double total = 0;
    if (tl->n_tasks != n) {
        for (int i = 0; i < tl->n_tasks; i++)
            fprintf(stderr, "  task %d: %s x%d %s\n", i, tl->tasks[i].desc, tl->tasks[i].weight,
                    tl->tasks[i].name);
        fail_msg("%d tasks, want %d", tl->n_tasks, n);
    }
    for (int i = 0; i < n; i++) {
        const md_task *t = &tl->tasks[i];
        char err[256];
        if (strcmp(t->desc, w[i].desc) != 0 || t->weight != w[i].weight ||
            strcmp(t->name, w[i].name) != 0)
            fail_msg("task %d: '%s' x%d %s, want '%s' x%d %s", i, t->desc, t->weight, t->name,
                     w[i].desc, w[i].weight, w[i].name);
        assert_int_equal(t->n_uses, t->weight);
        assert_true(t->tunable);
        assert_non_null(t->dag);
        assert_string_equal(t->dag->key, t->key);
        if (w[i].flops == 0) {
            /* a plain library operator: the same DAG, so the same key and FLOPs */
            ss_dag *lib;
            assert_int_equal(kn_op_build(w[i].desc, &lib, err, sizeof err), AT_OK);
            if (strcmp(lib->key, t->key) != 0)
                fail_msg("task %d: key %s, library operator %s has %s", i, t->key, w[i].desc,
                         lib->key);
            assert_true(lib->flops == t->flops);
            ss_dag_unref(lib);
        } else if (t->flops != w[i].flops) {
            fail_msg("task %d: %.0f FLOPs, want %.0f", i, t->flops, w[i].flops);
        }
        total += t->flops * t->weight;
    }
    assert_true(fabs(md_task_list_flops(tl) - total) < 1e-6 * total);
}

static void small_cnn(void)
{
    md_model *m = load("small_cnn.onnx");
    md_model_info info;
    const want w[] = {
        {conv(0, 3, 32, 16, 3, 1, 1, 1, ""), 1, "conv2d_bias_relu", 0},
        {pool(4, "max_pool2d", "N=1,C=16,H=32,W=32,kh=2,kw=2,sh=2,sw=2,ph=0,pw=0"), 1,
         "max_pool2d", 0},
        {conv(1, 16, 16, 32, 3, 1, 1, 1, ""), 1, "conv2d_bias_relu", 0},
        {conv(2, 32, 16, 32, 3, 1, 1, 1, ""), 2, "conv2d_bias_relu", 0},
        /* the residual: conv + bias + add + relu, 2 more FLOPs per output element */
        {conv(3, 32, 16, 32, 3, 1, 1, 0, " + add, relu"), 1, "conv2d_bias_add_relu",
         2.0 * 32 * 16 * 16 * 32 * 9 + 3.0 * 32 * 16 * 16},
        {pool(5, "global_avg_pool", "N=1,C=32,H=16,W=16"), 1, "global_avg_pool", 0},
        {"dense:M=1,N=10,K=32,bias=1,relu=0", 1, "dense_bias", 0},
    };
    check_tasks(md_model_tasks(m), w, (int)AT_ARRAY_LEN(w));
    /* the first conv: 2*OUT*C*R*S + bias + relu */
    assert_true(md_model_tasks(m)->tasks[0].flops == 2.0 * 16 * 32 * 32 * 27 + 2.0 * 16 * 32 * 32);
    /* BatchNormalization folded into conv1: its node is listed with the conv's */
    assert_int_equal(md_model_tasks(m)->tasks[0].uses[0].n_nodes, 3);
    assert_string_equal(md_model_tasks(m)->tasks[0].uses[0].nodes[0], "conv1");
    assert_string_equal(md_model_tasks(m)->tasks[0].uses[0].nodes[1], "bn1");
    assert_string_equal(md_model_tasks(m)->tasks[0].uses[0].nodes[2], "relu1");
    assert_string_equal(md_model_tasks(m)->tasks[3].uses[1].nodes[0], "conv5");
    md_model_get_info(m, &info);
    assert_int_equal(info.opset, 13);
    assert_int_equal(info.n_nodes, 16);
    assert_int_equal(info.n_unsupported, 0);
    assert_int_equal(md_model_n_warnings(m), 0);
    /* 8 task runs (conv3 twice) and nothing to copy: Flatten is an alias.  In NHWC too: the
    ** first conv reads the 3-channel input in NCHW (no transpose) and the pooled
    ** [1, 1, 1, 32] goes back to NCHW as an alias (only dimensions of size 1 move) */
    assert_int_equal(info.n_steps, 8);
    if (layout == MD_LAYOUT_NHWC) {
        const char *t0 = md_model_tasks(m)->tasks[0].dag_text;
        assert_non_null(strstr(t0, "input X[1, 3, 32, 32] float32"));
        assert_non_null(strstr(t0, "conv[n:1, h:32, w:32, k:16]"));
        assert_non_null(strstr(t0, "const W[3, 3, 3, 16] float32"));
        assert_non_null(strstr(md_model_tasks(m)->tasks[4].dag_text, "input p1[16, 16, 32]"));
    }
    md_model_free(m);
}

static void test_small_cnn(void **unused)
{
    (void)unused;
    small_cnn();
    layout = MD_LAYOUT_NCHW; /* the model's own layout when asked */
    small_cnn();
    layout = MD_LAYOUT_NHWC;
}

/* Winograd on: conv2..conv5 (3x3, stride 1, 16 or 32 channels, 16x16) as three tasks each,
** F(4x4, 3x3): 16 tiles; conv3 and conv5 share theirs; conv1 (3 input channels) stays. */
static void test_small_cnn_winograd(void **unused)
{
    md_model *m;
    const md_task_list *tl;
    md_model_info info;
    const want w[] = {
        {conv(0, 3, 32, 16, 3, 1, 1, 1, ""), 1, "conv2d_bias_relu", 0},
        {pool(4, "max_pool2d", "N=1,C=16,H=32,W=32,kh=2,kw=2,sh=2,sw=2,ph=0,pw=0"), 1,
         "max_pool2d", 0},
        {"winograd_input:N=1,H=16,W=16,C=16,m=4", 1, "winograd_input", 0},
        {"winograd_gemm:P=16,C=16,K=32,m=4", 1, "winograd_gemm", 0},
        {"winograd_output:N=1,H=16,W=16,K=32,m=4,bias=1,relu=1", 3,
         "winograd_output_bias_relu", 0},
        {"winograd_input:N=1,H=16,W=16,C=32,m=4", 3, "winograd_input", 0},
        {"winograd_gemm:P=16,C=32,K=32,m=4", 3, "winograd_gemm", 0},
        {"winograd_output:N=1,H=16,W=16,K=32,m=4,bias=1,relu=0 + add, relu", 1,
         "winograd_output_bias_add_relu", 0},
        {pool(5, "global_avg_pool", "N=1,C=32,H=16,W=16"), 1, "global_avg_pool", 0},
        {"dense:M=1,N=10,K=32,bias=1,relu=0", 1, "dense_bias", 0},
    };
    (void)unused;
    winograd = MD_WINOGRAD_ON;
    m = load("small_cnn.onnx");
    winograd = MD_WINOGRAD_OFF;
    tl = md_model_tasks(m);
    /* the add and relu: 2 FLOPs per output element more than the library operator */
    for (int i = 0; i < tl->n_tasks; i++)
        if (strcmp(tl->tasks[i].name, "winograd_output_bias_add_relu") == 0) {
            ss_dag *lib;
            char err[256];
            assert_int_equal(kn_op_build("winograd_output:N=1,H=16,W=16,K=32,m=4,bias=1,relu=0",
                                         &lib, err, sizeof err), AT_OK);
            ((want *)w)[7].flops = lib->flops + 2.0 * 32 * 16 * 16;
            ss_dag_unref(lib);
        }
    check_tasks(tl, w, (int)AT_ARRAY_LEN(w));
    /* the output transform is named with the convolution it replaces (and its BN) */
    assert_string_equal(tl->tasks[4].uses[0].nodes[0], "conv2.wino_out");
    assert_string_equal(tl->tasks[4].uses[0].nodes[1], "conv2");
    assert_string_equal(tl->tasks[2].uses[0].nodes[0], "conv2.wino_in");
    md_model_get_info(m, &info);
    assert_int_equal(info.n_winograd, 4);
    assert_int_equal(info.n_winograd_eligible, 4);
    md_model_free(m);
}

static void test_resnet18(void **unused)
{
    md_model *m = load("resnet18.onnx");
    want w[18];
    int k = 0, s = 0, C = 64, H = 56;
    (void)unused;
    w[k++] = (want){conv(s++, 3, 224, 64, 7, 2, 3, 1, ""), 1, "conv2d_bias_relu", 0};
    w[k++] = (want){pool(40, "max_pool2d", "N=1,C=64,H=112,W=112,kh=3,kw=3,sh=2,sw=2,ph=1,"
                                           "pw=1"), 1, "max_pool2d", 0};
    w[k++] = (want){conv(s++, 64, 56, 64, 3, 1, 1, 1, ""), 2, "conv2d_bias_relu", 0};
    w[k++] = (want){conv(s++, 64, 56, 64, 3, 1, 1, 0, " + add, relu"), 2,
                    "conv2d_bias_add_relu", 2.0 * 64 * 56 * 56 * 64 * 9 + 3.0 * 64 * 56 * 56};
    for (int K = 128; K <= 512; K *= 2, C *= 2, H /= 2) {
        int OH = H / 2;
        w[k++] = (want){conv(s++, C, H, K, 3, 2, 1, 1, ""), 1, "conv2d_bias_relu", 0};
        w[k++] = (want){conv(s++, K, OH, K, 3, 1, 1, 0, " + add, relu"), 2,
                        "conv2d_bias_add_relu", 2.0 * K * OH * OH * K * 9 + 3.0 * K * OH * OH};
        w[k++] = (want){conv(s++, C, H, K, 1, 2, 0, 0, ""), 1, "conv2d_bias", 0};
        w[k++] = (want){conv(s++, K, OH, K, 3, 1, 1, 1, ""), 1, "conv2d_bias_relu", 0};
    }
    w[k++] = (want){pool(41, "global_avg_pool", "N=1,C=512,H=7,W=7"), 1, "global_avg_pool", 0};
    w[k++] = (want){"dense:M=1,N=1000,K=512,bias=1,relu=0", 1, "dense_bias", 0};
    assert_int_equal(k, 18);
    check_tasks(md_model_tasks(m), w, k);
    /* 15 distinct conv2d tasks for 20 convolutions */
    {
        const md_task_list *tl = md_model_tasks(m);
        int n_conv = 0, uses = 0;
        for (int i = 0; i < tl->n_tasks; i++)
            if (strncmp(tl->tasks[i].desc, "conv2d:", 7) == 0) {
                n_conv++;
                uses += tl->tasks[i].weight;
            }
        assert_int_equal(n_conv, 15);
        assert_int_equal(uses, 20);
        assert_string_equal(tl->tasks[2].uses[1].nodes[0], "layer1.1.conv1");
        assert_true(strncmp(tl->tasks[0].tag, "conv2d:", 7) == 0);
    }
    md_model_free(m);
}

static void test_mobilenet_v2(void **unused)
{
    md_model *m = load("mobilenet_v2.onnx");
    const md_task_list *tl = md_model_tasks(m);
    int n_dw = 0, uses = 0, n_clip = 0, n_add = 0;
    (void)unused;
    assert_int_equal(tl->n_tasks, 32);
    for (int i = 0; i < tl->n_tasks; i++) {
        const md_task *t = &tl->tasks[i];
        uses += t->weight;
        if (strncmp(t->name, "depthwise_conv2d", 16) == 0) {
            n_dw++;
            assert_non_null(strstr(t->desc, ",groups="));
            assert_true(strncmp(t->tag, "depthwise_conv2d:", 17) == 0);
        }
        n_clip += strstr(t->name, "_clip") != NULL;
        n_add += strstr(t->name, "_add") != NULL;
    }
    /* 52 convolutions + the pool + the classifier; 10 distinct depthwise shapes */
    assert_int_equal(uses, 54);
    assert_int_equal(n_dw, 10);
    assert_int_equal(n_clip, 18);
    assert_int_equal(n_add, 5);
    /* relu6 is a fused Clip: the dw 384 3x3 task runs 4 times */
    for (int i = 0; i < tl->n_tasks; i++)
        if (strstr(tl->tasks[i].desc, "C=384,H=14,W=14,K=384,R=3") != NULL) {
            assert_int_equal(tl->tasks[i].weight, 4);
            assert_non_null(strstr(tl->tasks[i].dag_text, "min(max("));
        }
    md_model_free(m);
}

static void test_transformer(void **unused)
{
    md_model *m = load("transformer.onnx");
    const md_task_list *tl;
    const double gelu = 2.0 * 32 * 256 * 64 + 6.0 * 32 * 256;
    const want w[] = {
        {"dense:M=32,N=64,K=64,bias=1,relu=0", 3, "dense_bias", 0},
        /* the heads' transposes ([1, S, H, d] -> [1, H, S, d], and back) read and written
        ** through by the products: no copies */
        {"batch_matmul:B=4,M=32,N=32,K=16 (operands read through their transposes) + div", 1,
         "batch_matmul_div", 2.0 * 4 * 32 * 32 * 16 + 4 * 32 * 32},
        {"softmax:shape=4x32x32", 1, "softmax", 0},
        {"batch_matmul:B=4,M=32,N=16,K=32 (operands read through their transposes) (written "
         "transposed)", 1, "batch_matmul", 2.0 * 4 * 32 * 16 * 32},
        {"dense:M=32,N=64,K=64,bias=1,relu=0 + add", 1, "dense_bias_add",
         2.0 * 32 * 64 * 64 + 2.0 * 32 * 64},
        /* one LayerNormalization node and one decomposed layer norm: one task */
        {"layer_norm:shape=32x64,eps=1e-05", 2, "layer_norm", 0},
        {"dense:M=32,N=256,K=64,bias=1,relu=0 + div, erf, add, mul, mul", 1,
         "dense_bias_div_erf_add_mul_mul", gelu},
        {"dense:M=32,N=64,K=256,bias=1,relu=0 + add", 1, "dense_bias_add",
         2.0 * 32 * 64 * 256 + 2.0 * 32 * 64},
    };
    (void)unused;
    tl = md_model_tasks(m);
    check_tasks(tl, w, (int)AT_ARRAY_LEN(w));
    /* the decomposed layer norm's nine nodes are one use */
    assert_int_equal(tl->tasks[5].uses[1].n_nodes, 9);
    assert_string_equal(tl->tasks[5].uses[1].nodes[0], "norm2.mean");
    md_model_free(m);
}

static void test_weights_as_inputs(void **unused)
{
    md_model *m = load("tiny_mlp.onnx");
    const want w[] = {
        {"dense:M=1,N=32,K=16,bias=1,relu=1", 1, "dense_bias_relu", 0},
        {"dense:M=1,N=8,K=32,bias=1,relu=0", 1, "dense_bias", 0},
    };
    const want w2[] = {
        {"conv2d:N=1,C=3,H=8,W=8,K=8,R=3,S=3,sh=1,sw=1,ph=1,pw=1,dh=1,dw=1,groups=1,bias=0,"
         "relu=0 + relu", 1, "conv2d_relu", 2.0 * 8 * 8 * 8 * 27 + 8 * 8 * 8},
        {"global_avg_pool:N=1,C=8,H=8,W=8", 1, "global_avg_pool", 0},
        {"dense:M=1,N=4,K=8,bias=1,relu=0", 1, "dense_bias", 0},
    };
    (void)unused;
    /* initializers listed among the graph inputs too */
    check_tasks(md_model_tasks(m), w, 2);
    md_model_free(m);
    /* weights given as graph inputs without initializers: 'const' in the DAGs all the same */
    m = load("weights_as_inputs.onnx");
    check_tasks(md_model_tasks(m), w2, 3);
    assert_non_null(strstr(md_model_tasks(m)->tasks[0].dag_text, "const W[8, 3, 3, 3] float32"));
    assert_non_null(strstr(md_model_tasks(m)->tasks[2].dag_text, "const W[4, 8] float32"));
    md_model_free(m);
}

/* A symbolic batch dimension takes the value asked for (1 by default), with a warning. */
static void test_symbolic_batch(void **unused)
{
    char path[PATH_MAX], err[1024];
    md_model *m;
    (void)unused;
    mt_path(path, dir, "dynamic_batch.onnx");
    for (int n = 1; n <= 4; n += 3) {
        char prefix[128];
        assert_int_equal(md_model_load(path, &(md_model_opts){.dim_default = n}, &m, err,
                                       sizeof err), AT_OK);
        assert_int_equal(md_model_n_warnings(m), 1);
        assert_non_null(strstr(md_model_warning(m, 0), "graph input 'input' has 1 symbolic "
                                                      "dimension(s) ('N')"));
        snprintf(prefix, sizeof prefix, "conv2d:layout=NHWC,in_layout=NCHW,N=%d,C=3,H=8,W=8,K=8,",
                 n);
        assert_true(strncmp(md_model_tasks(m)->tasks[0].desc, prefix, strlen(prefix)) == 0);
        snprintf(prefix, sizeof prefix, "dense:M=%d,N=4,K=8,bias=1", n);
        assert_true(strncmp(md_model_tasks(m)->tasks[2].desc, prefix, strlen(prefix)) == 0);
        md_model_free(m);
    }
}

/* Named symbolic dimensions (issue 17, item 2): '--dim seq=12' gives 'seq' its value (no
** warning), a name no input has is an error naming the ones it has, and the model's
** structure hash is the same at every length (the key of its buckets in the store). */
static void test_named_dims(void **unused)
{
    char path[PATH_MAX], other[PATH_MAX], err[1024], sig[40], *out, *errs;
    md_model *m, *m2;
    (void)unused;
    mt_path(path, dir, "bert_tiny_dyn.onnx");
    assert_int_equal(md_model_load(path, &(md_model_opts){.n_dims = 1,
                                                          .dims = &(md_dim){"seq", 12}},
                                   &m, err, sizeof err), AT_OK);
    assert_int_equal(md_model_n_warnings(m), 0);
    assert_int_equal(md_model_n_dims(m), 1);
    assert_string_equal(md_model_dim_name(m, 0), "seq");
    assert_int_equal(md_model_dim_value(m, 0), 12);
    assert_int_equal(strlen(md_model_sig(m)), 32);
    snprintf(sig, sizeof sig, "%s", md_model_sig(m));
    {
        int dense12 = 0;
        for (int i = 0; i < md_model_tasks(m)->n_tasks; i++)
            dense12 += strncmp(md_model_tasks(m)->tasks[i].desc, "dense:M=12,", 11) == 0;
        assert_true(dense12 >= 3);
    }
    md_model_free(m);
    /* another length: other tasks, the same structure */
    assert_int_equal(md_model_load(path, &(md_model_opts){.n_dims = 1,
                                                          .dims = &(md_dim){"seq", 16}},
                                   &m2, err, sizeof err), AT_OK);
    assert_string_equal(md_model_sig(m2), sig);
    md_model_free(m2);
    mt_path(other, dir, "bert_tiny.onnx");
    assert_int_equal(md_model_load(other, NULL, &m2, err, sizeof err), AT_OK);
    assert_string_not_equal(md_model_sig(m2), sig);
    assert_int_equal(md_model_n_dims(m2), 0);
    md_model_free(m2);
    /* without a value: the default, with the warning */
    assert_int_equal(md_model_load(path, NULL, &m, err, sizeof err), AT_OK);
    assert_int_equal(md_model_dim_value(m, 0), 1);
    assert_true(md_model_n_warnings(m) >= 1);
    md_model_free(m);
    assert_int_equal(md_model_load(path, &(md_model_opts){.n_dims = 1,
                                                          .dims = &(md_dim){"foo", 3}},
                                   &m, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "no graph input has a symbolic dimension named 'foo' (it has "
                                "'seq')"));
    /* the command line */
    assert_int_equal(TUNER(&out, &errs, "tasks", "--dim", "seq=8,16", path), TN_EXIT_OK);
    assert_non_null(strstr(out, "bucket seq=8: 10 tasks"));
    assert_non_null(strstr(out, "bucket seq=16: 10 tasks"));
    assert_non_null(strstr(out, "dense:M=16,"));
    at_free(out);
    at_free(errs);
    /* a range: the tuner chooses its buckets (the rule: tests/tuner/test_search.c) */
    assert_int_equal(TUNER(&out, &errs, "tasks", "--dim", "seq=3..8,12..16", path), TN_EXIT_OK);
    assert_non_null(strstr(out, "bucket seq=8: 10 tasks"));  /* 3 rounds up past 8: 8 */
    assert_non_null(strstr(out, "bucket seq=16: 10 tasks")); /* 12..16: 16 alone */
    assert_null(strstr(out, "bucket seq=3:"));
    assert_null(strstr(out, "bucket seq=12:"));
    at_free(out);
    at_free(errs);
    {
        static const struct { const char *a, *b, *want; } bad[] = {
            {"--dim", "seq=40..8", "'40..8' is not a range LO..HI of whole numbers, 1 <= LO <= HI"},
            {"--dim", "seq=0..8", "'0..8' is not a range"},
            {"--dim", "seq=8..x", "'8..x' is not a range"},
            {"--dim", "seq=16..64,32", "32 is given twice"},
            {"--dim", "seq=1..100000", "more than 32 values"},
            {"--dim", "seq=0", "'0' is not a whole number >= 1"},
            {"--dim", "seq=8,8", "8 is given twice"},
            {"--dim", "seq=8,x", "'x' is not a whole number >= 1"},
            {"--dim", "=8", "the dimension's name is missing"},
            {"--dim", "0", "give a whole number >= 1, or NAME=V"},
        };
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            assert_int_equal(TUNER(&out, &errs, "tasks", bad[i].a, bad[i].b, path),
                             TN_EXIT_USAGE);
            if (strstr(errs, bad[i].want) == NULL)
                fail_msg("--dim %s: '%s' has no '%s'", bad[i].b, errs, bad[i].want);
            at_free(out);
            at_free(errs);
        }
    }
    assert_int_equal(TUNER(&out, &errs, "tasks", "--dim", "a=1,2", "--dim", "b=3,4", path),
                     TN_EXIT_USAGE);
    assert_non_null(strstr(errs, "only one dimension may have several values"));
    at_free(out);
    at_free(errs);
    assert_int_equal(TUNER(&out, &errs, "tasks", "--dim", "seq=8,16", "-o", "x.jsonl", path),
                     TN_EXIT_USAGE);
    assert_non_null(strstr(errs, "-o writes the tasks of one size"));
    at_free(out);
    at_free(errs);
    assert_int_equal(TUNER(&out, &errs, "tasks", "--dim", "foo=3", path), TN_EXIT_FAIL);
    assert_non_null(strstr(errs, "no graph input has a symbolic dimension named 'foo'"));
    at_free(out);
    at_free(errs);
}

/* ---- models exported by torch (when python3-torch is installed) ---- */

static int have_torch(void)
{
    return system("/usr/bin/python3 -c 'import torch, torchvision' >/dev/null 2>&1") == 0;
}

/* torchvision's ResNet-18 and MobileNetV2 exported by torch.onnx (BatchNormalization folded
** by the exporter, Identity and Constant nodes, Flatten) give the same tasks, keys and
** weights as the models built here with onnx.helper. */
static void test_torch_exports(void **unused)
{
    static const char *const pairs[][2] = {{"tv_resnet18.onnx", "resnet18.onnx"},
                                           {"tv_mobilenet_v2.onnx", "mobilenet_v2.onnx"}};
    (void)unused;
    if (!have_torch()) {
        fprintf(stderr, "SKIP (python3-torch or torchvision not installed)\n");
        skip();
    }
    mt_make_models(dir, "tv_resnet18 tv_mobilenet_v2");
    for (size_t p = 0; p < AT_ARRAY_LEN(pairs); p++) {
        md_model *a = load(pairs[p][0]), *b = load(pairs[p][1]);
        const md_task_list *ta = md_model_tasks(a), *tb = md_model_tasks(b);
        assert_int_equal(md_model_n_warnings(a), 0);
        assert_int_equal(ta->n_tasks, tb->n_tasks);
        for (int i = 0; i < ta->n_tasks; i++) {
            if (strcmp(ta->tasks[i].key, tb->tasks[i].key) != 0)
                fail_msg("%s task %d (%s) differs from %s's (%s)", pairs[p][0], i,
                         ta->tasks[i].desc, pairs[p][1], tb->tasks[i].desc);
            assert_int_equal(ta->tasks[i].weight, tb->tasks[i].weight);
        }
        md_model_free(a);
        md_model_free(b);
    }
}

/* ---- the tasks JSONL ---- */

static char *to_jsonl(const md_task_list *tl, size_t *n)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, n);
    assert_non_null(f);
    assert_int_equal(md_tasks_write_jsonl(tl, f), AT_OK);
    fclose(f);
    return buf;
}

static at_err read_text(const char *text, md_task_list **out, char *err, size_t n)
{
    return md_tasks_read_jsonl("t.jsonl", text, strlen(text), out, err, n);
}

static void test_jsonl_round_trip(void **unused)
{
    md_model *m = load("transformer.onnx");
    const md_task_list *tl = md_model_tasks(m);
    md_task_list *back;
    char *text, *again, err[512];
    size_t n, n2;
    (void)unused;
    text = to_jsonl(tl, &n);
    assert_int_equal(md_tasks_read_jsonl("t.jsonl", text, n, &back, err, sizeof err), AT_OK);
    assert_int_equal(back->n_tasks, tl->n_tasks);
    for (int i = 0; i < tl->n_tasks; i++) {
        const md_task *a = &tl->tasks[i], *b = &back->tasks[i];
        assert_string_equal(a->key, b->key);
        assert_string_equal(a->dag_text, b->dag_text);
        assert_string_equal(a->name, b->name);
        assert_string_equal(a->desc, b->desc);
        assert_string_equal(a->tag, b->tag);
        assert_int_equal(a->weight, b->weight);
        assert_int_equal(a->tunable, b->tunable);
        assert_true(a->flops == b->flops);
        assert_int_equal(a->n_op_types, b->n_op_types);
        assert_int_equal(a->n_uses, b->n_uses);
        for (int u = 0; u < a->n_uses; u++) {
            assert_int_equal(a->uses[u].n_nodes, b->uses[u].n_nodes);
            for (int k = 0; k < a->uses[u].n_nodes; k++)
                assert_string_equal(a->uses[u].nodes[k], b->uses[u].nodes[k]);
        }
    }
    assert_string_equal(back->model, "transformer.onnx");
    /* writing what was read gives the same bytes */
    again = to_jsonl(back, &n2);
    assert_int_equal(n, n2);
    assert_memory_equal(text, again, n);
    free(again);
    md_task_list_free(back);
    free(text);
    md_model_free(m);
}

static void test_jsonl_errors(void **unused)
{
    static const char dag[] = "input A[4, 8] float32\\nconst B[8, 2] float32\\n"
                              "C[i:4, j:2] = sum[k:8](A[i, k] * B[k, j])\\n";
    char good[1024], line[2200], err[512];
    md_task_list *tl = NULL;
    ss_dag *d;
    char text[256];
    (void)unused;
    snprintf(text, sizeof text, "input A[4, 8] float32\nconst B[8, 2] float32\n"
                                "C[i:4, j:2] = sum[k:8](A[i, k] * B[k, j])\n");
    assert_int_equal(ss_dag_parse(text, strlen(text), &d, err, sizeof err), AT_OK);
    snprintf(good, sizeof good, "{\"v\":1,\"key\":\"%s\",\"weight\":3,\"flops\":128,\"dag\":\"%s\"}",
             d->key, dag);
    /* a minimal line is enough; blank lines are skipped */
    snprintf(line, sizeof line, "\n%s\n\n", good);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_OK);
    assert_int_equal(tl->n_tasks, 1);
    assert_int_equal(tl->tasks[0].weight, 3);
    assert_string_equal(tl->tasks[0].name, "task");
    md_task_list_free(tl);
    /* a key that is not the DAG's */
    snprintf(line, sizeof line, "{\"v\":1,\"key\":\"%032d\",\"weight\":1,\"dag\":\"%s\"}", 0, dag);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EINVAL);
    assert_null(tl);
    assert_non_null(strstr(err, "t.jsonl:1:"));
    assert_non_null(strstr(err, "workload key"));
    /* FLOPs that are not the DAG's */
    snprintf(line, sizeof line, "{\"v\":1,\"key\":\"%s\",\"weight\":1,\"flops\":5,\"dag\":\"%s\"}",
             d->key, dag);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "FLOPs"));
    /* malformed JSON on line 2 */
    snprintf(line, sizeof line, "%s\n{\"v\":1,\"key\":", good);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EPARSE);
    assert_non_null(strstr(err, "t.jsonl:2:"));
    /* a newer format */
    snprintf(line, sizeof line, "{\"v\":2,\"key\":\"%s\",\"weight\":1,\"dag\":\"%s\"}", d->key, dag);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EVERSION);
    /* a DAG that does not parse, a weight of 0, a task twice, nothing at all */
    snprintf(line, sizeof line, "{\"v\":1,\"key\":\"%s\",\"weight\":1,\"dag\":\"C[i:4] = D[i]\"}",
             d->key);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "does not parse"));
    snprintf(line, sizeof line, "{\"v\":1,\"key\":\"%s\",\"weight\":0,\"dag\":\"%s\"}", d->key, dag);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EINVAL);
    snprintf(line, sizeof line, "%s\n%s\n", good, good);
    assert_int_equal(read_text(line, &tl, err, sizeof err), AT_EINVAL);
    assert_non_null(strstr(err, "twice"));
    assert_int_equal(read_text("\n\n", &tl, err, sizeof err), AT_EINVAL);
    assert_int_equal(read_text("[1,2]", &tl, err, sizeof err), AT_EPARSE);
    ss_dag_unref(d);
}

/* ---- the command ---- */


static void test_cli_tasks(void **unused)
{
    char model[PATH_MAX], jsonl[PATH_MAX], *out, *err;
    (void)unused;
    mt_path(model, dir, "small_cnn.onnx");
    mt_path(jsonl, dir, "small_cnn.tasks.jsonl");
    assert_int_equal(TUNER(&out, &err, "tasks", model), TN_EXIT_OK);
    assert_non_null(strstr(out, "13 tasks (13 tunable)"));
    assert_non_null(strstr(out, "winograd: the last 6 tasks are the Winograd alternatives of 4 "));
    assert_non_null(strstr(out, "conv2d_bias_add_relu"));
    assert_string_equal(err, "");
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "tasks", "-q", "-o", jsonl, model), TN_EXIT_OK);
    assert_string_equal(out, "");
    at_free(out);
    at_free(err);
    /* the task list alone is enough to list the tasks again */
    assert_int_equal(TUNER(&out, &err, "tasks", "-v", jsonl), TN_EXIT_OK);
    assert_non_null(strstr(out, "13 tasks"));
    assert_non_null(strstr(out, "use 2: conv5 relu5"));
    at_free(out);
    at_free(err);
    /* --winograd */
    assert_int_equal(TUNER(&out, &err, "tasks", "--winograd", "on", model), TN_EXIT_OK);
    assert_non_null(strstr(out, "10 tasks (10 tunable)"));
    assert_non_null(strstr(out, "winograd: 4 of 4 eligible 3x3 convolutions run as Winograd"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "tasks", "--winograd", "off", model), TN_EXIT_OK);
    assert_non_null(strstr(out, "7 tasks (7 tunable)"));
    assert_null(strstr(out, "winograd"));
    at_free(out);
    at_free(err);
    assert_int_not_equal(TUNER(&out, &err, "tasks", "--winograd", "maybe", model), TN_EXIT_OK);
    assert_non_null(strstr(err, "--winograd must be auto, on or off, not 'maybe'"));
    at_free(out);
    at_free(err);
    /* errors: exit status 1 and a sentence naming the file and the problem */
    /* issue 14, item 9: a negative dimension is an error, not a symbolic one */
    mt_path(model, dir, "negative_dim.onnx");
    assert_int_equal(TUNER(&out, &err, "tasks", model), TN_EXIT_FAIL);
    assert_non_null(strstr(err, "negative_dim.onnx: graph input 'input': dimension 0 is -3 (a "
                                "dimension is a positive size or a symbolic name)"));
    at_free(out);
    at_free(err);
    mt_path(model, dir, "bad_opset.onnx");
    assert_int_equal(TUNER(&out, &err, "tasks", model), TN_EXIT_FAIL);
    assert_non_null(strstr(err, "bad_opset.onnx: opset 99 of the default ONNX domain"));
    at_free(out);
    at_free(err);
    mt_path(model, dir, "unsupported_op.onnx");
    assert_int_equal(TUNER(&out, &err, "tasks", model), TN_EXIT_OK);
    assert_non_null(strstr(err, "warning: unsupported_op.onnx: node 'mystery' (FancyOp): "
                                "operator 'FancyOp' is not supported"));
    assert_non_null(strstr(out, "13 tasks"));
    at_free(out);
    at_free(err);
    /* found by fuzz_onnx: folding an Add of constants whose first input is '' (absent) read
    ** before the tensor array; now the node is unsupported, named, and nothing crashes */
    mt_path(model, dir, "missing_input.onnx");
    assert_int_equal(TUNER(&out, &err, "tasks", model), TN_EXIT_OK);
    assert_non_null(strstr(err, "warning: missing_input.onnx: node 'add_missing' (Add): an "
                                "input it needs is absent (an empty name)"));
    assert_non_null(strstr(out, "0 tasks"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "tasks"), TN_EXIT_USAGE);
    assert_non_null(strstr(err, "missing model file"));
    at_free(out);
    at_free(err);
    assert_int_equal(TUNER(&out, &err, "tasks", "/nonexistent/m.onnx"), TN_EXIT_FAIL);
    assert_non_null(strstr(err, "/nonexistent/m.onnx"));
    at_free(out);
    at_free(err);
}

/* ---- bad input ---- */

static void test_unknown_opset(void **unused)
{
    char path[PATH_MAX], err[1024];
    md_model *m = NULL;
    (void)unused;
    mt_path(path, dir, "bad_opset.onnx");
    assert_int_equal(md_model_load(path, NULL, &m, err, sizeof err), AT_EUNSUPPORTED);
    assert_null(m);
    assert_non_null(strstr(err, "bad_opset.onnx: opset 99"));
    assert_non_null(strstr(err, "7 to 21"));
}

static void test_unsupported_operator(void **unused)
{
    md_model *m = load("unsupported_op.onnx"), *ref = load("small_cnn.onnx");
    const md_task_list *a = md_model_tasks(m), *b = md_model_tasks(ref);
    md_model_info info;
    (void)unused;
    assert_int_equal(md_model_n_warnings(m), 1);
    assert_non_null(strstr(md_model_warning(m, 0), "node 'mystery' (FancyOp)"));
    /* the rest of the model gives the same tasks (the value_info shape of 'mystery') */
    assert_int_equal(a->n_tasks, b->n_tasks);
    for (int i = 0; i < a->n_tasks; i++) {
        assert_string_equal(a->tasks[i].key, b->tasks[i].key);
        assert_int_equal(a->tasks[i].weight, b->tasks[i].weight);
    }
    md_model_get_info(m, &info);
    assert_int_equal(info.n_unsupported, 1);
    md_model_free(m);
    md_model_free(ref);
}

static int allowed_error(at_err e)
{
    return e == AT_ECORRUPT || e == AT_EINVAL || e == AT_EUNSUPPORTED;
}

static void test_truncated(void **unused)
{
    char path[PATH_MAX], err[1024];
    size_t n;
    char *data;
    (void)unused;
    mt_path(path, dir, "small_cnn.onnx");
    data = mt_read(path, &n);
    for (int k = 0; k <= 16; k++) {
        size_t cut = k == 16 ? n - 1 : n * (size_t)k / 16;
        md_model *m = NULL;
        at_err e = md_model_load_mem(data, cut, "cut.onnx", NULL, &m, err, sizeof err);
        if (e == AT_OK || !allowed_error(e) || strncmp(err, "cut.onnx: ", 10) != 0)
            fail_msg("cut at %zu of %zu: %s: %s", cut, n, at_errname(e), err);
        assert_null(m);
        if (k > 1)
            assert_non_null(strstr(err, "truncated"));
    }
    at_free(data);
}

static void test_corrupt(void **unused)
{
    char path[PATH_MAX], err[1024];
    size_t n;
    char *data, *copy;
    at_rng rng;
    int n_ok = 0, n_err = 0;
    (void)unused;
    mt_path(path, dir, "small_cnn.onnx");
    data = mt_read(path, &n);
    copy = at_malloc(n);
    at_rng_seed(&rng, 8);
    /* 120 variants with 1 to 8 bytes changed: an error naming the file, or a model (a
    ** change inside a weight's bytes is still a valid model); never a crash */
    for (int v = 0; v < 120; v++) {
        md_model *m = NULL;
        at_err e;
        int changes = 1 + (int)at_rng_below(&rng, 8);
        memcpy(copy, data, n);
        for (int c = 0; c < changes; c++) {
            /* mostly in the graph's structure: the first 600 bytes and the last 4000 */
            size_t at = at_rng_below(&rng, 2) ? at_rng_below(&rng, 600)
                                              : n - 1 - at_rng_below(&rng, 4000);
            copy[at] = (char)at_rng_below(&rng, 256);
        }
        e = md_model_load_mem(copy, n, "bad.onnx", NULL, &m, err, sizeof err);
        if (e == AT_OK) {
            n_ok++;
            md_model_free(m);
            continue;
        }
        n_err++;
        if (!allowed_error(e) || strncmp(err, "bad.onnx: ", 10) != 0)
            fail_msg("variant %d: %s: %s", v, at_errname(e), err);
    }
    fprintf(stderr, "corrupt variants: %d loaded, %d refused\n", n_ok, n_err);
    assert_true(n_err > 0);
    /* not ONNX at all */
    for (int v = 0; v < 50; v++) {
        md_model *m = NULL;
        size_t len = 1 + at_rng_below(&rng, 4000);
        for (size_t i = 0; i < len; i++)
            copy[i] = (char)at_rng_below(&rng, 256);
        assert_int_not_equal(md_model_load_mem(copy, len, "rand.onnx", NULL, &m, err, sizeof err),
                             AT_OK);
        assert_null(m);
    }
    assert_int_equal(md_model_load_mem(copy, 0, "empty.onnx", NULL, &(md_model *){NULL}, err,
                                       sizeof err), AT_ECORRUPT);
    assert_string_equal(err, "empty.onnx: the file is empty");
    at_free(copy);
    at_free(data);
}

/* A model whose graph nests node -> attribute -> graph 'depth' times. */
static size_t nested(uint8_t *out, size_t cap, int depth)
{
    uint8_t *buf = at_malloc(cap), *tmp = at_malloc(cap);
    size_t len = 0;
    static const uint8_t tags[3] = {0x32 /* attr.g */, 0x2a /* node.attribute */,
                                    0x0a /* graph.node */};
    for (int d = 0; d < depth * 3; d++) {
        size_t k = 0, l = len;
        tmp[k++] = tags[d % 3];
        do {
            tmp[k++] = (uint8_t)((l & 0x7f) | (l > 0x7f ? 0x80 : 0));
            l >>= 7;
        } while (l);
        memcpy(tmp + k, buf, len);
        len += k;
        memcpy(buf, tmp, len);
    }
    /* ModelProto: ir_version 8, graph */
    out[0] = 0x08;
    out[1] = 0x08;
    out[2] = 0x3a;
    {
        size_t k = 3, l = len;
        do {
            out[k++] = (uint8_t)((l & 0x7f) | (l > 0x7f ? 0x80 : 0));
            l >>= 7;
        } while (l);
        memcpy(out + k, buf, len);
        len += k;
    }
    at_free(buf);
    at_free(tmp);
    return len;
}

static void test_deep_nesting(void **unused)
{
    size_t cap = 1 << 16, n;
    uint8_t *p = at_malloc(cap);
    char err[512];
    md_model *m = NULL;
    (void)unused;
    n = nested(p, cap, 200);
    assert_int_equal(md_model_load_mem(p, n, "deep.onnx", NULL, &m, err, sizeof err), AT_ECORRUPT);
    assert_non_null(strstr(err, "nested more than"));
    /* a shallow one passes the check (and fails later for what it is) */
    n = nested(p, cap, 3);
    assert_int_not_equal(md_model_load_mem(p, n, "shallow.onnx", NULL, &m, err, sizeof err),
                         AT_OK);
    assert_null(strstr(err, "nested"));
    at_free(p);
}

static void test_out_of_memory(void **unused)
{
    char path[PATH_MAX], err[1024];
    size_t n;
    char *data;
    long base;
    int tries = 0;
    (void)unused;
    mt_path(path, dir, "small_cnn.onnx");
    data = mt_read(path, &n);
    base = at_test_live_allocs();
    /* every 5th allocation count; AT_TEST_LONG=1: every one */
    for (size_t limit = 0;; limit += getenv("AT_TEST_LONG") ? 1 : 5, tries++) {
        md_model *m = NULL;
        at_err e;
        at_test_alloc_limit(limit);
        e = md_model_load_mem(data, n, "small_cnn.onnx", NULL, &m, err, sizeof err);
        at_test_alloc_limit(SIZE_MAX);
        if (e == AT_OK) {
            assert_int_equal(md_model_tasks(m)->n_tasks, 13); /* 6 Winograd alternatives */
            assert_int_equal(md_model_n_warnings(m), 0);
            md_model_free(m);
            break;
        }
        if (e != AT_ENOMEM)
            fail_msg("limit %zu: %s: %s", limit, at_errname(e), err);
        assert_null(m);
        assert_int_equal(at_test_live_allocs(), base);
    }
    fprintf(stderr, "out of memory: %d failing loads\n", tries);
    assert_int_equal(at_test_live_allocs(), base);
    at_free(data);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_cnn),
        cmocka_unit_test(test_small_cnn_winograd),
        cmocka_unit_test(test_resnet18),
        cmocka_unit_test(test_mobilenet_v2),
        cmocka_unit_test(test_transformer),
        cmocka_unit_test(test_weights_as_inputs),
        cmocka_unit_test(test_symbolic_batch),
        cmocka_unit_test(test_named_dims),
        cmocka_unit_test(test_torch_exports),
        cmocka_unit_test(test_jsonl_round_trip),
        cmocka_unit_test(test_jsonl_errors),
        cmocka_unit_test(test_cli_tasks),
        cmocka_unit_test(test_unknown_opset),
        cmocka_unit_test(test_unsupported_operator),
        cmocka_unit_test(test_truncated),
        cmocka_unit_test(test_corrupt),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_out_of_memory),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
