#!/usr/bin/env python3
"""Where a queue stood idle: the gaps in one track of an hsdp-train timeline (log.trace=true), step by step.

    trace_gaps.py TRACE [--track compute] [--skip 0] [--top 5]

TRACE is a rank's log.dir/trace_rank<R>.json (Chrome's trace event format: one track per queue and one for the
host, an instant at each begin_step). A step runs from its begin_step to the next one (the last to the end of the
last span). For each step after the first --skip: its length, the time the track was busy (the union of its
spans) and idle, and the --top longest idle gaps with the operations on either side; on a GPU the spans are the
kernels' times, so idle is time the device had nothing of that queue to run. Then the same over all those steps.

Each gap also says what the host was doing (its track's "wait for Q" spans, the host's waits on a queue):
  "host waiting for Q"       the host waited for Q for at least half the gap: it could not enqueue the next work;
  "after the host's wait for Q"  a host wait ended inside the gap: the device ran dry while the host waited (a
                             synchronization), and the rest of the gap is the host's time from that wait to the next
                             work (reading the result, its own bookkeeping, enqueueing);
  "host busy"                no wait: the host was running its own work (enqueueing slower than the device ran it,
                             data, logging).
Per step the idle time by these three ("waiting_ms", "after_wait_ms", "host_busy_ms").

One JSON line each on stdout: {"step", "step_ms", "busy_ms", "idle_ms", "waiting_ms", "after_wait_ms",
"host_busy_ms", "gaps": [{"ms", "after", "before", "cause"}, ...]}, then {"steps", "step_ms", "busy_ms", "idle_ms",
"idle_share", "waiting_ms", "after_wait_ms", "host_busy_ms", "gaps": [...]} with means and the longest gaps of all.
Exit 2 when the file has no such track or too few steps.
"""
import argparse
import json
import sys


def fail(message):
    print(f"trace_gaps.py: {message}", file=sys.stderr)
    sys.exit(2)


def gaps_in(spans, begin, end):
    """The busy time (union) of spans clipped to [begin, end] and the idle intervals between, with neighbours."""
    busy, gaps = 0.0, []
    cursor, last = begin, "(step start)"
    for ts, stop, name in sorted(spans):
        ts, stop = max(ts, begin), min(stop, end)  # spans that reach into [begin, end): ts <= stop
        if ts > cursor:
            gaps.append({"us": ts - cursor, "from": cursor, "to": ts, "after": last, "before": name})
        if stop > cursor:
            busy += stop - max(ts, cursor)
            cursor = stop
        last = name
    if end > cursor:
        gaps.append({"us": end - cursor, "from": cursor, "to": end, "after": last, "before": "(step end)"})
    return busy, gaps


CLASSES = {"waiting": "waiting_ms", "after_wait": "after_wait_ms", "host_busy": "host_busy_ms"}


def cause_of(gap, waits):
    """The host's part in a gap (see the module's text): (class, cause) from the host's waits (ts, stop, queue)."""
    lo, hi = gap["from"], gap["to"]
    overlap = {}
    ended = []
    for ts, stop, queue in waits:
        if stop > lo and ts < hi:
            overlap[queue] = overlap.get(queue, 0.0) + min(stop, hi) - max(ts, lo)
        if lo <= stop <= hi:
            ended.append((stop, queue))
    if overlap and sum(overlap.values()) >= (hi - lo) / 2:
        return "waiting", "host waiting for " + max(overlap, key=overlap.get)
    if ended:
        return "after_wait", "after the host's wait for " + max(ended)[1]
    return "host_busy", "host busy"


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("trace")
    p.add_argument("--track", default="compute", help="the queue's track name (default compute)")
    p.add_argument("--skip", type=int, default=0, help="leading steps left out (warm-up)")
    p.add_argument("--top", type=int, default=5, help="longest gaps listed per step and overall")
    a = p.parse_args()
    try:
        events = json.load(open(a.trace))
    except (OSError, ValueError) as e:
        fail(f"cannot read {a.trace}: {e}")
    if isinstance(events, dict):
        events = events.get("traceEvents", [])
    tracks = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    tids = [tid for tid, name in tracks.items() if name == a.track]
    if not tids:
        fail(f"{a.trace} has no track '{a.track}' (it has: {', '.join(sorted(tracks.values())) or 'none'})")
    spans = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("ph") == "X" and e["tid"] in tids]
    host = [tid for tid, name in tracks.items() if name == "host"]
    waits = [(e["ts"], e["ts"] + e["dur"], e["name"][len("wait for "):]) for e in events
             if e.get("ph") == "X" and e["tid"] in host and e["name"].startswith("wait for ")]
    starts = sorted(e["ts"] for e in events if e.get("ph") == "i" and e["name"].startswith("begin_step"))
    if len(starts) <= a.skip:
        fail(f"{a.trace} has {len(starts)} step(s), --skip {a.skip} leaves none")
    last_end = max((stop for _, stop, _ in spans), default=starts[-1])
    bounds = list(zip(starts, starts[1:] + [max(last_end, starts[-1])]))
    rows, all_gaps = [], []
    for k, (begin, end) in enumerate(bounds):
        if k < a.skip:
            continue
        busy, gaps = gaps_in([s for s in spans if s[1] >= begin and s[0] < end], begin, end)
        gaps.sort(key=lambda g: -g["us"])
        step = {"step": k + 1, "step_ms": (end - begin) / 1e3, "busy_ms": busy / 1e3,
                "idle_ms": (end - begin - busy) / 1e3}
        for key in CLASSES.values():
            step[key] = 0.0
        for g in gaps:
            kind, g["cause"] = cause_of(g, waits)
            step[CLASSES[kind]] += g["us"] / 1e3
        step["gaps"] = [{"ms": g["us"] / 1e3, "after": g["after"], "before": g["before"], "cause": g["cause"]}
                        for g in gaps[:a.top]]
        rows.append(step)
        all_gaps += [dict(g, step=k + 1) for g in gaps]
        print(json.dumps(step))
    n = len(rows)
    mean = lambda key: sum(r[key] for r in rows) / n
    all_gaps.sort(key=lambda g: -g["us"])
    idle_share = sum(r["idle_ms"] for r in rows) / sum(r["step_ms"] for r in rows)
    total = {"steps": n, "track": a.track, "step_ms": mean("step_ms"), "busy_ms": mean("busy_ms"),
             "idle_ms": mean("idle_ms"), "idle_share": idle_share}
    for key in CLASSES.values():
        total[key] = mean(key)
    total["gaps"] = [{"ms": g["us"] / 1e3, "step": g["step"], "after": g["after"], "before": g["before"],
                      "cause": g["cause"]} for g in all_gaps[:a.top]]
    print(json.dumps(total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
