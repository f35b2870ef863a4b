#!/usr/bin/env python3
"""The sandbox's memory at 20,400 pods, measured: Online Boutique x1700.

Starts `karpenter sandbox --scale 1700` (12 Deployments of 1 replica each, so 20,400 pods),
waits until every pod is bound and Running (the API server's own count, read with
`kubectl get pods -A --chunk-size=500`), then runs `kubectl get pods -A -o json` five times and
`kubectl get --raw /api/v1/pods` twice (the API server's part of a list: one unpaged request,
received but neither decoded nor printed).
Prints, from /proc: the peak RSS (VmHWM) when settled and after the five lists, the RSS (VmRSS)
at the end, the wall time to settle and of each list, and the RSS over time (sampled every
half second). Asserts nothing (issue 20's target:
a peak of at most 2 GB).

Usage: scripts/bench-sandbox-memory.py [--bin-dir target/release] [--scale 1700]
Needs kubectl on PATH.
"""

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time


def status_kib(pid, field):
    """A /proc/PID/status field in KiB (VmHWM: peak RSS, VmRSS: current RSS)."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"no {field} for {pid}")


def mib(kib):
    return f"{kib / 1024:,.0f} MiB"


class Sampler(threading.Thread):
    """Samples the process's RSS every half second: the peak's time, and a timeline."""

    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.start_at, self.samples, self.done = pid, time.monotonic(), [], False

    def run(self):
        while not self.done:
            try:
                self.samples.append((time.monotonic() - self.start_at, status_kib(self.pid, "VmRSS")))
            except (OSError, RuntimeError):
                return
            time.sleep(0.5)

    def timeline(self, every=10.0):
        """The highest RSS in each `every`-second window, as (window start, KiB)."""
        out = {}
        for t, kib in self.samples:
            w = int(t // every) * every
            out[w] = max(out.get(w, 0), kib)
        return sorted(out.items())


def running_pods(kubeconfig):
    """(pods, Running pods), or None while the API server is not up."""
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-A", "--no-headers",
         "--chunk-size=500", "-o", "custom-columns=PHASE:.status.phase"],
        capture_output=True, text=True,
    )
    if out.returncode != 0:
        return None
    phases = out.stdout.split()
    return len(phases), phases.count("Running")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--scale", type=int, default=1700)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds to settle")
    args = ap.parse_args()
    want = 12 * args.scale
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        proc = subprocess.Popen(
            [os.path.join(args.bin_dir, "karpenter"), "sandbox", "--scale", str(args.scale),
             "--kubeconfig-out", kubeconfig],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "LOG_LEVEL": "error"},
        )
        sampler = Sampler(proc.pid)
        sampler.start()
        try:
            start = time.monotonic()
            while True:
                if proc.poll() is not None:
                    sys.exit(f"the sandbox exited with {proc.returncode}")
                if time.monotonic() - start > args.timeout:
                    sys.exit(f"not settled within {args.timeout:.0f} s")
                counts = running_pods(kubeconfig) if os.path.exists(kubeconfig) else None
                if counts == (want, want):
                    break
                time.sleep(5)
            settled = time.monotonic() - start
            hwm_settled = status_kib(proc.pid, "VmHWM")
            lists = []
            for _ in range(5):
                t = time.monotonic()
                out = subprocess.run(
                    ["kubectl", "--kubeconfig", kubeconfig, "get", "pods", "-A", "-o", "json"],
                    capture_output=True,
                )
                if out.returncode != 0:
                    sys.exit(f"kubectl get pods failed: {out.stderr.decode()}")
                lists.append((time.monotonic() - t, len(out.stdout)))
            # The API server's part alone: one unpaged list, received but not decoded or printed.
            raws = []
            for _ in range(2):
                t = time.monotonic()
                out = subprocess.run(
                    ["kubectl", "--kubeconfig", kubeconfig, "get", "--raw", "/api/v1/pods"],
                    capture_output=True,
                )
                if out.returncode != 0:
                    sys.exit(f"kubectl get --raw failed: {out.stderr.decode()}")
                raws.append((time.monotonic() - t, len(out.stdout)))
            hwm = status_kib(proc.pid, "VmHWM")
            rss = status_kib(proc.pid, "VmRSS")
            sampler.done = True
        finally:
            proc.terminate()
            proc.wait()
    print(f"pods: {want:,} Running, settled in {settled:.0f} s")
    print(f"peak RSS when settled: {mib(hwm_settled)}")
    print(f"peak RSS after 5 x kubectl get pods -A -o json: {mib(hwm)}")
    print(f"RSS at the end: {mib(rss)}")
    for i, (secs, size) in enumerate(lists, 1):
        print(f"list {i}: {secs:.2f} s, {size / 1e6:.1f} MB")
    for i, (secs, size) in enumerate(raws, 1):
        print(f"server list {i} (kubectl get --raw /api/v1/pods, unpaged): {secs:.2f} s, {size / 1e6:.1f} MB")
    print("RSS over time (highest in each 10 s):")
    for t, kib in sampler.timeline():
        print(f"  {t:4.0f} s  {mib(kib)}")


if __name__ == "__main__":
    main()
