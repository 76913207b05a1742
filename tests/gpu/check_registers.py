#!/usr/bin/python3
"""The CUDA fused interpreter's registers, checked without a device (Note [Long ops in
fused programs] in tensor/fused.h): every pointwise op without kLong needs at most 32
registers in a one-op kernel (tests/gpu/one_op_kernels.cu), and the interpreters built
without the long ops (gpu/fused.cu, fused::Ops::Short) spill nothing. An op that fails
the first wants kLong on its row of tensor/ops.def.

    check_registers.py NVCC HOST_COMPILER SOURCE_ROOT     (HOST_COMPILER "-": nvcc's own)

Compiled for sm_90 whatever the build's architectures: the threshold was read there.
"""
import os
import re
import subprocess
import sys
import tempfile

MAX_REGISTERS = 32
ARCH = "90"


def report(nvcc, host, root, source):
    """ptxas's lines for each kernel of `source`: {mangled name: (registers, spilled bytes)}."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [nvcc, "-std=c++20", "-O3", "--expt-relaxed-constexpr", f"-arch=sm_{ARCH}", "-I", root,
               "-Xptxas", "-v", "-c", os.path.join(root, source), "-o", os.path.join(tmp, "k.o")]
        if host != "-":
            cmd[1:1] = ["-ccbin", host]
        run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"check_registers: {source} did not compile:\n{run.stderr[-4000:]}")
    kernels, name = {}, None
    spills = 0
    for line in run.stderr.splitlines():
        m = re.search(r"Compiling entry function '(\w+)'", line)
        if m:
            name, spills = m.group(1), 0
            continue
        m = re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", line)
        if m and name:
            spills = int(m.group(1)) + int(m.group(2))
        m = re.search(r"Used (\d+) registers", line)
        if m and name:
            kernels[name] = (int(m.group(1)), spills)
            name = None
    if not kernels:
        sys.exit(f"check_registers: no kernel in ptxas's report of {source}:\n{run.stderr[-2000:]}")
    return kernels


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    nvcc, host, root = sys.argv[1:4]
    failures = []
    ops = report(nvcc, host, root, "tests/gpu/one_op_kernels.cu")
    for mangled, (regs, _) in sorted(ops.items()):
        m = re.search(r"one_op_(\w+?)EP", mangled)
        op = m.group(1) if m else mangled
        if regs > MAX_REGISTERS:
            failures.append(f"{op} needs {regs} registers in a one-op kernel (at most {MAX_REGISTERS} "
                            f"without kLong): mark its row of tensor/ops.def kLong")
    interpreters = report(nvcc, host, root, "gpu/fused.cu")
    short = {k: v for k, v in interpreters.items() if "fused_kernel" in k and "OpsE1" in k}
    if len(short) != 2:
        failures.append(f"expected the float32 and float64 interpreters without long ops, found {sorted(short)}")
    for mangled, (regs, spilled) in sorted(short.items()):
        dtype = "float32" if "fused_kernelIf" in mangled else "float64"
        print(f"fused interpreter without long ops, {dtype}: {regs} registers, {spilled} bytes spilled")
        if spilled:
            failures.append(f"the {dtype} interpreter without long ops spills {spilled} bytes")
    print(f"{len(ops)} one-op kernels, the most registers {max(r for r, _ in ops.values())}")
    if failures:
        sys.exit("check_registers: " + "\n  ".join(failures))


if __name__ == "__main__":
    main()
