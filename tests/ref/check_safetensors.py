#!/usr/bin/python3
"""Safetensors interop between dlua and PyTorch, both ways.

Run with Debian's Python, which has torch and numpy (the `safetensors` package is
not in Debian, so the format is parsed and written here by hand, following the
specification and the reference implementation's layout):

    /usr/bin/python3 tests/ref/check_safetensors.py <dlua_io_fixtures> <work dir>

1. dlua writes a file (dlua_io_fixtures write); this script checks the layout the
   format requires (length prefix, UTF-8 JSON header padded with spaces to 8 bytes,
   offsets tiling the data section, aligned tensors) and compares every tensor, read
   with numpy, against torch tensors computed from the recipe in the tensor's name.
2. This script writes a file as the reference implementation does (its order, its
   padding, F16 and BF16 from torch), and dlua checks it (dlua_io_fixtures check).

Exits 77 (ctest's SKIP_RETURN_CODE) when torch or numpy is missing.
"""
import json
import os
import struct
import subprocess
import sys

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e}")
    sys.exit(77)

DTYPES = {  # safetensors name -> (numpy dtype, torch dtype)
    "BOOL": (np.bool_, torch.bool),
    "U8": (np.uint8, torch.uint8),
    "I32": (np.dtype("<i4"), torch.int32),
    "I64": (np.dtype("<i8"), torch.int64),
    "F32": (np.dtype("<f4"), torch.float32),
    "F64": (np.dtype("<f8"), torch.float64),
    "F16": (np.dtype("<f2"), torch.float16),
    "BF16": (np.dtype("<i2"), torch.bfloat16),   # numpy has no bfloat16: read the bits
}
SPECIAL = [float("inf"), float("-inf"), float("nan"), -0.0, 1e-45, 3.4e38, 1.0 / 3.0]


def recipe(kind, shape):
    """The torch tensor that dlua_io_fixtures.cpp's value() describes."""
    n = int(np.prod(shape)) if shape else 1
    i = torch.arange(n, dtype=torch.int64)
    k = ((i * 37) % 101 - 50).to(torch.float64)
    if kind == "bool":
        t = i % 3 == 0
    elif kind == "uint8":
        t = ((i * 7) % 256).to(torch.uint8)
    elif kind == "int32":
        t = (i * 7919 - 50000).to(torch.int32)
    elif kind == "int64":
        t = i * 3000000007 - (1 << 40)
    elif kind == "float64":
        t = k / 3.0
    elif kind == "float32":
        t = (k / 3.0).to(torch.float32)
    elif kind == "special":
        t = torch.tensor([SPECIAL[j % 7] for j in range(n)], dtype=torch.float32)
    elif kind == "f16":
        t = (k / 8.0).to(torch.float16)
    elif kind == "bf16":
        t = (k / 8.0).to(torch.bfloat16)
    else:
        raise ValueError(kind)
    return t.reshape(shape)


def parse_name(name):
    kind, dims = name.rsplit("_", 1)
    return kind, [] if dims == "scalar" else [int(d) for d in dims.split("x")]


def same(a, b):
    """Bitwise equality (NaN == NaN, -0.0 != 0.0)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        a, b = a.contiguous(), b.contiguous()
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.view(width), b.view(width))
    return torch.equal(a, b)


def read_safetensors(path):
    """A strict hand-written reader; fails loudly on anything the format forbids."""
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    raw = data[8:8 + n]
    assert n % 8 == 0, f"header length {n} is not a multiple of 8"
    text = raw.decode("utf-8")
    assert text.startswith("{"), "header must start with '{'"
    stripped = text.rstrip(" ")
    assert len(text) - len(stripped) < 8, "more padding than needed"
    assert stripped.endswith("}"), "the header is padded with spaces only"

    def no_duplicates(pairs):
        keys = [k for k, _ in pairs]
        assert len(keys) == len(set(keys)), f"duplicate keys {keys}"
        return dict(pairs)

    header = json.loads(stripped, object_pairs_hook=no_duplicates)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    body = data[8 + n:]
    spans = sorted((info["data_offsets"][0], info["data_offsets"][1], name)
                   for name, info in header.items())
    at = 0
    for b, e, name in spans:
        assert b == at, f"{name}: data starts at {b}, expected {at}"
        at = e
    assert at == len(body), f"data section is {len(body)} bytes, tensors cover {at}"
    tensors = {}
    for name, info in header.items():
        assert set(info) == {"dtype", "shape", "data_offsets"}, info
        np_dtype, torch_dtype = DTYPES[info["dtype"]]
        b, e = info["data_offsets"]
        size = np.dtype(np_dtype).itemsize
        assert b % size == 0, f"{name}: offset {b} not aligned to {size}"
        count = int(np.prod(info["shape"])) if info["shape"] else 1
        assert e - b == count * size, f"{name}: {e - b} bytes for {count} elements"
        arr = np.frombuffer(body[b:e], dtype=np_dtype).reshape(info["shape"])
        tensors[name] = torch.from_numpy(arr.copy())
        if torch_dtype == torch.bfloat16:
            tensors[name] = tensors[name].view(torch.bfloat16)
        assert tensors[name].dtype == torch_dtype
    return tensors, meta


def write_reference_style(path, tensors, meta):
    """As the reference implementation lays files out: sorted by dtype alignment
    (largest first) then name, __metadata__ first, compact JSON, space padding."""
    names = {torch.float64: "F64", torch.int64: "I64", torch.float32: "F32",
             torch.int32: "I32", torch.float16: "F16", torch.bfloat16: "BF16",
             torch.uint8: "U8", torch.bool: "BOOL"}
    order = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, blobs, at = {"__metadata__": meta}, [], 0
    for name, t in order:
        t = t.contiguous()
        if t.dtype == torch.bfloat16:
            blob = t.view(torch.int16).numpy().astype("<i2").tobytes()
        else:
            blob = t.numpy().astype(t.numpy().dtype.newbyteorder("<")).tobytes()
        header[name] = {"dtype": names[t.dtype], "shape": list(t.shape),
                        "data_offsets": [at, at + len(blob)]}
        blobs.append(blob)
        at += len(blob)
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    fixtures, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    failures = 0

    # 1. dlua -> torch
    subprocess.run([fixtures, "write", work], check=True)
    tensors, meta = read_safetensors(os.path.join(work, "dlua.safetensors"))
    assert meta.get("format") == "pt", meta
    assert meta.get("unicode") == "é∑🙂 \"q\" \\ \n", meta
    for name, got in sorted(tensors.items()):
        kind, shape = parse_name(name)
        want = recipe(kind, shape)
        if not same(got, want):
            print(f"dlua -> torch: {name} differs:\n{got}\n{want}")
            failures += 1
    print(f"dlua -> torch: {len(tensors)} tensors checked")

    # 2. torch -> dlua
    ours = {}
    for kind in ["bool", "uint8", "int32", "int64", "float32", "float64", "f16", "bf16"]:
        for shape in [[], [0], [5], [2, 3], [2, 0, 4]]:
            dims = "scalar" if not shape else "x".join(map(str, shape))
            ours[f"{kind}_{dims}"] = recipe(kind, shape)
    ours["special_7"] = recipe("special", [7])
    ours["float32_2x3"] = recipe("float32", [2, 3]).t().contiguous().t()  # non-contiguous
    path = os.path.join(work, "torch.safetensors")
    write_reference_style(path, ours, {"format": "pt", "source": "torch " + torch.__version__})
    r = subprocess.run([fixtures, "check", path])
    if r.returncode != 0:
        print("torch -> dlua: dlua_io_fixtures check failed")
        failures += 1
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
