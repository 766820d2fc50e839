#!/usr/bin/env python3
"""Server egress of one title served by periodic broadcast against unicast, for 1, 20 and
50 clients, in a network namespace of its own (multicast on its loopback); and the CPU time
of a clean broadcast client against a lossy one (5 % bursty loss).

    python3 scripts/bench-broadcast.py [--isnode target/release/isnode] [--clients 1,20,50]

Needs root (ip netns). Prints a table; the figures in docs/benchmarks.md came from it.
"""
import argparse, json, os, random, subprocess, sys, tempfile, time, urllib.request

def sh(*a, **kw):
    return subprocess.run(a, check=True, **kw)

def get(url):
    with urllib.request.urlopen(url, timeout=10) as r:
        return r.read().decode()

def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST")
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())

def metric(base, name):
    """The sum of a metric's series (every label set)."""
    total = 0.0
    for line in get(base + "/metrics").splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total

def cpu_s(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")

def run(args, mode, n, vol, base, server_pid, work):
    """Starts n clients (broadcast or unicast) arriving over 10 s; measures 12 s..30 s."""
    extra = ["--broadcast"] if mode == "broadcast" else []
    procs, stats = [], []
    t0 = time.time()
    rng = random.Random(n)
    for i in range(n):
        time.sleep(rng.random() * 10.0 / n)
        st = os.path.join(work, f"{mode}-{n}-{i}.json")
        stats.append(st)
        cmd = [args.isnode, "play", "title.ts", "--server", base, "--stats-json", st,
               "--max-seconds", "120"] + extra
        procs.append(subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    time.sleep(max(0.0, 12.0 - (time.time() - t0)))
    b0, c0, m0 = metric(base, "isnode_bytes_sent_total"), cpu_s(server_pid), time.time()
    time.sleep(18.0)
    b1, c1, m1 = metric(base, "isnode_bytes_sent_total"), cpu_s(server_pid), time.time()
    for p in procs:
        p.wait(timeout=180)
    return (b1 - b0) * 8 / (m1 - m0), (c1 - c0) / (m1 - m0), stats

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--isnode", default="target/release/isnode")
    ap.add_argument("--clients", default="1,20,50")
    ap.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.isnode = os.path.abspath(args.isnode)
    if not args.inside:
        ns = f"isnode-bb-{os.getpid()}"
        sh("ip", "netns", "add", ns)
        try:
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "-n", ns, "link", "set", "lo", "multicast", "on")
            sh("ip", "-n", ns, "route", "add", "224.0.0.0/4", "dev", "lo")
            sh("ip", "netns", "exec", ns, sys.executable, __file__, "--isnode", args.isnode,
               "--clients", args.clients, "--inside")
        finally:
            subprocess.run(["ip", "netns", "del", ns])
        return
    work = tempfile.mkdtemp(prefix="isnode-bb-")
    vol = os.path.join(work, "vol")
    sh(args.isnode, "--volume", vol, "gen-ts", "--bitrate", "3500000", "--duration", "60",
       os.path.join(work, "title.ts"), stdout=subprocess.DEVNULL)
    sh(args.isnode, "--volume", vol, "ingest", os.path.join(work, "title.ts"),
       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = "http://127.0.0.1:7979"
    server = subprocess.Popen([args.isnode, "--volume", vol, "serve", "--listen", "127.0.0.1:7979",
                               "--max-sessions-per-client", "1000"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(100):
            try:
                get(base + "/v1/objects"); break
            except Exception:
                time.sleep(0.1)
        rows = []
        for n in [int(x) for x in args.clients.split(",")]:
            b = post(base + "/v1/broadcasts", {"object": "title.ts", "scheme": "cautious-harmonic",
                                               "max_wait_s": 5.0})
            bps, cpu, st = run(args, "broadcast", n, vol, base, server.pid, work)
            urllib.request.urlopen(urllib.request.Request(base + "/v1/broadcasts/" + b["id"],
                                                          method="DELETE"))
            ok = sum(1 for f in st if os.path.exists(f) and json.load(open(f))["codewords_lost"] == 0)
            rows.append(("broadcast", n, bps, cpu, ok, b["send_rate_bps"]))
            ubps, ucpu, ust = run(args, "unicast", n, vol, base, server.pid, work)
            uok = sum(1 for f in ust if os.path.exists(f))
            rows.append(("unicast", n, ubps, ucpu, uok, None))
        print(f"{'mode':<10} {'clients':>7} {'egress Mbit/s':>14} {'server CPU %':>13} {'complete':>9} {'plan Mbit/s':>12}")
        for mode, n, bps, cpu, ok, plan in rows:
            print(f"{mode:<10} {n:>7} {bps/1e6:>14.2f} {cpu*100:>13.1f} {ok:>9} "
                  f"{'' if plan is None else f'{plan/1e6:.2f}':>12}")
        # The CPU of a clean client against a lossy one, on one more broadcast.
        b = post(base + "/v1/broadcasts", {"object": "title.ts", "scheme": "cautious-harmonic",
                                           "max_wait_s": 5.0})
        out = {}
        for label, extra in (("clean", []), ("lossy 5 %", ["--loss", "0.05", "--burst", "3"])):
            st = os.path.join(work, f"client-{label[0]}.json")
            sh(args.isnode, "play", "title.ts", "--broadcast", "--server", base, "--stats-json", st,
               *extra, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out[label] = json.load(open(st))
        for label, s in out.items():
            print(f"client {label}: CPU {s['cpu_s']:.3f} s for {s['bytes_out']/1e6:.1f} MB, "
                  f"{s['symbols_repaired']} symbols decoded, {s['repair_groups_joined']} repair groups, "
                  f"lost {s['codewords_lost']}, wait {s['wait_s']:.2f} s")
    finally:
        server.terminate()
        server.wait()

if __name__ == "__main__":
    main()
