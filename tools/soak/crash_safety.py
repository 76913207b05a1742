#!/usr/bin/env python3
"""Crash safety of checkpoints: kill a checkpoint-writing process with SIGKILL at random
moments, many times, and check after each kill that the latest checkpoint loads and is
complete.

    tools/soak/crash_safety.py [--dlua build/bin/dlua] [--kills 300] [--mb 4] [--seed 1]

Each round starts tools/soak/checkpoint_writer.lua on the same directory (it restores
the latest checkpoint, checks it, then saves one per step), waits a random time (from
0, which kills it while it starts or restores, up to a few of its save intervals), and
kills it with SIGKILL. Then a separate run with --verify must load the latest
checkpoint and find it complete, and its step must be at least the last one the killed
process reported as saved (a save that returned is durable) and at most one more (the
save in flight). A writer that fails on start (a torn or inconsistent checkpoint)
fails the test too. Prints the figures; exits non-zero on the first failure.
"""
import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
WRITER = os.path.join(HERE, "checkpoint_writer.lua")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dlua", default=os.path.join(HERE, "..", "..", "build", "bin", "dlua"))
    ap.add_argument("--kills", type=int, default=300)
    ap.add_argument("--mb", type=float, default=4, help="model size in MB (bigger: longer saves)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dir", help="checkpoint directory (default: a fresh temporary one)")
    args = ap.parse_args()
    rnd = random.Random(args.seed)
    work = args.dir or tempfile.mkdtemp(prefix="dlua-crash-")
    os.makedirs(work, exist_ok=True)
    started = time.monotonic()

    def verify():
        r = subprocess.run([args.dlua, WRITER, work, str(args.mb), "--verify"], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit("FAIL: the latest checkpoint does not load or is not complete:\n" + r.stdout + r.stderr)
        word = r.stdout.split()[-1]
        return None if word == "none" else int(word)

    kills, durable, in_flight, before_first = 0, None, 0, 0
    interval = 0.05
    for round_no in range(args.kills):
        proc = subprocess.Popen([args.dlua, WRITER, work, str(args.mb)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        delay = rnd.uniform(0, 0.3 + 4 * interval)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        out, err = proc.communicate()
        kills += 1
        if proc.returncode != -signal.SIGKILL:
            sys.exit("FAIL: round %d: the writer ended by itself (exit %s) before the kill:\n%s%s"
                     % (round_no, proc.returncode, out, err))
        saved = [int(l.split()[1]) for l in out.splitlines() if l.startswith("saved ")]
        resumed = [int(l.split()[1]) for l in out.splitlines() if l.startswith("resumed ")]
        if resumed and durable is not None and resumed[0] < durable:
            sys.exit("FAIL: round %d: resumed at step %d, but step %d was saved" % (round_no, resumed[0], durable))
        if not resumed:
            before_first += 1  # killed while starting or restoring
        if len(saved) >= 2:
            # Save intervals, measured from the writer's own pace, size the next delays.
            interval = max(0.01, delay / (len(saved) + 1))
        if saved:
            durable = saved[-1]
        latest = verify()
        if durable is not None:
            if latest is None or latest < durable or latest > durable + 1:
                sys.exit("FAIL: round %d: the latest checkpoint is step %s; step %d was reported saved"
                         % (round_no, latest, durable))
            if latest == durable + 1:
                in_flight += 1  # killed after the save's rename, before it printed
            durable = latest
    stray = [f for f in os.listdir(work) if ".tmp" in f]
    print("crash safety: %d kills in %.0f s, %d of them while starting or restoring, %d right after "
          "a save; every latest checkpoint loaded and was complete (last step %s); %d stray temporary "
          "files left by kills mid-save; about %.0f ms per save"
          % (kills, time.monotonic() - started, before_first, in_flight, durable, len(stray), interval * 1000))
    if not args.dir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
