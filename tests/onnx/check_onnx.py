#!/usr/bin/python3
"""dl.export.onnx's models against ONNX's own checker and an independent evaluator.

    /usr/bin/python3 tests/onnx/check_onnx.py <dlua> <work dir>

Runs tests/onnx/models.lua with the given dlua (it exports each model as an .onnx file
and saves its inputs and dlua's outputs), then for each model:
  1. onnx.checker.check_model(model, full_check=True): the schema of every node and
     ONNX's shape inference over the whole graph (Debian's python3-onnx, 1.12);
  2. evaluates the graph with the small numpy evaluator below (one function per ONNX
     op, written from the operator specification, sharing no code with dlua) on the
     saved inputs, and compares with dlua's outputs: within 1e-5 (relative to the
     largest output, plus a relative 1e-5 per element).
Exits 77 (ctest's SKIP_RETURN_CODE) where python3-onnx or numpy is missing.
"""
import json
import math
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import onnx
    from onnx import numpy_helper
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
ST_DTYPES = {"F32": "<f4", "F64": "<f8", "I64": "<i8", "I32": "<i4", "U8": "u1", "BOOL": "?"}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        a, b = e["data_offsets"]
        out[name] = np.frombuffer(data[8 + n + a:8 + n + b], dtype=ST_DTYPES[e["dtype"]]).reshape(e["shape"])
    return out


# ---- the evaluator ----------------------------------------------------------------------
def attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def axes_of(node, ins, k=1):
    a = attrs(node)
    if "axes" in a:
        return tuple(a["axes"])
    if len(ins) > k and ins[k] is not None:
        return tuple(int(v) for v in ins[k])
    return None


def reduce(fn):
    def run(node, ins):
        a = attrs(node)
        axes = axes_of(node, ins)
        return [fn(ins[0], axis=axes, keepdims=bool(a.get("keepdims", 1)))]
    return run


def softmax(x, axis):
    m = x.max(axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=axis, keepdims=True)


def pad2(x, ph, pw, value):
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def out_size(n, k, s, p, d, ceil):
    span = n + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil else span // s) + 1
    if ceil and (o - 1) * s >= n + p:   # the last window must start inside the input or its left padding
        o -= 1
    return o


def conv(node, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    a = attrs(node)
    sh, sw = a.get("strides", [1, 1])
    ph, _, pw, _ = (a["pads"][0], a["pads"][2], a["pads"][1], a["pads"][3]) if "pads" in a else (0, 0, 0, 0)
    dh, dw = a.get("dilations", [1, 1])
    g = a.get("group", 1)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    xp = pad2(x, ph, pw, 0)
    ho, wo = out_size(h, kh, sh, ph, dh, False), out_size(wd, kw, sw, pw, dw, False)
    y = np.zeros((n, o, ho, wo), dtype=np.float64)
    og = o // g
    for gi in range(g):
        for i in range(kh):
            for j in range(kw):
                patch = xp[:, gi * cg:(gi + 1) * cg, i * dh:i * dh + sh * (ho - 1) + 1:sh, j * dw:j * dw + sw * (wo - 1) + 1:sw]
                y[:, gi * og:(gi + 1) * og] += np.einsum("nchw,oc->nohw", patch, w[gi * og:(gi + 1) * og, :, i, j])
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    return [y.astype(x.dtype)]


def conv_transpose(node, ins):
    x, w = ins[0], ins[1]
    b = ins[2] if len(ins) > 2 else None
    a = attrs(node)
    sh, sw = a.get("strides", [1, 1])
    ph, pw = (a["pads"][0], a["pads"][1]) if "pads" in a else (0, 0)
    dh, dw = a.get("dilations", [1, 1])
    oh, ow = a.get("output_padding", [0, 0])
    g = a.get("group", 1)
    n, c, h, wd = x.shape
    _, og, kh, kw = w.shape
    fh, fw = (h - 1) * sh + dh * (kh - 1) + 1 + oh, (wd - 1) * sw + dw * (kw - 1) + 1 + ow
    full = np.zeros((n, og * g, fh, fw), dtype=np.float64)
    cg = c // g
    for gi in range(g):
        xs, ws = x[:, gi * cg:(gi + 1) * cg], w[gi * cg:(gi + 1) * cg]
        for i in range(kh):
            for j in range(kw):
                full[:, gi * og:(gi + 1) * og, i * dh:i * dh + sh * (h - 1) + 1:sh, j * dw:j * dw + sw * (wd - 1) + 1:sw] += \
                    np.einsum("nchw,co->nohw", xs, ws[:, :, i, j])
    y = full[:, :, ph:fh - ph, pw:fw - pw]
    if b is not None:
        y = y + b.reshape(1, -1, 1, 1)
    return [y.astype(x.dtype)]


def pool(kind):
    def run(node, ins):
        x = ins[0]
        a = attrs(node)
        kh, kw = a["kernel_shape"]
        sh, sw = a.get("strides", [1, 1])
        ph, pw = (a["pads"][0], a["pads"][1]) if "pads" in a else (0, 0)
        ceil = bool(a.get("ceil_mode", 0))
        n, c, h, w = x.shape
        ho, wo = out_size(h, kh, sh, ph, 1, ceil), out_size(w, kw, sw, pw, 1, ceil)
        extra_h, extra_w = max(0, (ho - 1) * sh + kh - h - 2 * ph), max(0, (wo - 1) * sw + kw - w - 2 * pw)
        fill = -np.inf if kind == "max" else 0.0
        xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (ph, ph + extra_h), (pw, pw + extra_w)),
                    constant_values=fill)
        ones = np.pad(np.ones((h, w)), ((ph, ph + extra_h), (pw, pw + extra_w)))
        inside = np.pad(np.ones((h + 2 * ph, w + 2 * pw)), ((0, extra_h), (0, extra_w)))
        y = np.zeros((n, c, ho, wo))
        for i in range(ho):
            for j in range(wo):
                win = xp[:, :, i * sh:i * sh + kh, j * sw:j * sw + kw]
                if kind == "max":
                    y[:, :, i, j] = win.max(axis=(2, 3))
                else:
                    cnt = (inside if a.get("count_include_pad", 0) else ones)[i * sh:i * sh + kh, j * sw:j * sw + kw].sum()
                    y[:, :, i, j] = win.sum(axis=(2, 3)) / cnt
        return [y.astype(x.dtype)]
    return run


