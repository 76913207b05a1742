"""Checks the ELF files a build made (BUILD_DIR/bin, BUILD_DIR/lib): every RUNPATH or
RPATH entry must be an absolute path or start with $ORIGIN. An empty entry (CMake's
padding, "a:b:") or a relative one makes the dynamic loader look for libraries in the
current directory, so that a library planted beside a script would be loaded.

    check_runpath.py BUILD_DIR
"""
import os
import subprocess
import sys


def elf_files(build):
    for sub in ("bin", "lib"):
        folder = os.path.join(build, sub)
        if not os.path.isdir(folder):
            continue
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            with open(path, "rb") as f:
                if f.read(4) == b"\x7fELF":
                    yield path


def search_paths(path):
    out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        if "(RUNPATH)" in line or "(RPATH)" in line:
            value = line.split("[", 1)[1].rsplit("]", 1)[0]
            yield value


def main():
    build = sys.argv[1]
    bad, checked = [], 0
    for path in elf_files(build):
        checked += 1
        for value in search_paths(path):
            for entry in value.split(":"):
                if not (entry.startswith("/") or entry.startswith("$ORIGIN")):
                    bad.append(f"{path}: search path [{value}] has the entry '{entry}' (the current directory)")
    for b in bad:
        print(b)
    print(f"{checked} ELF files checked, {len(bad)} bad search paths")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
