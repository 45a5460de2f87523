#!/usr/bin/env python3
"""tools/bench/trace_gaps.py against gaps worked out by hand on a made-up timeline.

Two steps (begin_step at 0 and 100 us), the compute track's spans (us): step 1: A 0-10, B 12-20, C 20-25 (and a
span of another track, 30-90, which must not count); step 2: D 95-130 (reaching back into step 1), E 150-160 (the
last span: step 2 ends at 160). By hand: step 1 is 100 us long, busy 10 + 8 + 5 + 5 (D from 95) = 28, idle 72; its
gaps 25-95 (70, after C, before D) and 10-12 (2, after A, before B). Step 2: 60 us, busy 30 (D to 130) + 10 = 40,
idle 20: one gap 130-150 (after D, before E). With --skip 1 only step 2 is reported. A track that is not there and
a --skip that leaves nothing exit 2.

The host's part: it waits for compute 30-90 (60 of the 70 us gap 25-95: "host waiting for compute") and for reduce
120-135 (5 us of the gap 130-150, ending inside it: "after the host's wait for reduce"); nothing during 10-12 ("host
busy"). Step 1: waiting 70, after a wait 0, busy 2; step 2: 0, 20, 0.
"""
import json
import os
import subprocess
import sys
import tempfile

tool = sys.argv[1]
events = [
    {"name": "thread_name", "ph": "M", "pid": 0, "tid": 1, "args": {"name": "host"}},
    {"name": "thread_name", "ph": "M", "pid": 0, "tid": 2, "args": {"name": "compute"}},
    {"name": "begin_step 1", "ph": "i", "s": "p", "pid": 0, "tid": 0, "ts": 0},
    {"name": "begin_step 2", "ph": "i", "s": "p", "pid": 0, "tid": 0, "ts": 100},
    {"name": "wait for compute", "ph": "X", "pid": 0, "tid": 1, "ts": 30, "dur": 60},
    {"name": "wait for reduce", "ph": "X", "pid": 0, "tid": 1, "ts": 120, "dur": 15},
]
for name, ts, stop in [("B", 12, 20), ("A", 0, 10), ("C", 20, 25), ("D", 95, 130), ("E", 150, 160)]:
    events.append({"name": name, "ph": "X", "pid": 0, "tid": 2, "ts": ts, "dur": stop - ts})


def run(path, *args):
    r = subprocess.run([sys.executable, tool, path, *args], capture_output=True, text=True)
    return r.returncode, [json.loads(l) for l in r.stdout.splitlines() if l.strip()], r.stderr


def close(x, y):
    return abs(x - y) < 1e-9


with tempfile.TemporaryDirectory() as d:
    path = os.path.join(d, "trace_rank0.json")
    json.dump(events, open(path, "w"))
    code, rows, err = run(path, "--top", "5")
    assert code == 0, err
    s1, s2, total = rows
    assert s1["step"] == 1 and close(s1["step_ms"], 0.100) and close(s1["busy_ms"], 0.028), s1
    assert close(s1["idle_ms"], 0.072), s1
    assert [(round(g["ms"] * 1e3), g["after"], g["before"]) for g in s1["gaps"]] == [(70, "C", "D"), (2, "A", "B")], s1
    assert s2["step"] == 2 and close(s2["step_ms"], 0.060) and close(s2["busy_ms"], 0.040), s2
    assert [(round(g["ms"] * 1e3), g["after"], g["before"]) for g in s2["gaps"]] == [(20, "D", "E")], s2
    assert total["steps"] == 2 and close(total["idle_share"], (72 + 20) / 160), total
    assert [(round(g["ms"] * 1e3), g["step"]) for g in total["gaps"]] == [(70, 1), (20, 2), (2, 1)], total
    assert [g["cause"] for g in total["gaps"]] == ["host waiting for compute", "after the host's wait for reduce",
                                                   "host busy"], total
    by_cause = lambda r: [round(r[k] * 1e3) for k in ("waiting_ms", "after_wait_ms", "host_busy_ms")]
    assert by_cause(s1) == [70, 0, 2] and by_cause(s2) == [0, 20, 0], (s1, s2)
    assert by_cause(total) == [35, 10, 1], total
    code, rows, err = run(path, "--skip", "1")
    assert code == 0 and [r.get("step") for r in rows] == [2, None], rows
    code, rows, err = run(path, "--track", "gather")
    assert code == 2 and "no track 'gather'" in err, (code, err)
    code, rows, err = run(path, "--skip", "2")
    assert code == 2 and "leaves none" in err, (code, err)
print("PASS: trace_gaps.py's steps, busy and idle times, gaps and the host's part in them equal the hand-worked ones")
