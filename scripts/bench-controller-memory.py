#!/usr/bin/env python3
"""The controller's own memory at 20,400 pods: `karpenter run` beside `sandbox --no-controller`.

Starts `karpenter sandbox --no-controller --scale 1700` (Online Boutique x1700: 20,400 pods, no
controller inside) and, once its kubeconfig is written, `karpenter run --cloud-provider sim`
against it as a process of its own. The run process has a simulated cloud of its own (docs/getting-started.md,
"Leader election"), so the sandbox's kubelets never register its instances: the pods stay
pending, planned onto the NodeClaims the controller launched. That is the state measured: every
pod in the controller's caches and one provisioning pass done. Settled means: the API server
holds every pod, the controller answers `/readyz`, and its NodeClaim count (read with kubectl)
has not changed for `--quiet` seconds. Prints the controller's peak RSS (VmHWM) and RSS
(VmRSS) from /proc when settled, the sandbox's beside it, and the controller's RSS over time.
Asserts nothing (issue 36's target: half of the figure before the pod view).

Usage: scripts/bench-controller-memory.py [--bin-dir target/release] [--scale 1700]
Needs kubectl on PATH.
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from importlib import import_module  # noqa: E402

sandbox_bench = import_module("bench-sandbox-memory")
status_kib, mib, Sampler = sandbox_bench.status_kib, sandbox_bench.mib, sandbox_bench.Sampler


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def count(kubeconfig, resource):
    """How many objects of `resource` the API server holds, or None while it is not up."""
    out = subprocess.run(
        ["kubectl", "--kubeconfig", kubeconfig, "get", resource, "-A", "--no-headers",
         "--chunk-size=500", "-o", "name"],
        capture_output=True, text=True,
    )
    return len(out.stdout.split()) if out.returncode == 0 else None


def ready(port):
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bin-dir", default="target/release")
    ap.add_argument("--scale", type=int, default=1700)
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds to settle")
    ap.add_argument("--quiet", type=float, default=30.0,
                    help="seconds without a NodeClaim change that count as settled")
    args = ap.parse_args()
    want = 12 * args.scale
    binary = os.path.join(args.bin_dir, "karpenter")
    env = {**os.environ, "LOG_LEVEL": "error"}
    with tempfile.TemporaryDirectory() as tmp:
        kubeconfig = os.path.join(tmp, "kubeconfig")
        sandbox = subprocess.Popen(
            [binary, "sandbox", "--no-controller", "--scale", str(args.scale),
             "--kubeconfig-out", kubeconfig],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
        )
        controller = None
        try:
            start = time.monotonic()

            def check():
                if sandbox.poll() is not None:
                    sys.exit(f"the sandbox exited with {sandbox.returncode}")
                if controller is not None and controller.poll() is not None:
                    sys.exit(f"karpenter run exited with {controller.returncode}")
                if time.monotonic() - start > args.timeout:
                    sys.exit(f"not settled within {args.timeout:.0f} s")

            while count(kubeconfig, "pods") != want if os.path.exists(kubeconfig) else True:
                check()
                time.sleep(5)
            pods_at = time.monotonic() - start
            health = free_port()
            controller = subprocess.Popen(
                [binary, "run", "--cloud-provider", "sim", "--cluster-name", "sandbox",
                 "--metrics-port", str(free_port()), "--health-probe-port", str(health)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                env={**env, "KUBECONFIG": kubeconfig},
            )
            sampler = Sampler(controller.pid)
            sampler.start()
            run_start = time.monotonic()
            while not ready(health):
                check()
                time.sleep(1)
            synced = time.monotonic() - run_start
            last, since = None, time.monotonic()
            while time.monotonic() - since < args.quiet:
                check()
                claims = count(kubeconfig, "nodeclaims")
                if claims != last:
                    last, since = claims, time.monotonic()
                time.sleep(5)
            settled = time.monotonic() - run_start
            hwm, rss = status_kib(controller.pid, "VmHWM"), status_kib(controller.pid, "VmRSS")
            sb_hwm, sb_rss = status_kib(sandbox.pid, "VmHWM"), status_kib(sandbox.pid, "VmRSS")
            sampler.done = True
        finally:
            for p in (controller, sandbox):
                if p is not None:
                    p.terminate()
                    p.wait()
    print(f"pods: {want:,} in the API server after {pods_at:.0f} s")
    print(f"controller: caches synced in {synced:.0f} s, settled in {settled:.0f} s "
          f"with {last} NodeClaims")
    print(f"controller peak RSS (VmHWM): {mib(hwm)}")
    print(f"controller RSS (VmRSS) when settled: {mib(rss)}")
    print(f"sandbox beside it: VmHWM {mib(sb_hwm)}, VmRSS {mib(sb_rss)}")
    print("controller RSS over time (highest in each 10 s):")
    for t, kib in sampler.timeline():
        print(f"  {t:4.0f} s  {mib(kib)}")


if __name__ == "__main__":
    main()
