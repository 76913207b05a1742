"""Checks of the source tree that no compiler makes (ctest "repo: ..."):

  check_tree.py ROOT citations   no file cites a document outside the repository, and
                                 every `docs/<guide>.md, "<heading>"` citation names a
                                 heading that the guide has (or the part of one before
                                 its colon)
  check_tree.py ROOT lengths     source files stay under 1,500 lines (generated reference
                                 data excepted)
  check_tree.py ROOT mirrors     every recorded op declared in autograd/autograd.h (its
                                 "the ops, recorded" section) and autograd/nn.h is
                                 declared word for word as the engine's in tensor/*.h,
                                 or is listed in RECORDED_FORMS with why it differs
  check_tree.py ROOT timings     no comment in the sources (tensor/, autograd/, bindings/,
                                 dist/, gpu/, scripts/, io/, vm/, export/, compile/,
                                 repl/, tools/) names a machine or gives a measured time
                                 or rate: those go to docs/performance.md, and the comment
                                 cites the section (bench/, tests/ and docs/ are not read)

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


# The sources whose comments `timings` reads: the engine, its bindings and libraries, the
# programs and tools; not bench/ (where timings belong), tests/ or docs/.
TIMED_DIRS = ("tensor/", "autograd/", "bindings/", "dist/", "gpu/", "scripts/", "io/", "vm/", "export/",
              "compile/", "repl/", "tools/")
TIMED_EXT = (".h", ".hpp", ".c", ".cpp", ".cu", ".cuh", ".lua", ".py")
# A machine named in a comment: what was measured on it belongs in docs/performance.md.
MACHINE = re.compile(r"\b(?:EPYC|Xeon|H100|H200|A100)\b")
# A measured time or rate: a number (or a range, "201-205", "35 to 70") and a unit of
# time or throughput. Not a period the code keeps: "every 20 ms", "a 50 ms timeout".
MEASURED = re.compile(r"(?<!every )\b\d[\d.,]*(?:\s?(?:-|to)\s?\d[\d.,]*)?\s?(?:ns|us|\u00b5s|ms|[KMGT]B/s|[GT]FLOP/s)"
                      r"(?![\w/])(?!\s+(?:timeout|deadline|limit|period|interval)\b)")
# A measured speed ratio written in digits: "8x slower", "1.07x as long", "5 to 25 times slower".
RATIO = re.compile(r"\b\d[\d.]*(?:\s?(?:-|to)\s?\d[\d.]*)?(?:x| times) (?:faster|slower|longer|as long|its time)\b")


def files(root, ext=SOURCE):
    try:
        out = subprocess.run(["git", "-C", root, "ls-files"], capture_output=True, text=True, check=True).stdout
        names = out.split("\n")
    except (OSError, subprocess.CalledProcessError):
        names = [os.path.relpath(os.path.join(d, f), root) for d, _, fs in os.walk(root) for f in fs]
    return [n for n in names if n.endswith(ext) and not n.startswith("build")]


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


def comments(name, text):
    """The comments of a C, C++, CUDA, Lua or Python file as (offset, text), string and
    character literals skipped."""
    lua, py = name.endswith(".lua"), name.endswith(".py")
    line = "--" if lua else "#" if py else "//"
    long_open = re.compile(r"\[(=*)\[")
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith(line, i):
            m = long_open.match(text, i + 2) if lua else None
            if m:   # --[[ ... ]] or --[==[ ... ]==]
                end = text.find("]" + m.group(1) + "]", m.end())
                end = n if end < 0 else end
                out.append((m.end(), text[m.end():end]))
                i = end + len(m.group(0))
                continue
            end = text.find("\n", i)
            end = n if end < 0 else end
            out.append((i + len(line), text[i + len(line):end]))
            i = end
        elif not lua and not py and text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end
            out.append((i + 2, text[i + 2:end]))
            i = end + 2
        elif lua and long_open.match(text, i):   # a long string [[ ... ]]
            m = long_open.match(text, i)
            end = text.find("]" + m.group(1) + "]", m.end())
            i = n if end < 0 else end + len(m.group(0))
        elif py and text.startswith(('"""', "'''"), i):
            end = text.find(text[i:i + 3], i + 3)
            i = n if end < 0 else end + 3
        elif c == '"' and not lua and not py and i > 0 and text[i - 1] == "R":   # R"delim( ... )delim"
            open_at = text.find("(", i)
            end = text.find(")" + text[i + 1:open_at] + '"', open_at)
            i = n if end < 0 else end + len(text[i + 1:open_at]) + 2
        elif c == "'" and not lua and not py and i > 0 and text[i - 1].isdigit():   # 1'000
            i += 1
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def timings(root):
    bad = []
    for name in files(root, TIMED_EXT):
        if not name.startswith(TIMED_DIRS):
            continue
        with open(os.path.join(root, name), encoding="utf-8", errors="replace") as f:
            text = f.read()
        # Each comment line with its line number; a run of comments on consecutive lines
        # is read as one text, so "201-205" and "us" on two lines still meet.
        runs = []
        for at, body in comments(name, text):
            first = text.count("\n", 0, at) + 1
            for k, part in enumerate(body.split("\n")):
                part = re.sub(r"^\s*\*(?!/)", "", part).strip()
                if runs and runs[-1][-1][0] == first + k - 1:
                    runs[-1].append((first + k, part))
                else:
                    runs.append([(first + k, part)])
        for run in runs:
            flat, starts = "", []
            for line, part in run:
                starts.append((len(flat), line))
                flat += part + " "
            for pattern in (MACHINE, MEASURED, RATIO):
                for m in pattern.finditer(flat):
                    line = max(l for off, l in starts if off <= m.start())
                    bad.append(f"{name}:{line}: a comment gives a measurement ({m.group(0)!r}): move it to "
                               f"docs/performance.md and cite the section there")
    return bad


