"""The PyTorch references of bench/run.lua (PyTorch eager, Debian's python3-torch).

A worker: one command a line on stdin, one answer a line on stdout (bench/run.lua
alternates it with its own measurement in the same run):
  info                        -> "ok python X | torch Y | numpy Z | threads ..."
  add16 <iters> <threads>     -> "ok <seconds per op>"    c = a + b, 16 float32, no grad
  chain <iters> <threads>     -> "ok <seconds per op>"    the op chain recorded, then backward
  d2 <iters> <threads>        -> "ok <seconds per call>"  d2/dx2 of x^3 at a scalar
  fft <n> <iters> <threads> -> "ok <seconds per call>"  rfft then irfft of (64, n) float32
  layernorm <iters> <threads> -> "ok <seconds per call>"  layer_norm forward + backward, (64, 512)
  sgdstep <iters> <threads>   -> "ok <seconds per step>"  SGD with momentum on a (256, 784) weight
  adamstep <iters> <threads>  -> "ok <seconds per step>"  Adam on a (256, 784) weight
  unary <op> <n> <iters> <threads> -> "ok <seconds per op>"  torch.<op> of n float32 in [0.5, 1.5)
  half <iters> <threads>      -> "ok <seconds per call>"  x.half() of 1e7 float32
  lstm <iters> <threads>      -> "ok <seconds per call>"  2-layer LSTM 256, 64 steps, batch 32
  sdpa <iters> <threads>      -> "ok <seconds per call>"  attention (8, 4, 128, 64), fwd + bwd
  pergrad <iters> <threads>   -> "ok <seconds per call>"  per-example gradients, functorch vmap(grad)
  chartf <iters> <threads>    -> "ok <seconds per step>"  the char transformer's training step
  mlp <epochs> <threads>      -> "ok <seconds per epoch>" Fashion-MNIST MLP, SGD, batch 64
  cnn <epochs> <threads>      -> "ok <seconds per epoch>" the TF guide's conv net, Adam, batch 32
  quit
The cases mirror bench/cases.lua line for line: the same shapes, ops, data, batch
sizes and optimizers. Each command sets torch.set_num_threads(threads) first.

Also a program: `python3 bench/torch_ref.py train-mlp [threads] [--uint8] [--limit N]`
trains the MLP for one epoch (or on its first N images; --uint8: images kept as the
file's bytes, each batch converted) from a cold start (bench/run.lua reads its
peak RSS, printed last as "peak_rss <bytes>"), as bench/mlp_train.lua does for dlua.
"""
import ctypes
import gzip
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

DATA_DIRS = [os.environ.get("DLUA_FASHION_MNIST", ""), "/usr/share/datasets/fashion-mnist",
             "/usr/share/datasets/fashion_mnist"]
MEAN, STD = 0.2860, 0.3530
CHAIN_REPEAT = 10          # (y * w, + 0.1, tanh) ten times, then sum: 31 ops
CHAIN_OPS = 3 * CHAIN_REPEAT + 1

now = time.perf_counter


def read_idx(name):
    for d in DATA_DIRS:
        if not d:
            continue
        for path in (os.path.join(d, name + ".gz"), os.path.join(d, name)):
            if os.path.exists(path):
                opener = gzip.open if path.endswith(".gz") else open
                with opener(path, "rb") as f:
                    raw = f.read()
                ndim = raw[3]
                dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
                return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)
    raise FileNotFoundError("fashion_mnist: cannot find " + name)


_train = None


def train_data():
    """Images (60000, 1, 28, 28) float32 standardised, labels int64 0..9."""
    global _train
    if _train is None:
        # In place after the one conversion to float32, as bench/cases.lua does.
        x = torch.from_numpy(read_idx("train-images-idx3-ubyte").copy()).float()
        x.div_(255.0).sub_(MEAN).div_(STD)
        y = torch.from_numpy(read_idx("train-labels-idx1-ubyte").astype(np.int64))
        _train = (x.unsqueeze(1), y)
    return _train


def train_bytes():
    """The same images as the file's bytes: uint8 (60000, 784), labels int64 0..9."""
    x = torch.from_numpy(read_idx("train-images-idx3-ubyte").copy()).reshape(-1, 784)
    y = torch.from_numpy(read_idx("train-labels-idx1-ubyte").astype(np.int64))
    return x, y


