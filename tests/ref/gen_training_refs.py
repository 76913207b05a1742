#!/usr/bin/python3
"""Writes tests/lua/ref/training_ref.lua: PyTorch's results for the training library
(scripts/dlua/nn, optim.lua): optimizer steps, layer forwards with given weights,
losses and their gradients, learning-rate schedules, and a few training steps of a
small MLP end to end.

Run with Debian's python3 (it has python3-torch), from anywhere:

    /usr/bin/python3 tests/ref/gen_training_refs.py

The generated file is committed, so the Lua tests (tests/lua/test_optim.lua,
test_nn.lua) need no torch. Inputs are drawn here (float32, torch.manual_seed) and
stored with the results, exactly (17 significant digits), so both sides start from the
same values. Every reference value comes from PyTorch, never from dlua.
"""
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "lua", "ref", "training_ref.lua")

torch.manual_seed(20240501)
torch.set_num_threads(1)


def lua(v, indent=""):
    """A Lua constructor for numbers, strings, booleans, tensors, lists and dicts."""
    if isinstance(v, torch.Tensor):
        return lua(v.detach().double().tolist(), indent)
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if math.isnan(v):
            return "0/0"
        if math.isinf(v):
            return "math.huge" if v > 0 else "-math.huge"
        return repr(v)
    if isinstance(v, str):
        return '"' + v + '"'
    if isinstance(v, (list, tuple)):
        inner = ", ".join(lua(x, indent) for x in v)
        return "{" + inner + "}"
    if isinstance(v, dict):
        nxt = indent + "  "
        parts = [f"{nxt}{k} = {lua(x, nxt)}," for k, x in v.items()]
        return "{\n" + "\n".join(parts) + "\n" + indent + "}"
    raise TypeError(type(v))


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape) * scale).float()


# ---- optimizers: fixed gradient sequences, so that only the update rule is tested ------

def opt_case(cls, kwargs, steps=5, lua_opts=None):
    w0, b0 = rnd(3, 4), rnd(4)
    grads = [[rnd(3, 4), rnd(4)] for _ in range(steps)]
    w, b = w0.clone().requires_grad_(), b0.clone().requires_grad_()
    opt = cls([w, b], **kwargs)
    after = []
    for gw, gb in grads:
        w.grad, b.grad = gw.clone(), gb.clone()
        opt.step()
        after.append([w.detach().clone(), b.detach().clone()])
    return {"opts": lua_opts, "w0": w0, "b0": b0, "grads": grads, "after": after}


def gen_optim():
    cases = {}
    cases["sgd"] = opt_case(torch.optim.SGD, {"lr": 0.1}, lua_opts="{lr = 0.1}")
    cases["sgd_momentum"] = opt_case(torch.optim.SGD, {"lr": 0.1, "momentum": 0.9},
                                     lua_opts="{lr = 0.1, momentum = 0.9}")
    cases["sgd_nesterov_wd"] = opt_case(
        torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01},
        lua_opts="{lr = 0.05, momentum = 0.9, nesterov = true, weight_decay = 0.01}")
    cases["sgd_dampening"] = opt_case(torch.optim.SGD, {"lr": 0.1, "momentum": 0.5, "dampening": 0.3},
                                      lua_opts="{lr = 0.1, momentum = 0.5, dampening = 0.3}")
    cases["adam"] = opt_case(torch.optim.Adam, {"lr": 0.01}, lua_opts="{lr = 0.01}")
    cases["adam_wd_amsgrad"] = opt_case(
        torch.optim.Adam, {"lr": 0.01, "betas": (0.8, 0.99), "eps": 1e-3, "weight_decay": 0.1, "amsgrad": True},
        lua_opts="{lr = 0.01, betas = {0.8, 0.99}, eps = 1e-3, weight_decay = 0.1, amsgrad = true}")
    cases["adamw"] = opt_case(torch.optim.AdamW, {"lr": 0.01, "weight_decay": 0.1},
                              lua_opts="{lr = 0.01, weight_decay = 0.1}")
    cases["adamw_default"] = opt_case(torch.optim.AdamW, {}, lua_opts="{}")
    cases["rmsprop"] = opt_case(torch.optim.RMSprop, {"lr": 0.01}, lua_opts="{lr = 0.01}")
    cases["rmsprop_centered_momentum"] = opt_case(
        torch.optim.RMSprop, {"lr": 0.01, "alpha": 0.9, "eps": 1e-2, "momentum": 0.9, "centered": True,
                              "weight_decay": 0.1},
        lua_opts="{lr = 0.01, alpha = 0.9, eps = 1e-2, momentum = 0.9, centered = true, weight_decay = 0.1}")
    classes = {"sgd": "SGD", "sgd_momentum": "SGD", "sgd_nesterov_wd": "SGD", "sgd_dampening": "SGD",
               "adam": "Adam", "adam_wd_amsgrad": "Adam", "adamw": "AdamW", "adamw_default": "AdamW",
               "rmsprop": "RMSprop", "rmsprop_centered_momentum": "RMSprop"}
    # Drawn from a stream of their own, so that the cases above keep their inputs.
    with torch.random.fork_rng():
        torch.manual_seed(20261203)
        for key, cls, kwargs, lua_opts in (
                ("adadelta", torch.optim.Adadelta, {"lr": 0.5}, "{lr = 0.5}"),
                ("adadelta_wd", torch.optim.Adadelta, {"lr": 1.0, "rho": 0.8, "eps": 1e-4, "weight_decay": 0.1},
                 "{lr = 1.0, rho = 0.8, eps = 1e-4, weight_decay = 0.1}"),
                ("adamax", torch.optim.Adamax, {"lr": 0.01}, "{lr = 0.01}"),
                ("adamax_wd", torch.optim.Adamax, {"lr": 0.02, "betas": (0.8, 0.9), "weight_decay": 0.1},
                 "{lr = 0.02, betas = {0.8, 0.9}, weight_decay = 0.1}"),
                ("nadam", torch.optim.NAdam, {"lr": 0.01}, "{lr = 0.01}"),
                ("nadam_wd", torch.optim.NAdam, {"lr": 0.02, "weight_decay": 0.1, "momentum_decay": 0.01},
                 "{lr = 0.02, weight_decay = 0.1, momentum_decay = 0.01}"),
                ("radam", torch.optim.RAdam, {"lr": 0.01}, "{lr = 0.01}"),
                ("radam_short", torch.optim.RAdam, {"lr": 0.01, "betas": (0.9, 0.8), "weight_decay": 0.1},
                 "{lr = 0.01, betas = {0.9, 0.8}, weight_decay = 0.1}")):
            cases[key] = opt_case(cls, kwargs, steps=8, lua_opts=lua_opts)
            classes[key] = {"adadelta": "Adadelta", "adamax": "Adamax", "nadam": "NAdam",
                            "radam": "RAdam"}[key.split("_")[0]]
    out = {}
    for k, c in cases.items():
        opts = c.pop("opts")
        c["class"] = classes[k]
        out[k] = c
        out[k]["opts"] = "@" + opts   # a Lua expression, written unquoted
    return out


