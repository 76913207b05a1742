#!/usr/bin/env python3
"""Writes the hand-made seed inputs of the fuzz corpora (tests/fuzz/README.md).

    tests/fuzz/make_seeds.py tests/fuzz/corpus

Seeds are small valid files of every kind the readers accept, plus a few random op
programs; fuzzing grows the corpora from them (tests/fuzz/run.sh --merge). The
checkpoint seeds are real checkpoints, written by the fuzz target itself
(DLUA_FUZZ_SEED_DIR, see fuzz_checkpoint.cpp), so they match the model it restores.
"""
import gzip
import json
import os
import random
import struct
import zlib
import sys

# safetensors dtype -> (struct format, sample values)
ST_TYPES = {
    "F64": ("d", [0.0, -1.5, float("inf")]), "F32": ("f", [1.0, 2.5, -0.0]),
    "F16": ("e", [1.0, -2.0, 65504.0]), "BF16": (None, [0x3F80, 0xC000, 0x7FC0]),
    "I64": ("q", [-1, 2**40, 7]), "I32": ("i", [-5, 6, 2**31 - 1]), "I16": ("h", [-300, 2, 3]),
    "I8": ("b", [-128, 0, 127]), "U8": ("B", [0, 255, 9]), "U16": ("H", [65535, 1, 2]),
    "U32": ("I", [2**32 - 1, 0, 5]), "BOOL": ("?", [True, False, True]),
}


