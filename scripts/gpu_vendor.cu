// scripts/gpu_vendor.cu -- the vendor references of scripts/gpu_check.sh, built there with the
// host's nvcc:  nvcc -O2 -o gpu_vendor gpu_vendor.cu -lcublas -lcudnn
// (or -DAT_NO_CUDNN -lcublas where cuDNN is missing: cuBLAS alone).
// Prints "cublas_sgemm M N K GFLOPS" and "cudnn_conv2d N C H W K R S pad stride GFLOPS": fp32
// with FMA math only (no TF32: cuBLAS's default math mode, cuDNN's CUDNN_FMA_MATH), the best
// algorithm cuDNN finds.  Timed as the GPU agent times a kernel: 'number' calls between two
// CUDA events, 'number' doubled until they last at least 5 ms (so a small convolution's
// launch overhead counts as little as in the agent's figures), the median of 10 such repeats
// after 3 warm-up calls.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#ifndef AT_NO_CUDNN
#include <cudnn.h>
#endif
#include <vector>

#define CK(x)                                                                                  \
    do {                                                                                       \
        auto r_ = (x);                                                                         \
        if (r_ != 0) {                                                                         \
            fprintf(stderr, "gpu_vendor: %s failed (%d) at line %d\n", #x, (int)r_, __LINE__);  \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

// Milliseconds of one call: the median over 10 repeats of 'number' calls between two events.
template <class F> static double median_ms(F run)
{
    cudaEvent_t a, b;
    std::vector<double> t;
    int number = 1;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    auto repeat = [&](int n) {
        float ms = 0;
        CK(cudaEventRecord(a));
        for (int i = 0; i < n; i++)
            run();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        return (double)ms;
    };
    for (int i = 0; i < 3; i++)
        run();
    while (number < (1 << 16) && repeat(number) < 5.0)
        number *= 2;
    for (int i = 0; i < 10; i++)
        t.push_back(repeat(number) / number);
    std::sort(t.begin(), t.end());
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    return (t[4] + t[5]) / 2;
}

static float *dev_random(size_t n)
{
    std::vector<float> h(n);
    float *d;
    for (size_t i = 0; i < n; i++)
        h[i] = (float)((i * 2654435761u >> 8) % 1000) / 1000.0f - 0.5f;
    CK(cudaMalloc(&d, n * sizeof(float)));
    CK(cudaMemcpy(d, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

int main(int argc, char **argv)
{
    int M = 4096, N = 4096, K = 4096;
    // ResNet-50's 3x3 layer (as bench_tune): N1 C64 56x56, K64, 3x3, pad 1, stride 1
#ifndef AT_NO_CUDNN
    int cn = 1, cc = 64, ch = 56, cw = 56, ck = 64, cr = 3, cs = 3, pad = 1, stride = 1;
#endif
    (void)argc;
    (void)argv;
    {
        cublasHandle_t h;
        float *A = dev_random((size_t)M * K), *B = dev_random((size_t)K * N), *C;
        const float one = 1, zero = 0;
        CK(cudaMalloc(&C, (size_t)M * N * sizeof(float)));
        CK(cublasCreate(&h));
        CK(cublasSetMathMode(h, CUBLAS_DEFAULT_MATH));
        double ms = median_ms([&] {
            // row-major C = A x B is column-major C^T = B^T x A^T
            CK(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, N, M, K, &one, B, N, A, K, &zero, C, N));
        });
        printf("cublas_sgemm %d %d %d %.1f\n", M, N, K, 2.0 * M * N * K / (ms * 1e-3) / 1e9);
        cublasDestroy(h);
        cudaFree(A);
        cudaFree(B);
        cudaFree(C);
    }
#ifndef AT_NO_CUDNN
    {
        cudnnHandle_t h;
        cudnnTensorDescriptor_t xd, yd;
        cudnnFilterDescriptor_t wd;
        cudnnConvolutionDescriptor_t cd;
        int on, oc, oh, ow, n_algo = 0;
        cudnnConvolutionFwdAlgoPerf_t perf[16];
        size_t ws_n = 0;
        void *ws = nullptr;
        const float one = 1, zero = 0;
        CK(cudnnCreate(&h));
        CK(cudnnCreateTensorDescriptor(&xd));
        CK(cudnnCreateTensorDescriptor(&yd));
        CK(cudnnCreateFilterDescriptor(&wd));
        CK(cudnnCreateConvolutionDescriptor(&cd));
        CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, cn, cc, ch, cw));
        CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, ck, cc, cr, cs));
        CK(cudnnSetConvolution2dDescriptor(cd, pad, pad, stride, stride, 1, 1,
                                           CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
        CK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));
        CK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
        CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, on, oc, oh, ow));
        float *X = dev_random((size_t)cn * cc * ch * cw), *W = dev_random((size_t)ck * cc * cr * cs);
        float *Y;
        CK(cudaMalloc(&Y, (size_t)on * oc * oh * ow * sizeof(float)));
        CK(cudnnFindConvolutionForwardAlgorithm(h, xd, wd, cd, yd, 16, &n_algo, perf));
        int best = -1;
        for (int i = 0; i < n_algo && best < 0; i++)
            if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].mathType == CUDNN_FMA_MATH)
                best = i;
        if (best < 0) {
            fprintf(stderr, "gpu_vendor: cuDNN found no FMA algorithm\n");
            return 1;
        }
        CK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, perf[best].algo, &ws_n));
        if (ws_n)
            CK(cudaMalloc(&ws, ws_n));
        double ms = median_ms([&] {
            CK(cudnnConvolutionForward(h, &one, xd, X, wd, W, cd, perf[best].algo, ws, ws_n,
                                       &zero, yd, Y));
        });
        double flops = 2.0 * on * oc * oh * ow * cc * cr * cs;
        printf("cudnn_conv2d %d %d %d %d %d %d %d %d %d %.1f\n", cn, cc, ch, cw, ck, cr, cs, pad,
               stride, flops / (ms * 1e-3) / 1e9);
        cudnnDestroy(h);
    }
#endif
    return 0;
}
