"""Reads every point's summary.json and metrics.jsonl into one row; writes results.csv and results.md."""

import csv
import json
import os
import statistics

from .errors import InputError
from .spec import LAUNCH_NODES, recorded_exit_code

MIB = 1024 * 1024
MEMORY_CATEGORIES = ("params", "grads", "optimizer", "activations", "comm_buffers", "hpz_secondary")


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _read_metrics(path):
    steps = []
    try:
        with open(path, encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                try:
                    step = json.loads(line)
                except ValueError:
                    break  # a line cut short by a killed run: keep what came before
                if not isinstance(step, dict):
                    raise InputError(f"{path}:{n}: not a JSON object (one step's metrics)")
                steps.append(step)
    except OSError:
        pass
    return steps


# The kinds of summary.json's values that the table and the plots format, and how to name them.
NUMBER, INTEGER = ((int, float), "a number"), ((int,), "an integer")
SUMMARY_KINDS = {"world_size": INTEGER, "nodes": INTEGER, "steps": INTEGER, "tokens_per_s": NUMBER,
                 "final_loss": NUMBER, "final_val_loss": NUMBER, "entropy_rate": NUMBER, "seconds": NUMBER,
                 "strategy": ((str,), "a string"), "memory_peak": ((dict,), "an object")}


def _read_summary(path):
    """summary.json, or None where there is none (or it is cut short); one whose values are not of the kinds
    hsdp-train writes is bad input, named (the table would end in a format)."""
    summary = _read_json(path)
    if summary is None:
        return None
    if not isinstance(summary, dict):
        raise InputError(f"{path}: not a JSON object")
    checks = [(key, summary.get(key), kind) for key, kind in SUMMARY_KINDS.items()]
    if isinstance(summary.get("memory_peak"), dict):
        checks += [(f"memory_peak.{k}", v, NUMBER) for k, v in summary["memory_peak"].items()]
    for key, value, (kinds, name) in checks:
        if value is not None and (not isinstance(value, kinds) or isinstance(value, bool)):
            raise InputError(f"{path}: {key} is {json.dumps(value)}, not {name}")
    return summary


def _median(steps, key):
    """Median over the steps after the first (step 1 warms caches and allocators up)."""
    values = [s[key] for s in steps[1:] or steps if isinstance(s.get(key), (int, float))]
    return statistics.median(values) if values else None


def _status(point_dir, summary, has_metrics):
    code = recorded_exit_code(point_dir)
    if code not in (None, 0):
        return f"failed (exit {code})", code
    if summary is not None:
        return "ok", code
    if code == 0:
        return "no summary", code
    return ("incomplete" if has_metrics else "not run"), code


def point_row(index, values, deck):
    """One dict per point: its axis values, status and measurements (None where unknown)."""
    point_dir = os.path.dirname(deck)
    summary = _read_summary(os.path.join(point_dir, "summary.json"))
    steps = _read_metrics(os.path.join(point_dir, "metrics.jsonl"))
    status, code = _status(point_dir, summary, bool(steps))
    summary = summary or {}
    exposed_key = "exposed_comm_ms" if any("exposed_comm_ms" in s for s in steps) else "comm_ms"
    peak = summary.get("memory_peak") or {}
    peak_total = peak.get("total")
    if peak_total is None:
        totals = [s["memory"].get("peak_total") for s in steps if isinstance(s.get("memory"), dict)]
        peak_total = max((t for t in totals if isinstance(t, (int, float))), default=None)
    row = {"index": index, "axes": dict(values), "status": status, "exit_code": code,
           "strategy": summary.get("strategy") or dict(values).get("parallel.sharding") or _deck_value(
               deck, "parallel", "sharding"),
           "world_size": summary.get("world_size"), "nodes": summary.get("nodes"),
           "steps": summary.get("steps", len(steps) or None), "tokens_per_s": summary.get("tokens_per_s"),
           "step_ms": _median(steps, "step_ms"), "exposed_comm_ms": _median(steps, exposed_key),
           "exposed_comm_source": exposed_key if steps else None, "memory_peak_bytes": peak_total,
           "bytes_intra_per_step": _median(steps, "bytes_intra"),
           "bytes_inter_per_step": _median(steps, "bytes_inter"),
           "final_loss": summary.get("final_loss"), "final_val_loss": summary.get("final_val_loss"),
           "entropy_rate": summary.get("entropy_rate"), "seconds": summary.get("seconds"),
           "point_dir": point_dir}
    for category in MEMORY_CATEGORIES:
        row[f"memory_{category}_bytes"] = peak.get(category)
    return row


def _deck_value(deck, section, key):
    current = None
    try:
        for line in open(deck, encoding="utf-8"):
            line = line.split("#", 1)[0].strip()
            if line.startswith("["):
                current = line.strip("[]")
            elif "=" in line and current == section and line.split("=", 1)[0].strip() == key:
                return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return None


CSV_FIELDS = ["index", "status", "exit_code", "strategy", "world_size", "nodes", "steps", "tokens_per_s",
              "step_ms", "exposed_comm_ms", "exposed_comm_source", "memory_peak_bytes",
              *[f"memory_{c}_bytes" for c in MEMORY_CATEGORIES], "bytes_intra_per_step", "bytes_inter_per_step",
              "final_loss", "final_val_loss", "entropy_rate", "seconds", "point_dir"]


def axis_keys(points):
    keys = []
    for _, values, _ in points:
        for key, _ in values:
            if key not in keys:
                keys.append(key)
    return keys


def write_csv(path, rows, axes):
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["index", *axes, *CSV_FIELDS[1:]])
        for row in rows:
            writer.writerow([row["index"], *[row["axes"].get(a, "") for a in axes],
                             *["" if row[k] is None else row[k] for k in CSV_FIELDS[1:]]])


