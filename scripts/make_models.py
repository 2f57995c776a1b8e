#!/usr/bin/python3
"""Generate ONNX test models with Debian's python3-onnx (random weights, fixed seed).

    /usr/bin/python3 scripts/make_models.py --out DIR [NAME...]
    /usr/bin/python3 scripts/make_models.py --list
    /usr/bin/python3 scripts/make_models.py --check MODEL DIR   (outputs of 'tuner run --dump
                                                                  DIR' against numpy)

Models built here with onnx.helper (no torch needed), opset 13 unless noted:
  small_cnn        1x3x32x32: conv+BN+relu, max pool, conv+relu, a residual block, a repeated
                   conv, global average pool, flatten, gemm (the tests tune and run it)
  resnet18         1x3x224x224, torchvision's ResNet-18 layout (BN after every conv)
  mobilenet_v2     1x3x224x224, torchvision's MobileNetV2 layout (depthwise convs, Clip 0..6)
  transformer      1x32x64 encoder block, 4 heads: MatMul/Add attention, Softmax, one
                   LayerNormalization node and one decomposed layer norm, FFN with Erf GELU
                   (opset 17, which has LayerNormalization)
  tiny_mlp         1x16 gemm+relu+gemm (weights as graph inputs with initializers, IR 3 style)
  token_embed, token_mask, bert_tiny   int64 token ids (and an attention mask) at run time
  bert_tiny_dyn    bert_tiny with the sequence dimension symbolic ('seq', at most 16)
  bert_tiny_hf     bert_tiny_dyn with transformers' newer mask (Expand, Cast to bool, Where
                   with finfo.min) and positions from Range
  mask_ops         Greater, Less, Equal, Not, Where and Casts to bool at run time, Range,
                   Expand and Where folded on constants
  weights_as_inputs  conv and gemm weights as graph inputs without initializers
  dynamic_batch    a conv net whose input has a symbolic batch dimension 'N'
  seed_cnn, seed_attention   a few kilobytes each: seeds of the ONNX fuzz target
Models for error tests:
  bad_opset        small_cnn claiming opset 99 of the default domain
  negative_dim     dynamic_batch whose input says its first dimension is -3
  missing_input    an Add of constants whose first input name is empty ('')
  unsupported_op   small_cnn with a node 'mystery' of type 'FancyOp' in the middle (its
                   output shape declared in value_info, so the rest still gives tasks)
With python3-torch and python3-torchvision installed (optional), also:
  tv_resnet18, tv_mobilenet_v2   torchvision's models (random weights) exported at opset 13
  tv_encoder       torch.nn.TransformerEncoderLayer(64, 4 heads, 256, GELU) at opset 13
  tv_bert2         a BERT-base-shaped encoder: 2 torch.nn.TransformerEncoderLayer (d_model 768,
                   12 heads, ff 3072, GELU), sequence 128, float input [1, 128, 768]
                   (what make bench-model tuned before BERT-base)
  tv_bert_base     BERT-base as transformers' BertModel computes it (12 layers, hidden 768,
                   12 heads, ff 3072, vocab 30522), token ids and mask [1, seq], seq symbolic
  tv_bert_small    the same with 2 layers, hidden 64, vocab 1000 (the tests)
The models are written as NAME.onnx; nothing here is committed to the repository.
"""
import argparse
import os
import sys

import numpy as np

try:
    import onnx
    from onnx import TensorProto, helper, numpy_helper
except ImportError:  # pragma: no cover
    sys.exit("make_models.py: needs Debian's python3-onnx (run it with /usr/bin/python3)")