def standardise_batch(xb):
    """A uint8 batch as float32, standardised as train_data's images are."""
    return xb.float().div_(255.0).sub_(MEAN).div_(STD)


def add16(iters):
    a, b = torch.rand(16), torch.rand(16)
    for _ in range(100):
        c = a + b
    t0 = now()
    for _ in range(iters):
        c = a + b
    t = now() - t0
    del c
    return t / iters


def chain_fn(x, w):
    y = x
    for _ in range(CHAIN_REPEAT):
        y = torch.tanh(y * w + 0.1)
    return y.sum()


def chain(iters):
    x = torch.rand(16, requires_grad=True)
    w = torch.rand(16)
    for _ in range(20):
        g, = torch.autograd.grad(chain_fn(x, w), x)
    t0 = now()
    for _ in range(iters):
        g, = torch.autograd.grad(chain_fn(x, w), x)
    t = now() - t0
    return t / iters / CHAIN_OPS


def d2_fn(x):
    y = x ** 3
    g, = torch.autograd.grad(y, x, create_graph=True)
    h, = torch.autograd.grad(g, x)
    return h


def timed(step, iters, warm, *args):
    """Seconds per call of step(*args) over iters calls, after warm untimed ones."""
    for _ in range(warm):
        step(*args)
    t0 = now()
    for _ in range(iters):
        step(*args)
    return (now() - t0) / iters


def d2(iters):
    x = torch.tensor(2.0, requires_grad=True)
    h = d2_fn(x)
    assert abs(h.item() - 12.0) < 1e-4, h
    return timed(d2_fn, iters, 20, x)


def layernorm(iters):
    """layer_norm forward and backward (input, weight, bias) on (64, 512) float32."""
    torch.manual_seed(1)
    x, w, b = (torch.randn(*s, requires_grad=True) for s in ((64, 512), (512,), (512,)))
    c = torch.randn(64, 512)

    def step():
        y = F.layer_norm(x, (512,), w, b)
        return torch.autograd.grad((y * c).sum(), [x, w, b])
    return timed(step, iters, 20)


def fft(n, iters):
    """torch.fft.rfft then irfft of (64, n) float32: a round trip."""
    torch.manual_seed(1)
    x = torch.randn(64, n)

    def trip():
        return torch.fft.irfft(torch.fft.rfft(x), n)
    return timed(trip, iters, 20)


def unary(op, n, iters):
    """torch.<op>(x) (or torch.nn.functional.<op>) of n float32 in [0.5, 1.5)."""
    f = getattr(torch, op, None) or getattr(F, op)
    x = torch.rand(n) + 0.5
    return timed(lambda: f(x), iters, 3)


def optstep(make, iters):
    """One optimizer step on a (256, 784) float32 weight and a fixed gradient."""
    torch.manual_seed(1)
    w = torch.nn.Parameter(torch.randn(256, 784))
    w.grad = torch.randn(256, 784)
    opt = make([w])
    return timed(opt.step, iters, 20)


def sgdstep(iters):
    return optstep(lambda ps: torch.optim.SGD(ps, lr=1e-3, momentum=0.9), iters)


def adamstep(iters):
    return optstep(lambda ps: torch.optim.Adam(ps, lr=1e-3), iters)


