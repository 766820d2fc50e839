#!/usr/bin/env python3
"""Runs every test binary of the workspace, a few at a time, then the doc tests.

`cargo test` runs its test binaries one after another. Most of this workspace's time is in
end-to-end binaries that wait on real clocks (a broadcast's timetable, a player's segments)
and use a tenth of a core while they do; run one after another they took about 18 minutes.
Here they run side by side (`ISNODE_TEST_JOBS`, default 3), longest first, each as cargo
would run it (in its package's directory, with CARGO_MANIFEST_DIR set); each binary's output
is printed whole when it ends. Exits 1 if any binary failed, naming them.

Usage: run-tests.py [ARGS FOR EVERY TEST BINARY...]  (e.g. --nocapture)
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed

# The binaries that took longest in a full run (seconds then, for the order only): they
# start first so that none of them is left running alone at the end.
LONGEST_FIRST = [
    "stock_players", "broadcast_rungs", "rung_switch", "broadcast_play", "edge_cluster",
    "protection_cmaf", "edge_fill", "protection_fill", "faults", "restart", "protection",
    "volume_rebuild", "schemes", "background_load", "protection_dash", "status_page_hls",
]
# Most seconds one test binary may take before it is stopped and failed.
BINARY_DEADLINE_S = 1200


def test_binaries():
    """(name, executable, package directory) of every test binary, built first."""
    out = subprocess.run(
        ["cargo", "test", "--workspace", "--no-run", "--message-format=json-render-diagnostics"],
        stdout=subprocess.PIPE, check=True, text=True,
    ).stdout
    found = []
    for line in out.splitlines():
        msg = json.loads(line)
        if msg.get("reason") != "compiler-artifact" or not msg.get("profile", {}).get("test"):
            continue
        exe = msg.get("executable")
        if exe:
            pkg_dir = os.path.dirname(msg["manifest_path"])
            # An integration test by its crate's folder too (several crates have `props`).
            name = msg["target"]["name"]
            if msg["target"]["kind"] == ["test"]:
                name = f"{os.path.basename(pkg_dir)}/{name}"
            found.append((name, exe, pkg_dir))
    order = {n: i for i, n in enumerate(LONGEST_FIRST)}
    found.sort(key=lambda b: (order.get(b[0].split("/")[-1], len(order)), b[0]))
    return found


def run_one(binary, args):
    """Runs one test binary to its end; (name, return code, seconds, output)."""
    name, exe, pkg_dir = binary
    env = dict(os.environ, CARGO_MANIFEST_DIR=pkg_dir)
    start = time.monotonic()
    with tempfile.TemporaryFile(mode="w+") as log:
        try:
            rc = subprocess.run([exe, *args], cwd=pkg_dir, env=env, stdout=log,
                                stderr=subprocess.STDOUT, timeout=BINARY_DEADLINE_S).returncode
        except subprocess.TimeoutExpired:
            rc = f"stopped after {BINARY_DEADLINE_S} s"
        log.seek(0)
        return name, rc, time.monotonic() - start, log.read()


def main():
    args = sys.argv[1:]
    jobs = int(os.environ.get("ISNODE_TEST_JOBS", "3"))
    binaries = test_binaries()
    print(f"run-tests: {len(binaries)} test binaries, {jobs} at a time", flush=True)
    failed = []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        running = [pool.submit(run_one, b, args) for b in binaries]
        for done in as_completed(running):
            # Each binary's output printed whole as it ends, never interleaved.
            name, rc, took_s, output = done.result()
            print(f"\n---- {name} ({took_s:.1f} s): {'ok' if rc == 0 else f'FAILED ({rc})'}")
            print(output, end="", flush=True)
            if rc != 0:
                failed.append(name)
    print(f"\nrun-tests: test binaries done in {time.monotonic() - start:.0f} s", flush=True)
    doc = subprocess.run(["cargo", "test", "--workspace", "--doc"])
    if doc.returncode != 0:
        failed.append("doc tests")
    if failed:
        print(f"run-tests: FAILED: {', '.join(failed)}", flush=True)
        return 1
    print("run-tests: every test binary and the doc tests passed", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
