#!/usr/bin/python3
"""Writes tests/lua/ref/breadth_ref.lua: PyTorch's results for the losses, optimizer,
schedules, gradient clipping of the training library's second round (nll_loss,
smooth_l1_loss, huber_loss, kl_div, cosine_embedding_loss, Adagrad, OneCycleLR, a
warm-up + cosine LambdaLR, ReduceLROnPlateau, clip_grad_norm_), read by
tests/lua/test_breadth.lua.

Run with Debian's python3 (it has python3-torch), from anywhere:

    /usr/bin/python3 tests/ref/gen_breadth_refs.py

The generated file is committed, so the Lua tests need no torch. Inputs are drawn here
(float64) and stored with the results (17 significant digits); every reference value
comes from PyTorch, never from dlua.
"""
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_training_refs import lua  # noqa: E402  (the same Lua writer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "lua", "ref", "breadth_ref.lua")

torch.manual_seed(20261125)
torch.set_num_threads(1)


def rnd(*shape, scale=1.0):
    return (torch.randn(*shape, dtype=torch.float64) * scale)


def loss_case(fn, *inputs, grad_of=(0,), **kw):
    """Values for the three reductions (where the loss has them) and the gradient of the
    mean (or of the named reduction) with respect to the inputs in grad_of."""
    xs = [x.clone().requires_grad_() if i in grad_of else x for i, x in enumerate(inputs)]
    red = kw.pop("reduction", "mean")
    y = fn(*xs, reduction=red, **kw)
    grads = torch.autograd.grad(y, [xs[i] for i in grad_of])
    out = {"inputs": list(inputs), "value": y, "grads": list(grads)}
    if red == "mean":
        out["sum"] = fn(*inputs, reduction="sum", **kw)
        out["none"] = fn(*inputs, reduction="none", **kw)
    return out


def gen_losses():
    out = {}
    logp = torch.log_softmax(rnd(6, 4, scale=2.0), dim=1)
    labels = torch.tensor([0, 3, 2, 1, 3, 0])
    out["nll"] = loss_case(lambda x, reduction: F.nll_loss(x, labels, reduction=reduction), logp)
    out["nll"]["labels"] = labels + 1
    w = torch.tensor([0.5, 2.0, 1.0, 3.0], dtype=torch.float64)
    lab_ign = torch.tensor([0, 3, -100, 1, 3, -100])
    out["nll_weight_ignore"] = loss_case(
        lambda x, reduction: F.nll_loss(x, lab_ign, weight=w, ignore_index=-100, reduction=reduction), logp)
    out["nll_weight_ignore"]["labels"] = torch.where(lab_ign >= 0, lab_ign + 1, lab_ign)
    out["nll_weight_ignore"]["weight"] = w

    a, b = rnd(5, 3, scale=2.0), rnd(5, 3, scale=2.0)
    out["smooth_l1"] = loss_case(F.smooth_l1_loss, a, b)
    out["smooth_l1_beta"] = loss_case(F.smooth_l1_loss, a, b, beta=0.5)
    out["smooth_l1_beta0"] = loss_case(F.smooth_l1_loss, a, b, beta=0.0)
    out["huber"] = loss_case(F.huber_loss, a, b)
    out["huber_delta"] = loss_case(F.huber_loss, a, b, delta=2.0)

    inp = torch.log_softmax(rnd(4, 5), dim=1)
    tgt = torch.softmax(rnd(4, 5), dim=1)
    tgt[0, 2] = 0.0   # a zero target contributes nothing
    out["kl_batchmean"] = loss_case(F.kl_div, inp, tgt, reduction="batchmean")
    out["kl_mean"] = loss_case(F.kl_div, inp, tgt)
    out["kl_log_target"] = loss_case(F.kl_div, inp, torch.log_softmax(rnd(4, 5), dim=1), reduction="sum",
                                     log_target=True)

    x1, x2 = rnd(6, 4), rnd(6, 4)
    y = torch.tensor([1, -1, 1, -1, -1, 1])
    out["cosine_embedding"] = loss_case(lambda p, q, reduction, **kw: F.cosine_embedding_loss(
        p, q, y, reduction=reduction, **kw), x1, x2, grad_of=(0, 1), margin=0.2)
    out["cosine_embedding"]["y"] = y
    return out


def gen_adagrad():
    out = {}
    for name, kw, lua_opts in (("default", {}, "{}"),
                               ("decay_wd_init", {"lr": 0.1, "lr_decay": 0.05, "weight_decay": 0.1,
                                                  "initial_accumulator_value": 0.3, "eps": 1e-6},
                                "{lr = 0.1, lr_decay = 0.05, weight_decay = 0.1, initial_accumulator_value = 0.3, eps = 1e-6}")):
        w0 = rnd(3, 4)
        grads = [rnd(3, 4) for _ in range(5)]
        w = w0.clone().requires_grad_()
        opt = torch.optim.Adagrad([w], **kw)
        after = []
        for g in grads:
            w.grad = g.clone()
            opt.step()
            after.append(w.detach().clone())
        out[name] = {"opts": "@" + lua_opts, "w0": w0, "grads": grads, "after": after}
    return out


def gen_schedules():
    out = {}

    def one_cycle(kw, steps, opt_kind):
        p = torch.zeros(1, requires_grad=True)
        opt = (torch.optim.SGD([p], lr=0.1, momentum=0.9) if opt_kind == "sgd"
               else torch.optim.Adam([p], lr=0.1))
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, **kw)
        key = "momentum" if opt_kind == "sgd" else "betas"
        lrs, moms = [opt.param_groups[0]["lr"]], []
        m = opt.param_groups[0][key]
        moms.append(m if opt_kind == "sgd" else m[0])
        for _ in range(steps):
            opt.step()
            sched.step()
            lrs.append(opt.param_groups[0]["lr"])
            m = opt.param_groups[0][key]
            moms.append(m if opt_kind == "sgd" else m[0])
        return {"lrs": lrs, "momentum": moms}

    out["one_cycle_cos"] = one_cycle({"max_lr": 1.0, "total_steps": 20}, 20, "sgd")
    out["one_cycle_linear_three"] = one_cycle({"max_lr": 0.5, "total_steps": 15, "anneal_strategy": "linear",
                                               "three_phase": True, "pct_start": 0.4}, 15, "adam")

    warm, total, base = 5, 20, 0.1

    def lam(e):
        if e < warm:
            return e / warm
        t = (min(e, total) - warm) / max(1, total - warm)
        return 0.5 * (1 + math.cos(math.pi * t))
    p = torch.zeros(1, requires_grad=True)
    opt = torch.optim.SGD([p], lr=base)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    lrs = [opt.param_groups[0]["lr"]]
    for _ in range(25):
        opt.step()
        sched.step()
        lrs.append(opt.param_groups[0]["lr"])
    out["warmup_cosine"] = {"warmup": warm, "total": total, "base": base, "lrs": lrs}

    metrics = [1.0, 0.9, 0.95, 0.91, 0.92, 0.93, 0.89, 0.899, 0.9, 0.95, 0.96, 0.97, 0.5, 0.6, 0.7, 0.8]
    for name, kw in (("plateau_min", {"patience": 2, "factor": 0.5, "cooldown": 1, "min_lr": 0.01}),
                     ("plateau_max_abs", {"mode": "max", "patience": 1, "threshold": 0.05,
                                          "threshold_mode": "abs"})):
        p = torch.zeros(1, requires_grad=True)
        opt = torch.optim.SGD([p], lr=0.1)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **kw)
        lrs = []
        for m in metrics:
            opt.step()
            sched.step(m)
            lrs.append(opt.param_groups[0]["lr"])
        out[name] = {"metrics": metrics, "lrs": lrs}
    return out


def gen_clip():
    out = {}
    gs = [rnd(3, 4), rnd(5), rnd(2, 2, scale=3.0)]
    for name, max_norm, p in (("l2", 1.0, 2.0), ("inf", 0.5, math.inf), ("l1_no_clip", 1e3, 1.0)):
        ps = [torch.zeros_like(g, requires_grad=True) for g in gs]
        for q, g in zip(ps, gs):
            q.grad = g.clone()
        norm = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type=p)
        out[name] = {"grads": gs, "max_norm": max_norm, "norm_type": "@math.huge" if math.isinf(p) else p,
                     "norm": norm, "clipped": [q.grad for q in ps]}
    return out


def gen_recurrent():
    """Sequence layers with their weights, outputs, final states and two gradients of
    sum(out^2) + sum(h_n) (+ sum(c_n)): with respect to the input and to one weight."""
    out = {}
    cases = (("lstm_2layer_bi_batch_first", torch.nn.LSTM(3, 5, num_layers=2, bidirectional=True, batch_first=True),
              rnd(2, 4, 3), True, "weight_hh_l1_reverse"),
             ("gru_1layer", torch.nn.GRU(3, 4), rnd(5, 2, 3), True, "weight_ih_l0"),
             ("rnn_relu_2layer_unbatched", torch.nn.RNN(3, 4, num_layers=2, nonlinearity="relu"), rnd(6, 3), False,
              "bias_hh_l1"))
    for name, mod, x, with_h0, wname in cases:
        mod = mod.double()
        dirs = 2 if mod.bidirectional else 1
        batched = x.dim() == 3
        n = (x.shape[0] if mod.batch_first else x.shape[1]) if batched else None
        sshape = (mod.num_layers * dirs, n, mod.hidden_size) if batched else (mod.num_layers * dirs, mod.hidden_size)
        h0 = rnd(*sshape) if with_h0 else None
        c0 = rnd(*sshape) if with_h0 and isinstance(mod, torch.nn.LSTM) else None
        xr = x.clone().requires_grad_()
        if isinstance(mod, torch.nn.LSTM):
            y, (hn, cn) = mod(xr, (h0, c0)) if with_h0 else mod(xr)
            total = (y * y).sum() + hn.sum() + cn.sum()
        else:
            y, hn = mod(xr, h0) if with_h0 else mod(xr)
            cn = None
            total = (y * y).sum() + hn.sum()
        w = dict(mod.named_parameters())[wname]
        gx, gw = torch.autograd.grad(total, [xr, w])
        case = {"params": {k: v for k, v in mod.named_parameters()}, "x": x, "y": y, "hn": hn, "gx": gx,
                "wname": wname, "gw": gw}
        if with_h0:
            case["h0"] = h0
        if c0 is not None:
            case["c0"] = c0
        if cn is not None:
            case["cn"] = cn
        out[name] = case
    return out


def gen_norms():
    """layer_norm over the last two dims and group_norm, with affine parameters: values
    and the gradients of sum(y * c) (c fixed) for the input, weight and bias."""
    out = {}
    x, w, b = rnd(3, 4, 5, scale=3.0), rnd(4, 5), rnd(4, 5)
    c = rnd(3, 4, 5)
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    y = F.layer_norm(xs[0], (4, 5), xs[1], xs[2], eps=1e-5)
    out["layer_norm"] = {"x": x, "w": w, "b": b, "c": c, "y": y,
                         "grads": list(torch.autograd.grad((y * c).sum(), xs))}
    x, w, b = rnd(2, 6, 2, 3, scale=2.0) + 5, rnd(6), rnd(6)
    c = rnd(2, 6, 2, 3)
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    y = F.group_norm(xs[0], 3, xs[1], xs[2], eps=1e-5)
    out["group_norm"] = {"x": x, "w": w, "b": b, "c": c, "y": y,
                         "grads": list(torch.autograd.grad((y * c).sum(), xs))}
    return out


