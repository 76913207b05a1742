"""PyTorch's side of bench/gpu.lua: the same cases on the same CUDA device.

Prints one line per case, "name milliseconds", the median of the repetitions, each
repetition timing `iters` calls between two device synchronisations.
    python3 bench/torch_gpu.py [--reps 7] [--only name,name]
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def timed(fn, iters, reps):
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / iters * 1e3)
    return statistics.median(times)


def warm_up():
    """Products for half a second, as bench/gpu.lua: the device raises its clocks under load."""
    a = torch.randn(4096, 4096, device="cuda")
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 0.5:
        a @ a
        torch.cuda.synchronize()


def cases():
    dev = "cuda"
    torch.manual_seed(1)
    out = {}

    def mm(dtype, n):
        a = torch.randn(n, n, device=dev, dtype=dtype)
        b = torch.randn(n, n, device=dev, dtype=dtype)
        return lambda: a @ b
    out["matmul_f32_4096"] = (mm(torch.float32, 4096), 20)
    out["matmul_f16_4096"] = (mm(torch.float16, 4096), 50)
    out["matmul_f32_256"] = (mm(torch.float32, 256), 2000)

    a = torch.randn(4096, 4096, device=dev)
    b = torch.randn(4096, 4096, device=dev)
    out["pointwise_chain_16M"] = (lambda: torch.relu(torch.tanh(a * b + 1) * a - torch.sigmoid(b)), 50)
    out["sum_16M"] = (lambda: a.sum(), 200)
    out["sum_rows_4096x4096"] = (lambda: a.sum(1), 200)
    out["sum_cols_4096x4096"] = (lambda: a.sum(0), 200)
    out["softmax_4096x4096"] = (lambda: torch.softmax(a, 1), 50)
    f = torch.randn(4096, 1024, device=dev)
    out["rfft_irfft_4096x1024"] = (lambda: torch.fft.irfft(torch.fft.rfft(f), 1024), 200)
    s = torch.randn(64, 64, device=dev)
    out["small_op_64x64"] = (lambda: s * 2 + 1, 5000)

    def train_step(net, x, y):
        net = net.to(dev)
        opt = torch.optim.SGD(net.parameters(), lr=0.01)

        def step():
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(x), y).backward()
            opt.step()
        return step

    def mlp(batch):
        net = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
        return train_step(net, torch.randn(batch, 784, device=dev), torch.randint(0, 10, (batch,), device=dev))
    out["mlp_step_b64"] = (mlp(64), 500)
    out["mlp_step_b4096"] = (mlp(4096), 200)
    # (dlua's compiled step against PyTorch's eager one, as the compiled chain's row)
    out["mlp_step_b64_compiled"] = (mlp(64), 500)

    conv = torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(64 * 7 * 7, 10))
    out["conv_step_b128"] = (train_step(conv, torch.randn(128, 1, 28, 28, device=dev),
                                        torch.randint(0, 10, (128,), device=dev)), 200)
    return out


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--only", default="")
    args = p.parse_args()
    only = set(filter(None, args.only.split(",")))
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    warm_up()
    for name, (fn, iters) in cases().items():
        if only and name not in only:
            continue
        print(name, "%.6f" % timed(fn, iters, args.reps), flush=True)


if __name__ == "__main__":
    main()