def slice_op(node, ins):
    x = ins[0]
    starts, ends = ins[1], ins[2]
    axes = ins[3] if len(ins) > 3 else range(len(starts))
    steps = ins[4] if len(ins) > 4 else [1] * len(starts)
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        sl[int(ax)] = slice(int(s), int(e), int(st))
    return [x[tuple(sl)]]


def cast(node, ins):
    to = attrs(node)["to"]
    return [ins[0].astype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[to])]


def layer_norm(node, ins):
    a = attrs(node)
    x = ins[0]
    axis = a.get("axis", -1) % x.ndim
    dims = tuple(range(axis, x.ndim))
    m = x.mean(axis=dims, keepdims=True, dtype=np.float64)
    v = ((x - m) ** 2).mean(axis=dims, keepdims=True)
    y = (x - m) / np.sqrt(v + a.get("epsilon", 1e-5)) * ins[1]
    if len(ins) > 2 and ins[2] is not None:
        y = y + ins[2]
    return [y.astype(x.dtype)]


def batch_norm(node, ins):
    x, s, b, m, v = ins
    eps = attrs(node).get("epsilon", 1e-5)
    shp = (1, -1) + (1,) * (x.ndim - 2)
    return [((x - m.reshape(shp)) / np.sqrt(v.reshape(shp) + eps) * s.reshape(shp) + b.reshape(shp)).astype(x.dtype)]


def arg(fn):
    def run(node, ins):
        a = attrs(node)
        r = fn(ins[0], axis=a.get("axis", 0))
        if a.get("keepdims", 1):
            r = np.expand_dims(r, a.get("axis", 0))
        return [r.astype(np.int64)]
    return run


def const_of_shape(node, ins):
    t = attrs(node).get("value")
    v = numpy_helper.to_array(t) if t is not None else np.zeros(1, np.float32)
    return [np.full([int(d) for d in ins[0]], v.reshape(-1)[0], dtype=v.dtype)]


def gather_elements(node, ins):
    return [np.take_along_axis(ins[0], ins[1], axis=attrs(node).get("axis", 0))]


def clip(node, ins):
    x = ins[0]
    lo = ins[1] if len(ins) > 1 and ins[1] is not None else None
    hi = ins[2] if len(ins) > 2 and ins[2] is not None else None
    if lo is not None:
        x = np.maximum(x, lo)
    if hi is not None:
        x = np.minimum(x, hi)
    return [x]


def split(node, ins):
    sizes = [int(k) for k in ins[1]]
    return np.split(ins[0], np.cumsum(sizes)[:-1], axis=attrs(node).get("axis", 0))


