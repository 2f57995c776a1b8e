/* tests/support/ref_ops.h -- plain C reference operators for tests (prefix ref_).
**
**   ref_matmul(M, N, K, tb, A, B, C);                         C = A x B
**   ref_conv2d(&(ref_conv2d_params){...}, X, W, b, out);       any layout/stride/pad/groups
**   ref_dag_eval(dag, bufs, err, sizeof err);                  any DAG, element by element
**
** The simplest loops, accumulating in double, with the same tensor layouts as the library
** operators of kernels/kn_ops.c (docs/operators.md).  They are the "naive C" side of the
** checks that generated kernels compute the right thing; speed does not matter.  Every
** array is dense, row-major (last index fastest); no function allocates except
** ref_dag_eval (nothing that outlives the call). */
#ifndef REF_OPS_H
#define REF_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "schedule_space/schedule_space.h"

/* C[M,N] = A[M,K] x B, B being [K,N] (tb = 0) or [N,K] (tb = 1). */
void ref_matmul(int M, int N, int K, int tb, const float *A, const float *B, float *C);

/* C[b] = A[b] x B[b] for b < batch; A [batch,M,K], B [batch,K,N] or [batch,N,K] (tb). */
void ref_batch_matmul(int batch, int M, int N, int K, int tb, const float *A, const float *B,
                      float *C);

/* out[M,N] = X[M,K] x W[N,K]^T (+ b[N] unless b is NULL) (then max(., 0) if relu). */
void ref_dense(int M, int N, int K, const float *X, const float *W, const float *b, int relu,
               float *out);

typedef struct ref_conv2d_params {
    int nhwc;             /* 0: X [N,C,H,W], W [K,C/g,R,S], out [N,K,OH,OW];
                          ** 1: X [N,H,W,C], W [R,S,C/g,K], out [N,OH,OW,K] */
    int N, C, H, W;       /* input */
    int K, R, S;          /* output channels, kernel height and width */
    int sh, sw;           /* strides (>= 1) */
    int ph, pw;           /* zero padding on each side (>= 0) */
    int dh, dw;           /* dilations (>= 1) */
    int groups;           /* divides C and K */
    int relu;             /* max(., 0) after the bias */
} ref_conv2d_params;

/* Output height and width: (H + 2*ph - dh*(R-1) - 1)/sh + 1; returns 0 (and sets nothing)
** when the parameters are invalid or the output would be empty, 1 otherwise. */
int ref_conv2d_out(const ref_conv2d_params *p, int *oh, int *ow);

/* 'b' is the bias [K] or NULL.  The parameters must be valid (ref_conv2d_out). */
void ref_conv2d(const ref_conv2d_params *p, const float *X, const float *Wt, const float *b,
                float *out);

typedef struct ref_pool2d_params {
    int N, C, H, W; /* NCHW input */
    int kh, kw;     /* window */
    int sh, sw;     /* strides */
    int ph, pw;     /* padding on each side: -inf for max, 0 for avg */
} ref_pool2d_params;

/* Output height and width as for conv2d with dilation 1; 0 when empty or invalid. */
int ref_pool2d_out(const ref_pool2d_params *p, int *oh, int *ow);
void ref_max_pool2d(const ref_pool2d_params *p, const float *X, float *out);
/* Divides by kh*kw whatever part of the window is padding. */
void ref_avg_pool2d(const ref_pool2d_params *p, const float *X, float *out);
/* out[N,C] = mean of X[n,c,:,:]. */
void ref_global_avg_pool(int N, int C, int H, int W, const float *X, float *out);

/* Softmax of each of 'rows' rows of 'n' elements (the max is subtracted first). */
void ref_softmax(int64_t rows, int64_t n, const float *X, float *out);

/* Per row: (x - mean) / sqrt(var + eps) * gamma + beta, var the mean squared deviation. */
void ref_layer_norm(int64_t rows, int64_t n, double eps, const float *X, const float *gamma,
                    const float *beta, float *out);

/* Evaluate a float32 DAG directly from its expressions, element by element.  'bufs[i]'
** holds op i (ss_op_n_elems floats, row-major): the caller fills the placeholders and
** provides storage for every compute op, which this writes in topological order.
** Returns AT_EUNSUPPORTED for a tensor that is not float32, AT_EINVAL with a message when
** a load outside a select arm leaves its tensor (a DAG bug), AT_ENOMEM. */
at_err ref_dag_eval(const ss_dag *dag, float *const *bufs, char *errmsg, size_t errmsg_size);

#endif /* REF_OPS_H */