class CharLM(torch.nn.Module):
    """scripts/examples/char_transformer.lua's model (bench/cases.lua's chartf)."""
    def __init__(self, V, T, width, heads, layers):
        super().__init__()
        self.tokens = torch.nn.Embedding(V, width)
        self.blocks = torch.nn.ModuleList(
            torch.nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.1,
                                             batch_first=True, norm_first=True, activation="gelu")
            for _ in range(layers))
        self.norm = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, V)
        pos = torch.arange(T, dtype=torch.float64).reshape(T, 1)
        i = torch.arange(width // 2, dtype=torch.float64).reshape(1, width // 2)
        angle = pos / torch.exp(i * (2 * np.log(10000) / width))
        self.positions = torch.stack([torch.sin(angle), torch.cos(angle)], 2).reshape(T, width).float()
        self.mask = torch.triu(torch.full((T, T), float("-inf")), 1)

    def forward(self, x):
        h = self.tokens(x) + self.positions
        for b in self.blocks:
            h = b(h, src_mask=self.mask)
        return self.head(self.norm(h))


def chartf(iters):
    """One training step of the char transformer: forward, backward, clipping, AdamW."""
    torch.manual_seed(1)
    V, T, B = 80, 64, 16
    model = CharLM(V, T, 64, 4, 2)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    x, y = torch.randint(0, V, (B, T)), torch.randint(0, V, (B, T))

    def step():
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        return loss
    return timed(step, iters, 3)


def pergrad(iters):
    """Per-example gradients of an MLP 784-128-10 (relu, cross-entropy) on 64 examples:
    functorch's vmap(grad), torch 1.13's per-example gradient transform."""
    import functorch
    torch.manual_seed(1)
    w1, b1 = torch.randn(128, 784) * 0.05, torch.zeros(128)
    w2, b2 = torch.randn(10, 128) * 0.05, torch.zeros(10)
    xs, ys = torch.randn(64, 784), torch.randint(0, 10, (64,))

    def loss(a1, c1, a2, c2, x, y):
        h = F.relu(F.linear(x, a1, c1))
        return F.cross_entropy(F.linear(h, a2, c2).unsqueeze(0), y.unsqueeze(0))
    g = functorch.vmap(functorch.grad(loss, argnums=(0, 1, 2, 3)), in_dims=(None, None, None, None, 0, 0))
    assert g(w1, b1, w2, b2, xs, ys)[0].shape == (64, 128, 784)
    return timed(g, iters, 3, w1, b1, w2, b2, xs, ys)


def lstm(iters):
    """A 2-layer LSTM of 256 over 64 steps of a batch of 32, forward and backward."""
    torch.manual_seed(1)
    net = torch.nn.LSTM(256, 256, num_layers=2)
    x = torch.randn(64, 32, 256, requires_grad=True)
    params = [x] + list(net.parameters())

    def step():
        return torch.autograd.grad(net(x)[0].sum(), params)
    return timed(step, iters, 3)


def sdpa(iters):
    """softmax(q k^T / sqrt(64)) v on (8, 4, 128, 64), forward and backward to q, k, v
    (torch 1.13 has no public scaled_dot_product_attention: the same formula in ops)."""
    torch.manual_seed(1)
    q, k, v = (torch.randn(8, 4, 128, 64, requires_grad=True) for _ in range(3))

    def step():
        y = torch.softmax(q @ k.transpose(-2, -1) / 8.0, -1) @ v
        return torch.autograd.grad(y.sum(), [q, k, v])
    return timed(step, iters, 3)


class MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(784, 256)
        self.fc2 = torch.nn.Linear(256, 10)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


class GuideCNN(torch.nn.Module):
    """The conv net of TensorFlow's eager execution guide: Conv2D(16, 3x3, relu),
    Conv2D(16, 3x3, relu), GlobalAveragePooling2D, Dense(10)."""

    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(1, 16, 3)
        self.c2 = torch.nn.Conv2d(16, 16, 3)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x):
        x = torch.relu(self.c1(x))
        x = torch.relu(self.c2(x))
        return self.fc(x.mean(dim=(2, 3)))


_models = {}


def model_for(name):
    """One model and optimizer per case, kept across commands (as the Lua side keeps
    its own): every timed epoch continues training the same model."""
    if name not in _models:
        torch.manual_seed(1)
        if name in ("mlp", "mlp8"):
            m = MLP()
            opt = torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9)
            if name == "mlp8":
                x, y = train_bytes()
            else:
                x, y = train_data()
                x = x.reshape(-1, 784).contiguous()
            batch = 64
        else:
            m = GuideCNN()
            opt = torch.optim.Adam(m.parameters(), lr=1e-3)
            x, y = train_data()
            batch = 32
        _models[name] = (m, opt, x, y, batch)
    return _models[name]