def gen_schedules():
    def lrs(make, epochs):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        sched = make(opt)
        out = []
        for _ in range(epochs):
            opt.step()
            sched.step()
            out.append(opt.param_groups[0]["lr"])
        return out
    return {
        "step": lrs(lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5), 7),
        "cosine": lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.001), 12),
        "exponential": lrs(lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9), 8),
        "multistep": lrs(lambda o: torch.optim.lr_scheduler.MultiStepLR(o, milestones=[2, 5, 6], gamma=0.5), 9),
        "lambda": lrs(lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 1 / (1 + e)), 6),
        "linear": lrs(lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0,
                                                                  total_iters=4), 7),
        "restarts": lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.01), 10),
        "restarts_mult": lrs(lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2), 16),
        "sequential": lrs(lambda o: torch.optim.lr_scheduler.SequentialLR(
            o, [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=3),
                torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=6)], milestones=[3]), 10),
    }


# ---- layers with given weights ----------------------------------------------------------------

def gen_layers():
    out = {}
    lin = nn.Linear(4, 3)
    x = rnd(2, 4)
    out["linear"] = {"weight": lin.weight, "bias": lin.bias, "x": x, "y": lin(x)}

    conv = nn.Conv2d(2, 3, 3, stride=2, padding=1)
    x = rnd(2, 2, 5, 5).requires_grad_()
    y = conv(x)
    gx, gw = torch.autograd.grad(y.sum() + (y * y).sum() * 0.5, [x, conv.weight])
    out["conv"] = {"weight": conv.weight, "bias": conv.bias, "x": x, "y": y, "gx": gx, "gw": gw}

    conv = nn.Conv2d(4, 4, 3, padding=2, dilation=2, groups=2, bias=False)
    x = rnd(1, 4, 6, 6)
    out["conv_groups"] = {"weight": conv.weight, "x": x, "y": conv(x)}

    x = rnd(2, 3, 6, 6)
    out["pool"] = {"x": x, "max": F.max_pool2d(x, 2), "avg": F.avg_pool2d(x, 3, stride=2, padding=1),
                   "max_s": F.max_pool2d(x, 3, stride=2, padding=1), "gap": x.mean((2, 3))}

    bn = nn.BatchNorm2d(3)
    with torch.no_grad():
        bn.weight.copy_(rnd(3))
        bn.bias.copy_(rnd(3))
    x1, x2, x3 = rnd(4, 3, 2, 2) + 1, rnd(4, 3, 2, 2) * 2, rnd(2, 3, 2, 2)
    y1 = bn(x1)
    bn(x2)
    rm, rv = bn.running_mean.clone(), bn.running_var.clone()
    bn.eval()
    y3 = bn(x3)
    out["bn2d"] = {"weight": bn.weight, "bias": bn.bias, "x1": x1, "x2": x2, "x3": x3, "y1": y1,
                   "running_mean": rm, "running_var": rv, "y3": y3}

    bn = nn.BatchNorm1d(3, momentum=0.3)
    x = rnd(5, 3)
    y = bn(x)
    out["bn1d"] = {"x": x, "y": y, "running_mean": bn.running_mean, "running_var": bn.running_var}

    cell = nn.LSTMCell(3, 4)
    x, h, c = rnd(2, 3), rnd(2, 4), rnd(2, 4)
    h2, c2 = cell(x, (h, c))
    h0, c0 = cell(x)
    out["lstm"] = {"weight_ih": cell.weight_ih, "weight_hh": cell.weight_hh, "bias_ih": cell.bias_ih,
                   "bias_hh": cell.bias_hh, "x": x, "h": h, "c": c, "h2": h2, "c2": c2,
                   "h0": h0, "c0": c0}
    for name, nl in (("rnn_tanh", "tanh"), ("rnn_relu", "relu")):
        cell = nn.RNNCell(3, 4, nonlinearity=nl)
        x, h = rnd(2, 3), rnd(2, 4)
        out[name] = {"weight_ih": cell.weight_ih, "weight_hh": cell.weight_hh, "bias_ih": cell.bias_ih,
                     "bias_hh": cell.bias_hh, "x": x, "h": h, "h2": cell(x, h)}
    cell = nn.GRUCell(3, 4)
    x, h = rnd(2, 3), rnd(2, 4)
    out["gru"] = {"weight_ih": cell.weight_ih, "weight_hh": cell.weight_hh, "bias_ih": cell.bias_ih,
                  "bias_hh": cell.bias_hh, "x": x, "h": h, "h2": cell(x, h)}

    emb = nn.Embedding(5, 3, padding_idx=1)
    idx = torch.tensor([[0, 1, 4], [2, 2, 3]])
    y = emb(idx)
    (gw,) = torch.autograd.grad((y * y).sum(), [emb.weight])
    out["embedding"] = {"weight": emb.weight, "idx": idx + 1, "padding_idx": 2, "y": y, "gw": gw}

    # Drawn from a stream of their own, so that the cases above and below keep their inputs.
    with torch.random.fork_rng():
        torch.manual_seed(20261130)
        conv = nn.ConvTranspose2d(4, 2, 3, stride=2, padding=1, output_padding=1)
        x = rnd(2, 4, 3, 3).requires_grad_()
        y = conv(x)
        gx, gw, gb = torch.autograd.grad(y.sum() + (y * y).sum() * 0.5, [x, conv.weight, conv.bias])
        out["conv_transpose"] = {"weight": conv.weight, "bias": conv.bias, "x": x, "y": y, "gx": gx, "gw": gw,
                                 "gb": gb}
        conv = nn.ConvTranspose2d(4, 6, (2, 3), stride=(1, 2), padding=(0, 1), dilation=(2, 1), groups=2,
                                  bias=False)
        x = rnd(4, 3, 4)
        out["conv_transpose_groups"] = {"weight": conv.weight, "x": x, "y": conv(x)}
        conv = nn.ConvTranspose1d(3, 2, 4, stride=3, padding=1, output_padding=2)
        x = rnd(2, 3, 5)
        out["conv_transpose1d"] = {"weight": conv.weight, "bias": conv.bias, "x": x, "y": conv(x)}

        # The activations of dlua.nn.activations, through their corners (0, the clamps'
        # bounds), on either side of them and far out; gradients of sum(y g).
        x = torch.cat([torch.tensor([-30.0, -4, -3, -1, -0.5, 0, 0.5, 1, 3, 6, 7, 30]), rnd(20) * 3])
        g = rnd(x.numel())
        acts = {}
        for name, fn in (("elu", lambda v: F.elu(v, 0.7)), ("selu", F.selu), ("celu", lambda v: F.celu(v, 1.5)),
                         ("hardtanh", lambda v: F.hardtanh(v, -2.0, 3.0)), ("relu6", F.relu6),
                         ("hardsigmoid", F.hardsigmoid), ("hardswish", F.hardswish), ("mish", F.mish),
                         ("softsign", F.softsign)):
            v = x.clone().requires_grad_()
            y = fn(v)
            (gx,) = torch.autograd.grad((y * g).sum(), [v])
            acts[name] = {"y": y, "gx": gx}
        xp = rnd(2, 3, 4)
        xp[0, 0, 0] = 0.0
        w = torch.tensor([0.25, -0.1, 0.6]).requires_grad_()
        v = xp.clone().requires_grad_()
        y = F.prelu(v, w)
        gp = rnd(2, 3, 4)
        gx, gw = torch.autograd.grad((y * gp).sum(), [v, w])
        out["activations"] = {"x": x, "g": g, "acts": acts, "prelu": {"x": xp, "weight": w, "g": gp, "y": y,
                                                                          "gx": gx, "gw": gw}}

        # Resizing (dlua.nn.resample): each case as {opts, y, gx} for x4 (2-D) or x3 (1-D);
        # gradients of sum(y g) with g of y's shape, drawn here.
        x4, x3 = rnd(2, 3, 5, 7), rnd(2, 3, 7)
        cases = []
        for dims, kw in ((2, {"size": (8, 10)}), (2, {"scale_factor": 1.7}), (2, {"size": (3, 4)}),
                         (2, {"size": (8, 10), "mode": "nearest-exact"}),
                         (2, {"size": (3, 4), "mode": "nearest-exact"}),
                         (2, {"size": (8, 10), "mode": "bilinear", "align_corners": False}),
                         (2, {"size": (8, 10), "mode": "bilinear", "align_corners": True}),
                         (2, {"scale_factor": 0.6, "mode": "bilinear", "align_corners": False}),
                         (2, {"scale_factor": 2.5, "mode": "bilinear", "align_corners": False}),
                         (2, {"size": (1, 3), "mode": "bilinear", "align_corners": True}),
                         (1, {"size": 12, "mode": "linear", "align_corners": False}),
                         (1, {"scale_factor": 2.5, "mode": "linear", "align_corners": True}),
                         (1, {"scale_factor": 3})):
            v = (x4 if dims == 2 else x3).clone().requires_grad_()
            y = F.interpolate(v, **kw)
            gy = rnd(*y.shape)
            (gx,) = torch.autograd.grad((y * gy).sum(), [v])
            opts = {k: (list(val) if isinstance(val, tuple) else val) for k, val in kw.items()}
            cases.append({"dims": dims, "opts": opts, "y": y, "g": gy, "gx": gx})
        pools = []
        for dims, size in ((2, (3, 2)), (2, (1, 1)), (2, 4), (2, (5, 7)), (1, 3), (1, 7)):
            v = (x4 if dims == 2 else x3).clone().requires_grad_()
            y = F.adaptive_avg_pool2d(v, size) if dims == 2 else F.adaptive_avg_pool1d(v, size)
            gy = rnd(*y.shape)
            (gx,) = torch.autograd.grad((y * gy).sum(), [v])
            pools.append({"dims": dims, "size": list(size) if isinstance(size, tuple) else size, "y": y, "g": gy,
                          "gx": gx})
        out["resample"] = {"x4": x4, "x3": x3, "interpolate": cases, "adaptive": pools}

        # l1_loss, binary_cross_entropy (probabilities at 0 and 1: the logs clamped at
        # -100), normalize and cosine_similarity (a zero row: the eps), with gradients.
        a, b = rnd(4, 5), rnd(4, 5)
        a[3] = 0.0
        p = torch.sigmoid(rnd(4, 5))
        p[0, 0], p[0, 1], p[1, 2] = 0.0, 1.0, 1.0
        t = (rnd(4, 5) > 0).float()
        w = rnd(4, 5).abs()
        va, vb, vp = a.clone().requires_grad_(), b.clone().requires_grad_(), p.clone().requires_grad_()
        res = {"a": a, "b": b, "p": p, "t": t, "w": w}
        for name, fn, args in (("l1", lambda: F.l1_loss(va, vb), (va, vb)),
                               ("l1_sum", lambda: F.l1_loss(va, vb, reduction="sum"), (va, vb)),
                               ("bce", lambda: F.binary_cross_entropy(vp, t), (vp,)),
                               ("bce_weighted", lambda: F.binary_cross_entropy(vp, t, weight=w, reduction="sum"), (vp,)),
                               ("normalize", lambda: (F.normalize(va) * vb).sum(), (va,)),
                               ("normalize_p1_dim1", lambda: (F.normalize(va, p=1.0, dim=0) * vb).sum(), (va,)),
                               ("cosine", lambda: (F.cosine_similarity(va, vb) * torch.arange(4.0)).sum(), (va, vb)),
                               ("cosine_dim1", lambda: F.cosine_similarity(va, vb, dim=0).sum(), (va, vb))):
            y = fn()
            grads = torch.autograd.grad(y, list(args), allow_unused=True)
            res[name] = {"y": y, "grads": [g for g in grads]}
        out["extra_losses"] = res

        # The 1-d pools (values, indices, gradients) and median (no ties in the indices).
        x = rnd(2, 3, 9)
        g = {}
        pools = []
        for kind, k, kw in (("max", 2, {}), ("max", 3, {"stride": 2, "padding": 1, "ceil_mode": True}),
                            ("avg", 3, {"stride": 1, "padding": 1}),
                            ("avg", 4, {"stride": 2, "padding": 2, "count_include_pad": False, "ceil_mode": True})):
            v = x.clone().requires_grad_()
            if kind == "max":
                y, idx = F.max_pool1d(v, k, return_indices=True, **kw)
            else:
                y, idx = F.avg_pool1d(v, k, **kw), None
            gy = rnd(*y.shape)
            (gx,) = torch.autograd.grad((y * gy).sum(), [v])
            pools.append({"kind": kind, "k": k, "opts": kw, "y": y, "g": gy, "gx": gx,
                          "idx": (idx + 1) if idx is not None else "none"})
        m = rnd(3, 6)
        m[1, 2] = float("nan")
        mv, mi = m.median(1)
        m2 = rnd(4, 5)
        out["pool1d_median"] = {"x": x, "pools": pools, "m": m, "values": mv, "indices": mi + 1,
                                "m2": m2, "all": m2.median(), "dim1": m2.median(0)[0], "dim1_idx": m2.median(0)[1] + 1}

        # dlua.nn.spatial and the ranking losses: values and gradients of sum(y c).
        sp = {}
        x = rnd(2, 3, 5, 7)
        inorm = nn.InstanceNorm2d(3, affine=True, track_running_stats=True)
        with torch.no_grad():
            inorm.weight.copy_(rnd(3))
            inorm.bias.copy_(rnd(3))
        xr = x.clone().requires_grad_()
        y = inorm(xr)
        c = rnd(*y.shape)
        (gx,) = torch.autograd.grad((y * c).sum(), [xr])
        inorm.eval()
        sp["instance"] = {"x": x, "weight": inorm.weight, "bias": inorm.bias, "y": y, "c": c, "gx": gx,
                          "running_mean": inorm.running_mean, "running_var": inorm.running_var,
                          "y_eval": inorm(x)}
        for name, fn in (("amax2d", lambda v: F.adaptive_max_pool2d(v, (2, 3))),
                         ("amax2d_4", lambda v: F.adaptive_max_pool2d(v, 4)),
                         ("amax1d", lambda v: F.adaptive_max_pool1d(v.reshape(2, 3, 35), 6)),
                         ("shuffle", lambda v: F.pixel_shuffle(v[:, :, :4, :].reshape(2, 12, 1, 7), 2)),
                         ("unshuffle", lambda v: F.pixel_unshuffle(v[:, :, :4, :6], 2))):
            xr = x.clone().requires_grad_()
            y = fn(xr)
            c = rnd(*y.shape)
            (gx,) = torch.autograd.grad((y * c).sum(), [xr])
            sp[name] = {"y": y, "c": c, "gx": gx}
        a, p_, n_ = rnd(4, 5), rnd(4, 5), rnd(4, 5)
        x1, x2, yy = rnd(6), rnd(6), torch.tensor([1.0, -1, 1, -1, 1, 1])
        for name, fn, args in (("triplet", lambda u, v, w: F.triplet_margin_loss(u, v, w, margin=0.5), (a, p_, n_)),
                               ("triplet_swap_p1", lambda u, v, w: F.triplet_margin_loss(u, v, w, p=1.0, swap=True),
                                (a, p_, n_)),
                               ("pairwise", lambda u, v, w: (F.pairwise_distance(u, v) * w[:, 0]).sum(), (a, p_, n_)),
                               ("ranking", lambda u, v, w: F.margin_ranking_loss(u, v, yy, margin=0.3), (x1, x2, x2))):
            vs = [t.clone().requires_grad_() for t in args]
            y = fn(*vs)
            grads = torch.autograd.grad(y, vs[:2])
            sp[name] = {"args": list(args), "y": y, "grads": list(grads)}
        sp["ranking"]["target"] = yy
        out["spatial"] = sp

    # Resizing where PyTorch's kernels take shortcuts of their own (found by comparing
    # random cases): nearest with a scale factor keeps its scale when the size is kept or
    # doubled; the linear modes leave a dim whose size is kept as it is.
    with torch.random.fork_rng():
        torch.manual_seed(20261204)
        edges = []
        for shape, kw in (((1, 2, 5), {"scale_factor": 1.09}), ((1, 2, 3), {"scale_factor": 2.01}),
                          ((1, 2, 4, 5), {"scale_factor": 1.1, "mode": "nearest-exact"}),
                          ((1, 2, 4), {"scale_factor": 1.24, "mode": "linear"}),
                          ((1, 2, 6, 3), {"scale_factor": 1.24, "mode": "bilinear"}),
                          ((1, 2, 2, 3), {"scale_factor": (2.0, 1.24), "mode": "bilinear", "align_corners": True})):
            x = rnd(*shape)
            opts = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}
            edges.append({"x": x, "opts": opts, "y": F.interpolate(x, **kw)})
        out["resample_edges"] = edges

    # Tensor.unfold, F.unfold and F.fold: values and gradients of sum(y c).
    with torch.random.fork_rng():
        torch.manual_seed(20261205)
        x = rnd(2, 3, 5, 6)
        folds = []
        for name, fn in (("tensor_unfold", lambda v: v.unfold(3, 3, 2)),
                         ("tensor_unfold_dim1", lambda v: v.unfold(1, 2, 1)),
                         ("unfold", lambda v: F.unfold(v, 2)),
                         ("unfold_geometry", lambda v: F.unfold(v, (2, 3), dilation=(2, 1), padding=(1, 2), stride=(2, 3))),
                         ("fold", lambda v: F.fold(F.unfold(v, 3, padding=1), (5, 6), 3, padding=1)),
                         ("fold_geometry", lambda v: F.fold(v.reshape(2, 10, 9), (5, 7), (1, 2), dilation=(1, 2),
                                                            stride=(2, 2)))):
            xr = x.clone().requires_grad_()
            y = fn(xr)
            c = rnd(*y.shape)
            (gx,) = torch.autograd.grad((y * c).sum(), [xr])
            folds.append({"name": name, "y": y, "c": c, "gx": gx})
        out["folds"] = {"x": x, "cases": folds}

    # affine_grid and grid_sample: a rotation and zoom that reaches outside the image, every
    # mode, padding mode and align_corners; gradients for x and theta (through the grid).
    with torch.random.fork_rng():
        torch.manual_seed(20261206)
        # (in float64, and with entries that keep the sampling points off whole pixels:
        # the gradient for theta jumps where a point crosses a pixel, so a point within
        # rounding of one would make the reference depend on the order of operations)
        x = rnd(2, 3, 5, 6).double()
        ang = 0.4
        theta = torch.tensor([[[math.cos(ang) * 1.3, -math.sin(ang), 0.2], [math.sin(ang), math.cos(ang) * 1.3, -0.3]],
                              [[0.713, 0.0871, -0.391], [-0.2113, 0.9037, 0.4871]]], dtype=torch.float64)
        samples = []
        for mode in ("bilinear", "nearest"):
            for padding in ("zeros", "border", "reflection"):
                for align in (False, True):
                    xr, tr = x.clone().requires_grad_(), theta.clone().requires_grad_()
                    g = F.affine_grid(tr, [2, 3, 4, 7], align_corners=align)
                    y = F.grid_sample(xr, g, mode=mode, padding_mode=padding, align_corners=align)
                    c = rnd(*y.shape).double()
                    gx, gt = torch.autograd.grad((y * c).sum(), [xr, tr])
                    samples.append({"mode": mode, "padding_mode": padding, "align_corners": align, "grid": g,
                                    "y": y, "c": c, "gx": gx, "gtheta": gt})
        out["grid_sample"] = {"x": x, "theta": theta, "cases": samples}

    # More activations and losses: values and gradients (of sum(y c) for the activations).
    with torch.random.fork_rng():
        torch.manual_seed(20261207)
        x = torch.cat([torch.tensor([-3.0, -0.5, -0.3, 0.0, 0.3, 0.5, 2.0]), rnd(9) * 2])
        acts = {}
        for name, fn in (("logsigmoid", F.logsigmoid), ("softmin", lambda v: F.softmin(v.reshape(4, 4), 1)),
                         ("glu", lambda v: F.glu(v.reshape(4, 4), 1)), ("softshrink", lambda v: F.softshrink(v, 0.3)),
                         ("hardshrink", lambda v: F.hardshrink(v, 0.3)), ("tanhshrink", F.tanhshrink),
                         ("threshold", lambda v: F.threshold(v, 0.2, -5.0))):
            v = x.clone().requires_grad_()
            y = fn(v)
            c = rnd(*y.shape)
            (g,) = torch.autograd.grad((y * c).sum(), [v])
            acts[name] = {"y": y, "c": c, "g": g}
        inp, tgt = rnd(3, 4), torch.rand(3, 4) * 3
        var = torch.rand(3, 4) * 2
        var[0, 0] = 1e-9
        ylab = (rnd(3, 4) > 0).float() * 2 - 1
        ybin = (ylab + 1) / 2
        w = torch.rand(4)
        losses = {}
        for name, fn in (("poisson", lambda a: F.poisson_nll_loss(a, tgt)),
                         ("poisson_full_lin", lambda a: F.poisson_nll_loss(a.abs() + 0.1, tgt, log_input=False, full=True)),
                         ("gaussian", lambda a: F.gaussian_nll_loss(a, tgt, var)),
                         ("gaussian_full_sum", lambda a: F.gaussian_nll_loss(a, tgt, var, full=True, reduction="sum")),
                         ("soft_margin", lambda a: F.soft_margin_loss(a, ylab)),
                         ("multilabel", lambda a: F.multilabel_soft_margin_loss(a, ybin, weight=w)),
                         ("hinge", lambda a: F.hinge_embedding_loss(a, ylab, margin=0.7))):
            a = inp.clone().requires_grad_()
            y = fn(a)
            (g,) = torch.autograd.grad(y, [a])
            losses[name] = {"y": y, "g": g}
        # EmbeddingBag (every mode, offsets with an empty bag, per-sample weights, a padding
        # row) and Bilinear: values and gradients for the weights.
        wt = rnd(7, 3)
        inp2 = torch.tensor([[0, 2, 5], [6, 6, 1]])
        flat = torch.tensor([1, 3, 3, 0, 5, 2, 6])
        offs = torch.tensor([0, 2, 2, 5])
        psw = rnd(7)
        bags = []
        for name, kw, inp_ in (("mean2d", {"mode": "mean"}, inp2), ("sum_offsets", {"mode": "sum", "offsets": offs}, flat),
                               ("max_offsets", {"mode": "max", "offsets": offs[[0, 1, 3]]}, flat),
                               ("weighted", {"mode": "sum", "offsets": offs, "per_sample_weights": psw}, flat),
                               ("padding", {"mode": "mean", "padding_idx": 3, "offsets": offs}, flat)):
            wr = wt.clone().requires_grad_()
            y = F.embedding_bag(inp_, wr, **kw)
            c = rnd(*y.shape)
            (gw,) = torch.autograd.grad((y * c).sum(), [wr])
            bags.append({"name": name, "y": y, "c": c, "gw": gw})
        x1, x2, bw, bb = rnd(4, 3), rnd(4, 5), rnd(2, 3, 5), rnd(2)
        vs = [t.clone().requires_grad_() for t in (x1, x2, bw, bb)]
        y = F.bilinear(*vs)
        c = rnd(*y.shape)
        bilinear = {"x1": x1, "x2": x2, "w": bw, "b": bb, "y": y, "c": c,
                    "grads": list(torch.autograd.grad((y * c).sum(), vs))}
        logits, labels = rnd(5, 4), torch.tensor([0, 3, 1, 1, 2])
        smooth = {}
        for name, kw in (("mean", {}), ("ignore", {"ignore_index": 1}), ("sum", {"reduction": "sum"})):
            lr = logits.clone().requires_grad_()
            y = F.cross_entropy(lr, labels, label_smoothing=0.15, **kw)
            (g,) = torch.autograd.grad(y, [lr])
            smooth[name] = {"y": y, "g": g}
        out["smoothing"] = {"logits": logits, "labels": labels + 1, "cases": smooth}

    # ctc_loss: variable input and target lengths, repeated labels (a blank between
    # them), an empty target, an impossible alignment (zero_infinity), blank not 0;
    # losses and gradients for the logits through log_softmax. In float64.
    with torch.random.fork_rng():
        torch.manual_seed(20261209)
        Tn, N, C = 7, 4, 5
        logits = rnd(Tn, N, C).double()
        targets = torch.tensor([[1, 2, 2, 3], [4, 4, 1, 0], [2, 0, 0, 0], [1, 2, 3, 4]])
        in_len, tg_len = torch.tensor([7, 6, 5, 3]), torch.tensor([4, 2, 0, 4])
        ctc = []
        for blank, reduction, zero_inf in ((0, "none", False), (0, "mean", True), (0, "sum", True), (4, "none", True)):
            tg = targets.clone()
            if blank == 4:
                tg = torch.where(tg == 4, torch.zeros_like(tg), tg)   # no target may be the blank
            lr = logits.clone().requires_grad_()
            lp = lr.log_softmax(2)
            loss = F.ctc_loss(lp, tg, in_len, tg_len, blank=blank, reduction=reduction, zero_infinity=zero_inf)
            g = torch.autograd.grad(loss.sum() if reduction == "none" and not zero_inf else
                                    (loss if reduction != "none" else loss.sum()), [lr])[0] if zero_inf else None
            ctc.append({"blank": blank + 1, "reduction": reduction, "zero_infinity": zero_inf, "targets": tg + 1,
                        "loss": loss, "g": g if g is not None else "none"})
        out["ctc"] = {"logits": logits, "in_len": in_len, "tg_len": tg_len, "cases": ctc}
        out["bags"] = {"weight": wt, "input2": inp2 + 1, "flat": flat + 1, "offsets": offs + 1, "psw": psw, "cases": bags,
                       "bilinear": bilinear}
        out["more"] = {"x": x, "acts": acts, "inp": inp, "tgt": tgt, "var": var, "ylab": ylab, "ybin": ybin, "w": w,
                       "losses": losses}

    # interpolate's bicubic and area modes (values and gradients of sum(y g), float32 and
    # float64), and transposed convolutions whose output_padding is past the stride (below
    # the dilation, as PyTorch allows), bias and all three gradients included.
    with torch.random.fork_rng():
        torch.manual_seed(20261210)
        x4 = rnd(2, 3, 5, 7)
        resize = []
        for dims, dt, kw in ((2, torch.float32, {"size": (8, 10), "mode": "bicubic"}),
                             (2, torch.float64, {"size": (8, 10), "mode": "bicubic", "align_corners": True}),
                             (2, torch.float64, {"size": (3, 4), "mode": "bicubic"}),
                             (2, torch.float32, {"scale_factor": 0.6, "mode": "bicubic"}),
                             (2, torch.float64, {"scale_factor": (1.1, 2.5), "mode": "bicubic"}),
                             (2, torch.float32, {"size": (1, 3), "mode": "bicubic", "align_corners": True}),
                             (2, torch.float64, {"size": (3, 4), "mode": "area"}),
                             (2, torch.float32, {"scale_factor": 0.5, "mode": "area"}),
                             (2, torch.float64, {"size": (9, 4), "mode": "area"}),
                             (1, torch.float64, {"scale_factor": 0.4, "mode": "area"})):
            v = (x4 if dims == 2 else x4[:, :, 0]).to(dt).clone().requires_grad_()
            y = F.interpolate(v, **kw)
            gy = rnd(*y.shape).to(dt)
            (gx,) = torch.autograd.grad((y * gy).sum(), [v])
            opts = {k: (list(val) if isinstance(val, tuple) else val) for k, val in kw.items()}
            resize.append({"dims": dims, "dtype": str(dt).split(".")[1], "opts": opts, "y": y, "g": gy, "gx": gx})
        convs = []
        for cls, cin, cout, k, kw, shape in (
                (nn.ConvTranspose2d, 3, 2, 3, {"stride": (1, 2), "padding": (1, 2), "output_padding": (2, 1),
                                               "dilation": (3, 2)}, (2, 3, 4, 3)),
                (nn.ConvTranspose2d, 4, 4, 2, {"stride": 1, "padding": 0, "output_padding": 1, "dilation": 2,
                                               "groups": 2}, (1, 4, 3, 3)),
                (nn.ConvTranspose1d, 2, 3, 3, {"stride": 1, "padding": 2, "output_padding": 1, "dilation": 2},
                 (2, 2, 5))):
            conv = cls(cin, cout, k, **kw).double()
            v = rnd(*shape).double().requires_grad_()
            y = conv(v)
            gy = rnd(*y.shape).double()
            gx, gw, gb = torch.autograd.grad((y * gy).sum(), [v, conv.weight, conv.bias])
            opts = {key: (list(val) if isinstance(val, tuple) else val) for key, val in kw.items()}
            convs.append({"dims": 2 if cls is nn.ConvTranspose2d else 1, "k": k, "cin": cin, "cout": cout, "opts": opts,
                          "weight": conv.weight, "bias": conv.bias, "x": v, "y": y, "g": gy, "gx": gx, "gw": gw,
                          "gb": gb})
        # grid_sample's bicubic mode (the grid_sample cases' image and maps), every padding
        # mode and align_corners, gradients for x and theta
        gs = out["grid_sample"]
        cubic = []
        for padding in ("zeros", "border", "reflection"):
            for align in (False, True):
                xr, tr = gs["x"].clone().requires_grad_(), gs["theta"].clone().requires_grad_()
                g = F.affine_grid(tr, [2, 3, 4, 7], align_corners=align)
                y = F.grid_sample(xr, g, mode="bicubic", padding_mode=padding, align_corners=align)
                c = rnd(*y.shape).double()
                gx, gt = torch.autograd.grad((y * c).sum(), [xr, tr])
                cubic.append({"mode": "bicubic", "padding_mode": padding, "align_corners": align, "grid": g, "y": y,
                              "c": c, "gx": gx, "gtheta": gt})
        out["resize_more"] = {"x4": x4, "cases": resize, "convs": convs, "grid_bicubic": cubic}

    # The loss modules' weights (cross_entropy's class weights with ignore_index and label
    # smoothing, bce_with_logits' weight beside pos_weight), the padding layers,
    # ChannelShuffle and Softmax2d. Losses and gradients in float64.
    with torch.random.fork_rng():
        torch.manual_seed(20261211)
        logits, labels = rnd(6, 4).double(), torch.tensor([0, 3, 1, 1, 2, 3])
        w = (torch.rand(4) + 0.2).double()
        ce = []
        for kw in ({"weight": w}, {"weight": w, "ignore_index": 1, "reduction": "sum"},
                   {"weight": w, "ignore_index": 3, "label_smoothing": 0.2},
                   {"ignore_index": 1, "label_smoothing": 0.3}, {"weight": w, "label_smoothing": 0.1, "reduction": "none"}):
            v = logits.clone().requires_grad_()
            loss = nn.CrossEntropyLoss(**kw)(v, labels)
            (g,) = torch.autograd.grad(loss.sum(), [v])
            opts = {k: (val + 1 if k == "ignore_index" else val) for k, val in kw.items() if k != "weight"}
            ce.append({"opts": opts, "weighted": "weight" in kw, "loss": loss, "g": g})
        x, t = rnd(5, 3).double(), (torch.rand(5, 3) > 0.5).double()
        bw, pw = (torch.rand(3) + 0.5).double(), (torch.rand(3) + 0.5).double()
        v = x.clone().requires_grad_()
        loss = nn.BCEWithLogitsLoss(weight=bw, pos_weight=pw)(v, t)
        (gb,) = torch.autograd.grad(loss, [v])
        img, seq = rnd(2, 3, 4, 5), rnd(2, 3, 6)
        pads = {"zero": nn.ZeroPad2d((1, 2, -1, 1))(img), "const2": nn.ConstantPad2d(2, 3.5)(img),
                "const1": nn.ConstantPad1d((0, 3), -1.0)(seq), "reflect2": nn.ReflectionPad2d((1, 2, 3, 0))(img),
                "reflect1": nn.ReflectionPad1d(2)(seq), "replicate2": nn.ReplicationPad2d((2, 0, 1, 3))(img),
                "replicate1": nn.ReplicationPad1d((3, 1))(seq)}
        chan = rnd(2, 6, 2, 2)
        out["criteria_more"] = gen_margins_and_pools()
        out["criteria"] = {"logits": logits, "labels": labels + 1, "weight": w, "ce": ce,
                           "bce": {"x": x, "t": t, "weight": bw, "pos_weight": pw, "loss": loss, "g": gb},
                           "img": img, "seq": seq, "pads": pads, "chan": chan,
                           "shuffle": nn.ChannelShuffle(3)(chan), "softmax2d": nn.Softmax2d()(chan)}
    return out