class Builder:
    """A graph under construction: nodes, initializers, unique names, seeded weights."""

    def __init__(self, seed):
        self.rng = np.random.RandomState(seed)
        self.nodes = []
        self.inits = []
        self.value_info = []
        self.count = {}

    def name(self, base):
        k = self.count.get(base, 0)
        self.count[base] = k + 1
        return base if k == 0 else "%s_%d" % (base, k)

    def const(self, base, array):
        nm = self.name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), nm))
        return nm

    def node(self, op, inputs, base=None, n_out=1, **attrs):
        nm = self.name(base or op.lower())
        outs = [nm if i == 0 else "%s_out%d" % (nm, i) for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outs, name=nm, **attrs))
        return outs[0] if n_out == 1 else outs

    # layers ------------------------------------------------------------------------------
    def conv(self, x, cin, cout, k, stride=1, pad=None, groups=1, bias=False, base="conv"):
        pad = k // 2 if pad is None else pad
        fan_in = cin // groups * k * k
        w = (self.rng.randn(cout, cin // groups, k, k) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        ins = [x, self.const(base + ".weight", w)]
        if bias:
            ins.append(self.const(base + ".bias", (self.rng.randn(cout) * 0.1).astype(np.float32)))
        return self.node("Conv", ins, base, kernel_shape=[k, k], strides=[stride, stride],
                         pads=[pad] * 4, group=groups, dilations=[1, 1])

    def bn(self, x, c, base="bn"):
        p = [self.const(base + ".weight", self.rng.uniform(0.5, 1.5, c).astype(np.float32)),
             self.const(base + ".bias", (self.rng.randn(c) * 0.1).astype(np.float32)),
             self.const(base + ".running_mean", (self.rng.randn(c) * 0.1).astype(np.float32)),
             self.const(base + ".running_var", self.rng.uniform(0.5, 1.5, c).astype(np.float32))]
        return self.node("BatchNormalization", [x] + p, base, epsilon=1e-5)

    def relu(self, x, base="relu"):
        return self.node("Relu", [x], base)

    def relu6(self, x, base="relu6"):
        lo = self.const(base + ".min", np.array(0.0, np.float32))
        hi = self.const(base + ".max", np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi], base)

    def gemm(self, x, cin, cout, base="fc"):
        w = (self.rng.randn(cout, cin) * np.sqrt(1.0 / cin)).astype(np.float32)
        b = (self.rng.randn(cout) * 0.1).astype(np.float32)
        return self.node("Gemm", [x, self.const(base + ".weight", w),
                                  self.const(base + ".bias", b)], base, transB=1)

    def linear(self, x, cin, cout, base):
        """torch.nn.Linear as torch exports it at opset 13 for 3-d input: MatMul + Add."""
        w = (self.rng.randn(cin, cout) * np.sqrt(1.0 / cin)).astype(np.float32)
        b = (self.rng.randn(cout) * 0.1).astype(np.float32)
        y = self.node("MatMul", [x, self.const(base + ".weight", w)], base + ".matmul")
        return self.node("Add", [y, self.const(base + ".bias", b)], base + ".add")

    def model(self, name, inputs, outputs, opset=13, ir=8, value_info=()):
        graph = helper.make_graph(self.nodes, name, inputs, outputs, self.inits,
                                  value_info=list(value_info))
        m = helper.make_model(graph, producer_name="make_models.py",
                              opset_imports=[helper.make_opsetid("", opset)])
        m.ir_version = ir
        return m


def tensor(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


# ---- small CNN -----------------------------------------------------------------------------

def small_cnn(fancy=False):
    b = Builder(1)
    x = b.conv("input", 3, 16, 3, base="conv1")
    x = b.relu(b.bn(x, 16, "bn1"), "relu1")
    x = b.node("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    if fancy:
        x = b.node("FancyOp", [x], "mystery")
    x = b.relu(b.conv(x, 16, 32, 3, bias=True, base="conv2"), "relu2")
    skip = x
    y = b.relu(b.conv(x, 32, 32, 3, bias=True, base="conv3"), "relu3")
    y = b.conv(y, 32, 32, 3, bias=True, base="conv4")
    y = b.relu(b.node("Add", [y, skip], "add1"), "relu4")
    y = b.relu(b.conv(y, 32, 32, 3, bias=True, base="conv5"), "relu5")  # same task as conv3
    y = b.node("GlobalAveragePool", [y], "gap")
    y = b.node("Flatten", [y], "flatten", axis=1)
    y = b.gemm(y, 32, 10, "fc")
    vi = [tensor("mystery", [1, 16, 16, 16])] if fancy else []
    return b.model("small_cnn", [tensor("input", [1, 3, 32, 32])], [tensor(y, [1, 10])],
                   value_info=vi)


# ---- ResNet-18 ------------------------------------------------------------------------------

def resnet18():
    b = Builder(18)
    x = b.conv("input", 3, 64, 7, stride=2, pad=3, base="conv1")
    x = b.relu(b.bn(x, 64, "bn1"), "relu")
    x = b.node("MaxPool", [x], "maxpool", kernel_shape=[3, 3], strides=[2, 2], pads=[1] * 4)
    cin = 64
    for layer, (cout, stride) in enumerate([(64, 1), (128, 2), (256, 2), (512, 2)], 1):
        for blk in range(2):
            s = stride if blk == 0 else 1
            pre = "layer%d.%d" % (layer, blk)
            identity = x
            y = b.relu(b.bn(b.conv(x, cin, cout, 3, s, base=pre + ".conv1"), cout, pre + ".bn1"),
                       pre + ".relu1")
            y = b.bn(b.conv(y, cout, cout, 3, base=pre + ".conv2"), cout, pre + ".bn2")
            if s != 1 or cin != cout:
                identity = b.bn(b.conv(x, cin, cout, 1, s, pad=0, base=pre + ".downsample.0"),
                                cout, pre + ".downsample.1")
            x = b.relu(b.node("Add", [y, identity], pre + ".add"), pre + ".relu2")
            cin = cout
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    x = b.gemm(x, 512, 1000, "fc")
    return b.model("resnet18", [tensor("input", [1, 3, 224, 224])], [tensor(x, [1, 1000])])


# ---- MobileNetV2 ----------------------------------------------------------------------------

def mobilenet_v2():
    b = Builder(2)
    x = b.relu6(b.bn(b.conv("input", 3, 32, 3, 2, base="features.0.0"), 32, "features.0.1"),
                "features.0.2")
    cin, idx = 32, 1
    for t, c, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2),
                       (6, 96, 3, 1), (6, 160, 3, 2), (6, 320, 1, 1)]:
        for i in range(n):
            stride = s if i == 0 else 1
            pre = "features.%d" % idx
            hidden = cin * t
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, cin, hidden, 1, base=pre + ".expand"), hidden,
                                 pre + ".expand_bn"), pre + ".expand_relu6")
            y = b.relu6(b.bn(b.conv(y, hidden, hidden, 3, stride, groups=hidden,
                                    base=pre + ".dw"), hidden, pre + ".dw_bn"), pre + ".dw_relu6")
            y = b.bn(b.conv(y, hidden, c, 1, base=pre + ".project"), c, pre + ".project_bn")
            if stride == 1 and cin == c:
                y = b.node("Add", [x, y], pre + ".add")
            x, cin, idx = y, c, idx + 1
    x = b.relu6(b.bn(b.conv(x, 320, 1280, 1, base="features.18.0"), 1280, "features.18.1"),
                "features.18.2")
    x = b.node("GlobalAveragePool", [x], "avgpool")
    x = b.node("Flatten", [x], "flatten", axis=1)
    x = b.gemm(x, 1280, 1000, "classifier")
    return b.model("mobilenet_v2", [tensor("input", [1, 3, 224, 224])], [tensor(x, [1, 1000])])