def gen_attention():
    """Scaled dot-product attention (the formula, causal and with a bool mask),
    nn.MultiheadAttention with both kinds of mask, and nn.TransformerEncoderLayer (post-
    and pre-norm, gelu) in eval mode: outputs and gradients of sum(out * c)."""
    out = {}
    q, k, v = rnd(2, 3, 4, 8), rnd(2, 3, 5, 8), rnd(2, 3, 5, 6)
    keep = torch.rand(4, 5) > 0.3
    keep[:, 0] = True   # every row attends to something
    for name, mask, causal in (("sdpa_mask", keep, False), ("sdpa_causal", None, True)):
        qs = [t.clone().requires_grad_() for t in (q, k, v)]
        scores = qs[0] @ qs[1].transpose(-2, -1) / math.sqrt(8)
        if causal:
            scores = scores.masked_fill(torch.ones(4, 5, dtype=torch.bool).triu(1), float("-inf"))
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        y = torch.softmax(scores, -1) @ qs[2]
        c = rnd(*y.shape)
        out[name] = {"q": q, "k": k, "v": v, "y": y, "c": c, "grads": list(torch.autograd.grad((y * c).sum(), qs))}
        if mask is not None:
            out[name]["mask"] = mask

    mha = torch.nn.MultiheadAttention(8, 2).double()
    query, key = rnd(3, 2, 8), rnd(4, 2, 8)
    attn_mask = rnd(3, 4)
    kpm = torch.tensor([[False, False, True, False], [False, True, False, False]])
    qr = query.clone().requires_grad_()
    y, w = mha(qr, key, key, attn_mask=attn_mask, key_padding_mask=kpm)
    c = rnd(*y.shape)
    gq, gw = torch.autograd.grad((y * c).sum(), [qr, mha.in_proj_weight])
    out["mha"] = {"params": {k.replace(".", "__"): v for k, v in mha.named_parameters()}, "query": query, "key": key, "attn_mask": attn_mask,
                  "kpm": kpm, "y": y, "w": w, "c": c, "gq": gq, "gw": gw}

    for name, kw in (("encoder_post", {}), ("encoder_pre_gelu", {"norm_first": True, "activation": "gelu"})):
        enc = torch.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kw).double()
        enc.eval()
        src = rnd(2, 5, 8)
        sr = src.clone().requires_grad_()
        y = enc(sr)
        c = rnd(*y.shape)
        (gs,) = torch.autograd.grad((y * c).sum(), [sr])
        out[name] = {"params": {k.replace(".", "__"): v for k, v in enc.named_parameters()}, "src": src, "y": y,
                     "c": c, "gs": gs}
    return out


def gen_transformer():
    """nn.TransformerDecoderLayer (post- and pre-norm, gelu) with a causal target mask and a
    memory padding mask, and a two-layer nn.Transformer with masks, in eval mode: outputs
    and gradients of sum(out * c) for the target and the memory (source)."""
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(20261130)
        causal = torch.nn.Transformer.generate_square_subsequent_mask(4).double()
        pad = torch.tensor([[False, False, False, True, True], [False, False, False, False, False]])
        for name, kw in (("decoder_post", {}), ("decoder_pre_gelu", {"norm_first": True, "activation": "gelu"})):
            dec = torch.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, dropout=0.0, batch_first=True, **kw).double()
            dec.eval()
            tgt, mem = rnd(2, 4, 8), rnd(2, 5, 8)
            tr, mr = tgt.clone().requires_grad_(), mem.clone().requires_grad_()
            y = dec(tr, mr, tgt_mask=causal, memory_key_padding_mask=pad)
            c = rnd(*y.shape)
            gt, gm = torch.autograd.grad((y * c).sum(), [tr, mr])
            out[name] = {"params": {k.replace(".", "__"): v for k, v in dec.named_parameters()}, "tgt": tgt, "mem": mem,
                         "pad": pad, "y": y, "c": c, "gt": gt, "gm": gm}
        t = torch.nn.Transformer(8, 2, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=16, dropout=0.0,
                                 batch_first=True).double()
        t.eval()
        src, tgt = rnd(2, 5, 8), rnd(2, 4, 8)
        sr, tr = src.clone().requires_grad_(), tgt.clone().requires_grad_()
        y = t(sr, tr, tgt_mask=causal, src_key_padding_mask=pad, memory_key_padding_mask=pad)
        c = rnd(*y.shape)
        gs, gt = torch.autograd.grad((y * c).sum(), [sr, tr])
        out["transformer"] = {"params": {k.replace(".", "__"): v for k, v in t.named_parameters()}, "src": src,
                              "tgt": tgt, "pad": pad, "y": y, "c": c, "gs": gs, "gt": gt,
                              "names": [k for k, _ in t.named_parameters()]}
    return out