def gen_margins_and_pools():
    """multi_margin_loss, multilabel_margin_loss, triplet_margin_with_distance_loss, pdist,
    rrelu (eval), local_response_norm, lp_pool2d/1d, max_unpool2d/1d: values and gradients of
    sum(y c) in float64 (indices and classes 1-based)."""
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(20261214)
        x = rnd(4, 5).double()
        y = torch.tensor([0, 3, 4, 1])
        w = (torch.rand(5) + 0.5).double()
        ml_y = torch.tensor([[3, 0, -1, 1, 2], [4, 4, 1, -1, -1], [-1, 2, 0, 0, 0], [0, 1, 2, 3, 4]])
        a, p, n = rnd(3, 4).double(), rnd(3, 4).double(), rnd(3, 4).double()
        pd = rnd(4, 3).double()
        pd[2] = pd[0]    # a zero distance
        img, seq = rnd(2, 6, 4, 5).double(), rnd(2, 3, 8).double()
        cases = (
            ("multi_margin", lambda v: F.multi_margin_loss(v, y), x),
            ("multi_margin_p2", lambda v: F.multi_margin_loss(v, y, p=2, margin=0.7, weight=w, reduction="none"), x),
            ("multilabel_margin", lambda v: F.multilabel_margin_loss(v, ml_y, reduction="sum"), x),
            ("triplet_distance", lambda v: F.triplet_margin_with_distance_loss(v, p, n, margin=0.5, swap=True), a),
            ("triplet_cosine", lambda v: F.triplet_margin_with_distance_loss(
                v, p, n, distance_function=lambda s, t: 1 - F.cosine_similarity(s, t), reduction="none"), a),
            ("pdist", lambda v: F.pdist(v), pd),
            ("pdist_p1", lambda v: F.pdist(v, 1.0), pd),
            ("rrelu_eval", lambda v: F.rrelu(v, 0.1, 0.3, training=False), x),
            ("lrn", lambda v: F.local_response_norm(v, 3, alpha=0.01, beta=0.8, k=1.5), img),
            ("lrn_seq", lambda v: F.local_response_norm(v, 2), seq),
            ("lp_pool2d", lambda v: F.lp_pool2d(v.abs(), 2, 2), img),
            ("lp_pool2d_p3", lambda v: F.lp_pool2d(v.abs() + 0.1, 3, (2, 3), stride=1, ceil_mode=True), img),
            ("lp_pool1d", lambda v: F.lp_pool1d(v.abs(), 1.5, 3, stride=2), seq),
        )
        res = {}
        for name, fn, arg in cases:
            v = arg.clone().requires_grad_()
            out_y = fn(v)
            c = rnd(*out_y.shape).double() if out_y.dim() > 0 else torch.tensor(1.0, dtype=torch.float64)
            (g,) = torch.autograd.grad((out_y * c).sum(), [v])
            res[name] = {"x": arg, "y": out_y, "c": c, "g": g}
        pooled, idx = F.max_pool2d(img, 2, return_indices=True)
        v = pooled.clone().requires_grad_()
        un = F.max_unpool2d(v, idx, 2, output_size=(4, 5))
        c = rnd(*un.shape).double()
        (g,) = torch.autograd.grad((un * c).sum(), [v])
        pooled1, idx1 = F.max_pool1d(seq, 3, stride=2, padding=1, return_indices=True)
        un1 = F.max_unpool1d(pooled1, idx1, 3, stride=2, padding=1, output_size=[8])
        out = {"x": x, "y": y + 1, "w": w, "ml_y": ml_y + 1, "p": p, "n": n, "img": img, "seq": seq, "cases": res,
               "unpool": {"pooled": pooled, "idx": idx + 1, "y": un, "c": c, "g": g},
               "unpool1": {"pooled": pooled1, "idx": idx1 + 1, "y": un1}}
    return out


