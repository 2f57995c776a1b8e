# scripts/gpu_vendor_torch.py -- the GPU check's second way to the vendor references, for a
# host where gpu_vendor.cu cannot be built or run (no nvcc, no cuBLAS or cuDNN headers) but
# PyTorch is installed: torch.matmul on fp32 is cuBLAS's sgemm, torch's conv2d with
# cudnn.benchmark is cuDNN's fastest algorithm; TF32 is off for both (FMA math, as
# gpu_vendor.cu).  Timed the same way: 'number' calls between two CUDA events, doubled until
# they last 5 ms, the median of 10 repeats after 3 warm-ups.  Prints the lines gpu_vendor
# prints ("cublas_sgemm M N K GFLOPS", "cudnn_conv2d N C H W K R S pad stride GFLOPS"), each
# only when it was measured:  python3 gpu_vendor_torch.py [cublas] [cudnn]
import sys

want = set(sys.argv[1:]) or {"cublas", "cudnn"}
if not want <= {"cublas", "cudnn"}:
    print(f"gpu_vendor_torch: unknown reference {sorted(want - {'cublas', 'cudnn'})} "
          "(usage: gpu_vendor_torch.py [cublas] [cudnn])", file=sys.stderr)
    sys.exit(2)

try:
    import torch
except Exception as e:  # no PyTorch: say so and let the caller go on
    print(f"gpu_vendor_torch: no PyTorch ({e})", file=sys.stderr)
    sys.exit(1)
if not torch.cuda.is_available():
    print("gpu_vendor_torch: PyTorch sees no GPU", file=sys.stderr)
    sys.exit(1)
torch.backends.cuda.matmul.allow_tf32 = False
torch.backends.cudnn.allow_tf32 = False
torch.backends.cudnn.benchmark = True


def median_ms(run):
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)

    def repeat(n):
        a.record()
        for _ in range(n):
            run()
        b.record()
        b.synchronize()
        return a.elapsed_time(b)

    for _ in range(3):
        run()
    number = 1
    while number < (1 << 16) and repeat(number) < 5.0:
        number *= 2
    t = sorted(repeat(number) / number for _ in range(10))
    return (t[4] + t[5]) / 2


def rand(*shape):
    return torch.rand(*shape, device="cuda", dtype=torch.float32) - 0.5


with torch.no_grad():
    if "cublas" in want:
        M = N = K = 4096
        A, B = rand(M, K), rand(K, N)
        C = torch.empty(M, N, device="cuda")
        ms = median_ms(lambda: torch.matmul(A, B, out=C))
        print(f"cublas_sgemm {M} {N} {K} {2.0 * M * N * K / (ms * 1e-3) / 1e9:.1f}")
    if "cudnn" in want:
        n, c, h, w, k, r, s, pad, stride = 1, 64, 56, 56, 64, 3, 3, 1, 1
        X, W = rand(n, c, h, w), rand(k, c, r, s)
        conv = torch.nn.functional.conv2d
        Y = conv(X, W, padding=pad, stride=stride)
        ms = median_ms(lambda: conv(X, W, padding=pad, stride=stride))
        flops = 2.0 * Y.numel() * c * r * s
        print(f"cudnn_conv2d {n} {c} {h} {w} {k} {r} {s} {pad} {stride} "
              f"{flops / (ms * 1e-3) / 1e9:.1f}")