def epoch(name, limit=None):
    """One epoch (or its first `limit` images): shuffle, then for each batch an index
    gather, forward, loss, backward and the optimizer's step. Returns seconds and the
    last batch's loss."""
    m, opt, x, y, batch = model_for(name)
    n = x.shape[0] if limit is None else limit
    t0 = now()
    perm = torch.randperm(n)
    loss = None
    for i in range(0, n, batch):
        idx = perm[i:i + batch]
        xb, yb = x.index_select(0, idx), y.index_select(0, idx)
        if xb.dtype == torch.uint8:
            xb = standardise_batch(xb)
        loss = F.cross_entropy(m(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    t = now() - t0
    return t, loss.item()


def set_threads(threads):
    """PyTorch's own threads and, for Debian's torch (BLAS_INFO=generic: its matrix
    products go through libblas.so.3, which is OpenBLAS here), OpenBLAS's thread pool
    too, which torch.set_num_threads does not reach: with one torch thread and two
    OpenBLAS threads the MLP epoch took 2.35 s on a loaded machine."""
    torch.set_num_threads(threads)
    try:
        ctypes.CDLL("libblas.so.3").openblas_set_num_threads(threads)
    except (OSError, AttributeError):
        pass  # another BLAS: torch.set_num_threads is all there is


def mlpinfer(iters):
    torch.manual_seed(1)
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)).eval()
    x = torch.zeros(1, 784)
    with torch.no_grad():
        return timed(model, iters, 2, x)


def half(iters):
    """x.half() of 1e7 float32."""
    x = torch.rand(10**7)
    return timed(lambda: x.half(), iters, 2)


def run(cmd, n, threads):
    set_threads(threads)
    if cmd == "add16":
        return add16(n)
    if cmd == "chain":
        return chain(n)
    if cmd == "d2":
        return d2(n)
    if cmd == "layernorm":
        return layernorm(n)
    if cmd == "sgdstep":
        return sgdstep(n)
    if cmd == "adamstep":
        return adamstep(n)
    if cmd == "chartf":
        return chartf(n)
    if cmd == "pergrad":
        return pergrad(n)
    if cmd == "lstm":
        return lstm(n)
    if cmd == "sdpa":
        return sdpa(n)
    if cmd == "mlpinfer":
        return mlpinfer(n)
    if cmd == "half":
        return half(n)
    if cmd in ("mlp", "cnn"):
        # n > 1000: a partial epoch of n images (the quick mode), else n epochs.
        if n > 1000:
            return epoch(cmd, n)[0]
        return sum(epoch(cmd)[0] for _ in range(n)) / n
    raise ValueError("unknown command " + cmd)


def worker():
    out = sys.stdout
    for line in sys.stdin:
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "quit":
            break
        try:
            if parts[0] == "info":
                out.write("ok python %s | torch %s | numpy %s | torch threads %d (default), interop %d | "
                          "GLIBC_TUNABLES=%s\n" % (
                              sys.version.split()[0], torch.__version__, np.__version__, torch.get_num_threads(),
                              torch.get_num_interop_threads(), os.environ.get("GLIBC_TUNABLES", "(unset)")))
            else:
                if parts[0] == "unary":
                    set_threads(int(parts[4]))
                    t = unary(parts[1], int(parts[2]), int(parts[3]))
                elif parts[0] == "fft":   # fft <n> <iters> <threads>
                    set_threads(int(parts[3]))
                    t = fft(int(parts[1]), int(parts[2]))
                else:
                    t = run(parts[0], int(parts[1]), int(parts[2]))
                out.write("ok %.9g\n" % t)
        except Exception as e:  # the harness shows the reference as failed
            out.write("err %s: %s\n" % (type(e).__name__, str(e).replace("\n", " ")))
        out.flush()


def train_mlp(threads, limit=None, name="mlp"):
    set_threads(threads)
    t, loss = epoch(name, limit)
    print("%s: one epoch in %.2f s, last loss %.4f" % (name, t, loss))
    # This process's own peak RSS (VmHWM), which bench/run.lua reads.
    with open("/proc/self/status") as f:
        kb = int(next(l for l in f if l.startswith("VmHWM:")).split()[1])
    print("peak_rss %d" % (kb * 1024))


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "train-mlp":
        args = sys.argv[2:]
        limit = None
        if "--limit" in args:
            i = args.index("--limit")
            limit = int(args[i + 1])
            del args[i:i + 2]
        name = "mlp"
        if "--uint8" in args:
            args.remove("--uint8")
            name = "mlp8"
        train_mlp(int(args[0]) if args else 1, limit, name)
    else:
        worker()