# ---- losses and their gradients -----------------------------------------------------------------

def gen_losses():
    out = {}
    logits = rnd(4, 5, scale=3.0).requires_grad_()
    labels = torch.tensor([0, 3, 4, 1])
    loss = F.cross_entropy(logits, labels)
    (g,) = torch.autograd.grad(loss, [logits])
    out["cross_entropy"] = {"logits": logits, "labels": labels + 1, "mean": loss, "grad": g,
                            "sum": F.cross_entropy(logits, labels, reduction="sum"),
                            "none": F.cross_entropy(logits, labels, reduction="none")}

    probs = torch.softmax(rnd(4, 5), dim=1)
    onehot = F.one_hot(labels, 5).float()
    for name, target in (("softmax_xent_onehot", onehot), ("softmax_xent_soft", probs)):
        loss = F.cross_entropy(logits, target)   # torch's probability targets
        (g,) = torch.autograd.grad(loss, [logits])
        out[name] = {"labels": target, "logits": logits, "mean": loss, "grad": g,
                     "none": F.cross_entropy(logits, target, reduction="none")}

    a, b = rnd(3, 4).requires_grad_(), rnd(3, 4)
    loss = F.mse_loss(a, b)
    (g,) = torch.autograd.grad(loss, [a])
    out["mse"] = {"input": a, "target": b, "mean": loss, "grad": g,
                  "sum": F.mse_loss(a, b, reduction="sum")}

    x = torch.tensor([-100.0, -30.0, -2.5, -1e-3, 0.0, 0.5, 3.0, 30.0, 100.0]).requires_grad_()
    y = torch.tensor([0.0, 1.0, 1.0, 0.0, 1.0, 0.3, 0.0, 1.0, 0.0])
    loss = F.binary_cross_entropy_with_logits(x, y)
    (g,) = torch.autograd.grad(loss, [x])
    out["bce"] = {"logits": x, "targets": y, "mean": loss, "grad": g,
                  "none": F.binary_cross_entropy_with_logits(x, y, reduction="none"),
                  "pos_weight_none": F.binary_cross_entropy_with_logits(
                      x, y, reduction="none", pos_weight=torch.tensor(2.5))}
    return out


