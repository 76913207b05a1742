#!/usr/bin/env python3
"""The `dlua` REPL driven through a pseudo-terminal, as a person types at it.

Usage: test_repl_pty.py <path to dlua>. Each check types keys and waits (generously)
for the expected text on the screen; nothing is asserted about timing beyond "it
appeared". Prints one line per check and 'N passed, N failed'.
"""
import os
import pty
import re
import select
import signal
import sys
import tempfile
import time

DLUA = sys.argv[1]
results = []
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


class Repl:
    def __init__(self, home):
        env = dict(os.environ)
        env.update({"HOME": home, "TERM": "xterm", "DLUA_HISTORY": os.path.join(home, "hist")})
        self.pid, self.fd = pty.fork()
        if self.pid == 0:
            os.execve(DLUA, [DLUA], env)
        self.out = ""
        self.mark = 0

    def read_for(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    data = os.read(self.fd, 65536)
                except OSError:
                    return
                if not data:
                    return
                self.out += data.decode(errors="replace")

    def expect(self, pattern, timeout=20):
        """Waits until `pattern` (a regex) appears after the last mark; returns the text."""
        end = time.time() + timeout
        rx = re.compile(pattern, re.S)
        while time.time() < end:
            text = ANSI.sub("", self.out[self.mark:])
            m = rx.search(text)
            if m:
                self.mark = len(self.out)
                return text
            self.read_for(0.1)
        return None

    def send(self, keys):
        self.mark = len(self.out)
        os.write(self.fd, keys.encode())

    def close(self):
        try:
            os.kill(self.pid, signal.SIGKILL)
            os.waitpid(self.pid, 0)
        except OSError:
            pass


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok     " if cond else "FAILED ") + name + ("" if cond else "\n  " + repr(detail)[-600:]))


with tempfile.TemporaryDirectory() as home:
    r = Repl(home)
    check("the banner and a prompt", r.expect(r"dlua .*help\(\).*\n> ") is not None, r.out)

    r.send("1 + 1\n")
    check("an expression is printed without '='", r.expect(r"\n2\n> ") is not None, r.out[r.mark:])

    r.send("x = dl.ones(2, 2)\n")
    r.expect(r"> $")
    r.send("x\n")
    check("a tensor is pretty-printed", r.expect(r"tensor\(\[\[1\., 1\.\],.*shape=\(2, 2\)") is not None, r.out[r.mark:])

    r.send("x;\n")
    t = r.expect(r"> $")
    check("a trailing ';' hides the result", t is not None and "tensor" not in t, t)

    r.send("t = {a = 1, list = {1, 2, 3}, nested = {deep = {deeper = true}}}\n")
    r.expect(r"> $")
    r.send("t\n")
    check("a table is printed with its nesting",
          r.expect(r"\{a = 1, list = \{1, 2, 3\}, nested = \{deep = \{deeper = true\}\}\}") is not None,
          r.out[r.mark:])

    r.send("c = {} c.self = c\n")
    r.expect(r"> $")
    r.send("c\n")
    check("a cycle is shown, not followed", r.expect(r"\{self = <cycle>\}") is not None, r.out[r.mark:])

    r.send("dl.matm\t")
    check("TAB completes a field of dl", r.expect(r"ul") is not None, r.out[r.mark:])
    r.send("(x, x)\n")
    check("the completed call runs", r.expect(r"tensor\(\[\[2\., 2\.\]") is not None, r.out[r.mark:])

    r.send("x:resh\t")  # the terminal shows only what TAB added
    check("TAB completes a tensor method", r.expect(r"ape") is not None, r.out[r.mark:])
    r.send("(4)\n")
    check("the completed method runs", r.expect(r"shape=\(4,\)") is not None, r.out[r.mark:])

    r.send("prin\t")
    check("TAB completes a global", r.expect(r"t") is not None, r.out[r.mark:])
    r.send("('done')\n")
    check("the completed global runs", r.expect(r"\ndone\n") is not None, r.out[r.mark:])

    r.send("dl.ma\t\t")
    check("a second TAB lists the candidates",
          r.expect(r"dl\.matmul.*dl\.max") is not None, r.out[r.mark:])
    r.send("\x03")
    r.expect(r"> $")

    r.send("dl.nn.Transformer\t\t")
    check("TAB lists names that load on first use (dl.nn's transformer classes)",
          r.expect(r"dl\.nn\.TransformerDecoder.*dl\.nn\.TransformerEncoderLayer") is not None, r.out[r.mark:])
    r.send("\x03")
    r.expect(r"> $")

    r.send("for i = 1, 3 do\n")
    check("an incomplete statement continues on a '>>' line", r.expect(r">> $") is not None, r.out[r.mark:])
    r.send("io.write(i, ' ')\n")
    r.expect(r">> $")
    r.send("end\n")
    check("the multi-line statement runs", r.expect(r"1 2 3 ") is not None, r.out[r.mark:])

    r.send("error('oops')\n")
    check("an error is printed", r.expect(r"stdin:1: oops") is not None, r.out[r.mark:])
    r.send("41 + 1\n")
    check("the session survives an error", r.expect(r"\n42\n") is not None, r.out[r.mark:])

    r.send("dl.ones(2) + dl.ones(3)\n")
    check("a tensor error names the op", r.expect(r"add.*\n> ") is not None, r.out[r.mark:])

    r.send("while true do end\n")
    time.sleep(1.0)
    r.send("\x03")
    check("Ctrl-C stops a runaway loop", r.expect(r"interrupted") is not None, r.out[r.mark:])
    r.send("'still here'\n")
    check("the prompt is back after Ctrl-C", r.expect(r"still here") is not None, r.out[r.mark:])

    r.send("while true do pcall(function() while true do end end) end\n")
    time.sleep(1.0)
    r.send("\x03")
    check("Ctrl-C is not swallowed by pcall", r.expect(r"interrupted") is not None, r.out[r.mark:])

    r.send("local s = 0 for i = 1, 3e7 do s = s + i end\n")
    check("a slow command shows its time", r.expect(r"\(\d+\.\d ms\)", timeout=60) is not None, r.out[r.mark:])

    r.send("? dl.matmul\n")
    check("'? dl.matmul' shows its doc", r.expect(r"dl\.matmul\(a, b\).*Matrix product") is not None, r.out[r.mark:])
    r.send("help(dl.exp)\n")
    check("help(dl.exp) shows the op table's doc", r.expect(r"dl\.exp\(x\).*e\^x") is not None, r.out[r.mark:])
    r.send("help(dl.linalg.qr)\n")
    check("help(dl.linalg.qr) shows its doc", r.expect(r"dl\.linalg\.qr\(A.*Q, R with A = Q R") is not None, r.out[r.mark:])
    r.send("help('grad')\n")
    check("help('grad') finds a Lua-level function", r.expect(r"dl\.grad\(f") is not None, r.out[r.mark:])
    r.send("help(dl.einsum)\n")
    check("help of a function whose module loads on first use", r.expect(r"dl\.einsum\(spec") is not None,
          r.out[r.mark:])
    r.send("help(dl.nn.functional.interpolate)\n")
    check("help of a dl.nn.functional function", r.expect(r"F\.interpolate\(x") is not None, r.out[r.mark:])
    r.send("? dl.nn.Linear\n")
    check("? on a layer class shows the layer's doc", r.expect(r"dl\.nn\.Linear\(in, out\)") is not None,
          r.out[r.mark:])

    r.send("half typed\x03")
    check("Ctrl-C at the prompt drops the line", r.expect(r"\^C\n> ") is not None, r.out[r.mark:])
    r.send("'fresh'\n")
    check("and the next line runs", r.expect(r"fresh") is not None, r.out[r.mark:])

    r.send("\x04")
    time.sleep(0.5)
    r.read_for(0.5)
    hist = os.path.join(home, "hist")
    check("the history file is written on exit",
          os.path.exists(hist) and "dl.matmul" in open(hist, errors="replace").read(), "")
    r.close()

    # Every row of tensor/ops.def has a doc that help() finds from dl.<name> / x:<name>.
    r = Repl(home)
    r.expect(r"> $")
    r.send("local bad = {} for _, c in ipairs(require('dlua_repl').op_doc_coverage()) do "
           "if not c.doc then bad[#bad + 1] = c.name end "
           "for _, m in ipairs(c.missing) do bad[#bad + 1] = m end end "
           "print('coverage', #bad == 0 and 'complete' or table.concat(bad, ' '))\n")
    t = r.expect(r"coverage\t[^\n]*\n")
    check("every op of tensor/ops.def is documented", t is not None and "coverage\tcomplete" in t, t)
    # ... and every public function of dl and its libraries, dl.nn's classes and the
    # tensor methods (in-place forms from their ops' docs).
    r.send("local m = require('dlua_repl').doc_coverage() "
           "print('public', #m == 0 and 'complete' or table.concat(m, ' '))\n")
    t = r.expect(r"public\t[^\n]*\n")
    check("every public function has help", t is not None and "public\tcomplete" in t, t)
    r.send("x = dl.ones(2)\n")
    r.send("? x.atan2_\n")
    t = r.expect(r"x:atan2_\(b\)\s+In place: x becomes x:atan2\(b\)")
    check("an in-place method's help comes from its op's", t is not None, t)
    r.send("? dl.optim.RAdam\n")
    t = r.expect(r"RAdam\{lr, betas, eps, weight_decay\}")
    check("a function documented in another's entry is found", t is not None, t)
    r.send("history_check = 1\n")
    r.send("\x1b[A\x1b[A\x1b[A")
    check("the previous session's history is loaded (up arrow)", r.expect(r"history_check|coverage") is not None, r.out[r.mark:])
    r.close()

passed = sum(results)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
