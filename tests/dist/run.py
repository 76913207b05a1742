"""dl.dist under mpirun: the multi-rank checks (tests/dist/ranks.lua on 2 and 3 ranks) and
the failure modes, each with a deadline (docs/distributed.md, "When something goes wrong").

    run.py DLUA CASE      CASE: ranks2, ranks3, ranks2_tcp, timeline, stall, stall_plain, mismatch, order, dtype,
                          dtype_late, shape, thread_host,
                          error, exit, kill, example

Exits 0 when the case behaved, 1 with the output when not. Where mpirun is absent the
case prints why and exits 0 (ctest shows the message; SKIP_RETURN_CODE is not used so that a
machine without Open MPI still runs the rest of the suite green).
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,vader,tcp",
         "--mca", "btl_tcp_if_include", "lo"]
# ranks2_tcp: the same checks with TCP over loopback as the only transport (as between machines).
TCP_FLAGS = ["--allow-run-as-root", "--oversubscribe", "--mca", "btl", "self,tcp",
             "--mca", "btl_tcp_if_include", "lo"]

# Scripts of the failure cases. Each starts dl.dist with a short deadline.
CASES = {
    # Rank 1 never reaches the allreduce: rank 0 says where it waits, then ends the job.
    "stall": """
dl.dist.init({ timeout = 3, warn = 1 })
local step = dl.dist.grad(function(w) return (w * w):sum() end)
if dl.dist.rank() == 0 then step(dl.ones(3)) end
local t0 = os.clock()
while os.clock() - t0 < 60 do end
""",
    "stall_plain": """
dl.dist.init({ timeout = 3, warn = 1 })
dl.dist.barrier()
if dl.dist.rank() == 0 then dl.dist.barrier() end
local t0 = os.clock()
while os.clock() - t0 < 60 do end
""",
    # The ranks differentiate tensors of different shapes: an error naming both, not a hang.
    "mismatch": """
dl.dist.init({ timeout = 30 })
local n = dl.dist.rank() == 0 and 4 or 3
local g = dl.dist.grad(function(w) return (w * w):sum() end)
g(dl.ones(n))
""",
    # Ranks that call different collectives get an error naming both (the first 32
    # collectives are compared: Note [Collectives compared across the ranks] in dist.lua).
    "order": """
dl.dist.init({ timeout = 30 })
local t = dl.ones(3)
if dl.dist.rank() == 0 then dl.dist.allreduce(t) else dl.dist.broadcast(t, 0) end
""",
    # One collective of tensors of different dtypes and the same bytes (MPI sees nothing).
    "dtype": """
dl.dist.init({ timeout = 30 })
local t = dl.dist.rank() == 0 and dl.ones(4) or dl.ones(2, { dtype = "float64" })
dl.dist.allreduce(t)
""",
    # With DLUA_DIST_DEBUG=1, past the first 32 collectives too.
    "dtype_late": """
dl.dist.init({ timeout = 30 })
for _ = 1, 40 do dl.dist.allreduce(dl.ones(3)) end
local t = dl.dist.rank() == 0 and dl.ones(3) or dl.ones(3, { dtype = "float64" })
dl.dist.allreduce(t)
""",
    # allgather's parts may differ in their first dim only; always checked.
    "shape": """
dl.dist.init({ timeout = 30 })
dl.dist.allgather(dl.ones(3, dl.dist.rank() == 0 and 2 or 4))
""",
    # An uncaught error on rank 1 while rank 0 waits in a collective.
    "error": """
dl.dist.init({ timeout = 60 })
if dl.dist.rank() == 1 then error("boom on rank 1") end
dl.dist.allreduce(dl.ones(3))
""",
    # os.exit with a failure code on one rank.
    "exit": """
dl.dist.init({ timeout = 60 })
if dl.dist.rank() == 1 then os.exit(3) end
dl.dist.barrier()
""",
    # Rank 1 is killed (SIGKILL) while rank 0 waits in a collective.
    "kill": """
dl.dist.init({ timeout = 60 })
if dl.dist.rank() == 1 then
  local pid = io.open("/proc/self/stat"):read("*l"):match("^(%d+)")
  os.execute("kill -9 " .. pid)
