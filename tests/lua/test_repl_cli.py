#!/usr/bin/env python3
"""The `dlua` runner's command line: flags, arguments, exit codes and error output.

Usage: test_repl_cli.py <path to dlua>. Prints one line per check and
'N passed, N failed'; exits 1 when any check failed.
"""
import os
import subprocess
import sys
import tempfile

DLUA = sys.argv[1]
results = []


def run(args, stdin=None, env=None):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.run([DLUA] + args, input=stdin, capture_output=True, text=True,
                       timeout=60, env=e)
    return p.returncode, p.stdout, p.stderr


def check(name, cond, detail=""):
    results.append(bool(cond))
    print(("ok     " if cond else "FAILED ") + name + ("" if cond else "\n  " + detail))


rc, out, err = run(["--version"])
check("--version prints the version", rc == 0 and out.startswith("dlua ") and "LuaJIT" in out, out + err)

rc, out, err = run(["-v"])
check("-v is --version", rc == 0 and out.startswith("dlua "), out)

rc, out, err = run(["--help"])
check("--help shows the usage", rc == 0 and "usage: dlua" in out and "-e code" in out, out)

rc, out, err = run(["--nope"])
check("an unknown option fails with the usage", rc == 1 and "unrecognized option" in err, err)

rc, out, err = run(["-e"])
check("-e without code fails", rc == 1 and "needs an argument" in err, err)

rc, out, err = run(["-e", ""])
check("-e '' does nothing", rc == 0 and out == "" and err == "", out + err)

rc, out, err = run(["-e", "print(1 + 1)", "-e", "print(2 + 2)"])
check("several -e run in order", rc == 0 and out == "2\n4\n", out + err)

rc, out, err = run(["-e", "print(dl.ones(2):sum():item())"])
check("dl is a global in -e", rc == 0 and out.strip() == "2", out + err)

rc, out, err = run(["-e", "local dl = require('dlua') print(dl.zeros(1):item())"])
check("require('dlua') works in the runner", rc == 0 and out.strip() == "0", out + err)

rc, out, err = run(["-e", "error('boom')"])
check("an uncaught error exits 1 with its message and traceback",
      rc == 1 and err.startswith("dlua: (command line):1: boom") and "stack traceback:" in err, err)

rc, out, err = run(["-e", "x = = 1"])
check("a syntax error exits 1", rc == 1 and "dlua: " in err and "unexpected symbol" in err, err)

rc, out, err = run(["-e", "error(setmetatable({}, {__tostring = function() return 'custom' end}))"])
check("an error object's __tostring is used", rc == 1 and "dlua: custom" in err, err)

rc, out, err = run(["-e", "os.exit(3)"])
check("os.exit sets the status", rc == 3, str(rc))

rc, out, err = run(["-e", "print(dl.ones(2) + dl.ones(3))"])
check("a tensor error exits 1 naming the op", rc == 1 and "add" in err, err)

with tempfile.TemporaryDirectory() as d:
    script = os.path.join(d, "s.lua")
    with open(script, "w") as f:
        f.write("#!/usr/bin/env dlua\nprint(arg[0], arg[1], arg[2], #arg, ...)\nprint(arg[-1] ~= nil)\n")
    rc, out, err = run([script, "a", "b c"])
    check("a script gets arg and ... (shebang line skipped)",
          rc == 0 and out.splitlines() == [script + "\ta\tb c\t2\ta\tb c", "true"], out + err)

    rc, out, err = run(["-e", "x = 5", script])
    check("-e runs before the script", rc == 0, out + err)

    bad = os.path.join(d, "bad.lua")
    with open(bad, "w") as f:
        f.write("local function f()\n  error('deep')\nend\nf()\n")
    rc, out, err = run([bad])
    check("a script's error names its file and line",
          rc == 1 and "bad.lua:2: deep" in err and "in function 'f'" in err, err)

    rc, out, err = run([os.path.join(d, "missing.lua")])
    check("a missing script exits 1", rc == 1 and "cannot open" in err, err)

    lib = os.path.join(d, "mylib.lua")
    with open(lib, "w") as f:
        f.write("return {answer = 42}\n")
    rc, out, err = run(["-l", "mylib", "-e", "print(mylib.answer)"], env={"LUA_PATH": d + "/?.lua;;"})
    check("-l requires a library into a global", rc == 0 and out.strip() == "42", out + err)

rc, out, err = run(["-", "x", "y"], stdin="print('from stdin', ...)\n")
check("'-' runs standard input with arguments", rc == 0 and out == "from stdin\tx\ty\n", out + err)

rc, out, err = run([], stdin="print(6 * 7)\n")
check("no script and a pipe runs standard input", rc == 0 and out == "42\n", out + err)

rc, out, err = run(["--", "-e"], stdin="")
check("'--' ends the options", rc == 1 and "cannot open -e" in err, err)

passed = sum(results)
failed = len(results) - passed
print(f"{passed} passed, {failed} failed")
sys.exit(1 if failed else 0)