def gen_indexed():
    """index_add (repeated indices, alpha), index_copy, index_fill and scatter (a source,
    a value) along both dims of a matrix: outputs and gradients of
    sum(y * c) for x and the source. Indices 1-based in the refs."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261201)
        x = rnd(4, 5)
        for name, dim, idx, src_shape, extra in (
                ("index_add", 0, [1, 3, 1], (3, 5), {"alpha": 2.0}), ("index_add", 1, [4, 0], (4, 2), {}),
                ("index_copy", 0, [2, 0], (2, 5), {}), ("index_copy", 1, [1, 3, 4], (4, 3), {}),
                ("index_fill", 1, [0, 2], None, {"value": -1.5}),
                ("scatter", 0, [[0, 1, 2, 3, 0], [3, 2, 1, 0, 1]], (2, 5), {}),
                ("scatter", 1, [[4, 0], [1, 2], [3, 1], [0, 4]], (4, 2), {}),
                ("scatter", 1, [[0], [1], [2], [3]], None, {"value": 7.0})):
            xr = x.clone().requires_grad_()
            i = torch.tensor(idx)
            src = rnd(*src_shape).requires_grad_() if src_shape else None
            if name == "index_add":
                y = xr.index_add(dim, i, src, alpha=extra.get("alpha", 1))
            elif name == "index_copy":
                y = xr.index_copy(dim, i, src)
            elif name == "index_fill":
                y = xr.index_fill(dim, i, extra["value"])
            elif src is not None:
                y = xr.scatter(dim, i, src)
            else:
                y = xr.scatter(dim, i, extra["value"])
            c = rnd(*y.shape)
            inputs = [xr] + ([src] if src is not None else [])
            grads = torch.autograd.grad((y * c).sum(), inputs)
            out.append({"name": name, "dim": dim + 1, "idx": (i + 1).tolist(), "x": x,
                        "src": src if src is not None else "none", "extra": extra.get("alpha", extra.get("value", "none")),
                        "y": y, "c": c, "gx": grads[0], "gsrc": grads[1] if len(grads) > 1 else "none"})
    return out


def gen_composed():
    """The composed functions (dlua.pointwise, dlua.statistics, cross, cdist, rot90,
    bucketize): values, and gradients of sum(y * c) where they have them. Indices and
    counts 1-based in the refs."""
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(20261202)
        a, b = rnd(3, 4) * 3, rnd(3, 4) * 3
        w = torch.rand(3, 4) * 1.5 - 0.25
        big = torch.tensor([[700.0, -700.0, 0.0, 1e-300], [1e300, 3.0, -2.0, 5.0]], dtype=torch.float64)
        cases = {}
        for name, fn, args in (("lerp_scalar", lambda x, y: torch.lerp(x, y, 0.75), (a, b)),
                               ("lerp_tensor", lambda x, y: torch.lerp(x, y, w.double()), (a, b)),
                               ("hypot", torch.hypot, (a, b)),
                               ("hypot_big", torch.hypot, (big, big.flip(1))),
                               ("logaddexp", torch.logaddexp, (a, b)),
                               ("logaddexp_big", torch.logaddexp, (big, big.flip(1))),
                               ("fmod", torch.fmod, (a, b.abs() + 0.5)),
                               ("fmod_neg", torch.fmod, (a, -(b.abs() + 0.5))),
                               ("frac", lambda x, y: torch.frac(x) * y, (a, b)),
                               ("square_reciprocal", lambda x, y: x.square() + y.reciprocal(), (a, b)),
                               ("cross", lambda x, y: torch.linalg.cross(x[:, :3], y[:, 1:]), (a, b)),
                               ("cdist", lambda x, y: torch.cdist(x, y), (a, b[:2])),
                               ("cdist_p1", lambda x, y: torch.cdist(x, y, p=1.0), (a, b))):
            xs = [t.clone().requires_grad_() for t in args]
            y = fn(*xs)
            c = rnd(*y.shape).double()
            grads = torch.autograd.grad((y * c).sum(), xs)
            cases[name] = {"args": list(args), "y": y, "c": c, "grads": list(grads)}
        out["functions"] = cases
        out["weight"] = w.double()
        x = rnd(4, 6)
        x[1, 2], x[3, 0] = float("nan"), float("nan")
        v, m = torch.var_mean(a, 1)
        sv, sm = torch.std_mean(a, 0, unbiased=False, keepdim=True)
        out["statistics"] = {
            "x": x, "nansum": x.nansum(), "nansum1": x.nansum(1), "nanmean": x.nanmean(), "nanmean0": x.nanmean(0),
            "a": a, "var1": v, "mean1": m, "std0": sv, "mean0": sm, "amin1": a.amin(1), "amax1": a.amax(1),
            "isclose": torch.isclose(a, a + torch.tensor([1e-6, 1e-3, 0.0, 2e-5])),
            "hist_x": a.reshape(-1), "histc": torch.histc(a, bins=7), "histc_range": torch.histc(a, bins=5, min=-1, max=2),
            "bins_x": (torch.tensor([1, 4, 4, 0, 2, 7])).tolist(),
            "bincount": torch.bincount(torch.tensor([1, 4, 4, 0, 2, 7]), minlength=10),
            "bincount_w": torch.bincount(torch.tensor([1, 4, 4, 0, 2, 7]), weights=torch.tensor([.5, 1, 2, 3, 4, 5])),
        }
        bounds = torch.tensor([-1.0, 0.0, 0.5, 2.0])
        vals = torch.tensor([[-3.0, -1.0, 0.2], [0.5, 2.0, 9.0]])
        out["bucketize"] = {"bounds": bounds, "x": vals, "left": torch.bucketize(vals, bounds) + 1,
                            "right": torch.bucketize(vals, bounds, right=True) + 1}
        r = rnd(2, 3, 4)
        out["rot90"] = {"x": r, "k1": torch.rot90(r), "k2": torch.rot90(r, 2, (1, 2)), "k3": torch.rot90(r, 3, (0, 2)),
                        "km1": torch.rot90(r, -1)}
    return out


def gen_products():
    """tensordot, kron, block_diag (values and gradients of sum(y * c)), cartesian_prod and
    combinations."""
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(20261208)
        a, b = rnd(2, 3, 4), rnd(4, 3, 5)
        cases = {}
        for name, fn, args in (("tensordot1", lambda x, y: torch.tensordot(x, y, 1), (a, b)),
                               ("tensordot_lists", lambda x, y: torch.tensordot(x, y, ([1, 2], [1, 0])), (a, b)),
                               ("kron", lambda x, y: torch.kron(x[0], y[:, :, 0]), (a, b)),
                               ("kron_ranks", lambda x, y: torch.kron(x, y[0, 0]), (a, b)),
                               ("block_diag", lambda x, y: torch.block_diag(x[0], y[0, :2], x[1, 0, 0]), (a, b))):
            xs = [t.clone().requires_grad_() for t in args]
            y = fn(*xs)
            c = rnd(*y.shape)
            cases[name] = {"y": y, "c": c, "grads": list(torch.autograd.grad((y * c).sum(), xs))}
        t = torch.tensor([1.0, 2.0, 3.0, 4.0])
        out = {"a": a, "b": b, "cases": cases,
               "cartesian": torch.cartesian_prod(t[:2], t[1:], t[2:]),
               "comb2": torch.combinations(t), "comb3": torch.combinations(t, 3),
               "comb_rep": torch.combinations(t[:3], 2, with_replacement=True)}
    return out


def gen_conv1d_pad():
    """conv1d with stride, padding, dilation and groups; F.pad in every mode (4-D input,
    the last two dims padded, a negative count in constant mode): outputs and gradients
    of sum(y * c)."""
    out = {}
    x, w, b = rnd(2, 4, 11), rnd(6, 2, 3), rnd(6)
    xs = [t.clone().requires_grad_() for t in (x, w, b)]
    y = F.conv1d(xs[0], xs[1], xs[2], stride=2, padding=1, dilation=2, groups=2)
    c = rnd(*y.shape)
    out["conv1d"] = {"x": x, "w": w, "b": b, "c": c, "y": y, "grads": list(torch.autograd.grad((y * c).sum(), xs))}
    x = rnd(2, 3, 4, 5)
    for mode, pad in (("constant", (2, -1, 1, 2)), ("reflect", (2, 1, 1, 2)), ("replicate", (3, 1, 2, 0)),
                      ("circular", (2, 3, 1, 1))):
        xr = x.clone().requires_grad_()
        kw = {"value": 1.5} if mode == "constant" else {}
        y = F.pad(xr, pad, mode=mode, **kw)
        c = rnd(*y.shape)
        (g,) = torch.autograd.grad((y * c).sum(), [xr])
        out["pad_" + mode] = {"x": x, "pad": list(pad), "y": y, "c": c, "g": g}
    return out


EINSUM_CASES = (
    ("ij,jk->ik", ((3, 4), (4, 5))),
    ("bij,bjk->bik", ((2, 3, 4), (2, 4, 2))),
    ("bhqd,bhkd->bhqk", ((2, 2, 3, 4), (2, 2, 5, 4))),
    ("i,i->", ((5,), (5,))),
    ("i,j->ij", ((3,), (4,))),
    ("ij,ij->ij", ((3, 4), (3, 4))),
    ("ii->i", ((4, 4),)),
    ("ii", ((4, 4),)),
    ("ji", ((3, 4),)),
    ("ijk->", ((2, 3, 4),)),
    ("iij->j", ((3, 3, 2),)),
    ("abc,cd,de->abe", ((2, 3, 4), (4, 5), (5, 3))),
    ("...ij,...jk", ((2, 3, 4), (4, 2))),
    ("b...i,bi->b...", ((2, 3, 4), (2, 4))),
    ("ij,jk,kl", ((2, 3), (3, 4), (4, 2))),
)


def gen_einsum():
    """torch.einsum on random float64 operands: the result and the gradient of
    sum(y * c) for every operand."""
    out = []
    for spec, shapes in EINSUM_CASES:
        xs = [rnd(*sh).requires_grad_() for sh in shapes]
        y = torch.einsum(spec, *xs)
        c = rnd(*y.shape) if y.dim() > 0 else torch.randn((), dtype=torch.float64)
        grads = torch.autograd.grad((y * c).sum(), xs)
        out.append({"spec": spec, "inputs": [x.detach() for x in xs], "y": y, "c": c, "grads": list(grads),
                    "shape": list(y.shape)})
    return out


def gen_cumsum():
    """torch.cumsum along each dim of a (3, 4, 5) float64 tensor, with the gradient of
    sum(y * c); and of an int32 tensor (an int64 result)."""
    out = []
    x = rnd(3, 4, 5)
    for dim in range(3):
        xr = x.clone().requires_grad_()
        y = torch.cumsum(xr, dim)
        c = rnd(*y.shape)
        (g,) = torch.autograd.grad((y * c).sum(), [xr])
        out.append({"x": x, "dim": dim + 1, "y": y, "c": c, "g": g})
    xi = torch.randint(-5, 6, (4, 3), dtype=torch.int32)
    return {"float": out, "int": {"x": xi, "y": torch.cumsum(xi, 0), "dtype": str(torch.cumsum(xi, 0).dtype)}}


def gen_lbfgs():
    """torch.optim.LBFGS (no line search) on the Rosenbrock function and on a least-squares
    problem, float64: the loss each step() returns and the parameters after it."""
    out = {}
    A, b = rnd(6, 3), rnd(6)
    problems = {
        "rosenbrock": (torch.tensor([-1.5, 2.0], dtype=torch.float64),
                       lambda p: (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2,
                       {"lr": 1, "max_iter": 20, "history_size": 10}, 2),
        "least_squares": (torch.zeros(3, dtype=torch.float64), lambda p: ((A @ p - b) ** 2).sum(),
                          {"lr": 0.5, "max_iter": 5}, 3),
        "rosenbrock_wolfe": (torch.tensor([-1.5, 2.0], dtype=torch.float64),
                             lambda p: (1 - p[0]) ** 2 + 100 * (p[1] - p[0] ** 2) ** 2,
                             {"lr": 1, "max_iter": 20, "line_search_fn": "strong_wolfe"}, 3),
    }
    for name, (p0, f, kw, steps) in problems.items():
        p = p0.clone().requires_grad_()
        opt = torch.optim.LBFGS([p], **kw)

        def closure():
            opt.zero_grad()
            loss = f(p)
            loss.backward()
            return loss
        losses, params = [], []
        for _ in range(steps):
            losses.append(opt.step(closure).item())
            params.append(p.detach().clone())
        out[name] = {"p0": p0, "opts": kw, "losses": losses, "params": params}
    out["least_squares"]["A"], out["least_squares"]["b"] = A, b
    return out


def gen_arrange():
    """repeat/tile, roll, flip, triu, tril, repeat_interleave on a (2, 3, 4) float64 tensor: results and the
    gradient of sum(y * c)."""
    x = rnd(2, 3, 4)
    cases = [
        ("tile", {"reps": [2, 1, 3]}, lambda t: t.repeat(2, 1, 3)),
        ("tile", {"reps": [2, 2]}, lambda t: torch.tile(t, (2, 2))),
        ("tile", {"reps": [2, 1, 1, 2]}, lambda t: t.repeat(2, 1, 1, 2)),
        ("roll", {"shifts": [1, -2], "dims": [2, 3]}, lambda t: torch.roll(t, (1, -2), (1, 2))),
        ("roll", {"shifts": [5]}, lambda t: torch.roll(t, 5)),
        ("flip", {"dims": [1, 3]}, lambda t: torch.flip(t, (0, 2))),
        ("triu", {"k": 1}, lambda t: torch.triu(t, 1)),
        ("tril", {"k": -1}, lambda t: torch.tril(t, -1)),
        ("triu", {"k": 0}, lambda t: torch.triu(t)),
        ("repeat_interleave", {"repeats": 2, "dim": 2}, lambda t: torch.repeat_interleave(t, 2, dim=1)),
        ("repeat_interleave", {"repeats": [1, 0, 3], "dim": 2},
         lambda t: torch.repeat_interleave(t, torch.tensor([1, 0, 3]), dim=1)),
        ("repeat_interleave", {"repeats": 3}, lambda t: torch.repeat_interleave(t, 3)),
        ("repeat_interleave", {"repeats": [2], "dim": -1},
         lambda t: torch.repeat_interleave(t, torch.tensor([2]), dim=-1)),
    ]
    out = []
    for name, args, f in cases:
        xr = x.clone().requires_grad_()
        y = f(xr)
        c = rnd(*y.shape)
        (g,) = torch.autograd.grad((y * c).sum(), [xr])
        out.append({"op": name, "args": args, "x": x, "y": y, "c": c, "g": g})
    return out


def gen_more_functions():
    """The third round of functions (dlua.pointwise's divisions and xlogy ..., dlua.scans,
    dlua.shaping, the BLAS forms, matrix_power, matrix_exp, multi_dot, cov, corrcoef,
    quantile): each case {name, args, ys, c, grads}; ys every output, grads those of
    sum(ys[1] * c) for the float arguments (an integer argument is marked {int = ...}, its
    values 1-based where they are indices)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261212)
        a, b = rnd(3, 4) * 3, rnd(3, 4) * 3
        b[0, 0], a[1, 1], a[2, 3] = 0.0, 0.0, -0.0
        pos = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        ties = torch.tensor([[1.0, 3.0, 3.0, 2.0, 5.0, 5.0, 0.0], [2.0, float("nan"), 1.0, 4.0, float("nan"), 0.0, 7.0]],
                            dtype=torch.float64)
        sq = rnd(2, 3, 3) * 0.7
        big = rnd(3, 3) * 4
        grid_x = torch.tensor([0.0, 0.3, 1.1, 1.5, 2.9], dtype=torch.float64)
        yv = rnd(2, 5)
        idx = torch.tensor([[2, 0], [1, 1], [3, 2]])
        cases = (
            ("div_floor", lambda x, y: torch.div(x, y, rounding_mode="floor"), (a, b)),
            ("div_trunc", lambda x, y: torch.div(x, y, rounding_mode="trunc"), (a, b)),
            ("div_floor_small", lambda x: torch.div(x, 0.1, rounding_mode="floor"), (torch.tensor([1.0, -1.0, 0.3, 7.0], dtype=torch.float64),)),
            ("add_alpha", lambda x, y: torch.add(x, y, alpha=-2.5), (a, b)),
            ("sub_alpha", lambda x, y: torch.sub(x, y, alpha=0.5), (a, b)),
            ("xlogy", torch.xlogy, (a, pos)),
            ("logit", lambda x: torch.logit(x), (pos,)),
            ("logit_eps", lambda x: torch.logit(x, eps=0.2), (pos,)),
            ("sinc", torch.sinc, (a,)),
            ("deg2rad", torch.deg2rad, (a,)),
            ("copysign", torch.copysign, (a, b)),
            ("float_power", lambda x: torch.float_power(x, 2.5), (pos,)),
            ("cummax", lambda x: torch.cummax(x, 1), (ties,)),
            ("cummin", lambda x: torch.cummin(x, 1), (ties,)),
            ("cummax_dim1", lambda x: torch.cummax(x, 0), (a,)),
            ("logcumsumexp", lambda x: torch.logcumsumexp(x, 1), (a * 100,)),
            ("diff", lambda x: torch.diff(x, n=2, dim=1), (a,)),
            ("diff_prepend", lambda x, y: torch.diff(x, dim=0, prepend=y[:1], append=y), (a, b)),
            ("trapezoid_x", lambda y: torch.trapezoid(y, grid_x), (yv,)),
            ("trapezoid_dx", lambda y: torch.trapezoid(y, dx=0.25, dim=0), (yv,)),
            ("cumulative_trapezoid", lambda y: torch.cumulative_trapezoid(y, grid_x), (yv,)),
            ("take_along_dim", lambda x: torch.take_along_dim(x, idx, 1), (a,)),
            ("take_along_flat", lambda x: torch.take_along_dim(x, torch.tensor([11, 0, 5])), (a,)),
            ("diag_embed", lambda x: torch.diag_embed(x, 1), (a,)),
            ("diag_embed_dims", lambda x: torch.diag_embed(x, -2, 0, 2), (a,)),
            ("diagflat", lambda x: torch.diagflat(x[:2, :2], -1), (a,)),
            ("broadcast_to", lambda x: torch.broadcast_to(x[:, :1], (2, 3, 5)), (a,)),
            ("mv", lambda x, y: torch.mv(x, y[0]), (a, b)),
            ("vdot", lambda x, y: torch.vdot(x[0], y[1]), (a, b)),
            ("addmm", lambda x, y: torch.addmm(x[:, :3], x, y.T, beta=0.5, alpha=-2), (a, b)),
            ("addmv", lambda x, y: torch.addmv(x[0, :3], x, y[1], beta=2), (a, b)),
            ("baddbmm", lambda x, y: torch.baddbmm(x, y, x.transpose(1, 2), alpha=0.3), (sq, sq * 2)),
            ("addbmm", lambda x, y: torch.addbmm(x[0], y, x, beta=0), (sq, sq * 2)),
            ("matrix_power", lambda x: torch.linalg.matrix_power(x, 5), (sq,)),
            ("matrix_power_neg", lambda x: torch.linalg.matrix_power(x + 3 * torch.eye(3, dtype=x.dtype), -2), (sq,)),
            ("matrix_exp", torch.linalg.matrix_exp, (sq,)),
            ("matrix_exp_big", torch.linalg.matrix_exp, (big,)),
            ("multi_dot", lambda x, y: torch.linalg.multi_dot([x[0], y.T, x, y[1]]), (a, b)),
            ("cov", lambda x: torch.cov(x), (a,)),
            ("cov_weights", lambda x: torch.cov(x, correction=0, fweights=torch.tensor([1, 3, 2, 1]),
                                                aweights=torch.tensor([0.5, 1.0, 2.0, 0.1], dtype=torch.float64)), (a,)),
            ("corrcoef", torch.corrcoef, (a,)),
            ("quantile", lambda x: torch.quantile(x, torch.tensor([0.1, 0.5, 0.95], dtype=x.dtype), dim=1), (a,)),
            ("quantile_all", lambda x: torch.quantile(x, 0.3), (a,)),
            ("quantile_lower", lambda x: torch.quantile(x, 0.4, dim=0, keepdim=True, interpolation="lower"), (a,)),
            ("quantile_midpoint", lambda x: torch.quantile(x, 0.4, dim=1, interpolation="midpoint"), (a,)),
            ("quantile_nearest", lambda x: torch.quantile(x, torch.tensor([0.5, 0.75], dtype=x.dtype), dim=1,
                                                          interpolation="nearest"), (a,)),
            ("quantile_nan", lambda x: torch.quantile(x, 0.5, dim=1), (ties,)),
            ("nanquantile", lambda x: torch.nanquantile(x, torch.tensor([0.2, 0.9], dtype=x.dtype), dim=1), (ties,)),
        )
        for name, fn, args in cases:
            xs = [t.clone().requires_grad_() if t.is_floating_point() else t for t in args]
            ys = fn(*xs)
            ys = list(ys) if isinstance(ys, tuple) else [ys]
            c = torch.randn(ys[0].shape, dtype=torch.float64)
            grads = []
            diff = [t for t in xs if t.requires_grad]
            if ys[0].requires_grad and diff:
                grads = [g if g is not None else torch.zeros_like(t) for g, t in
                         zip(torch.autograd.grad((ys[0] * c).nan_to_num().sum(), diff, allow_unused=True), diff)]
            outs = [(y + 1 if not y.is_floating_point() else y) for y in ys]   # indices 1-based
            out.append({"name": name, "args": list(args), "ys": outs, "c": c, "grads": grads})
    return out