end
dl.dist.allreduce(dl.ones(3))
""",
}

# What each failure case must print (any rank), and its deadline in seconds.
EXPECT = {
    "stall": ([r"rank 0 of 2 stalled 1 s in dist\.grad \(collective 1, at case\.lua:3\)",
               r"rank 0 of 2 gave up after 3 s in dist\.grad"], 3 + 5),
    # The same in a plain collective: its sequence number, and its line with DLUA_DIST_DEBUG.
    "stall_plain": ([r"rank 0 of 2 stalled 1 s in dist\.barrier \(collective 2\)",
                     r"rank 0 of 2 gave up after 3 s in dist\.barrier"], 3 + 5),
    "mismatch": ([r"dist\.grad: the ranks' gradients differ .*rank 0 has 'gradient 1' float32 \(4,\), "
                  r"rank 1 has 'gradient 1' float32 \(3,\)"], 5),
    "order": ([r"the ranks' collectives differ \(the first 32 collectives are compared\): .*rank 0 has collective 1: "
               r"dist\.allreduce float32 \(3,\) sum, rank 1 has collective 1: dist\.broadcast float32 \(3,\) root 0"], 5),
    "dtype": ([r"the ranks' collectives differ \(the first 32 collectives are compared\): .*rank 0 has collective 1: "
               r"dist\.allreduce float32 \(4,\) sum, rank 1 has collective 1: dist\.allreduce float64 \(2,\) sum"], 5),
    "dtype_late": ([r"the ranks' collectives differ \(DLUA_DIST_DEBUG\): .*rank 0 has collective 41: "
                    r"dist\.allreduce float32 \(3,\) sum, rank 1 has collective 41: dist\.allreduce float64 \(3,\) sum"], 5),
    "shape": ([r"dist\.allgather: the tensors must agree in dtype and in every dim after the first: .*"
               r"rank 0 has float32 \(\*,2\), rank 1 has float32 \(\*,4\)"], 5),
    "error": ([r"dlua: rank 1 of 2: \S*case\.lua:2: boom on rank 1\nstack traceback:\n(?:\t.*\n)*?\t\S*case\.lua:2: in main chunk",
               r"rank 1 of 2 ends the job \(MPI_Abort\)"], 5),
    "exit": ([r"rank 1 of 2 exits with 3"], 5),
    "kill": ([], 10),
}


def mpirun(dlua, np, script, timeout, env=None, args=(), flags=FLAGS):
    cmd = ["mpirun"] + flags + ["-np", str(np), dlua, script] + list(args)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout,
                       env=env, stdin=subprocess.DEVNULL)
    return p.returncode, p.stdout.decode(errors="replace"), time.monotonic() - t0


def fail(msg, out=""):
    print("FAILED: " + msg)
    if out:
        print(out)
    sys.exit(1)


def leftover(marker):
    """dlua processes still running a script of this case (orphans)."""
    ps = subprocess.run(["ps", "-eo", "pid,args"], stdout=subprocess.PIPE).stdout.decode()
    return [l for l in ps.splitlines() if marker in l and "ps -eo" not in l]


def main():
    dlua, case = sys.argv[1], sys.argv[2]
    if not shutil.which("mpirun"):
        print("skipped: mpirun is not installed (apt-get install openmpi-bin libopenmpi-dev)")
        return
    env = dict(os.environ)
    # In the sanitizer tree (tools/sanitize.sh) the ranks keep ASan and UBSan but not
    # LeakSanitizer: Open MPI frees neither its components' allocations nor its
    # operation tables at MPI_Finalize and unloads the components (dlclose), so the
    # leaks' frames have no module to name in a suppression. The one-process tests
    # (tests/lua/test_dist.lua) load no MPI and keep leak checking.
    if "ASAN_OPTIONS" in env:
        env["ASAN_OPTIONS"] += ":detect_leaks=0"
    env["LUA_PATH"] = os.path.join(ROOT, "tests", "lua", "?.lua") + ";;"
    if case in ("ranks2", "ranks3", "ranks2_tcp"):
        np = int(case[5])
        rc, out, took = mpirun(dlua, np, os.path.join(HERE, "ranks.lua"), 300, env,
                               flags=TCP_FLAGS if case.endswith("_tcp") else FLAGS)
        passed = len(re.findall(r"^\d+ passed, 0 failed$", out, re.M))
        if rc != 0 or passed != np:
            fail(f"ranks.lua on {np} ranks: exit {rc}, {passed} of {np} ranks passed", out)
        print(out)
        print(f"{np} ranks passed in {took:.1f} s")
        return
    if case == "thread_host":   # MPI started by the host without thread support: a clear error
        host = os.path.join(os.path.dirname(os.path.abspath(dlua)), "dist_thread_host")
        t0 = time.monotonic()
        p = subprocess.run(["mpirun", *FLAGS, "-np", "1", host], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120, env=env)
        out = p.stdout.decode(errors="replace")
        if p.returncode != 0 or "dist.init refused it, the runtime went on" not in out:
            fail(f"thread_host: exit {p.returncode}", out)
        print(out)
        print(f"thread_host: refused as expected in {time.monotonic() - t0:.1f} s")
        return
    if case == "timeline":   # DLUA_DIST_TIMELINE: one Chrome trace per rank, every collective in it
        with tempfile.TemporaryDirectory(prefix="dlua_dist_timeline_") as tmp:
            script = os.path.join(tmp, "case.lua")
            with open(script, "w") as f:
                f.write("dl.dist.init()\n"
                        "dl.dist.allreduce_(dl.ones(10))\n"
                        "dl.dist.barrier()\n"
                        "dl.dist.grad(function(w) return (w * w):sum() end)(dl.ones(5))\n"
                        "dl.dist.allreduce_async(dl.ones(3)):wait()\n")
            base = os.path.join(tmp, "trace")
            rc, out, took = mpirun(dlua, 2, script, 120, dict(env, DLUA_DIST_TIMELINE=base))
            if rc != 0:
                fail(f"timeline: exit {rc}", out)
            for rank in (0, 1):
                with open(f"{base}.{rank}.json") as f:
                    events = json.load(f)["traceEvents"]
                names = [e["name"] for e in events]
                want = ["dist.allreduce_", "dist.barrier", "dist.grad", "dist.allreduce_async",
                        "dist.allreduce_async:wait"]
                if names != want or any(e["pid"] != rank or e["dur"] < 0 for e in events):
                    fail(f"timeline of rank {rank}: {events}", out)
        print("timeline: both ranks' traces hold their five collectives")
        return
    if case == "example":
        with tempfile.TemporaryDirectory(prefix="dlua_dist_example_") as tmp:
            script = os.path.join(ROOT, "scripts", "examples", "fashion_mnist_ddp.lua")
            rc, out, took = mpirun(dlua, 2, script, 600, env, ["--quick", "--logdir", tmp])
            if rc != 0 or "test accuracy" not in out or "largest difference 0" not in out:
                fail(f"the example on 2 ranks: exit {rc}", out)
            # One process on the 2 ranks' batch (2 x 64) sees the same images at every
            # step (dist.shard interleaves one shuffle), so it must train to the same loss
            # and accuracy, up to the order of the gradient's sums.
            one = subprocess.run([dlua, script, "--quick", "--batch", "128", "--logdir", tmp + "/one"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600,
                                 env=env, stdin=subprocess.DEVNULL)
            out1 = one.stdout.decode(errors="replace")
            if one.returncode != 0:
                fail(f"the example on 1 process: exit {one.returncode}", out1)
        pattern = r"epoch 1: loss ([0-9.]+), test accuracy ([0-9.]+)%"
        (loss2, acc2), (loss1, acc1) = (map(float, re.search(pattern, o).groups()) for o in (out, out1))
        if abs(loss2 - loss1) > 2e-3 or abs(acc2 - acc1) > 0.25:
            fail(f"2 ranks trained to loss {loss2}, accuracy {acc2}%; 1 process to {loss1}, {acc1}%",
                 out + out1)
        print(out)
        print(f"1 process on the same batches: loss {loss1}, accuracy {acc1}%")
        return
    patterns, deadline = EXPECT[case]
    with tempfile.TemporaryDirectory(prefix=f"dlua_dist_{case}_") as tmp:
        script = os.path.join(tmp, "case.lua")
        with open(script, "w") as f:
            f.write(CASES[case].lstrip("\n"))
        # mpirun itself may take a second or two to start and to tear down the job.
        case_env = dict(env, DLUA_DIST_DEBUG="1") if case == "dtype_late" else env
        rc, out, took = mpirun(dlua, 2, script, deadline + 30, case_env)
        if rc == 0:
            fail(f"{case}: the job exited 0", out)
        if took > deadline + 3:
            fail(f"{case}: the job took {took:.1f} s, more than {deadline} s (+3 for mpirun)", out)
        # Open MPI's own notices (a block between lines of dashes, such as MPI_Abort's) come
        # through mpirun on another channel than the ranks' output, at any point in it.
        ours = re.sub(r"^-{20,}\n.*?^-{20,}\n", "", out, flags=re.M | re.S)
        for p in patterns:
            if not re.search(p, ours):
                fail(f"{case}: no line matching {p!r}", out)
        time.sleep(0.5)
        orphans = leftover(tmp)
        if orphans:
            fail(f"{case}: processes left behind: {orphans}", out)
    print(out)
    print(f"{case}: exit {rc} after {took:.1f} s, as expected")


if __name__ == "__main__":
    main()