# ---- transformer encoder block -------------------------------------------------------------

def layer_norm_node(b, x, base, D):
    g = b.const(base + ".weight", b.rng.uniform(0.5, 1.5, D).astype(np.float32))
    be = b.const(base + ".bias", (b.rng.randn(D) * 0.1).astype(np.float32))
    return b.node("LayerNormalization", [x, g, be], base, axis=-1, epsilon=1e-5)


def layer_norm_decomposed(b, x, base, D):
    """What torch exports for nn.LayerNorm below opset 17."""
    m = b.node("ReduceMean", [x], base + ".mean", axes=[-1], keepdims=1)
    d = b.node("Sub", [x, m], base + ".sub")
    p = b.node("Pow", [d, b.const(base + ".two", np.array(2.0, np.float32))], base + ".pow")
    v = b.node("ReduceMean", [p], base + ".var", axes=[-1], keepdims=1)
    e = b.node("Add", [v, b.const(base + ".eps", np.array(1e-5, np.float32))], base + ".addeps")
    s = b.node("Sqrt", [e], base + ".sqrt")
    n = b.node("Div", [d, s], base + ".div")
    g = b.const(base + ".weight", b.rng.uniform(0.5, 1.5, D).astype(np.float32))
    be = b.const(base + ".bias", (b.rng.randn(D) * 0.1).astype(np.float32))
    return b.node("Add", [b.node("Mul", [n, g], base + ".mul"), be], base + ".add")


def transformer(S=32, D=64, H=4, FF=256):
    b = Builder(7)
    x = "input"
    dh = D // H

    def heads(t, base, perm):
        r = b.node("Reshape", [t, b.const(base + ".shape", np.array([1, S, H, dh], np.int64))],
                   base + ".reshape")
        return b.node("Transpose", [r], base + ".transpose", perm=perm)

    q = heads(b.linear(x, D, D, "attn.q"), "attn.q", [0, 2, 1, 3])   # 1 H S dh
    k = heads(b.linear(x, D, D, "attn.k"), "attn.k", [0, 2, 3, 1])   # 1 H dh S
    v = heads(b.linear(x, D, D, "attn.v"), "attn.v", [0, 2, 1, 3])   # 1 H S dh
    sc = b.node("MatMul", [q, k], "attn.scores")
    sc = b.node("Div", [sc, b.const("attn.scale", np.array(np.sqrt(dh), np.float32))],
                "attn.scale_div")
    p = b.node("Softmax", [sc], "attn.softmax", axis=-1)
    ctx = b.node("MatMul", [p, v], "attn.context")
    ctx = b.node("Transpose", [ctx], "attn.merge", perm=[0, 2, 1, 3])
    ctx = b.node("Reshape", [ctx, b.const("attn.merge.shape", np.array([1, S, D], np.int64))],
                 "attn.merge.reshape")
    o = b.linear(ctx, D, D, "attn.out")
    x1 = layer_norm_node(b, b.node("Add", [o, x], "attn.residual"), "norm1", D)
    h = b.linear(x1, D, FF, "ffn.fc1")
    # GELU as torch exports it at opset 13: x * 0.5 * (1 + erf(x / sqrt(2)))
    e = b.node("Erf", [b.node("Div", [h, b.const("ffn.sqrt2", np.array(1.4142135, np.float32))],
                              "ffn.gelu.div")], "ffn.gelu.erf")
    e = b.node("Add", [e, b.const("ffn.one", np.array(1.0, np.float32))], "ffn.gelu.add")
    h = b.node("Mul", [b.node("Mul", [h, e], "ffn.gelu.mul"),
                       b.const("ffn.half", np.array(0.5, np.float32))], "ffn.gelu.mul2")
    h = b.linear(h, FF, D, "ffn.fc2")
    y = layer_norm_decomposed(b, b.node("Add", [h, x1], "ffn.residual"), "norm2", D)
    return b.model("transformer", [tensor("input", [1, S, D])], [tensor(y, [1, S, D])], opset=17)


# ---- small models for special cases --------------------------------------------------------

def tiny_mlp():
    """Weights listed among the graph inputs too, as IR version 3 exporters did."""
    b = Builder(3)
    h = b.relu(b.gemm("input", 16, 32, "fc1"), "relu1")
    y = b.gemm(h, 32, 8, "fc2")
    m = b.model("tiny_mlp", [tensor("input", [1, 16])], [tensor(y, [1, 8])], ir=3)
    for init in m.graph.initializer:
        m.graph.input.append(helper.make_tensor_value_info(init.name, init.data_type,
                                                           list(init.dims)))
    return m


def dynamic_batch():
    """A symbolic batch dimension 'N' (tuner tasks --dim N gives it a value)."""
    b = Builder(8)
    x = b.relu(b.conv("input", 3, 8, 3, bias=True, base="conv"), "relu")
    y = b.gemm(b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1),
               8, 4, "fc")
    return b.model("dynamic_batch", [tensor("input", ["N", 3, 8, 8])], [tensor(y, ["N", 4])])


def seed_cnn():
    """A few kilobytes with the CNN operators: a seed for the ONNX fuzz target."""
    b = Builder(5)
    x = b.relu(b.bn(b.conv("input", 2, 3, 3, base="conv1"), 3, "bn1"), "relu1")
    x = b.node("MaxPool", [x], "pool1", kernel_shape=[2, 2], strides=[2, 2])
    y = b.conv(x, 3, 3, 3, bias=True, base="conv2")
    y = b.relu6(b.node("Add", [y, x], "add1"), "relu6")
    y = b.node("GlobalAveragePool", [y], "gap")
    y = b.gemm(b.node("Flatten", [y], "flatten", axis=1), 3, 2, "fc")
    return b.model("seed_cnn", [tensor("input", [1, 2, 6, 6])], [tensor(y, [1, 2])])