def _fmt(value, spec):
    return "–" if value is None else format(value, spec)


def write_markdown(path, rows, axes, title):
    exposed = {r["exposed_comm_source"] for r in rows if r["exposed_comm_source"]}
    comm_header = "exposed comm ms" if exposed == {"exposed_comm_ms"} else "comm ms"
    header = ["#", *axes, "ranks", "tokens/s", "step ms", comm_header, "memory/rank MiB", "intra MiB/step",
              "inter MiB/step", "final loss", "final val loss", "status"]
    lines = [f"# {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [str(r["index"]), *[r["axes"].get(a, "") for a in axes], _fmt(r["world_size"], "d"),
                 _fmt(r["tokens_per_s"], ".0f"), _fmt(r["step_ms"], ".1f"), _fmt(r["exposed_comm_ms"], ".2f"),
                 _fmt(None if r["memory_peak_bytes"] is None else r["memory_peak_bytes"] / MIB, ".1f"),
                 _fmt(None if r["bytes_intra_per_step"] is None else r["bytes_intra_per_step"] / MIB, ".2f"),
                 _fmt(None if r["bytes_inter_per_step"] is None else r["bytes_inter_per_step"] / MIB, ".2f"),
                 _fmt(r["final_loss"], ".4f"), _fmt(r["final_val_loss"], ".4f"), r["status"]]
        lines.append("| " + " | ".join(cells) + " |")
    comm_note = ("exposed comm ms: communication time not hidden behind compute (metrics key exposed_comm_ms)"
                 if comm_header.startswith("exposed") else
                 "comm ms: time in communication per step (metrics key comm_ms; this hsdp-train does not log "
                 "exposed_comm_ms)")
    lines += ["", "step ms, comm ms and bytes: medians over steps 2..N (step 1 warms up); " + comm_note + ".",
              "memory/rank: peak model state + activations + buffers of one rank over the run. "
              "intra/inter MiB/step: bytes all ranks together send per step over intra-node and inter-node links.", ""]
    if any(LAUNCH_NODES in r["axes"] for r in rows):
        lines.append(f"{LAUNCH_NODES}: nodes the point ran on (emulated with topology.ranks_per_node when run "
                     "with `run --local`).\n")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
