#!/usr/bin/env python3
"""Where a token's time goes, from a trace that `npullm run|bench|serve --trace FILE` wrote.

usage: scripts/trace-summary.py TRACE.json [--markdown]

For the decode steps in the trace (npuw "decode" spans; their blob runs on the queue thread and the
stages inside those): the median step, stages per token, each op's share of the blob time, the time
every thread spent waiting at barriers, and what lies outside the blob (filling its inputs,
sampling). Prefill chunks are summarised the same way when there are any.
"""
import json
import statistics
import sys


def load(path):
    with open(path) as f:
        doc = json.load(f)
    names = {}
    spans = []
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == 1:
            names[e["tid"]] = e["args"]["name"]
        elif e.get("ph") == "X" and e.get("pid") == 1:
            spans.append(e)
    return spans, names


def inside(s, o):
    return s["ts"] >= o["ts"] - 0.002 and s["ts"] + s["dur"] <= o["ts"] + o["dur"] + 0.002


def summarise(kind, spans, names, md):
    steps = [s for s in spans if s["cat"] == "npuw" and s["name"] == kind]
    if not steps:
        return
    blobs = [s for s in spans if s["cat"] == "driver"]
    stages = [s for s in spans if s["cat"] == "device" and s["name"] not in ("chunks", "barrier wait", "prepare")]
    waits = [s for s in spans if s["cat"] == "device" and s["name"] == "barrier wait"]
    samples = [s for s in spans if s["cat"] == "genai" and s["name"] == "sample"]
    blobs.sort(key=lambda s: s["ts"])
    stages.sort(key=lambda s: s["ts"])
    by_op, blob_total, stage_total, n_stages, wait_by_thread = {}, 0.0, 0.0, 0, {}
    step_total = sum(s["dur"] for s in steps)
    # Index the blob of each step, and the stages of each blob, by time (both sorted).
    bi = 0
    si = 0
    step_blobs = []
    for st in sorted(steps, key=lambda s: s["ts"]):
        while bi < len(blobs) and blobs[bi]["ts"] < st["ts"] - 0.002:
            bi += 1
        if bi < len(blobs) and inside(blobs[bi], st):
            step_blobs.append(blobs[bi])
    for b in step_blobs:
        blob_total += b["dur"]
        while si < len(stages) and stages[si]["ts"] < b["ts"] - 0.002:
            si += 1
        j = si
        while j < len(stages) and stages[j]["ts"] <= b["ts"] + b["dur"]:
            s = stages[j]
            if s["tid"] == b["tid"] and inside(s, b):
                by_op[s["name"]] = by_op.get(s["name"], 0.0) + s["dur"]
                stage_total += s["dur"]
                n_stages += 1
            j += 1
    lo, hi = (min(b["ts"] for b in step_blobs), max(b["ts"] + b["dur"] for b in step_blobs)) if step_blobs else (0, 0)
    for w in waits:
        if lo <= w["ts"] <= hi:
            name = names.get(w["tid"], f"thread {w['tid']}")
            wait_by_thread[name] = wait_by_thread.get(name, 0.0) + w["dur"]
    n = len(steps)
    med = statistics.median(s["dur"] for s in steps) / 1000.0
    mean = step_total / n / 1000.0
    rows = [(op, t) for op, t in sorted(by_op.items(), key=lambda kv: -kv[1])]
    out = []
    out.append(f"{kind}: {n} steps, mean {mean:.3f} ms (median {med:.3f}), {n_stages / max(1, len(step_blobs)):.0f} stages per step;"
               " below: mean ms per step")
    out.append(f"  blob runs {blob_total / step_total * 100:.1f} % of the steps' time "
               f"(stages {stage_total / max(blob_total, 1e-9) * 100:.1f} % of the blob runs)")
    header = "| stage op | ms per step | share of blob time |"
    out.append(header if md else "  op                      ms/step    share")
    if md:
        out.append("|---|---|---|")
    for op, t in rows:
        share = t / max(blob_total, 1e-9) * 100
        out.append(f"| {op} | {t / n / 1000:.3f} | {share:.1f} % |" if md else f"  {op:22s} {t / n / 1000:9.3f} {share:7.1f} %")
    for th, t in sorted(wait_by_thread.items()):
        share = t / max(blob_total, 1e-9) * 100
        label = f"barrier wait, {th}"
        out.append(f"| {label} | {t / n / 1000:.3f} | {share:.1f} % |" if md else f"  {label:22s} {t / n / 1000:9.3f} {share:7.1f} %")
    if kind == "decode" and samples:
        st = sum(s["dur"] for s in samples)
        out.append(f"  sampling: {st / len(samples) / 1000:.3f} ms a token ({len(samples)} samples)")
    print("\n".join(out))


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    spans, names = load(sys.argv[1])
    md = "--markdown" in sys.argv[2:]
    for kind in ("decode", "prefill chunk", "verify"):
        summarise(kind, spans, names, md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