def weights_as_inputs():
    """Conv and Gemm weights given as graph inputs without initializers (fed at run time)."""
    b = Builder(6)
    x = b.relu(b.node("Conv", ["input", "conv.weight"], "conv", kernel_shape=[3, 3],
                      pads=[1, 1, 1, 1]), "relu")
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x], "gap")], "flatten", axis=1)
    y = b.node("Gemm", [x, "fc.weight", b.const("fc.bias", np.zeros(4, np.float32))], "fc",
               transB=1)
    return b.model("weights_as_inputs", [tensor("input", [1, 3, 8, 8]),
                                         tensor("conv.weight", [8, 3, 3, 3]),
                                         tensor("fc.weight", [4, 8])], [tensor(y, [1, 4])])


def token_embed(S=8, V=50, D=32):
    """Token ids (int64) into an embedding table, then a dense layer: a Gather whose
    indices are known only at run time, as a BERT's first layer."""
    b = Builder(11)
    table = b.const("embed.weight", (b.rng.randn(V, D) * 0.5).astype(np.float32))
    pos = b.const("pos.weight", (b.rng.randn(1, S, D) * 0.1).astype(np.float32))
    x = b.node("Add", [b.node("Gather", [table, "input_ids"], "embed", axis=0), pos], "add_pos")
    y = b.relu(b.linear(x, D, 16, "fc"), "relu")
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, S])
    return b.model("token_embed", [ids], [tensor(y, [1, S, 16])])


def token_mask(S=8, V=50, D=16):
    """Token ids and an attention mask (both int64), as a BERT takes them: the mask becomes
    (1 - mask) * -10000 added to the attention scores (Unsqueeze and Cast at run time)."""
    b = Builder(12)
    table = b.const("embed.weight", (b.rng.randn(V, D) * 0.5).astype(np.float32))
    x = b.node("Gather", [table, "input_ids"], "embed", axis=0)
    q = b.linear(x, D, D, "q")
    k = b.linear(x, D, D, "k")
    v = b.linear(x, D, D, "v")
    kt = b.node("Transpose", [k], "kt", perm=[0, 2, 1])
    sc = b.node("Mul", [b.node("MatMul", [q, kt], "scores"),
                        b.const("scale", np.array(1 / np.sqrt(D), np.float32))], "scaled")
    m = b.node("Unsqueeze", ["attention_mask", b.const("axes", np.array([1], np.int64))],
               "mask_3d")
    m = b.node("Cast", [m], "mask_float", to=1)
    m = b.node("Sub", [b.const("one", np.array(1.0, np.float32)), m], "mask_inv")
    m = b.node("Mul", [m, b.const("neg", np.array(-10000.0, np.float32))], "mask_add")
    p = b.node("Softmax", [b.node("Add", [sc, m], "masked")], "probs", axis=-1)
    y = b.node("MatMul", [p, v], "context")
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, S])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, S])
    return b.model("token_mask", [ids, mask], [tensor(y, [1, S, D])])


