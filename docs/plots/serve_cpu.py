#!/usr/bin/env python3
"""Draws docs/plots/serve_cpu.svg from the `isnode bench serve --json` files in docs/data.

Usage: python3 docs/plots/serve_cpu.py   (no dependencies beyond the standard library)
"""
import json
import pathlib

root = pathlib.Path(__file__).resolve().parent.parent
runs = [
    ("ifb sink, software GSO segmentation", "bench-serve-ifb-software-gso.json"),
    ("ifb sink, device segmentation", "bench-serve-ifb-device-gso.json"),
    ("loopback, real receivers", "bench-serve-loopback.json"),
]
colors = {"gso": "#1b9e77", "uring-zc": "#7570b3", "sendmmsg": "#d95f02", "traditional": "#888888"}
engines = ["gso", "uring-zc", "sendmmsg", "traditional"]
data = []
for label, name in runs:
    report = json.loads((root / "data" / name).read_text())["report"]
    data.append((label, {r["engine"]: r["cpu_s_per_gb"] for r in report["results"]}))
vmax = max(v for _, d in data for v in d.values())
width, height, left, top, bar_h, gap = 760, 60 + len(data) * (len(engines) * 18 + 34), 250, 40, 16, 2
out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" font-size="12">',
       '<rect width="100%" height="100%" fill="white"/>',
       f'<text x="{width/2}" y="22" text-anchor="middle" font-size="15">isnode serve: server CPU seconds per delivered GB (lower is better)</text>']
y = top
scale = (width - left - 80) / vmax
for label, d in data:
    out.append(f'<text x="10" y="{y + 12}" font-weight="bold">{label}</text>')
    y += 18
    for e in engines:
        if e not in d:
            continue
        w = d[e] * scale
        ratio = d[e] / d["traditional"] if "traditional" in d else 0
        out.append(f'<text x="{left - 8}" y="{y + 12}" text-anchor="end">{e}</text>')
        out.append(f'<rect x="{left}" y="{y}" width="{w:.1f}" height="{bar_h}" fill="{colors[e]}"/>')
        out.append(f'<text x="{left + w + 5:.1f}" y="{y + 12}">{d[e]:.2f} s/GB ({ratio:.2f}x)</text>')
        y += bar_h + gap
    y += 16
out.append("</svg>")
(root / "plots" / "serve_cpu.svg").write_text("\n".join(out) + "\n")
print("wrote", root / "plots" / "serve_cpu.svg")