def safetensors(entries, metadata=None):
    """entries: [(name, dtype, shape, raw bytes)] -> the file's bytes."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in entries:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def pack(dtype, values):
    fmt, _ = ST_TYPES[dtype]
    if fmt is None:  # bf16: raw 16-bit patterns
        return b"".join(struct.pack("<H", v) for v in values)
    return b"".join(struct.pack("<" + fmt, v) for v in values)


def idx(type_code, fmt, shape, values):
    head = bytes([0, 0, type_code, len(shape)]) + b"".join(struct.pack(">I", d) for d in shape)
    return head + b"".join(struct.pack(">" + fmt, v) for v in values)


def png(w, h, channels, pixels):
    """A PNG of 8-bit samples (colour type by channels: grey, grey+alpha, RGB, RGBA)."""
    def chunk(kind, body):
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    colour = {1: 0, 2: 4, 3: 2, 4: 6}[channels]
    rows = b"".join(b"\x00" + bytes(pixels[y * w * channels:(y + 1) * w * channels]) for y in range(h))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, colour, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b""))


def images():
    w, h = 3, 2
    rgb = [(x * 40 + y * 90 + c * 7) % 256 for y in range(h) for x in range(w) for c in range(3)]
    out = {"png-grey": png(w, h, 1, rgb[:w * h]), "png-grey-alpha": png(w, h, 2, rgb[:w * h * 2]),
           "png-rgb": png(w, h, 3, rgb), "png-rgba": png(w, h, 4, rgb + rgb[:w * h])}
    # BMP, 24 bits, bottom-up rows padded to 4 bytes.
    row = 4 * ((w * 3 + 3) // 4)
    body = b"".join(bytes(rgb[(h - 1 - y) * w * 3:(h - y) * w * 3][::-1]) + b"\x00" * (row - w * 3) for y in range(h))
    info = struct.pack("<IiiHHIIiiII", 40, w, h, 1, 24, 0, len(body), 2835, 2835, 0, 0)
    out["bmp"] = b"BM" + struct.pack("<IHHI", 14 + len(info) + len(body), 0, 0, 14 + len(info)) + info + body
    out["pgm"] = b"P5\n%d %d\n255\n" % (w, h) + bytes(rgb[:w * h])
    out["ppm"] = b"P6\n%d %d\n255\n" % (w, h) + bytes(rgb)
    # TGA, uncompressed true colour (BGR), bottom-up.
    out["tga"] = struct.pack("<BBBHHBHHHHBB", 0, 0, 2, 0, 0, 0, 0, 0, w, h, 24, 0) + bytes(rgb)
    return out


def main(out):
    rnd = random.Random(8)
    st = os.path.join(out, "safetensors")
    os.makedirs(st, exist_ok=True)
    for dtype, (_, vals) in ST_TYPES.items():
        with open(os.path.join(st, "seed-" + dtype.lower()), "wb") as f:
            f.write(safetensors([("x", dtype, [3], pack(dtype, vals))], {"kind": dtype}))
    seeds = {
        "empty": safetensors([]),
        "scalar-and-empty": safetensors([("s", "F32", [], pack("F32", [4.0])),
                                         ("e", "F32", [0, 3], b"")]),
        "two-tensors": safetensors([("a", "F32", [2, 2], pack("F32", [1.0, 2.0, 3.0, 4.0])),
                                    ("b", "I64", [1], pack("I64", [9]))], {"format": "pt", "step": "3"}),
        "unicode-names": safetensors([("w\u00e9ight/\u4e2d", "U8", [2], b"\x01\x02")]),
    }
    for name, data in seeds.items():
        with open(os.path.join(st, "seed-" + name), "wb") as f:
            f.write(data)

    # IDX: the fuzz target's first byte picks plain (0) or gzip-compressed (1).
    ix = os.path.join(out, "idx")
    os.makedirs(ix, exist_ok=True)
    files = {
        "ubyte": idx(0x08, "B", [2, 3], [0, 1, 2, 253, 254, 255]),
        "sbyte": idx(0x09, "b", [3], [-128, 0, 127]),
        "int16": idx(0x0B, "h", [2], [-32768, 32767]),
        "int32": idx(0x0C, "i", [1, 2], [-1, 2**31 - 1]),
        "float32": idx(0x0D, "f", [2], [1.5, -2.0]),
        "float64": idx(0x0E, "d", [1], [3.25]),
        "scalar": idx(0x08, "B", [], [7]),
        "empty": idx(0x08, "B", [0, 28, 28], []),
    }
    for name, data in files.items():
        with open(os.path.join(ix, "seed-plain-" + name), "wb") as f:
            f.write(b"\x00" + data)
        with open(os.path.join(ix, "seed-gzip-" + name), "wb") as f:
            f.write(b"\x01" + data)
    with open(os.path.join(ix, "seed-real-gzip"), "wb") as f:
        f.write(b"\x00" + gzip.compress(files["ubyte"], mtime=0))

    # Images: one small file of each kind stb reads that is easy to write by hand (the
    # first byte is fuzz_image.cpp's channel choice: 0, as stored).
    img = os.path.join(out, "image")
    os.makedirs(img, exist_ok=True)
    for name, data in images().items():
        with open(os.path.join(img, "seed-" + name), "wb") as f:
            f.write(b"\x00" + data)

    # Op programs: random bytes are valid programs (fuzz_ops.cpp reads any input).
    ops = os.path.join(out, "ops")
    os.makedirs(ops, exist_ok=True)
    for i in range(8):
        with open(os.path.join(ops, "seed-random-%d" % i), "wb") as f:
            f.write(bytes(rnd.randrange(256) for _ in range(64 * (i + 1))))
    # The same for the breadth target's programs (fuzz_breadth.cpp).
    breadth = os.path.join(out, "breadth")
    os.makedirs(breadth, exist_ok=True)
    for i in range(8):
        with open(os.path.join(breadth, "seed-random-%d" % i), "wb") as f:
            f.write(bytes(rnd.randrange(256) for _ in range(64 * (i + 1))))
    # And the spectra target's (fuzz_spectra.cpp), from a generator of their own so that
    # the seeds above stay as they are.
    spectra = os.path.join(out, "spectra")
    os.makedirs(spectra, exist_ok=True)
    srnd = random.Random(2026113)
    for i in range(8):
        with open(os.path.join(spectra, "seed-random-%d" % i), "wb") as f:
            f.write(bytes(srnd.randrange(256) for _ in range(64 * (i + 1))))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus"))
