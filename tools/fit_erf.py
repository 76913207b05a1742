#!/usr/bin/python3
"""Fits the two polynomials of erf in double (tensor/functors.h, Note [erf in double])
and prints them as the C++ tables there.

    /usr/bin/python3 tools/fit_erf.py

Each polynomial is a least-squares fit in the Chebyshev basis at 400 Chebyshev nodes of
its interval (close to the minimax fit), against mpmath's erf and erfc at 40 digits,
turned into powers of u, the interval mapped to [-1, 1], lowest power first, for
Estrin's scheme. It prints the largest relative error of each, evaluated in double as
the C++ does (Estrin's pairs: a0 + a1 u, then those pairs paired with u^2, and so on),
on 4,001 points of its interval.
"""
import mpmath as mp
import numpy as np

mp.mp.dps = 40

SMALL = 1.25    # erf(z) = z P(z^2) below it
LARGE = 10.5    # from SMALL to here, e^(z^2) erfc(z) = Q(t), t = 1 / (1 + z)
P_DEGREE, Q_DEGREE = 12, 16


def fit(f, a, b, degree, nodes=400):
    k = np.arange(nodes)
    u = np.cos(np.pi * (k + 0.5) / nodes)
    mid, half = (mp.mpf(a) + b) / 2, (mp.mpf(b) - a) / 2
    y = np.array([float(f(mid + half * mp.mpf(float(v)))) for v in u])
    coef = np.polynomial.chebyshev.cheb2poly(np.polynomial.chebyshev.chebfit(u, y, degree))
    xs = np.linspace(a, b, 4001)
    us = (xs - float(mid)) * (1 / float(half))
    p = estrin(list(coef), us)
    ref = np.array([float(f(mp.mpf(float(x)))) for x in xs])
    return coef, float(mid), 1 / float(half), float(np.max(np.abs(p / ref - 1)))


def estrin(a, u):
    """a[0] + a[1] u + ..., paired as erf_small_double and erfc_scaled_double pair them."""
    while len(a) > 1:
        a = [a[i] + a[i + 1] * u if i + 1 < len(a) else a[i] for i in range(0, len(a), 2)]
        u = u * u
    return a[0]


def erf_over_z(w):
    return mp.erf(mp.sqrt(w)) / mp.sqrt(w) if w > 0 else 2 / mp.sqrt(mp.pi)


def scaled_erfc(t):
    z = 1 / t - 1
    return mp.exp(z * z) * mp.erfc(z)


def table(name, coef):
    values = [repr(float(c)) for c in coef]
    print(f"  constexpr double {name}[] = {{")
    for i in range(0, len(values), 4):
        end = "};" if i + 4 >= len(values) else ","
        print("      " + ", ".join(values[i:i + 4]) + end)


coef, mid, inv, err = fit(erf_over_z, 0.0, SMALL * SMALL, P_DEGREE)
print(f"// erf(z) / z at w = z^2 in [0, {SMALL * SMALL}]: u = w * {inv!r} - 1; max relative error {err:.2e}")
table("kP", coef)
coef, mid, inv, err = fit(scaled_erfc, 1 / (1 + LARGE), 1 / (1 + SMALL), Q_DEGREE)
print(f"// e^(z^2) erfc(z) at t = 1 / (1 + z) for z in [{SMALL}, {LARGE}]: u = (t - {mid!r}) * {inv!r};"
      f" max relative error {err:.2e}")
table("kQ", coef)