def cumsum(node, ins):
    ax = int(ins[1])
    x = ins[0]
    if attrs(node).get("reverse", 0):
        return [np.flip(np.cumsum(np.flip(x, ax), axis=ax), ax)]
    return [np.cumsum(x, axis=ax)]


def dft(node, ins):
    a = attrs(node)
    ax = a.get("axis", 1)
    x = ins[0][..., 0] + (1j * ins[0][..., 1] if ins[0].shape[-1] == 2 else 0)   # a last dim of 1: real
    y = np.fft.ifft(x, axis=ax) if a.get("inverse", 0) else np.fft.fft(x, axis=ax)   # ONNX's inverse divides by n
    if a.get("onesided", 0):
        y = np.take(y, np.arange(x.shape[ax] // 2 + 1), axis=ax)
    return [np.stack([y.real, y.imag], -1).astype(ins[0].dtype)]


OPS = {
    "Neg": lambda n, i: [-i[0]], "Abs": lambda n, i: [np.abs(i[0])], "Exp": lambda n, i: [np.exp(i[0])],
    "Log": lambda n, i: [np.log(i[0])], "Sqrt": lambda n, i: [np.sqrt(i[0])], "Sin": lambda n, i: [np.sin(i[0])],
    "Asin": lambda n, i: [np.arcsin(i[0])], "Acos": lambda n, i: [np.arccos(i[0])],
    "Atan": lambda n, i: [np.arctan(i[0])], "Sinh": lambda n, i: [np.sinh(i[0])], "Cosh": lambda n, i: [np.cosh(i[0])],
    "Asinh": lambda n, i: [np.arcsinh(i[0])], "Acosh": lambda n, i: [np.arccosh(i[0])],
    "Atanh": lambda n, i: [np.arctanh(i[0])],
    "Cos": lambda n, i: [np.cos(i[0])], "Tan": lambda n, i: [np.tan(i[0])], "Tanh": lambda n, i: [np.tanh(i[0])],
    "Sigmoid": lambda n, i: [1 / (1 + np.exp(-i[0]))], "Relu": lambda n, i: [np.maximum(i[0], 0)],
    "Softplus": lambda n, i: [np.log1p(np.exp(i[0]))],
    "Erf": lambda n, i: [np.vectorize(math.erf)(i[0]).astype(i[0].dtype)],
    "Floor": lambda n, i: [np.floor(i[0])], "Ceil": lambda n, i: [np.ceil(i[0])], "Round": lambda n, i: [np.round(i[0])],
    "Sign": lambda n, i: [np.sign(i[0])], "Not": lambda n, i: [np.logical_not(i[0])],
    "Atan": lambda n, i: [np.arctan(i[0])],
    # fmod = 1: C's fmod (the dividend's sign); 0: the divisor's, as Python's %
    "Mod": lambda n, i: [np.fmod(i[0], i[1]) if attrs(n).get("fmod", 0) else np.mod(i[0], i[1])],
    "Xor": lambda n, i: [np.logical_xor(i[0], i[1])], "IsInf": lambda n, i: [np.isinf(i[0])],
    "Identity": lambda n, i: [i[0]], "Reciprocal": lambda n, i: [1 / i[0]],
    "Add": lambda n, i: [i[0] + i[1]], "Sub": lambda n, i: [i[0] - i[1]], "Mul": lambda n, i: [i[0] * i[1]],
    "Div": lambda n, i: [i[0] / i[1]] if i[0].dtype.kind == "f" else [np.trunc(i[0] / i[1]).astype(i[0].dtype)],
    "Pow": lambda n, i: [np.power(i[0], i[1])], "Max": lambda n, i: [np.maximum(i[0], i[1])],
    "Min": lambda n, i: [np.minimum(i[0], i[1])], "Equal": lambda n, i: [i[0] == i[1]],
    "Less": lambda n, i: [i[0] < i[1]], "LessOrEqual": lambda n, i: [i[0] <= i[1]],
    "Greater": lambda n, i: [i[0] > i[1]], "GreaterOrEqual": lambda n, i: [i[0] >= i[1]],
    "And": lambda n, i: [np.logical_and(i[0], i[1])], "Or": lambda n, i: [np.logical_or(i[0], i[1])],
    "ReduceSum": reduce(np.sum), "ReduceMean": reduce(np.mean), "ReduceMax": reduce(np.max),
    "ReduceMin": reduce(np.min), "ReduceProd": reduce(np.prod),
    "ReduceLogSumExp": reduce(lambda x, axis, keepdims: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims))),
    "MatMul": lambda n, i: [np.matmul(i[0], i[1])],
    "Reshape": lambda n, i: [i[0].reshape([int(d) if d != 0 else i[0].shape[k] for k, d in enumerate(i[1])])],
    "Expand": lambda n, i: [i[0] * np.ones([int(d) for d in i[1]], dtype=i[0].dtype)],
    "Unsqueeze": lambda n, i: [np.expand_dims(i[0], tuple(int(a) for a in i[1]))],
    "Squeeze": lambda n, i: [np.squeeze(i[0], axis=tuple(int(a) for a in i[1]))],
    "Transpose": lambda n, i: [np.transpose(i[0], attrs(n).get("perm"))], "Cast": cast,
    "ConstantOfShape": const_of_shape, "Where": lambda n, i: [np.where(i[0], i[1], i[2])], "Clip": clip,
    "Softmax": lambda n, i: [softmax(i[0], attrs(n).get("axis", -1))],
    "LogSoftmax": lambda n, i: [np.log(softmax(i[0], attrs(n).get("axis", -1)))],
    "CumSum": cumsum, "DFT": dft, "Split": split, "ArgMax": arg(np.argmax), "ArgMin": arg(np.argmin), "Slice": slice_op,
    "Gather": lambda n, i: [np.take(i[0], i[1], axis=attrs(n).get("axis", 0))],
    "GatherElements": gather_elements,
    "Concat": lambda n, i: [np.concatenate(i, axis=attrs(n)["axis"])],
    "Shape": lambda n, i: [np.array(i[0].shape, dtype=np.int64)],
    "Conv": conv, "ConvTranspose": conv_transpose, "MaxPool": pool("max"), "AveragePool": pool("avg"), "BatchNormalization": batch_norm,
    "LayerNormalization": layer_norm,
}