def bert_tiny(S=16, V=100, D=32, H=2, FF=64, L=2, dyn=False, hf=False):
    """A BERT as users export it, small: token ids and an attention mask (int64), word and
    position embeddings, an embedding layer norm, L encoder layers whose attention adds the
    mask, (1 - mask) * -10000 broadcast over heads and queries, to the scores.  With dyn,
    the sequence dimension is symbolic ('seq', up to S): the position table is sliced to the
    ids' length through Shape/Gather/Unsqueeze/Slice and the reshapes use 0 and -1, as
    exporters write them."""
    b = Builder(13)
    dh = D // H
    word = b.const("embeddings.word.weight", (b.rng.randn(V, D) * 0.5).astype(np.float32))
    pos = b.const("embeddings.position.weight", (b.rng.randn(1, S, D) * 0.1).astype(np.float32))
    if dyn and hf:
        # positions as transformers' newer code computes them: Range(0, seq) into the table
        n = b.node("Gather", [b.node("Shape", ["input_ids"], "ids.shape"),
                              b.const("ids.seq_axis", np.array(1, np.int64))], "ids.seq", axis=0)
        r = b.node("Range", [b.const("pos.zero", np.array(0, np.int64)), n,
                             b.const("pos.one", np.array(1, np.int64))], "pos.range")
        pos = b.node("Gather", [b.node("Reshape", [pos, b.const("pos.flat", np.array([S, D], np.int64))],
                                       "pos.table"), r], "pos.gather", axis=0)
    elif dyn:
        n = b.node("Gather", [b.node("Shape", ["input_ids"], "ids.shape"),
                              b.const("ids.seq_axis", np.array(1, np.int64))], "ids.seq", axis=0)
        n = b.node("Unsqueeze", [n, b.const("ids.seq.axes", np.array([0], np.int64))],
                   "ids.seq.unsqueeze")
        pos = b.node("Slice", [pos, b.const("pos.start", np.array([0], np.int64)), n,
                               b.const("pos.axes", np.array([1], np.int64))], "pos.slice")
    x = b.node("Add", [b.node("Gather", [word, "input_ids"], "embeddings.word", axis=0), pos],
               "embeddings.add")
    x = layer_norm_node(b, x, "embeddings.norm", D)
    m = b.node("Unsqueeze", ["attention_mask", b.const("mask.axes", np.array([1, 2], np.int64))],
               "mask.unsqueeze")                                        # 1 1 1 S
    if hf:
        # transformers' _prepare_4d_attention_mask: expanded to [1, 1, S, S] (the length
        # from the ids' Shape), to float, inverted, and masked_fill(inverted.bool(), min)
        n2 = b.node("Unsqueeze", [n, b.const("mask.seq.axes", np.array([0], np.int64))],
                    "mask.seq")
        shp = b.node("Concat", [b.const("mask.lead", np.array([1, 1], np.int64)), n2, n2],
                     "mask.shape", axis=0)
        m = b.node("Expand", [m, shp], "mask.expand")
        m = b.node("Cast", [m], "mask.cast", to=1)
        m = b.node("Sub", [b.const("mask.one", np.array(1.0, np.float32)), m], "mask.invert")
        c = b.node("Cast", [m], "mask.bool", to=9)
        m = b.node("Where", [c, b.const("mask.min", np.array(np.finfo(np.float32).min,
                                                             np.float32)), m], "mask.fill")
    else:
        m = b.node("Cast", [m], "mask.cast", to=1)
        m = b.node("Sub", [b.const("mask.one", np.array(1.0, np.float32)), m], "mask.invert")
        m = b.node("Mul", [m, b.const("mask.neg", np.array(-10000.0, np.float32))], "mask.scale")

    def heads(t, base, perm):
        r = b.node("Reshape", [t, b.const(base + ".shape", np.array([1, -1 if dyn else S, H, dh],
                                                                     np.int64))],
                   base + ".reshape")
        return b.node("Transpose", [r], base + ".transpose", perm=perm)

    for layer in range(L):
        p = "layer%d" % layer
        q = heads(b.linear(x, D, D, p + ".q"), p + ".q", [0, 2, 1, 3])
        k = heads(b.linear(x, D, D, p + ".k"), p + ".k", [0, 2, 3, 1])
        v = heads(b.linear(x, D, D, p + ".v"), p + ".v", [0, 2, 1, 3])
        sc = b.node("Div", [b.node("MatMul", [q, k], p + ".scores"),
                            b.const(p + ".scale", np.array(np.sqrt(dh), np.float32))],
                    p + ".scale_div")
        sc = b.node("Add", [sc, m], p + ".masked")
        a = b.node("Softmax", [sc], p + ".softmax", axis=-1)
        c = b.node("Transpose", [b.node("MatMul", [a, v], p + ".context")], p + ".merge",
                   perm=[0, 2, 1, 3])
        c = b.node("Reshape", [c, b.const(p + ".merge.shape", np.array([1, 0 if dyn else S, D],
                                                                        np.int64))],
                   p + ".merge.reshape")
        x1 = layer_norm_node(b, b.node("Add", [b.linear(c, D, D, p + ".out"), x], p + ".res1"),
                             p + ".norm1", D)
        h = b.linear(x1, D, FF, p + ".fc1")
        e = b.node("Erf", [b.node("Div", [h, b.const(p + ".sqrt2", np.array(1.4142135,
                                                                          np.float32))],
                                  p + ".gelu.div")], p + ".gelu.erf")
        e = b.node("Add", [e, b.const(p + ".gelu.one", np.array(1.0, np.float32))],
                   p + ".gelu.add")
        h = b.node("Mul", [b.node("Mul", [h, e], p + ".gelu.mul"),
                           b.const(p + ".gelu.half", np.array(0.5, np.float32))], p + ".gelu.mul2")
        x = layer_norm_node(b, b.node("Add", [b.linear(h, FF, D, p + ".fc2"), x1], p + ".res2"),
                            p + ".norm2", D)
    seq = "seq" if dyn else S
    ids = helper.make_tensor_value_info("input_ids", TensorProto.INT64, [1, seq])
    mask = helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, seq])
    out = helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, seq, D])
    return b.model("bert_tiny_hf" if hf else "bert_tiny_dyn" if dyn else "bert_tiny",
                   [ids, mask], [out], opset=17)


def mask_ops(S=8):
    """The comparisons and selects masks are made of, on float data at run time: Greater,
    Less, Equal, Not, Where, Cast to bool and back, and Range/Expand/Equal/Where folded on
    constants (the shape arithmetic exporters write around them)."""
    b = Builder(21)
    x = "input"
    a = b.node("Greater", [x, b.const("q", np.array(0.25, np.float32))], "gt")
    lo = b.node("Less", [x, b.const("mq", np.array(-0.25, np.float32))], "lt")
    y = b.node("Where", [a, b.node("Mul", [x, b.const("two", np.array(2.0, np.float32))], "x2"),
                         b.node("Where", [lo, x, b.const("half", np.array(0.5, np.float32))],
                                "inner")], "outer")
    y = b.node("Add", [y, b.node("Cast", [b.node("Not", [a], "not")], "not_f", to=1)], "add1")
    e = b.node("Cast", [b.node("Equal", [x, x], "eq")], "eq_f", to=1)
    y = b.node("Add", [y, e], "add2")
    # folded: Range(0, S) == Range(0, S) -> ones, Where on them, Expand to [1, S]
    r = b.node("Range", [b.const("r0", np.array(0, np.int64)), b.const("rS", np.array(S, np.int64)),
                         b.const("r1", np.array(1, np.int64))], "range")
    w = b.node("Where", [b.node("Equal", [r, r], "req"), b.const("wa", np.array(3.0, np.float32)),
                         b.const("wb", np.array(-1.0, np.float32))], "rwhere")
    w = b.node("Expand", [w, b.const("wshape", np.array([1, S], np.int64))], "rexpand")
    y = b.node("Mul", [y, w], "scaled")
    c = b.node("Cast", [b.node("Cast", [x], "tobool", to=9)], "tofloat", to=1)
    y = b.node("Add", [y, c], "add3")
    return b.model("mask_ops", [tensor(x, [1, S])], [tensor(y, [1, S])])