def gen_special():
    """lgamma, digamma, polygamma (n = 1, 2, 3), erfinv and mvlgamma in float64 over
    positive, negative and large arguments (erfinv up to 1 - 1e-15), with gradients of
    sum(y * c)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261213)
        x = torch.cat([torch.rand(8, dtype=torch.float64) * 6 + 0.05,
                       torch.tensor([-0.5, -1.3, -2.7, -7.25, 1e-3, 25.0, 1e3, 1e7], dtype=torch.float64)])
        u = torch.cat([torch.rand(8, dtype=torch.float64) * 1.8 - 0.9,
                       torch.tensor([0.0, -0.0, 0.999, -0.9999, 1 - 1e-12, -(1 - 1e-15), 1e-300, 0.5],
                                    dtype=torch.float64)])
        m = torch.rand(6, dtype=torch.float64) * 4 + 1.6
        cases = (("lgamma", torch.lgamma, x), ("digamma", torch.digamma, x),
                 ("polygamma1", lambda v: torch.polygamma(1, v), x), ("polygamma2", lambda v: torch.polygamma(2, v), x),
                 ("polygamma3", lambda v: torch.polygamma(3, v), x), ("erfinv", torch.erfinv, u),
                 ("mvlgamma3", lambda v: torch.mvlgamma(v, 3), m))
        for name, fn, arg in cases:
            v = arg.clone().requires_grad_()
            y = fn(v)
            c = rnd(*y.shape)
            (g,) = torch.autograd.grad((y * c).sum(), [v])
            case = {"name": name, "x": arg, "y": y, "c": c, "g": g}
            if name in ("erfinv", "polygamma1"):
                # PyTorch's erfinv loses digits as |y| nears 1 (5e-5 relative at 1 - 1e-15)
                # and its trigamma (polygamma(1, x)) is good to about 1e-10: mpmath's values
                # at 40 digits beside them
                import mpmath
                mpmath.mp.dps = 40
                f = mpmath.erfinv if name == "erfinv" else (lambda t: mpmath.polygamma(1, t))
                case["exact"] = [float(f(mpmath.mpf(float(t)))) if abs(float(t)) != 0 else float(t) for t in arg]
            out.append(case)
    return out


def gen_elementwise_math():
    """asin, acos, atan, sinh, cosh, asinh, acosh, atanh, exp2, log2, log10 and erfc in float64
    on their domains (edges and far values included), with gradients of sum(y * c)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261215)
        unit = torch.cat([torch.rand(6, dtype=torch.float64) * 1.98 - 0.99,
                          torch.tensor([0.0, -0.0, 0.5, -0.999999], dtype=torch.float64)])
        real = torch.cat([rnd(6) * 4, torch.tensor([0.0, 1e-8, -30.0, 700.0], dtype=torch.float64)])
        above = torch.cat([torch.rand(6, dtype=torch.float64) * 5 + 1.001, torch.tensor([1.5, 1e6], dtype=torch.float64)])
        pos = torch.cat([torch.rand(6, dtype=torch.float64) * 50 + 1e-3, torch.tensor([1.0, 2.0, 1e-300, 1e300], dtype=torch.float64)])
        for name, fn, arg in (("asin", torch.asin, unit), ("acos", torch.acos, unit), ("atan", torch.atan, real),
                              ("sinh", torch.sinh, real[:-1]), ("cosh", torch.cosh, real[:-1]), ("asinh", torch.asinh, real),
                              ("acosh", torch.acosh, above), ("atanh", torch.atanh, unit), ("exp2", torch.exp2, real[:-1]),
                              ("log2", torch.log2, pos), ("log10", torch.log10, pos), ("erfc", torch.erfc, real)):
            v = arg.clone().requires_grad_()
            y = fn(v)
            c = rnd(*y.shape)
            (g,) = torch.autograd.grad((y * c).sum(), [v])
            out.append({"name": name, "x": arg, "y": y, "c": c, "g": g})
    return out


def gen_fourth_round():
    """scatter_reduce (every reduction, with and without x's values), index_put, put,
    take, masked_scatter, mode, renorm and vander, in float64 with repeated indices and
    tied values: each case {name, args, ys, c, grads} as in gen_more_functions (the index
    tensors are constants written out again in tests/lua/test_breadth.lua, 1-based)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261216)
        ix = torch.tensor([[0, 2, 0, 3, 0], [1, 1, 1, 1, 2], [3, 2, 3, 0, 3]])
        x = torch.randint(-3, 4, (3, 4)).double()
        src = torch.randint(-3, 4, (3, 5)).double()     # small integers: values tie
        pr = rnd(3, 5)
        pr[0, 0], pr[0, 2], pr[2, 1] = 0.0, 0.0, 0.0      # two zeros at one place, one alone
        a = rnd(4, 3)
        ties = torch.tensor([[1.0, 3.0, 3.0, 2.0, 1.0, 5.0], [2.0, 2.0, 7.0, 7.0, 0.0, 0.0], [4.0, -1.0, 4.0, -1.0, 4.0, 6.0]],
                            dtype=torch.float64)
        v = torch.tensor([0.0, 1.5, -2.0, 0.5], dtype=torch.float64)
        def powers(t, n):
            return torch.cat([torch.ones(len(t), 1, dtype=t.dtype), t.unsqueeze(1).expand(len(t), n - 1)], 1).cumprod(1)

        cases = []
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for inc in (True, False):
                tag = "scatter_reduce_" + reduce + ("" if inc else "_noself")
                base = pr if reduce == "prod" else src
                cases.append((tag, lambda t, u, r=reduce, i=inc: t.scatter_reduce(1, ix, u, r, include_self=i), (x, base)))
        cases.append(("scatter_reduce_dim1", lambda t, u: t.scatter_reduce(0, ix[:, :4] % 3, u[:, :4], "amax"), (x, src)))
        cases += [
            ("index_put", lambda t, u: t.index_put((torch.tensor([0, 2, -1]), torch.tensor([1, 1, 0])), u[0]), (a, a)),
            ("index_put_acc", lambda t, u: t.index_put((torch.tensor([0, 2, 0, 0]),), u, accumulate=True), (a, a)),
            ("index_put_mask", lambda t, u: t.index_put((torch.tensor([True, False, True, False]),), u[1]), (a, a)),
            ("put", lambda t, u: t.put(torch.tensor([[11, 0], [-1, 4]]), u[:2, :2]), (a, a)),
            ("put_acc", lambda t, u: t.put(torch.tensor([5, 5, 0]), u[0], accumulate=True), (a, a)),
            ("take", lambda t: torch.take(t, torch.tensor([[11, 0, 5], [-2, 3, 3]])), (a,)),
            ("masked_scatter", lambda t, u: t.masked_scatter(torch.tensor([True, False, True]), u), (a, a * 2)),
            ("mode", lambda t: torch.mode(t, 1), (ties,)),
            ("mode_dim1_keep", lambda t: torch.mode(t, 0, keepdim=True), (ties,)),
            ("renorm", lambda t: torch.renorm(t, 2, 0, 1.0), (a,)),
            ("renorm_p1", lambda t: torch.renorm(t, 1, 1, 1.5), (a,)),
            ("renorm_p3", lambda t: torch.renorm(t, 3, 0, 0.8), (a,)),
            ("vander", lambda t: powers(t, 4).flip(1), (v,)),
            ("vander_increasing", lambda t: powers(t, 5), (v,)),
        ]
        # torch.vander's backward fails in 1.13 (its cumprod works in place): the cases
        # run its own formula, checked here to give torch.vander's values
        assert torch.equal(powers(v, 4).flip(1), torch.vander(v))
        assert torch.equal(powers(v, 5), torch.vander(v, N=5, increasing=True))
        for name, fn, args in cases:
            xs = [t.clone().requires_grad_() for t in args]
            ys = fn(*xs)
            ys = list(ys) if isinstance(ys, tuple) else [ys]
            c = torch.randn(ys[0].shape, dtype=torch.float64)
            grads = [g if g is not None else torch.zeros_like(t) for g, t in
                     zip(torch.autograd.grad((ys[0] * c).sum(), xs, allow_unused=True), xs)]
            outs = [(y + 1 if not y.is_floating_point() else y) for y in ys]   # indices 1-based
            out.append({"name": name, "args": list(args), "ys": outs, "c": c, "grads": grads})
    return out


def gen_bits():
    """The bitwise ops, the shifts (amounts within the width), gcd and lcm on int64, int32,
    uint8 and bool, tensor with tensor (broadcast) and with a number on either side:
    each case {name, dtype, a, b, y} (b a number where the case has one; values within
    2^40, so that Lua's numbers hold them)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261217)
        for dt, lo, hi in ((torch.int64, -2 ** 40, 2 ** 40), (torch.int32, -2 ** 31, 2 ** 31 - 1), (torch.uint8, 0, 256)):
            a = torch.randint(lo, hi, (3, 4), dtype=dt)
            b = torch.randint(lo, hi, (4,), dtype=dt)
            small = torch.randint(-60, 61, (3, 4), dtype=dt) if dt != torch.uint8 else torch.randint(0, 200, (3, 4), dtype=dt)
            width = 8 * a.element_size()
            amount = torch.randint(0, width, (3, 4), dtype=dt)
            name = str(dt).replace("torch.", "")
            for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
                f = getattr(torch, op)
                out.append({"name": op, "dtype": name, "a": a, "b": b, "y": f(a, b)})
                out.append({"name": op, "dtype": name, "a": a, "b": 77, "y": f(a, 77)})
            out.append({"name": "bitwise_not", "dtype": name, "a": a, "y": torch.bitwise_not(a)})
            out.append({"name": "bitwise_left_shift", "dtype": name, "a": small, "b": amount % 20,
                        "y": torch.bitwise_left_shift(small, amount % 20)})
            out.append({"name": "bitwise_right_shift", "dtype": name, "a": a, "b": amount,
                        "y": torch.bitwise_right_shift(a, amount)})
            out.append({"name": "bitwise_right_shift", "dtype": name, "a": a, "b": 3, "y": torch.bitwise_right_shift(a, 3)})
            g = torch.randint(1, 30, (3, 4), dtype=dt) * torch.randint(0, 12, (3, 4), dtype=dt)
            h = torch.randint(1, 30, (3, 4), dtype=dt) * torch.randint(0, 12, (3, 4), dtype=dt)
            if dt != torch.uint8:
                g, h = g * (torch.randint(0, 2, (3, 4), dtype=dt) * 2 - 1), -h   # signs mixed
            out.append({"name": "gcd", "dtype": name, "a": g, "b": h, "y": torch.gcd(g, h)})
            out.append({"name": "lcm", "dtype": name, "a": g, "b": h, "y": torch.lcm(g, h)})
        t = torch.tensor([[True, False, True], [False, False, True]])
        u = torch.tensor([True, False, False])
        for op in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            out.append({"name": op, "dtype": "bool", "a": t, "b": u, "y": getattr(torch, op)(t, u)})
        out.append({"name": "bitwise_not", "dtype": "bool", "a": t, "y": torch.bitwise_not(t)})
    return out


def gen_volumetric():
    """3-D convolution, pools, adaptive pools, interpolation (trilinear, nearest, area),
    batch and instance normalisation over (N, C, D, H, W) in float64: each case {name,
    args, ys, c, grads} as in gen_more_functions (max_pool3d's indices 1-based)."""
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261218)
        x = rnd(2, 4, 5, 6, 7)
        w = rnd(6, 2, 3, 2, 3) * 0.3
        b = rnd(6)
        w1 = rnd(3, 4, 2, 3, 1) * 0.3
        cases = (
            ("conv3d", lambda t, u, v: F.conv3d(t, u, v, stride=(2, 1, 2), padding=(1, 0, 1), dilation=(1, 2, 1),
                                                 groups=2), (x, w, b)),
            ("conv3d_plain", lambda t, u: F.conv3d(t, u), (x, w1)),
            ("conv3d_same", lambda t, u: F.conv3d(t, u, padding="same"), (x, rnd(2, 4, 3, 3, 1))),
            ("conv_transpose3d", lambda t, u, v: F.conv_transpose3d(t, u, v, stride=(2, 1, 3), padding=(1, 0, 2),
                                                                     output_padding=(1, 0, 2), dilation=(1, 2, 1),
                                                                     groups=2), (x, rnd(4, 3, 3, 2, 3) * 0.3, rnd(6))),
            ("conv_transpose3d_plain", lambda t, u: F.conv_transpose3d(t, u, stride=2), (x, rnd(4, 2, 2, 3, 1) * 0.3)),
            ("conv_transpose3d_pad", lambda t, u: F.conv_transpose3d(t, u, padding=2, output_padding=1, dilation=2),
             (x, rnd(4, 1, 3, 3, 3) * 0.3)),
            ("max_pool3d", lambda t: F.max_pool3d(t, 2, return_indices=True), (x,)),
            ("max_pool3d_pad", lambda t: F.max_pool3d(t, (3, 2, 3), stride=2, padding=(1, 1, 0), ceil_mode=True,
                                                      return_indices=True), (x,)),
            ("avg_pool3d", lambda t: F.avg_pool3d(t, (3, 2, 2), stride=2, padding=1), (x,)),
            ("avg_pool3d_exclude", lambda t: F.avg_pool3d(t, 3, stride=2, padding=1, ceil_mode=True,
                                                          count_include_pad=False), (x,)),
            ("adaptive_avg_pool3d", lambda t: F.adaptive_avg_pool3d(t, (2, 4, 3)), (x,)),
            ("adaptive_max_pool3d", lambda t: F.adaptive_max_pool3d(t, (3, 2, 5)), (x,)),
            ("trilinear", lambda t: F.interpolate(t, scale_factor=(2, 1.5, 0.5), mode="trilinear"), (x,)),
            ("trilinear_aligned", lambda t: F.interpolate(t, size=(3, 9, 4), mode="trilinear", align_corners=True), (x,)),
            ("nearest3d", lambda t: F.interpolate(t, size=(7, 4, 9)), (x,)),
            ("area3d", lambda t: F.interpolate(t, size=(2, 3, 5), mode="area"), (x,)),
            ("batch_norm3d", lambda t: F.batch_norm(t, None, None, training=True), (x,)),
            ("instance_norm3d", lambda t: F.instance_norm(t), (x,)),
        )
        for name, fn, args in cases:
            xs = [t.clone().requires_grad_() for t in args]
            ys = fn(*xs)
            ys = list(ys) if isinstance(ys, tuple) else [ys]
            c = torch.randn(ys[0].shape, dtype=torch.float64)
            grads = list(torch.autograd.grad((ys[0] * c).sum(), xs))
            outs = [(y + 1 if not y.is_floating_point() else y) for y in ys]   # indices 1-based
            out.append({"name": name, "args": list(args), "ys": outs, "c": c, "grads": grads})
    return out


