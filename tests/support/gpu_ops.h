/* tests/support/gpu_ops.h -- the library operators (small shapes) whose GPU states the GPU
** tests check: tests/gpu/test_gpu_codegen (CUDA C, NVRTC, the emulator, without a GPU) and
** tests/tools/gpu_verify (on a GPU, against the CPU reference; scripts/gpu_check.sh).
**   static const char *const ops[] = {GPU_TEST_OPS}; */
#ifndef GPU_OPS_H
#define GPU_OPS_H

#define GPU_TEST_OPS                                                                         \
    "matmul:M=64,N=48,K=32", "matmul:M=8,N=8,K=1024", "batch_matmul:B=2,M=16,N=24,K=16",     \
        "dense:M=8,N=48,K=64,bias=1,relu=1", "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1",  \
        "conv2d:layout=NHWC,N=1,C=8,H=14,W=14,K=16,R=3,S=3,stride=2,pad=1",                  \
        "conv2d:N=1,C=8,H=14,W=14,K=16,R=3,S=3,pad=1,bias=1,relu=1",                         \
        "depthwise_conv2d:N=1,C=16,H=14,W=14,R=3,S=3,pad=1",                                 \
        "max_pool2d:N=1,C=8,H=16,W=16,kernel=3,stride=2,pad=1", "avg_pool2d:N=1,C=8,H=16,W=16", \
        "global_avg_pool:N=1,C=8,H=8,W=8", "softmax:M=2,N=256", "layer_norm:M=8,N=128",      \
        "add:shape=4x32", "mul:shape=4x32", "relu:shape=4x32", "gelu:shape=4x32",            \
        "transpose:shape=8x4x16"

#endif
