"""Checks of the source tree that no compiler makes (ctest "repo: ..."):

  check_tree.py ROOT citations   no file cites a document outside the repository, and
                                 every `docs/<guide>.md, "<heading>"` citation names a
                                 heading that the guide has (or the part of one before
                                 its colon)
  check_tree.py ROOT lengths     source files stay under 1,500 lines (generated reference
                                 data excepted)

Exit status 1 with one line per finding."""
import os
import re
import subprocess
import sys

SOURCE = (".cpp", ".h", ".hpp", ".c", ".cu", ".lua", ".py", ".sh", ".txt", ".cmake", ".md")
# Documents a reader of the repository does not have.
# (Written so that this file's own text does not match: `[.]` and `note[s]`.)
OUTSIDE = re.compile(r"\b(DESIGN[.]md|API[.]md|STYLE[.]md|shared/note[s]|note[s]/(sandbox|compile|distributed)[.]md)")
MAX_LINES = 1500
GENERATED = re.compile(r"^tests/(cpp|lua)/ref/|^tests/fuzz/")


def files(root):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        names = out.split("\n")
    except (OSError, subprocess.CalledProcessError):
        names = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return [n for n in names if n.endswith(SOURCE) and not n.startswith("build")]


def headings(path):
    with open(path, encoding="utf-8") as f:
        return {line.lstrip("#").strip() for line in f if line.startswith("#")}


def citations(root):
    bad = []
    # A citation may break across comment lines: join them first.
    joiner = re.compile(r"\s*\n\s*(?:--|//|#|\*)?\s*")
    cite = re.compile(r"docs/([a-z_]+\.md),? \(?\"([^\"]+)\"")
    known = {}
    for name in files(root):
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in OUTSIDE.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{name}:{line}: cites {m.group(0)}, which is not in the repository")
        flat = joiner.sub(" ", text)
        for m in cite.finditer(flat):
            guide, heading = m.group(1), m.group(2)
            path = os.path.join(root, "docs", guide)
            if not os.path.exists(path):
                bad.append(f"{name}: cites docs/{guide}, which does not exist")
                continue
            if path not in known:
                known[path] = headings(path)
            # "Control flow" names "## Control flow: `dl.cond` and `dl.while_loop`".
            if not any(h == heading or h.startswith(heading + ":") for h in known[path]):
                bad.append(f"{name}: cites docs/{guide}, \"{heading}\", which is not a heading there")
    return bad


def lengths(root):
    bad = []
    for name in files(root):
        if GENERATED.search(name) or name.endswith(".md") or name.endswith(".txt"):
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            n = sum(1 for _ in f)
        if n > MAX_LINES:
            bad.append(f"{name}: {n} lines, more than {MAX_LINES}: split it by concern")
    return bad


def main():
    root, what = sys.argv[1], sys.argv[2]
    bad = citations(root) if what == "citations" else lengths(root)
    for b in bad:
        print(b)
    print(f"{what}: {len(bad)} finding(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