def one_output_cases(cases, extra=lambda name: {}):
    """Cases (name, fn, args) of one output: {name, args, ys, c, grads} with the gradients
    of sum(y * c) for every argument (c drawn here, in order), plus extra(name)'s fields."""
    out = []
    for name, fn, args in cases:
        xs = [t.clone().requires_grad_() for t in args]
        y = fn(*xs)
        c = torch.randn(y.shape, dtype=torch.float64)
        grads = [g if g is not None else torch.zeros_like(t) for g, t in
                 zip(torch.autograd.grad((y * c).sum(), xs, allow_unused=True), xs)]
        case = {"name": name, "args": list(args), "ys": [y], "c": c, "grads": grads}
        case.update(extra(name))
        out.append(case)
    return out


def gen_distributions():
    """torch.distributions in float64: log_prob, entropy, cdf, icdf, mean and variance of
    Normal, Uniform, Exponential, Laplace, Bernoulli, Categorical (values 1-based in
    dlua), MultivariateNormal (covariance, scale_tril and precision), Independent, and
    kl_divergence of each pair: {name, args, ys, c, grads} as in gen_more_functions,
    gradients for the parameters (and the values where continuous)."""
    import torch.distributions as TD
    with torch.random.fork_rng():
        torch.manual_seed(20261219)
        loc, raw = rnd(3, 4), rnd(3, 4)
        scale = raw.exp()
        v = rnd(3, 4) * 2
        u = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        lo, width = rnd(4), torch.rand(4, dtype=torch.float64) + 0.5
        inside = lo + width * torch.rand(3, 4, dtype=torch.float64)
        rate = torch.rand(4, dtype=torch.float64) * 2 + 0.2
        pos = torch.rand(3, 4, dtype=torch.float64) * 3
        logits = rnd(3, 5)
        probs = torch.rand(3, 5, dtype=torch.float64) + 0.05
        cats = torch.tensor([0, 4, 2])
        bits = torch.tensor([[1.0, 0.0, 1.0, 1.0], [0.0, 0.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
        p01 = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        k = 3
        A = rnd(2, k, k)
        cov = A @ A.transpose(-1, -2) + torch.eye(k, dtype=torch.float64)
        mloc = rnd(2, k)
        mv = rnd(4, 2, k)
        tril = torch.linalg.cholesky(cov)
        B = rnd(k, k)

        def sym(t):   # a covariance from any square t, so that gradients stay on the manifold
            return t @ t.transpose(-1, -2) + torch.eye(k, dtype=torch.float64)

        cases = (
            ("normal_log_prob", lambda m, s, x: TD.Normal(m, s).log_prob(x), (loc, scale, v)),
            ("normal_entropy", lambda m, s: TD.Normal(m, s).entropy(), (loc, scale)),
            ("normal_cdf", lambda m, s, x: TD.Normal(m, s).cdf(x), (loc, scale, v)),
            ("normal_icdf", lambda m, s, q: TD.Normal(m, s).icdf(q), (loc, scale, u)),
            ("uniform_log_prob", lambda a, w, x: TD.Uniform(a, a + w).log_prob(x), (lo, width, inside)),
            ("uniform_entropy", lambda a, w: TD.Uniform(a, a + w).entropy(), (lo, width)),
            ("uniform_cdf", lambda a, w, x: TD.Uniform(a, a + w).cdf(x), (lo, width, inside)),
            ("uniform_moments", lambda a, w: TD.Uniform(a, a + w).variance + TD.Uniform(a, a + w).mean, (lo, width)),
            ("exponential_log_prob", lambda r, x: TD.Exponential(r).log_prob(x), (rate, pos)),
            ("exponential_cdf_icdf", lambda r, x, q: TD.Exponential(r).cdf(x) + TD.Exponential(r).icdf(q), (rate, pos, u)),
            ("exponential_entropy", lambda r: TD.Exponential(r).entropy(), (rate,)),
            ("laplace_log_prob", lambda m, s, x: TD.Laplace(m, s).log_prob(x), (loc, scale, v)),
            ("laplace_cdf_icdf", lambda m, s, x, q: TD.Laplace(m, s).cdf(x) + TD.Laplace(m, s).icdf(q), (loc, scale, v, u)),
            ("laplace_entropy", lambda m, s: TD.Laplace(m, s).entropy() + TD.Laplace(m, s).variance, (loc, scale)),
            ("bernoulli_log_prob", lambda p: TD.Bernoulli(probs=p).log_prob(bits), (p01,)),
            ("bernoulli_logits", lambda l: TD.Bernoulli(logits=l).log_prob(bits) + TD.Bernoulli(logits=l).entropy(), (loc,)),
            ("bernoulli_entropy", lambda p: TD.Bernoulli(probs=p).entropy(), (p01,)),
            ("categorical_log_prob", lambda l: TD.Categorical(logits=l).log_prob(cats), (logits,)),
            ("categorical_probs", lambda p: TD.Categorical(probs=p).log_prob(cats) + TD.Categorical(probs=p).entropy(), (probs,)),
            ("categorical_entropy", lambda l: TD.Categorical(logits=l).entropy(), (logits,)),
            ("mvn_log_prob", lambda m, a, x: TD.MultivariateNormal(m, covariance_matrix=sym(a)).log_prob(x), (mloc, A, mv)),
            ("mvn_scale_tril", lambda m, t, x: TD.MultivariateNormal(m, scale_tril=t).log_prob(x), (mloc, tril, mv)),
            ("mvn_precision", lambda m, a, x: TD.MultivariateNormal(m, precision_matrix=sym(a)).log_prob(x), (mloc, A, mv)),
            ("mvn_entropy", lambda a: TD.MultivariateNormal(torch.zeros(2, k, dtype=torch.float64),
                                                             covariance_matrix=sym(a)).entropy(), (A,)),
            ("independent", lambda m, s, x: TD.Independent(TD.Normal(m, s), 1).log_prob(x), (loc, scale, v)),
            ("kl_normal", lambda m, s: TD.kl_divergence(TD.Normal(m, s), TD.Normal(m.flip(0), s * 0.5 + 0.3)), (loc, scale)),
            ("kl_bernoulli", lambda p: TD.kl_divergence(TD.Bernoulli(probs=p), TD.Bernoulli(probs=p.flip(1))), (p01,)),
            ("kl_categorical", lambda l: TD.kl_divergence(TD.Categorical(logits=l), TD.Categorical(logits=l.flip(0))), (logits,)),
            ("kl_uniform", lambda a, w: TD.kl_divergence(TD.Uniform(a + 0.1 * w, a + 0.6 * w), TD.Uniform(a, a + w)), (lo, width)),
            ("kl_exponential", lambda r: TD.kl_divergence(TD.Exponential(r), TD.Exponential(r.flip(0))), (rate,)),
            ("kl_laplace", lambda m, s: TD.kl_divergence(TD.Laplace(m, s), TD.Laplace(m * 0.5, s.flip(1))), (loc, scale)),
            ("kl_mvn", lambda m, a, b: TD.kl_divergence(TD.MultivariateNormal(m, covariance_matrix=sym(a)),
                                                        TD.MultivariateNormal(m.flip(0), covariance_matrix=sym(b))),
             (mloc, A, B)),
            ("kl_independent", lambda m, s: TD.kl_divergence(TD.Independent(TD.Normal(m, s), 1),
                                                             TD.Independent(TD.Normal(m * 2, s), 1)), (loc, scale)),
        )
        out = one_output_cases(cases)
    return out


def gen_distributions2():
    """The second round of torch.distributions, float64: Gamma, Chi2, Beta, Dirichlet,
    LogNormal, HalfNormal, Gumbel, Cauchy, StudentT, Poisson, Geometric and
    OneHotCategorical (log_prob, entropy, moments, cdf/icdf where they have them) and
    their KL divergences; cases as gen_distributions'."""
    import torch.distributions as TD
    with torch.random.fork_rng():
        torch.manual_seed(20261220)
        pos1, pos2 = torch.rand(3, 4, dtype=torch.float64) * 3 + 0.2, torch.rand(3, 4, dtype=torch.float64) * 3 + 0.2
        x = torch.rand(3, 4, dtype=torch.float64) * 4 + 0.05
        unit = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        conc = torch.rand(3, 5, dtype=torch.float64) * 3 + 0.3
        simplex = torch.rand(3, 5, dtype=torch.float64) + 0.05
        simplex = simplex / simplex.sum(-1, keepdim=True)
        loc, scale = rnd(3, 4), torch.rand(3, 4, dtype=torch.float64) + 0.3
        v = rnd(3, 4) * 2
        counts = torch.randint(0, 9, (3, 4)).double()
        p01 = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        logits = rnd(3, 5)
        onehot = torch.nn.functional.one_hot(torch.tensor([2, 0, 4]), 5).double()
        cases = (
            ("gamma_log_prob", lambda a, r, t: TD.Gamma(a, r).log_prob(t), (pos1, pos2, x)),
            ("gamma_entropy", lambda a, r: TD.Gamma(a, r).entropy() + TD.Gamma(a, r).variance, (pos1, pos2)),
            ("chi2_log_prob", lambda d, t: TD.Chi2(d).log_prob(t) + TD.Chi2(d).entropy(), (pos1, x)),
            ("beta_log_prob", lambda a, b, t: TD.Beta(a, b).log_prob(t), (pos1, pos2, unit)),
            ("beta_entropy", lambda a, b: TD.Beta(a, b).entropy() + TD.Beta(a, b).variance + TD.Beta(a, b).mean, (pos1, pos2)),
            ("dirichlet_log_prob", lambda c, t: TD.Dirichlet(c).log_prob(t), (conc, simplex)),
            ("dirichlet_entropy", lambda c: TD.Dirichlet(c).entropy() + TD.Dirichlet(c).variance.sum(-1), (conc,)),
            ("lognormal", lambda m, s, t: TD.LogNormal(m, s).log_prob(t) + TD.LogNormal(m, s).entropy()
             + TD.LogNormal(m, s).mean, (loc, scale, x)),
            ("halfnormal", lambda s, t, q: TD.HalfNormal(s).log_prob(t) + TD.HalfNormal(s).entropy()
             + TD.HalfNormal(s).cdf(t) + TD.HalfNormal(s).icdf(q), (scale, x, unit)),
            ("gumbel", lambda m, s, t: TD.Gumbel(m, s).log_prob(t) + TD.Gumbel(m, s).entropy() + TD.Gumbel(m, s).mean
             + torch.exp(-torch.exp(-(t - m) / s)), (loc, scale, v)),   # (1.13's Gumbel.cdf checks its base's support)
            ("cauchy", lambda m, s, t, q: TD.Cauchy(m, s).log_prob(t) + TD.Cauchy(m, s).entropy() + TD.Cauchy(m, s).cdf(t)
             + TD.Cauchy(m, s).icdf(q), (loc, scale, v, unit)),
            ("student_t", lambda d, m, s, t: TD.StudentT(d, m, s).log_prob(t) + TD.StudentT(d, m, s).entropy(),
             (pos1 + 2, loc, scale, v)),
            ("poisson", lambda r: TD.Poisson(r).log_prob(counts), (pos1,)),
            ("geometric", lambda p: TD.Geometric(probs=p).log_prob(counts) + TD.Geometric(probs=p).entropy()
             + TD.Geometric(probs=p).mean, (p01,)),
            ("one_hot_categorical", lambda l: TD.OneHotCategorical(logits=l).log_prob(onehot)
             + TD.OneHotCategorical(logits=l).entropy(), (logits,)),
            ("kl_gamma", lambda a, r: TD.kl_divergence(TD.Gamma(a, r), TD.Gamma(r, a)), (pos1, pos2)),
            ("kl_beta", lambda a, b: TD.kl_divergence(TD.Beta(a, b), TD.Beta(b, a + 1)), (pos1, pos2)),
            ("kl_dirichlet", lambda c: TD.kl_divergence(TD.Dirichlet(c), TD.Dirichlet(c.flip(0))), (conc,)),
            ("kl_poisson", lambda r, q: TD.kl_divergence(TD.Poisson(r), TD.Poisson(q)), (pos1, pos2)),
            ("kl_gumbel", lambda m, s: TD.kl_divergence(TD.Gumbel(m, s), TD.Gumbel(m * 0.5, s.flip(1))), (loc, scale)),
            ("kl_lognormal", lambda m, s: TD.kl_divergence(TD.LogNormal(m, s), TD.LogNormal(m.flip(0), s)), (loc, scale)),
            ("kl_halfnormal", lambda s: TD.kl_divergence(TD.HalfNormal(s), TD.HalfNormal(s.flip(1))), (scale,)),
        )
        out = one_output_cases(cases, lambda name: {"counts": counts} if name in ("poisson", "geometric") else {})
    return out


def gen_gamma_slopes():
    """dx/dalpha of Gamma(alpha, 1) draws x with their uniform held fixed (the implicit
    reparameterisation of rsample), from mpmath at 30 digits: -dP/dalpha over the density,
    P the regularised lower incomplete gamma. PyTorch's _standard_gamma_grad beside them
    (an approximation, about 1e-4 off)."""
    import mpmath
    mpmath.mp.dps = 30
    out = []
    with torch.random.fork_rng():
        torch.manual_seed(20261221)
        for a in (0.05, 0.3, 1.0, 2.5, 7.0, 30.0, 200.0, 999.0, 1500.0, 40000.0):
            for x in torch._standard_gamma(torch.full((5,), a, dtype=torch.float64)).tolist():
                density = mpmath.mpf(x) ** (a - 1) * mpmath.exp(-x) / mpmath.gamma(a)
                dP = mpmath.diff(lambda t: mpmath.gammainc(t, 0, x, regularized=True), a)
                torch_slope = torch._standard_gamma_grad(torch.tensor([a], dtype=torch.float64),
                                                         torch.tensor([x], dtype=torch.float64)).item()
                out.append({"alpha": a, "x": x, "slope": float(-dP / density), "torch": torch_slope})
    return out


def gen_packed():
    """Sequence layers on packed batches of different lengths (torch.nn.utils.rnn): the
    padded output (pad_packed_sequence, batch first), the final states, the packed data
    and batch sizes, and the gradients of sum(out^2) + sum(h_n) (+ sum(c_n)) for the padded
    input and one weight."""
    from torch.nn.utils import rnn
    out = {}
    with torch.random.fork_rng():
        torch.manual_seed(20261222)
        cases = (("lstm_bi_2layer_unsorted", torch.nn.LSTM(3, 4, num_layers=2, bidirectional=True), [5, 2, 4, 5],
                  False, "weight_hh_l0_reverse"),
                 ("gru_sorted_batch_first", torch.nn.GRU(3, 5, batch_first=True), [6, 4, 1], True, "weight_ih_l0"),
                 ("rnn_tanh_bi", torch.nn.RNN(3, 4, bidirectional=True), [3, 1, 2], False, "bias_ih_l0_reverse"))
        for name, mod, lengths, sorted_, wname in cases:
            mod = mod.double()
            n, steps = len(lengths), max(lengths)
            x = rnd(n, steps, 3) if mod.batch_first else rnd(steps, n, 3)
            xr = x.clone().requires_grad_()
            packed = rnn.pack_padded_sequence(xr, lengths, batch_first=mod.batch_first, enforce_sorted=sorted_)
            if isinstance(mod, torch.nn.LSTM):
                y, (hn, cn) = mod(packed)
            else:
                y, hn = mod(packed)
                cn = None
            padded, lens = rnn.pad_packed_sequence(y, batch_first=True)
            total = (padded * padded).sum() + hn.sum() + (cn.sum() if cn is not None else 0)
            w = dict(mod.named_parameters())[wname]
            gx, gw = torch.autograd.grad(total, [xr, w])
            case = {"params": {k: v for k, v in mod.named_parameters()}, "x": x, "lengths": lengths,
                    "sorted": sorted_, "y": padded, "hn": hn, "data": packed.data, "batch_sizes": packed.batch_sizes,
                    "gx": gx, "wname": wname, "gw": gw}
            if cn is not None:
                case["cn"] = cn
            out[name] = case
    return out


def gen_distributions3():
    """Distributions made of others, and counts: TransformedDistribution through exp,
    affine, sigmoid, tanh and power transforms (log_prob, cdf, icdf), MixtureSameFamily
    (log_prob, mean, variance; scalar and vector components), Binomial and Multinomial;
    cases as gen_distributions', gradients for every argument."""
    import torch.distributions as TD
    from torch.distributions import transforms as TT
    with torch.random.fork_rng():
        torch.manual_seed(20261223)
        loc, scale = rnd(3, 4), torch.rand(3, 4, dtype=torch.float64) + 0.3
        inside = torch.rand(3, 4, dtype=torch.float64) * 1.8 - 0.4          # within (-0.5, 1.5)
        pos = torch.rand(3, 4, dtype=torch.float64) * 3 + 0.1
        unit = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        wlogits, mus, sigmas = rnd(3, 5), rnd(3, 5), torch.rand(3, 5, dtype=torch.float64) + 0.2
        v3 = rnd(3)
        mv_mus, mv_sig = rnd(3, 5, 2), torch.rand(3, 5, 2, dtype=torch.float64) + 0.3
        v32 = rnd(3, 2)
        p01 = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        k = torch.tensor([[0.0, 3.0, 7.0, 10.0], [5.0, 2.0, 1.0, 9.0], [4.0, 6.0, 0.0, 8.0]], dtype=torch.float64)
        mlogits = rnd(3, 4)
        counts = torch.tensor([[2.0, 0.0, 5.0, 3.0], [1.0, 1.0, 1.0, 7.0], [0.0, 0.0, 0.0, 10.0]], dtype=torch.float64)
        cases = (
            ("tanh_affine", lambda m, s, y: TD.TransformedDistribution(TD.Normal(m, s), [TT.TanhTransform(),
             TT.AffineTransform(0.5, 2.0)]).log_prob(y), (loc, scale, inside)),
            ("exp", lambda m, s, y: TD.TransformedDistribution(TD.Normal(m, s), TT.ExpTransform()).log_prob(y),
             (loc, scale, pos)),
            ("sigmoid", lambda m, s, y: TD.TransformedDistribution(TD.Normal(m, s), [TT.SigmoidTransform()]).log_prob(y),
             (loc, scale, unit)),
            ("power", lambda r, y: TD.TransformedDistribution(TD.Exponential(r), [TT.PowerTransform(0.5)]).log_prob(y),
             (pos, pos.flip(0))),
            ("transformed_cdf", lambda m, s, y, q: TD.TransformedDistribution(TD.Normal(m, s), [TT.ExpTransform(),
             TT.AffineTransform(1.0, 3.0)]).cdf(y) + TD.TransformedDistribution(TD.Normal(m, s), [TT.ExpTransform(),
             TT.AffineTransform(1.0, 3.0)]).icdf(q), (loc, scale, pos + 1.0, unit)),
            ("mixture", lambda w, m, s, x: TD.MixtureSameFamily(TD.Categorical(logits=w), TD.Normal(m, s)).log_prob(x),
             (wlogits, mus, sigmas, v3)),
            ("mixture_moments", lambda w, m, s: TD.MixtureSameFamily(TD.Categorical(logits=w), TD.Normal(m, s)).mean
             + TD.MixtureSameFamily(TD.Categorical(logits=w), TD.Normal(m, s)).variance, (wlogits, mus, sigmas)),
            ("mixture_vector", lambda w, m, s, x: TD.MixtureSameFamily(TD.Categorical(logits=w),
             TD.Independent(TD.Normal(m, s), 1)).log_prob(x), (wlogits, mv_mus, mv_sig, v32)),
            ("binomial", lambda p: TD.Binomial(10, probs=p).log_prob(k) + TD.Binomial(10, probs=p).entropy()
             + TD.Binomial(10, probs=p).variance, (p01,)),
            ("binomial_logits", lambda l: TD.Binomial(10, logits=l).log_prob(k), (loc,)),
            ("multinomial", lambda l: TD.Multinomial(10, logits=l).log_prob(counts), (mlogits,)),
        )
        out = one_output_cases(cases)
    return out


def gen_special_functions():
    """torch.special's ndtr, log_ndtr (far into the left tail), ndtri (down to 1e-300),
    erfcx (large and negative arguments), entr and xlog1py in float64, with gradients of
    sum(y * c)."""
    import torch.special as TS
    with torch.random.fork_rng():
        torch.manual_seed(20261224)
        x = torch.tensor([-60.0, -38.0, -31.0, -29.0, -10.0, -3.0, -0.5, 0.0, 0.7, 2.0, 9.0, 40.0], dtype=torch.float64)
        p = torch.tensor([1e-300, 1e-100, 1e-20, 1e-8, 9e-4, 1e-3, 0.02, 0.3, 0.5, 0.77, 0.999, 1 - 1e-9],
                         dtype=torch.float64)
        z = torch.tensor([-3.0, -0.4, 0.0, 0.3, 1.0, 5.0, 24.0, 26.0, 100.0, 1e4], dtype=torch.float64)
        e = torch.tensor([0.0, 1e-10, 0.3, 1.0, 2.5], dtype=torch.float64)
        u = torch.tensor([0.0, 0.5, -2.0, 3.0, 0.0], dtype=torch.float64)
        w = torch.tensor([-0.5, 1.0, 0.0, 7.0, -0.9], dtype=torch.float64)
        cases = (("ndtr", TS.ndtr, (x,)), ("log_ndtr", TS.log_ndtr, (x,)), ("ndtri", TS.ndtri, (p,)),
                 ("erfcx", TS.erfcx, (z,)), ("entr", TS.entr, (e,)), ("xlog1py", TS.xlog1py, (u, w)))
        return one_output_cases(cases)


def gen_bessel():
    """torch.special's Bessel functions of orders 0 and 1 and Hurwitz's zeta in float64,
    across the places where dlua's expansions change (Note [Bessel functions]: 1, 2, 20,
    25), with gradients of sum(y * c). PyTorch 1.13 differentiates only i0, i0e, i1, i1e
    and zeta's q; for the others the reference gradient is the textbook derivative made of
    the reference's own functions (J_0' = -J_1, K_1' = -K_0 - K_1 / x, ...). PyTorch 1.13's
    J_0, J_1, Y_0 and Y_1 are off by up to 2e-6 of their size beyond x = 5 (its rational
    fits there), so theirs come from mpmath at 30 digits (Debian's python3-mpmath, which
    PyTorch's sympy brings)."""
    import mpmath
    import torch.special as TS
    mpmath.mp.dps = 30

    def mp(f):   # an mpmath function of one argument, elementwise over a float64 tensor
        return lambda x: torch.tensor([float(f(mpmath.mpf(v))) for v in x.tolist()], dtype=torch.float64)

    def with_derivative(f, df):
        class Fn(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return f(x)

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                return g * df(x)
        return Fn.apply

    j0, j1 = mp(lambda v: mpmath.besselj(0, v)), mp(lambda v: mpmath.besselj(1, v))
    y0, y1 = mp(lambda v: mpmath.bessely(0, v)), mp(lambda v: mpmath.bessely(1, v))
    k0, k1, k0e, k1e = (TS.modified_bessel_k0, TS.modified_bessel_k1, TS.scaled_modified_bessel_k0,
                        TS.scaled_modified_bessel_k1)
    with torch.random.fork_rng():
        torch.manual_seed(20261130)
        both = torch.tensor([-30.0, -21.0, -5.5, -1.0, -1e-3, 1e-3, 0.3, 1.0, 1.9, 2.1, 4.0, 8.65, 15.0, 19.9,
                             20.1, 24.9, 25.1, 60.0, 300.0, 700.0], dtype=torch.float64)
        pos = torch.tensor([1e-6, 1e-3, 0.3, 0.9, 1.0, 1.1, 1.9, 2.1, 3.8317, 8.65, 15.0, 19.9, 20.1, 24.9, 25.1,
                            60.0, 300.0], dtype=torch.float64)
        wave = pos[pos < 300]   # (J and Y beside their zeros and far out)
        cases = (("i0", torch.special.i0, (both[both.abs() < 700],)), ("i0e", TS.i0e, (both,)),
                 ("i1", TS.i1, (both[both.abs() < 700],)), ("i1e", TS.i1e, (both,)),
                 ("bessel_j0", with_derivative(j0, lambda x: -j1(x)), (torch.cat([-wave, wave]),)),
                 ("bessel_j1", with_derivative(j1, lambda x: j0(x) - j1(x) / x), (torch.cat([-wave, wave]),)),
                 ("bessel_y0", with_derivative(y0, lambda x: -y1(x)), (wave,)),
                 ("bessel_y1", with_derivative(y1, lambda x: y0(x) - y1(x) / x), (wave,)),
                 ("modified_bessel_k0", with_derivative(k0, lambda x: -k1(x)), (pos,)),
                 ("modified_bessel_k1", with_derivative(k1, lambda x: -k0(x) - k1(x) / x), (pos,)),
                 ("scaled_modified_bessel_k0", with_derivative(k0e, lambda x: k0e(x) - k1e(x)), (pos,)),
                 ("scaled_modified_bessel_k1", with_derivative(k1e, lambda x: k1e(x) * (1 - 1 / x) - k0e(x)), (pos,)),
                 ("spherical_bessel_j0", with_derivative(TS.spherical_bessel_j0,
                                                         lambda x: (x.cos() - x.sin() / x) / x), (both,)))
        out = one_output_cases(cases)
        # zeta(x, q), differentiable in q only: x rides along as a field
        x = torch.tensor([[1.5], [2.0], [3.7], [10.0]], dtype=torch.float64)
        q = torch.tensor([0.3, 1.0, 2.5, 9.5, 40.0], dtype=torch.float64)
        out += one_output_cases((("zeta", lambda q: TS.zeta(x, q), (q,)),), lambda name: {"x": x})
        return out


def gen_von_mises():
    """VonMises(loc, concentration) in float64: log_prob at angles around the circle for
    small, moderate and large concentrations, with gradients in loc, concentration and
    the value, and the circular variance (with its gradient)."""
    from torch.distributions import VonMises
    with torch.random.fork_rng():
        torch.manual_seed(20261131)
        loc = torch.tensor([[0.3], [-2.0], [3.0]], dtype=torch.float64)
        k = torch.tensor([1e-3, 0.7, 4.0, 60.0, 900.0], dtype=torch.float64)
        v = torch.tensor([[-3.1], [0.1], [2.5], [0.31], [-2.9]], dtype=torch.float64).view(5, 1, 1)
        cases = (("log_prob", lambda m, c, x: VonMises(m, c).log_prob(x), (loc, k, v)),
                 ("variance", lambda c: VonMises(torch.zeros(()), c).variance, (k,)))
        return one_output_cases(cases)


def gen_distributions4():
    """The rarer families of torch.distributions in float64: Weibull, Pareto, HalfCauchy,
    Kumaraswamy, FisherSnedecor, NegativeBinomial and the relaxed (Gumbel-softmax) ones:
    log_prob, moments, entropy, cdf and icdf with gradients of sum(y * c) in every
    parameter and the value."""
    import torch.distributions as TD
    from torch.distributions.relaxed_categorical import ExpRelaxedCategorical
    from torch.distributions.relaxed_bernoulli import LogitRelaxedBernoulli
    with torch.random.fork_rng():
        torch.manual_seed(20261201)
        a = torch.tensor([0.7, 1.5, 3.0], dtype=torch.float64)          # positive parameters
        b = torch.tensor([[0.4], [2.5]], dtype=torch.float64)
        x = torch.tensor([[[0.3], [1.7]]], dtype=torch.float64).view(2, 1, 1) + torch.zeros(2, 2, 3, dtype=torch.float64)
        u = torch.tensor([0.05, 0.5, 0.93], dtype=torch.float64)
        big = torch.tensor([[3.5], [6.0]], dtype=torch.float64)         # Pareto's x above its scale
        frac = torch.tensor([[0.2], [0.85]], dtype=torch.float64)       # in (0, 1)
        counts = torch.tensor([0.0, 3.0, 11.0], dtype=torch.float64).view(3, 1, 1)
        logits = torch.tensor([[0.3, -1.2, 2.0], [1.0, 0.0, -0.5]], dtype=torch.float64)
        simplex = torch.softmax(torch.tensor([[0.1, 1.0, -0.4], [2.0, -1.0, 0.3]], dtype=torch.float64), -1)
        t = torch.tensor([[0.5], [2.0]], dtype=torch.float64)
        t0 = torch.tensor(0.7, dtype=torch.float64)                     # (a categorical's temperature is one number)
        cases = (
            ("weibull", lambda s, k, v: TD.Weibull(s, k).log_prob(v), (b, a, x)),
            ("weibull_moments", lambda s, k: TD.Weibull(s, k).mean + TD.Weibull(s, k).variance, (b, a)),
            ("weibull_entropy", lambda s, k: TD.Weibull(s, k).entropy(), (b, a)),
            ("weibull_cdf", lambda s, k, v, q: TD.Weibull(s, k).cdf(v) + TD.Weibull(s, k).icdf(q), (b, a, frac, u)),
            ("pareto", lambda s, al, v: TD.Pareto(s, al).log_prob(v), (b, a, big)),
            ("pareto_moments", lambda s, al: TD.Pareto(s, al + 2).mean + TD.Pareto(s, al + 2).variance, (b, a)),
            ("pareto_entropy", lambda s, al: TD.Pareto(s, al).entropy(), (b, a)),
            ("pareto_cdf", lambda s, al, v, q: TD.Pareto(s, al).cdf(v) + TD.Pareto(s, al).icdf(q), (b, a, big, u)),
            ("half_cauchy", lambda s, v: TD.HalfCauchy(s).log_prob(v), (a, x)),
            ("half_cauchy_more", lambda s, v, q: TD.HalfCauchy(s).entropy() + TD.HalfCauchy(s).cdf(v)
             + TD.HalfCauchy(s).icdf(q), (a, x, u)),
            ("kumaraswamy", lambda c1, c0, v: TD.Kumaraswamy(c1, c0).log_prob(v), (a, b, frac)),
            ("kumaraswamy_moments", lambda c1, c0: TD.Kumaraswamy(c1, c0).mean + TD.Kumaraswamy(c1, c0).variance
             + TD.Kumaraswamy(c1, c0).entropy(), (a, b)),
            ("fisher_snedecor", lambda d1, d2, v: TD.FisherSnedecor(d1, d2).log_prob(v), (a, b, x)),
            ("fisher_snedecor_moments", lambda d1, d2: TD.FisherSnedecor(d1, d2 + 4).mean
             + TD.FisherSnedecor(d1, d2 + 4).variance, (a, b)),
            ("negative_binomial", lambda r, p: TD.NegativeBinomial(r, probs=p).log_prob(counts), (a, frac)),
            ("negative_binomial_logits", lambda r, l: TD.NegativeBinomial(r, logits=l).log_prob(counts), (a, b)),
            ("negative_binomial_moments", lambda r, l: TD.NegativeBinomial(r, logits=l).mean
             + TD.NegativeBinomial(r, logits=l).variance, (a, b)),
            ("logit_relaxed_bernoulli", lambda tt, l, v: LogitRelaxedBernoulli(tt, logits=l).log_prob(v), (t, a, x)),
            ("relaxed_bernoulli", lambda tt, p, v: TD.RelaxedBernoulli(tt, probs=p).log_prob(v), (t, u, frac)),
            ("exp_relaxed_categorical", lambda tt, l, v: ExpRelaxedCategorical(tt, logits=l).log_prob(v.log()),
             (t0, logits, simplex)),
            ("relaxed_one_hot", lambda tt, l, v: TD.RelaxedOneHotCategorical(tt, logits=l).log_prob(v),
             (t0, logits, simplex)))
        return one_output_cases(cases, lambda name: {"counts": counts})


def gen_distributions5():
    """ContinuousBernoulli (probabilities on both sides of and inside its unstable region
    around 1/2, and logits) and LowRankMultivariateNormal (batched, broadcast factors) in
    float64: log_prob, moments, entropy, cdf and icdf, with gradients of sum(y * c)."""
    import torch.distributions as TD
    with torch.random.fork_rng():
        torch.manual_seed(20261203)
        p = torch.tensor([0.05, 0.3, 0.4995, 0.5004, 0.87], dtype=torch.float64)
        v = torch.tensor([[0.0], [0.25], [0.9], [1.0]], dtype=torch.float64)
        q = torch.tensor([[0.1], [0.6], [0.35], [0.95]], dtype=torch.float64)
        logits = torch.tensor([-3.0, -0.2, 0.0, 1e-5, 2.5], dtype=torch.float64)
        loc = torch.randn(2, 1, 4, dtype=torch.float64)
        w = torch.randn(3, 4, 2, dtype=torch.float64)
        d = torch.rand(4, dtype=torch.float64) + 0.5
        x = torch.randn(5, 2, 3, 4, dtype=torch.float64)
        cb = TD.ContinuousBernoulli
        lr = TD.LowRankMultivariateNormal
        cases = (
            ("cb", lambda pp, vv: cb(probs=pp).log_prob(vv), (p, v)),
            ("cb_logits", lambda ll, vv: cb(logits=ll).log_prob(vv), (logits, v)),
            ("cb_moments", lambda pp: cb(probs=pp).mean + cb(probs=pp).variance + cb(probs=pp).entropy(), (p,)),
            ("cb_logits_moments", lambda ll: cb(logits=ll).mean + cb(logits=ll).variance, (logits,)),
            ("cb_cdf", lambda pp, vv, qq: cb(probs=pp).cdf(vv) + cb(probs=pp).icdf(qq), (p, v, q)),
            ("low_rank", lambda m, f, dd, xx: lr(m, f, dd).log_prob(xx), (loc, w, d, x)),
            ("low_rank_more", lambda m, f, dd: lr(m, f, dd).entropy().sum() + lr(m, f, dd).variance.sum()
             + lr(m, f, dd).covariance_matrix.sum(), (loc, w, d)))
        return one_output_cases(cases)


def gen_logistic_normal():
    """LogisticNormal(loc, scale) in float64: log_prob of points on the simplex (a batch,
    broadcast parameters), with gradients of sum(y * c) in loc, scale and the value."""
    import torch.distributions as TD
    with torch.random.fork_rng():
        torch.manual_seed(20261204)
        loc = torch.randn(2, 1, 3, dtype=torch.float64)
        scale = torch.rand(3, dtype=torch.float64) + 0.4
        y = torch.softmax(torch.randn(4, 2, 5, 4, dtype=torch.float64), -1)
        return one_output_cases((("logistic_normal", lambda m, s, v: TD.LogisticNormal(m, s).log_prob(v),
                                  (loc, scale, y)),))


def gen_distributions6():
    """Wishart (df and each of its three matrices, batched and broadcast) and LKJCholesky
    (concentrations below, at and above 1) in float64: log_prob, entropy and the moments,
    with gradients of sum(y * c) in the parameters and the values."""
    import torch.distributions as TD
    with torch.random.fork_rng():
        torch.manual_seed(20261205)
        p = 3
        a = torch.randn(2, 1, p, p, dtype=torch.float64)
        cov = a @ a.transpose(-1, -2) + torch.eye(p, dtype=torch.float64)
        df = torch.tensor([3.5, 7.0], dtype=torch.float64).view(2, 1)   # (batch (2, 1))
        b = torch.randn(4, 2, 1, p, p, dtype=torch.float64)
        x = b @ b.transpose(-1, -2) + 0.5 * torch.eye(p, dtype=torch.float64)
        tril = torch.linalg.cholesky(cov)
        prec = torch.linalg.inv(cov)
        eta = torch.tensor([0.5, 1.0, 2.5], dtype=torch.float64)
        lkj_values = TD.LKJCholesky(4, eta).sample((5,))
        wi = TD.Wishart
        cases = (
            ("wishart_cov", lambda d, s, v: wi(d, covariance_matrix=s).log_prob(v), (df, cov, x)),
            # (tril: PyTorch's cholesky_solve gives the unread upper triangle a gradient)
            ("wishart_tril", lambda d, l, v: wi(d, scale_tril=l.tril()).log_prob(v), (df, tril, x)),
            ("wishart_prec", lambda d, q, v: wi(d, precision_matrix=q).log_prob(v), (df, prec, x)),
            ("wishart_more", lambda d, s: wi(d, covariance_matrix=s).entropy().sum()
             + wi(d, covariance_matrix=s).mean.sum() + wi(d, covariance_matrix=s).variance.sum()
             + torch.nan_to_num(wi(d, covariance_matrix=s).mode, 0.0).sum(), (df, cov)),
            ("lkj", lambda e, v: TD.LKJCholesky(4, e).log_prob(v), (eta, lkj_values)),
            ("lkj_dim2", lambda e, v: TD.LKJCholesky(2, e).log_prob(v), (eta, TD.LKJCholesky(2, eta).sample((2,)))))
        return one_output_cases(cases)


def gen_transforms():
    """Transforms that change an event's size or rank, and TransformedDistribution over
    them, in float64: forward, inverse and log |det J| of StickBreaking, LowerCholesky,
    Softmax and Abs (the last three have no Jacobian in PyTorch: not one to one), and
    log_prob through StickBreaking, IndependentTransform, ReshapeTransform and a
    composition (the base's batch dims taken into its event), with gradients of sum(y * c)
    in the parameters and the values."""
    import torch.distributions as TD
    import torch.distributions.transforms as TT
    with torch.random.fork_rng():
        torch.manual_seed(20261206)
        x = torch.randn(2, 4, dtype=torch.float64)
        m = torch.randn(2, 3, 3, dtype=torch.float64)
        loc, scale = torch.randn(2, 1, 3, dtype=torch.float64), torch.rand(3, dtype=torch.float64) + 0.5
        simplex = torch.softmax(torch.randn(5, 2, 3, 4, dtype=torch.float64), -1)
        rloc = torch.randn(5, 2, 3, dtype=torch.float64)
        ry = torch.randn(5, 6, dtype=torch.float64)
        pos = torch.rand(2, 4, dtype=torch.float64) + 0.2
        sb, lc = TT.StickBreakingTransform(), TT.LowerCholeskyTransform()

        def fwd_ladj(t, a):
            y = t(a)
            return y.sum() + t.log_abs_det_jacobian(a, y).sum()

        cases = (
            ("stick", lambda a: fwd_ladj(sb, a) + sb.inv(sb(a)).sum(), (x,)),
            ("lower_cholesky", lambda a: lc(a).sum() + lc.inv(lc(a)).sum(), (m,)),
            ("softmax_abs", lambda a: (TT.SoftmaxTransform()(a) * 3).sum() + TT.SoftmaxTransform().inv(torch.softmax(a, -1)).sum()
             + TT.AbsTransform()(a).sum(), (x,)),
            ("td_stick", lambda mu, s, v: TD.TransformedDistribution(TD.Normal(mu, s), [sb]).log_prob(v),
             (loc, scale, simplex)),
            ("td_stick_affine", lambda mu, s, v: TD.TransformedDistribution(
                TD.Normal(mu, s), [sb, TT.AffineTransform(0.0, 2.0)]).log_prob(v), (loc, scale, 2 * simplex)),
            ("td_independent", lambda mu, s, v: TD.TransformedDistribution(
                TD.Normal(mu, s), [TT.IndependentTransform(TT.ExpTransform(), 1)]).log_prob(v), (loc, scale, pos[:, :3])),
            ("corr_cholesky", lambda a: fwd_ladj(TT.CorrCholeskyTransform(), a)
             + TT.CorrCholeskyTransform().inv(TT.CorrCholeskyTransform()(a)).sum(), (torch.randn(2, 6, dtype=torch.float64),)),
            ("td_corr", lambda mu, v: TD.TransformedDistribution(TD.Normal(mu, 0.8), [TT.CorrCholeskyTransform()]).log_prob(v),
             (torch.randn(6, dtype=torch.float64), TD.LKJCholesky(4, torch.tensor(1.5, dtype=torch.float64)).sample((3,)))),
            ("td_reshape", lambda mu, v: TD.TransformedDistribution(
                TD.Normal(mu, 1.5), [TT.ReshapeTransform((2, 3), (6,))]).log_prob(v), (rloc, ry)))
        return one_output_cases(cases)


def gen_transforms2():
    """Transforms of parts of a tensor and through a distribution's cdf, in float64:
    CatTransform along a batch dim and along an event dim (its log |det J| concatenated
    or summed), StackTransform, CumulativeDistributionTransform, and a
    TransformedDistribution over the last, with gradients of sum(y * c)."""
    import torch.distributions as TD
    import torch.distributions.transforms as TT
    with torch.random.fork_rng():
        torch.manual_seed(20261130)
        x = torch.randn(3, 4, dtype=torch.float64)
        xs = torch.randn(4, 3, dtype=torch.float64)
        mu, s = torch.randn(3, 4, dtype=torch.float64), torch.rand(3, 4, dtype=torch.float64) + 0.5
        u = torch.rand(3, 4, dtype=torch.float64) * 0.9 + 0.05
        exp, aff, sig, tanh = TT.ExpTransform(), TT.AffineTransform(1.0, 2.0), TT.SigmoidTransform(), TT.TanhTransform()

        def all_three(t, a):
            y = t(a)
            return y.sum() + t.log_abs_det_jacobian(a, y).sum() + t.inv(y).sum()

        def ladj(t, a):
            return t.log_abs_det_jacobian(a, t(a))

        cat_last = TT.CatTransform([exp, aff, sig], dim=-1, lengths=[1, 2, 1])
        cat_first = TT.CatTransform([exp, tanh], dim=0, lengths=[2, 1])
        ind = [TT.IndependentTransform(exp, 1), TT.IndependentTransform(TT.AffineTransform(0.0, 3.0), 1)]
        cat_event = TT.CatTransform(ind, dim=-1, lengths=[1, 3])
        cat_rows = TT.CatTransform(ind, dim=0, lengths=[1, 2])
        stack = TT.StackTransform([exp, TT.AffineTransform(0.5, 2.0), sig], dim=1)
        cases = (
            ("cat_last", lambda a: all_three(cat_last, a), (x,)),
            ("cat_last_ladj", lambda a: ladj(cat_last, a), (x,)),
            ("cat_first_ladj", lambda a: ladj(cat_first, a) + cat_first.inv(cat_first(a)), (x,)),
            ("cat_event_ladj", lambda a: ladj(cat_event, a), (x,)),
            ("cat_rows_ladj", lambda a: ladj(cat_rows, a), (x,)),
            ("stack", lambda a: stack(a) + ladj(stack, a) + stack.inv(stack(a)), (xs,)),
            ("cdf", lambda m, sd, a: all_three(TT.CumulativeDistributionTransform(TD.Normal(m, sd)), a)
             + ladj(TT.CumulativeDistributionTransform(TD.Normal(m, sd)), a), (mu, s, x)),
            ("td_cdf", lambda m, sd, v: TD.TransformedDistribution(
                TD.Normal(0.5, 1.5), [TT.CumulativeDistributionTransform(TD.Normal(m, sd))]).log_prob(v), (mu, s, u)))
        return one_output_cases(cases)


def gen_fft():
    """torch.fft in float64, complex values as view_as_real pairs in and out: the one-dim,
    two-dim and n-dim transforms with n/s padding and cutting, dims and the three norms,
    with gradients of sum(y * c) in the pairs (PyTorch's complex gradient is the pair of
    the partial derivatives in the real and imaginary parts, which is what the pairs get)."""
    import torch.fft as TF
    vc = torch.view_as_complex

    def vr(t):
        return torch.view_as_real(t.resolve_conj())

    def cx(f):   # a function of complex tensors, over pairs
        return lambda *a: vr(f(*[vc(t) for t in a]))

    with torch.random.fork_rng():
        torch.manual_seed(20261202)
        z = torch.randn(3, 8, 2, dtype=torch.float64)
        z5 = torch.randn(5, 4, 2, dtype=torch.float64)
        x = torch.randn(2, 9, dtype=torch.float64)
        h = torch.randn(2, 5, 2, dtype=torch.float64)
        z3 = torch.randn(2, 4, 6, 2, dtype=torch.float64)
        x3 = torch.randn(3, 4, 6, dtype=torch.float64)
        h3 = torch.randn(3, 4, 4, 2, dtype=torch.float64)
        cases = (
            ("fft", cx(lambda t: TF.fft(t)), (z,)),
            ("fft_pad_ortho", cx(lambda t: TF.fft(t, n=10, norm="ortho")), (z,)),
            ("fft_cut_dim1", cx(lambda t: TF.fft(t, n=3, dim=0)), (z5,)),
            ("ifft", cx(lambda t: TF.ifft(t)), (z,)),
            ("ifft_forward", cx(lambda t: TF.ifft(t, n=7, norm="forward")), (z5,)),
            ("rfft", lambda t: vr(TF.rfft(t)), (x,)),
            ("rfft_pad_ortho", lambda t: vr(TF.rfft(t, n=12, norm="ortho")), (x,)),
            ("rfft_dim1", lambda t: vr(TF.rfft(t, dim=0)), (x,)),
            ("irfft", lambda t: TF.irfft(vc(t)), (h,)),
            ("irfft_odd", lambda t: TF.irfft(vc(t), n=9), (h,)),
            ("irfft_forward", lambda t: TF.irfft(vc(t), n=6, norm="forward"), (h,)),
            ("hfft", lambda t: TF.hfft(vc(t)), (h,)),
            ("ihfft", lambda t: vr(TF.ihfft(t, n=7)), (x,)),
            ("fft2", cx(lambda t: TF.fft2(t)), (z3,)),
            ("ifft2_s", cx(lambda t: TF.ifft2(t, s=(3, 8), norm="ortho")), (z3,)),
            ("fftn_dims", cx(lambda t: TF.fftn(t, dim=(0, 2))), (z3,)),
            ("fftn_all", cx(lambda t: TF.fftn(t)), (z3,)),
            ("rfft2", lambda t: vr(TF.rfft2(t)), (x3,)),
            ("rfftn_s", lambda t: vr(TF.rfftn(t, s=(5, 4, 7))), (x3,)),
            ("irfft2", lambda t: TF.irfft2(vc(t)), (h3,)),
            ("irfftn_s", lambda t: TF.irfftn(vc(t), s=(3, 5, 7), norm="ortho"), (h3,)),
            ("fftshift", lambda t: TF.fftshift(t), (x3,)),
            ("ifftshift_dim", lambda t: TF.ifftshift(t, dim=(1, 2)), (x3,)))
        out = one_output_cases(cases)
        out.append({"name": "freqs", "args": [], "ys": [TF.fftfreq(8, dtype=torch.float64),
                    TF.fftfreq(7, 0.5, dtype=torch.float64), TF.rfftfreq(9, 0.1, dtype=torch.float64)],
                    "c": torch.zeros(0), "grads": []})
        return out


def main():
    refs = {"losses": gen_losses(), "adagrad": gen_adagrad(), "schedules": gen_schedules(), "clip": gen_clip(),
            "recurrent": gen_recurrent(), "norms": gen_norms(), "attention": gen_attention(),
            "conv1d_pad": gen_conv1d_pad(), "einsum": gen_einsum(),
            "cumsum": gen_cumsum(), "lbfgs": gen_lbfgs(), "arrange": gen_arrange(), "transformer": gen_transformer(),
            "indexed": gen_indexed(), "composed": gen_composed(), "products": gen_products(),
            "more_functions": gen_more_functions(), "special": gen_special(),
            "elementwise_math": gen_elementwise_math(), "fourth_round": gen_fourth_round(),
            "bits": gen_bits(), "volumetric": gen_volumetric(),
            "distributions": gen_distributions(), "distributions2": gen_distributions2(),
            "gamma_slopes": gen_gamma_slopes(), "packed": gen_packed(),
            "distributions3": gen_distributions3(), "special_functions": gen_special_functions(),
            "bessel": gen_bessel(), "von_mises": gen_von_mises(),
            "distributions4": gen_distributions4(), "fft": gen_fft(),
            "distributions5": gen_distributions5(), "logistic_normal": gen_logistic_normal(),
            "distributions6": gen_distributions6(), "transforms": gen_transforms(),
            "transforms2": gen_transforms2()}
    text = lua(refs)
    import re
    text = re.sub(r'"@([^"]*)"', r"\1", text)   # Lua expressions: "@{lr = 0.1}" -> {lr = 0.1}
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT + ".tmp", "w") as f:
        f.write("-- Generated by tests/ref/gen_breadth_refs.py (PyTorch " + torch.__version__ + "); do not edit.\n")
        f.write("return " + text + "\n")
    os.replace(OUT + ".tmp", OUT)
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