# ---- end to end: an MLP trained a few steps ------------------------------------------------------

def gen_mlp():
    out = {}
    for name, make in (("adam", lambda ps: torch.optim.Adam(ps, lr=0.01)),
                       ("sgd", lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True))):
        net = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
        init = {k: v.detach().clone() for k, v in net.state_dict().items()}
        x = rnd(10, 6)
        y = torch.randint(0, 3, (10,))
        opt = make(net.parameters())
        losses = []
        for _ in range(4):
            opt.zero_grad()
            loss = F.cross_entropy(net(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        final = {k: v.detach().clone() for k, v in net.state_dict().items()}
        key = lambda k: '["' + k + '"]'
        out[name] = {"init": {key(k): v for k, v in init.items()}, "x": x, "y": y + 1, "losses": losses,
                     "final": {key(k): v for k, v in final.items()}}
    return out


def main():
    refs = {"optim": gen_optim(), "schedules": gen_schedules(), "layers": gen_layers(),
            "losses": gen_losses(), "mlp": gen_mlp()}
    text = lua(refs)
    # Option tables are Lua expressions: "@{lr = 0.1}" -> {lr = 0.1}.
    import re
    text = re.sub(r'"@(\{[^"]*\})"', r"\1", text)
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as f:
        f.write("-- Generated by tests/ref/gen_training_refs.py (PyTorch " + torch.__version__
                + "); do not edit.\n")
        f.write("return " + text + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