# The recorded forms (namespace dl::ag) that are not the engine's declaration word for
# word, and why. Every other one is: a change to an op's parameters is made in both.
RECORDED_FORMS = {
    "cast": "no `copy` flag: a recorded cast of the same dtype is x itself",
    "to_device": "the engine's copy between devices is Tensor::to; the recorded form is an op",
    "dropout": "returns the output alone and takes `training` (the engine's returns the mask too)",
    "batch_norm": "returns the output alone and takes the running statistics to update",
    "layer_norm": "returns the output alone (the engine's returns the statistics too)",
}


def declarations(text):
    """Function declarations of a C++ header's text, each on one line, comments out."""
    text = re.sub(r"/\*.*?\*/", "", re.sub(r"//[^\n]*", "", text), flags=re.S)
    return [" ".join(m.group(0).split()) for m in re.finditer(r"[^;{}]*\([^;{}]*\)\s*;", text)]


def mirrors(root):
    engine = set()
    for name in files(root, (".h",)):
        if name.startswith("tensor/") and "/" not in name[len("tensor/"):]:
            with open(os.path.join(root, name), encoding="utf-8") as f:
                engine.update(declarations(f.read()))
    bad = []
    for name, start in (("autograd/autograd.h", "// ---- the ops, recorded"), ("autograd/nn.h", "namespace dl::ag")):
        with open(os.path.join(root, name), encoding="utf-8") as f:
            text = f.read()
        if start not in text:
            bad.append(f"{name}: the section of recorded ops (starting {start!r}) is not there")
            continue
        for d in declarations(text[text.index(start):]):
            op = re.search(r"(\w+)\s*\(", d).group(1)
            if d not in engine and op not in RECORDED_FORMS:
                bad.append(f"{name}: `{d}` is not declared so in tensor/*.h: declare the recorded form as the "
                           f"engine's, or list `{op}` in RECORDED_FORMS (tests/repo/check_tree.py) with why")
    return bad


def main():
    root, what = sys.argv[1], sys.argv[2]
    checks = {"citations": citations, "lengths": lengths, "timings": timings, "mirrors": mirrors}
    if what not in checks:
        print(f"unknown check {what!r}: one of {', '.join(checks)}")
        return 2
    bad = checks[what](root)
    for b in bad:
        print(b)
    print(f"{what}: {len(bad)} finding(s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
