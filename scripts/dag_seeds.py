#!/usr/bin/env python3
"""Seeds of the DAG fuzz target (tests/fuzz/fuzz_dag.c): scripts/dag_seeds.py DIR.

A few small DAGs of the shapes the parser knows (placeholders, reductions, select, casts),
and the inputs that once crashed the tuner by recursion: 10,000 nested parentheses,
200,000 leading minuses and a 30,000-term sum (docs/dag_format.md, "Limits"); and 100
minuses, which the printer once wrote with parentheses nested past the limit."""
import os
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
seeds = {
    "matmul": "input A[8, 4] float32\nconst B[4, 6] float32\n"
              "C[i:8, j:6] = sum[k:4](A[i, k] * B[k, j])\n",
    "pad_relu": "input X[1, 6, 6, 3] float32\n"
                "pad[n:1, h:8, w:8, c:3] = select(h >= 1 && h < 7 && w >= 1 && w < 7, "
                "X[n, h - 1, w - 1, c], 0.0)\n"
                "relu[n:1, h:8, w:8, c:3] = max(pad[n, h, w, c], 0.0)\n",
    "softmax": "input X[2, 5] float32\nm[i:2] = max[j:5](X[i, j])\n"
               "e[i:2, j:5] = exp(X[i, j] - m[i])\ns[i:2] = sum[j:5](e[i, j])\n"
               "y[i:2, j:5] = e[i, j] / s[i]\n",
    "deep_parens": "input A[4] float32\nB[i:4] = " + "(" * 10000 + "A[i]" + ")" * 10000 + "\n",
    "many_minus": "input A[4] float32\nB[i:4] = " + "-" * 200000 + "A[i]\n",
    "long_sum": "input A[4] float32\nB[i:4] = " + " + ".join(["A[i]"] * 30000) + "\n",
    # within the limit, but printed as "-(-(...))" it once nested twice as deep
    "minus_100": "input A[4] float32\nB[i:4] = " + "-" * 100 + "A[i]\n",
}
for name, text in seeds.items():
    with open(os.path.join(out, name + ".dag"), "w") as f:
        f.write(text)