def bad_opset():
    m = small_cnn()
    m.opset_import[0].version = 99
    return m


def unsupported_op():
    return small_cnn(fancy=True)


def negative_dim():
    m = dynamic_batch()
    d = m.graph.input[0].type.tensor_type.shape.dim[0]
    d.Clear()
    d.dim_value = -3
    return m


def missing_input():
    """Constant elementwise nodes with an empty input name ('' is an absent optional input
    in ONNX): the folding found by fuzz_onnx read the tensor before index 0."""
    b = Builder(9)
    c = b.const("c", np.ones([1, 4], np.float32))
    y = b.node("Add", ["", c], "add_missing")
    y = b.node("Add", ["input", y], "add")
    return b.model("missing_input", [tensor("input", [1, 4])], [tensor(y, [1, 4])])


def torch_module(name):
    """The torch module a tv_* model is exported from, and its input: the same seed gives the
    same weights, so make bench-model runs PyTorch on the network the ONNX file holds."""
    import torch
    torch.manual_seed(0)
    if name in ("tv_resnet18", "tv_mobilenet_v2"):
        import torchvision
        net = getattr(torchvision.models, name[3:])(weights=None).eval()
        return net, torch.randn(1, 3, 224, 224)
    if name == "tv_encoder":
        layer = torch.nn.TransformerEncoderLayer(d_model=64, nhead=4, dim_feedforward=256,
                                                 batch_first=True, activation="gelu").eval()
        return layer, torch.randn(1, 32, 64)
    if name == "tv_bert2":
        layer = torch.nn.TransformerEncoderLayer(d_model=768, nhead=12, dim_feedforward=3072,
                                                 batch_first=True, activation="gelu")
        enc = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        return enc.eval(), torch.randn(1, 128, 768)
    if name in BERTS:
        torch.manual_seed(0)
        net = bert_module(**BERTS[name]).eval()
        S = BERTS[name]["seq"]
        ids = torch.randint(0, BERTS[name]["vocab"], (1, S))
        mask = torch.ones(1, S, dtype=torch.int64)
        mask[0, S - S // 8:] = 0           # the last eighth is padding
        return net, (ids, mask)
    raise KeyError(name)


# BERT as transformers' BertModel computes it (eval mode), written out here so that no
# download or PyPI package is needed: word + position + token-type embeddings and their layer
# norm (eps 1e-12), the extended attention mask (1 - mask) * finfo(float32).min added to the
# scores of every head, L post-norm encoder layers with separate Q, K, V projections and exact
# (erf) GELU.  Exported with the sequence dimension symbolic ('seq').
BERTS = {
    "tv_bert_base": dict(vocab=30522, hidden=768, layers=12, heads=12, ff=3072, max_pos=512, seq=128),
    "tv_bert_small": dict(vocab=1000, hidden=64, layers=2, heads=4, ff=128, max_pos=64, seq=32),
}


def bert_module(vocab, hidden, layers, heads, ff, max_pos, seq):
    import math
    import torch
    from torch import nn

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
            self.attn_out = nn.Linear(hidden, hidden)
            self.attn_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.inter = nn.Linear(hidden, ff)
            self.out = nn.Linear(ff, hidden)
            self.out_norm = nn.LayerNorm(hidden, eps=1e-12)

        def heads(self, x):
            b, s, _ = x.shape
            return x.view(b, s, heads, hidden // heads).permute(0, 2, 1, 3)

        def forward(self, x, ext):
            q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
            scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(hidden // heads)
            probs = torch.softmax(scores + ext, dim=-1)
            ctx = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
            ctx = ctx.view(ctx.shape[0], ctx.shape[1], hidden)
            a = self.attn_norm(self.attn_out(ctx) + x)
            h = nn.functional.gelu(self.inter(a))
            return self.out_norm(self.out(h) + a)

    class Bert(nn.Module):
        def __init__(self):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(max_pos, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.emb_norm = nn.LayerNorm(hidden, eps=1e-12)
            self.layers = nn.ModuleList(Layer() for _ in range(layers))
            self.register_buffer("position_ids", torch.arange(max_pos).unsqueeze(0))
            self.register_buffer("token_type_ids", torch.zeros(1, max_pos, dtype=torch.int64))
            for m in self.modules():   # BertModel's initialisation: N(0, 0.02)
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    m.weight.data.normal_(0.0, 0.02)
                if isinstance(m, nn.Linear):
                    m.bias.data.normal_(0.0, 0.02)

        def forward(self, input_ids, attention_mask):
            s = input_ids.shape[1]
            x = (self.word(input_ids) + self.position(self.position_ids[:, :s])
                 + self.token_type(self.token_type_ids[:, :s]))
            x = self.emb_norm(x)
            ext = attention_mask[:, None, None, :].to(torch.float32)
            ext = (1.0 - ext) * torch.finfo(torch.float32).min
            for layer in self.layers:
                x = layer(x, ext)
            return x

    return Bert()


def export_torch(name):
    import io
    import torch
    net, x = torch_module(name)
    buf = io.BytesIO()
    # with gradients on, torch takes the plain path of its encoder layers, not the fused
    # kernel of inference mode (which does not export)
    if name in BERTS:
        torch.onnx.export(net, x, buf, opset_version=13,
                          input_names=["input_ids", "attention_mask"], output_names=["output"],
                          dynamic_axes={"input_ids": {1: "seq"}, "attention_mask": {1: "seq"},
                                        "output": {1: "seq"}})
        return onnx.load_from_string(buf.getvalue())
    torch.onnx.export(net, x, buf, opset_version=13, input_names=["input"],
                      output_names=["output"])
    return onnx.load_from_string(buf.getvalue())


def torchvision_model(kind):
    return export_torch("tv_" + kind)


# ---- a numpy reference for checking 'tuner run' (--check) ----------------------------------

def _conv(x, w, b, a):
    g = a.get("group", 1)
    sh, sw = a.get("strides", [1, 1])
    dh, dw = a.get("dilations", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, wd = x.shape
    k, cg, r, s = w.shape
    oh = (h - dh * (r - 1) - 1) // sh + 1
    ow = (wd - dw * (s - 1) - 1) // sw + 1
    out = np.zeros((n, k, oh, ow))
    kg = k // g
    for gi in range(g):
        xs = x[:, gi * cg:(gi + 1) * cg]
        ws = w[gi * kg:(gi + 1) * kg]
        for i in range(r):
            for j in range(s):
                patch = xs[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
                out[:, gi * kg:(gi + 1) * kg] += np.einsum("nchw,kc->nkhw", patch, ws[:, :, i, j])
    if b is not None:
        out += b.reshape(1, -1, 1, 1)
    return out


def _pool(x, a, kind):
    kh, kw = a["kernel_shape"]
    sh, sw = a.get("strides", [1, 1])
    pt, pl, pb, pr = a.get("pads", [0, 0, 0, 0])
    fill = -np.inf if kind == "max" else 0.0
    x = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=fill)
    n, c, h, w = x.shape
    oh, ow = (h - kh) // sh + 1, (w - kw) // sw + 1
    win = [x[:, :, i:i + sh * (oh - 1) + 1:sh, j:j + sw * (ow - 1) + 1:sw]
           for i in range(kh) for j in range(kw)]
    return np.max(win, axis=0) if kind == "max" else np.mean(win, axis=0)


def _softmax(x, axis):
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


_erf = np.vectorize(__import__("math").erf)


def _f64(x):
    return x.astype(np.float64) if x.dtype == np.float32 else x


def _slice(i):
    x, starts, ends = i[0], i[1], i[2]
    axes = i[3] if len(i) > 3 and i[3] is not None else range(len(starts))
    steps = i[4] if len(i) > 4 and i[4] is not None else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        sl[int(ax)] = slice(int(s), int(e), int(st))
    return x[tuple(sl)]

NP_OPS = {
    "Conv": lambda i, a: _conv(i[0], i[1], i[2] if len(i) > 2 else None, a),
    "BatchNormalization": lambda i, a: (i[0] - i[3].reshape(1, -1, *[1] * (i[0].ndim - 2))) /
        np.sqrt(i[4].reshape(1, -1, *[1] * (i[0].ndim - 2)) + a.get("epsilon", 1e-5)) *
        i[1].reshape(1, -1, *[1] * (i[0].ndim - 2)) + i[2].reshape(1, -1, *[1] * (i[0].ndim - 2)),
    "Identity": lambda i, a: i[0],
    "Shape": lambda i, a: np.array(i[0].shape, np.int64),
    "Gather": lambda i, a: np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0)),
    "Unsqueeze": lambda i, a: np.expand_dims(i[0], tuple(int(v) for v in (i[1] if len(i) > 1 else a["axes"]))),
    "Concat": lambda i, a: np.concatenate(i, axis=a["axis"]),
    "Cast": lambda i, a: ((i[0] != 0).astype(np.int64) if a["to"] == 9 else
                          i[0].astype(np.float64 if a["to"] == 1 else np.int64)),
    "Equal": lambda i, a: (i[0] == i[1]).astype(np.int64),
    "Greater": lambda i, a: (i[0] > i[1]).astype(np.int64),
    "Less": lambda i, a: (i[0] < i[1]).astype(np.int64),
    "Not": lambda i, a: (i[0] == 0).astype(np.int64),
    "Where": lambda i, a: np.where(i[0] != 0, i[1], i[2]),
    "Expand": lambda i, a: i[0] * np.ones([int(v) for v in i[1]], i[0].dtype),
    "Range": lambda i, a: np.arange(i[0], i[1], i[2]),
    "Slice": lambda i, a: _slice(i),
    "Split": lambda i, a: np.split(i[0], np.cumsum(i[1])[:-1] if len(i) > 1 else len(a), axis=a.get("axis", 0)),
    "Constant": lambda i, a: _f64(numpy_helper.to_array(a["value"])),
    "Relu": lambda i, a: np.maximum(i[0], 0),
    "Clip": lambda i, a: np.clip(i[0], i[1], i[2]),
    "MaxPool": lambda i, a: _pool(i[0], a, "max"),
    "AveragePool": lambda i, a: _pool(i[0], a, "avg"),
    "GlobalAveragePool": lambda i, a: i[0].mean(axis=(2, 3), keepdims=True),
    "Flatten": lambda i, a: i[0].reshape(int(np.prod(i[0].shape[:a.get("axis", 1)])), -1),
    "Gemm": lambda i, a: i[0] @ (i[1].T if a.get("transB", 0) else i[1]) + i[2],
    "MatMul": lambda i, a: i[0] @ i[1],
    "Add": lambda i, a: i[0] + i[1],
    "Sub": lambda i, a: i[0] - i[1],
    "Mul": lambda i, a: i[0] * i[1],
    "Div": lambda i, a: (np.trunc(i[0] / i[1]).astype(np.int64)
                         if i[0].dtype.kind == "i" and i[1].dtype.kind == "i" else i[0] / i[1]),
    "Pow": lambda i, a: i[0] ** i[1],
    "Sqrt": lambda i, a: np.sqrt(i[0]),
    "Erf": lambda i, a: _erf(i[0]),
    "Reshape": lambda i, a: i[0].reshape([i[0].shape[k] if v == 0 else int(v)
                                          for k, v in enumerate(i[1])]),
    "Transpose": lambda i, a: np.transpose(i[0], a["perm"]),
    "Softmax": lambda i, a: _softmax(i[0], a.get("axis", -1)),
    "ReduceMean": lambda i, a: i[0].mean(axis=tuple(a["axes"]), keepdims=bool(a.get("keepdims", 1))),
    "LayerNormalization": lambda i, a: (i[0] - i[0].mean(-1, keepdims=True)) /
        np.sqrt(i[0].var(-1, keepdims=True) + a.get("epsilon", 1e-5)) * i[1] + i[2],
}


def check(model_path, dump_dir, tol):
    """Evaluate the model in float64 on DIR/input_<i>.bin; compare with DIR/output_<i>.bin."""
    m = onnx.load(model_path)
    env = {t.name: numpy_helper.to_array(t).astype(np.float64) if t.data_type == 1
           else numpy_helper.to_array(t) for t in m.graph.initializer}
    inits = set(env)
    k = 0
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        shape = [d.dim_value if d.dim_value > 0 else -1 for d in vi.type.tensor_type.shape.dim]
        integer = vi.type.tensor_type.elem_type in (TensorProto.INT64, TensorProto.INT32)
        data = np.fromfile(os.path.join(dump_dir, "input_%d.bin" % k),
                           np.int64 if integer else np.float32)
        if shape.count(-1) > 1:   # symbolic dimensions other than one: 1 each but the last
            shape = [1 if d < 0 and i < len(shape) - 1 - shape[::-1].index(-1) else d
                     for i, d in enumerate(shape)]
        data = data.reshape(shape)
        env[vi.name] = data if integer else data.astype(np.float64)
        k += 1
    for node in m.graph.node:
        ins = [env[n] if n else None for n in node.input]
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        if node.op_type not in NP_OPS:
            sys.exit("make_models.py --check: no numpy reference for %s" % node.op_type)
        env[node.output[0]] = NP_OPS[node.op_type](ins, attrs)
    worst = 0.0
    for i, vo in enumerate(m.graph.output):
        ref = env[vo.name]
        got = np.fromfile(os.path.join(dump_dir, "output_%d.bin" % i), np.float32)
        err = float(np.max(np.abs(got - ref.reshape(-1))) / max(np.max(np.abs(ref)), 1e-30))
        print("output %s: max relative error %.3g against numpy (float64)" % (vo.name, err))
        worst = max(worst, err)
    return 0 if worst <= tol else 1


def torch_encoder():
    return export_torch("tv_encoder")


def torch_bert2():
    return export_torch("tv_bert2")


MODELS = {
    "small_cnn": small_cnn,
    "resnet18": resnet18,
    "mobilenet_v2": mobilenet_v2,
    "transformer": transformer,
    "tiny_mlp": tiny_mlp,
    "token_embed": token_embed,
    "token_mask": token_mask,
    "bert_tiny": bert_tiny,
    "bert_tiny_dyn": lambda: bert_tiny(dyn=True),
    "bert_tiny_hf": lambda: bert_tiny(dyn=True, hf=True),
    "mask_ops": mask_ops,
    "weights_as_inputs": weights_as_inputs,
    "dynamic_batch": dynamic_batch,
    "seed_cnn": seed_cnn,
    "seed_attention": lambda: transformer(S=4, D=8, H=2, FF=16),
    "bad_opset": bad_opset,
    "unsupported_op": unsupported_op,
    "negative_dim": negative_dim,
    "missing_input": missing_input,
    "tv_resnet18": lambda: torchvision_model("resnet18"),
    "tv_mobilenet_v2": lambda: torchvision_model("mobilenet_v2"),
    "tv_encoder": torch_encoder,
    "tv_bert2": torch_bert2,
    "tv_bert_base": lambda: export_torch("tv_bert_base"),
    "tv_bert_small": lambda: export_torch("tv_bert_small"),
}
DEFAULT = ["small_cnn", "resnet18", "mobilenet_v2", "transformer", "tiny_mlp", "token_embed", "token_mask", "bert_tiny",
           "bert_tiny_dyn", "bert_tiny_hf", "mask_ops",
           "weights_as_inputs", "dynamic_batch", "bad_opset", "unsupported_op", "negative_dim",
           "missing_input"]


def have_torch():
    try:
        import torch  # noqa: F401
        import torchvision  # noqa: F401
        return True
    except ImportError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=".", help="folder for NAME.onnx (created)")
    ap.add_argument("--list", action="store_true", help="list the model names")
    ap.add_argument("--check", nargs=2, metavar=("MODEL", "DIR"),
                    help="compare DIR/output_<i>.bin ('tuner run --dump DIR') with numpy")
    ap.add_argument("--tol", type=float, default=1e-4, help="relative error bound of --check")
    ap.add_argument("names", nargs="*", help="models to make (default: all but tv_*)")
    a = ap.parse_args()
    if a.check:
        return check(a.check[0], a.check[1], a.tol)
    if a.list:
        print("\n".join(MODELS))
        return 0
    os.makedirs(a.out, exist_ok=True)
    for name in a.names or DEFAULT:
        if name not in MODELS:
            sys.exit("make_models.py: unknown model '%s' (known: %s)" % (name, ", ".join(MODELS)))
        if name.startswith("tv_") and not have_torch():
            print("make_models.py: skipping %s: python3-torch/torchvision not installed" % name,
                  file=sys.stderr)
            continue
        m = MODELS[name]()
        if name not in ("bad_opset", "unsupported_op", "negative_dim", "missing_input"):
            onnx.checker.check_model(m)
        path = os.path.join(a.out, name + ".onnx")
        onnx.save(m, path)
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