def run_graph(graph, env):
    """Runs a graph's nodes on env (its inputs, and for a subgraph the enclosing graph's
    values, which ONNX lets it read by name); returns its outputs."""
    env = dict(env)
    for t in graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for node in graph.node:
        ins = [env[i] if i else None for i in node.input]
        if node.op_type == "Loop":
            outs = loop(node, ins, env)
        elif node.op_type in OPS:
            outs = OPS[node.op_type](node, ins)
        else:
            raise RuntimeError(f"the evaluator has no {node.op_type}")
        for name, v in zip(node.output, outs):
            env[name] = np.asarray(v)
    return [env[o.name] for o in graph.output]


def loop(node, ins, env):
    """Loop: while cond (and fewer than M turns, if given), the body maps (iteration,
    cond, state...) to (cond, state..., scan outputs...); no scan outputs here."""
    body = attrs(node)["body"]
    trips, cond, state = ins[0], ins[1], list(ins[2:])
    i = 0
    while (cond is None or bool(cond)) and (trips is None or i < int(trips)):
        feeds = dict(env)
        names = [v.name for v in body.input]
        feeds.update(zip(names, [np.array(i, dtype=np.int64), np.array(cond if cond is not None else True)] + state))
        out = run_graph(body, feeds)
        cond, state = out[0], out[1:1 + len(state)]
        i += 1
    return state


def evaluate(model, feeds):
    return run_graph(model.graph, feeds)


def main():
    dlua, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    subprocess.run([dlua, os.path.join(HERE, "models.lua"), work], check=True)
    failures = 0
    names = sorted(f[:-5] for f in os.listdir(work) if f.endswith(".onnx"))
    for name in names:
        model = onnx.load(os.path.join(work, name + ".onnx"))
        onnx.checker.check_model(model, full_check=True)
        io = read_safetensors(os.path.join(work, name + ".io.safetensors"))
        feeds = {inp.name: io[f"input{k + 1}"] for k, inp in enumerate(model.graph.input)}
        with np.errstate(divide="ignore", invalid="ignore"):   # 1 / 0 and 0 / 0 are meant
            got = evaluate(model, feeds)
        for k, g in enumerate(got):
            want = io[f"output{k + 1}"]
            scale = max(1.0, float(np.abs(want).max()))
            err = np.abs(g.astype(np.float64) - want.astype(np.float64))
            ok = g.shape == want.shape and bool(np.all(err <= 1e-5 * scale + 1e-5 * np.abs(want)))
            print(f"{'ok' if ok else 'FAILED':6} {name} output {k + 1}: shape {g.shape}, "
                  f"largest difference {float(err.max()) if err.size else 0:.3g}, {len(model.graph.node)} nodes")
            failures += not ok
    if len(names) < 3:
        print(f"FAILED only {len(names)} models were exported")
        failures += 1
    print(f"{len(names) - failures} passed, {failures} failed")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
