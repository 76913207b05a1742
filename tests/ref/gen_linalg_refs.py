#!/usr/bin/python3
"""Writes tests/lua/ref/linalg_ref.lua: torch.linalg's results for dl.linalg, read by
tests/lua/test_linalg.lua.

Run with Debian's python3 (it has python3-torch), from anywhere:

    /usr/bin/python3 tests/ref/gen_linalg_refs.py

Every case is a function of float64 inputs with a list of results. The reference holds
the inputs, the results, weights W_k, the gradients of sum_k sum(result_k * W_k) with
respect to every input, and (where `second` is set) the gradient of
sum_i sum(grad_i * V_i) with respect to the inputs: a second-order check. Singular
vectors and eigenvectors enter only through products their sign choices do not change,
so the results do not depend on the LAPACK routine either side calls. The generated
file is committed, so the Lua tests need no torch; every value comes from PyTorch.
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_training_refs import lua  # noqa: E402  (the same Lua writer)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "lua", "ref", "linalg_ref.lua")

torch.manual_seed(20261126)
torch.set_num_threads(1)
L = torch.linalg


def rnd(*shape):
    return torch.randn(tuple(shape), dtype=torch.float64)


def well(*shape):
    n = shape[-1]
    return rnd(*shape) + 4 * torch.eye(n, dtype=torch.float64)


def mT(x):
    return x.transpose(-2, -1)


def sandwich(x, y):   # x diag(1..k) y, as the Lua side's
    k = x.shape[-1]
    return (x * torch.arange(1, k + 1, dtype=torch.float64)) @ y


def case(fn, *inputs, second=False):
    xs = [x.clone().requires_grad_() for x in inputs]
    outs = fn(*xs)
    ws = [rnd(*o.shape) for o in outs]
    loss = sum((o * w).sum() for o, w in zip(outs, ws))
    grads = torch.autograd.grad(loss, xs, create_graph=second)
    out = {"inputs": list(inputs), "outputs": [o.detach() for o in outs], "weights": ws,
           "grads": [g.detach() for g in grads]}
    if second:
        vs = [rnd(*x.shape) for x in inputs]
        inner = sum((g * v).sum() for g, v in zip(grads, vs))
        out["vs"] = vs
        out["second"] = list(torch.autograd.grad(inner, xs))
    return out


def gen():
    c = {}
    c["solve"] = case(lambda a, b: [L.solve(a, b)], well(3, 4, 4), rnd(3, 4, 2), second=True)
    c["solve_vector"] = case(lambda a, b: [L.solve(a, b)], well(4, 4), rnd(4))
    c["solve_broadcast"] = case(lambda a, b: [L.solve(a, b)], well(2, 1, 3, 3), rnd(4, 3, 1))
    c["solve_right"] = case(lambda a, b: [L.solve(a, b, left=False)], well(3, 3), rnd(2, 3))
    c["solve_triangular_upper"] = case(
        lambda a, b: [L.solve_triangular(a, b, upper=True)], well(2, 4, 4), rnd(2, 4, 3), second=True)
    c["solve_triangular_lower_unit_right"] = case(
        lambda a, b: [L.solve_triangular(a, b, upper=False, left=False, unitriangular=True)], rnd(3, 3), rnd(2, 3))
    c["cholesky"] = case(lambda m: [L.cholesky(m @ mT(m) + torch.eye(4, dtype=torch.float64))], rnd(2, 4, 4),
                         second=True)
    c["cholesky_upper"] = case(lambda m: [L.cholesky(m @ mT(m) + torch.eye(3, dtype=torch.float64), upper=True)],
                               rnd(3, 3))
    c["qr_tall"] = case(lambda a: list(L.qr(a)), rnd(5, 3), second=True)
    c["qr_wide"] = case(lambda a: list(L.qr(a)), rnd(2, 3, 5))
    c["qr_complete_square"] = case(lambda a: list(L.qr(a, mode="complete")), rnd(4, 4))
    c["eigh"] = case(lambda a: (lambda w, v: [w, sandwich(v, mT(v))])(*L.eigh(a + mT(a))), rnd(2, 4, 4), second=True)
    c["eigh_upper"] = case(lambda a: (lambda w, v: [w, sandwich(v, mT(v))])(*L.eigh(torch.triu(a) + mT(torch.triu(a, 1)),
                                                                                        UPLO="U")), rnd(3, 3))
    c["eigvalsh"] = case(lambda a: [L.eigvalsh(a + mT(a))], rnd(5, 5))

    def svd_parts(a):
        u, s, vh = L.svd(a, full_matrices=False)
        return [s, sandwich(u, vh), sandwich(u, mT(u)), sandwich(mT(vh), vh)]
    c["svd_tall"] = case(svd_parts, rnd(5, 3), second=True)
    c["svd_wide"] = case(svd_parts, rnd(2, 3, 4))
    c["svdvals"] = case(lambda a: [L.svdvals(a)], rnd(4, 6))
    c["det"] = case(lambda a: [L.det(a)], rnd(3, 4, 4), second=True)
    c["slogdet"] = case(lambda a: [L.slogdet(a)[1]], rnd(3, 3, 3))
    c["inv"] = case(lambda a: [L.inv(a)], well(2, 4, 4), second=True)
    c["lstsq_tall"] = case(lambda a, b: [L.lstsq(a, b).solution], rnd(6, 3), rnd(6, 2))
    c["lstsq_vector"] = case(lambda a, b: [L.lstsq(a, b.unsqueeze(-1)).solution.squeeze(-1)], rnd(5, 2), rnd(5))
    c["pinv_tall"] = case(lambda a: [L.pinv(a)], rnd(5, 3))
    c["pinv_wide"] = case(lambda a: [L.pinv(a)], rnd(2, 3, 4))
    for name, ord_ in [("fro", "fro"), ("nuc", "nuc"), ("2", 2), ("m2", -2), ("1", 1), ("m1", -1),
                       ("inf", float("inf")), ("minf", float("-inf"))]:
        c["matrix_norm_" + name] = case(lambda a, o=ord_: [L.matrix_norm(a, ord=o)], rnd(2, 3, 4))
    c["vector_norm"] = case(lambda a: [L.vector_norm(a, ord=3)], rnd(3, 4))
    c["cond"] = case(lambda a: [L.cond(a)], well(4, 4))
    rank2 = rnd(5, 2) @ rnd(2, 4)
    return c, {"matrix": rank2, "rank": int(L.matrix_rank(rank2))}


def main():
    cases, rank = gen()
    with open(OUT + ".tmp", "w") as f:
        f.write(f"-- Generated by tests/ref/gen_linalg_refs.py (PyTorch {torch.__version__}); do not edit.\n")
        f.write("return " + lua({"cases": cases, "rank": rank}) + "\n")
    os.replace(OUT + ".tmp", OUT)
    print("wrote", OUT)


if __name__ == "__main__":
    main()
