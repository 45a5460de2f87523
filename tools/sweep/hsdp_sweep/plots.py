"""gnuplot PNGs of a collected study: throughput, memory per rank and bytes per link, one bar (group) per point,
the training loss of every point against its step, and with a launch.link_mbit axis tokens/s against the link rate. The data files and the gnuplot script are kept next to the PNGs
so that a person can restyle them."""

import json
import math
import os
import shutil
import subprocess

from .collect import MEMORY_CATEGORIES, MIB
from .spec import PNG_FILES

def point_label(row):
    """'3: micro_batch=2 lr=3e-3': the point's index and axis values with their section dropped (a path: its file
    name)."""
    values = " ".join(f"{k.split('.')[-1]}={os.path.basename(str(v)) if '/' in str(v) else v}"
                      for k, v in row["axes"].items())
    return f"{row['index']}: {values}".replace("\t", " ")


def _num(value, scale=1.0):
    return "NaN" if value is None else repr(value / scale)


def write_data(path, rows):
    with open(path, "w", encoding="utf-8") as f:
        f.write("# index\tlabel\tstrategy\ttokens_per_s\t" + "\t".join(f"{c}_MiB" for c in MEMORY_CATEGORIES)
                + "\tpeak_MiB\tintra_MiB_per_step\tinter_MiB_per_step\n")
        for r in rows:
            ok = r["status"] == "ok"
            cells = [str(r["index"]), point_label(r), r["strategy"] or "unknown",
                     _num(r["tokens_per_s"] if ok else None)]
            cells += [_num(r[f"memory_{c}_bytes"] if ok else None, MIB) for c in MEMORY_CATEGORIES]
            cells += [_num(r["memory_peak_bytes"] if ok else None, MIB),
                      _num(r["bytes_intra_per_step"] if ok else None, MIB),
                      _num(r["bytes_inter_per_step"] if ok else None, MIB)]
            f.write("\t".join(cells) + "\n")


def write_losses(path, rows):
    """loss.dat: one block per point that has metrics (its label, then step and loss per line), blocks separated
    by two blank lines (gnuplot's `index`). Returns the labels of the blocks written, in order."""
    labels = []
    with open(path, "w", encoding="utf-8") as f:
        for r in rows:
            points = []
            try:
                for line in open(os.path.join(r["point_dir"], "metrics.jsonl"), encoding="utf-8"):
                    try:
                        m = json.loads(line)
                    except ValueError:
                        continue
                    if not isinstance(m, dict):
                        continue
                    if isinstance(m.get("step"), int) and isinstance(m.get("loss"), (int, float)):
                        points.append((m["step"], m["loss"]))
            except OSError:
                continue
            if not points:
                continue
            if labels:
                f.write("\n\n")
            labels.append(point_label(r))
            f.write(f"# {labels[-1]}\n")
            f.writelines(f"{step}\t{loss!r}\n" for step, loss in points)
    return labels


def _margins(rows):
    """Bottom and left margins (in character heights and widths) that hold the longest point label, drawn under its
    bar rotated by 30 degrees and right-aligned: it reaches sin 30 = 1/2 of its length down and cos 30 to the left."""
    longest = max((len(point_label(r)) for r in rows), default=0)
    return max(6, math.ceil(0.5 * longest) + 4), max(12, math.ceil(0.87 * longest) - 4)


def _has(rows, key):
    return any(r["status"] == "ok" and r[key] is not None for r in rows)


def gnuplot_script(rows, title, data="results.dat"):
    """The script, and the PNGs it draws: a plot whose every value is missing is left out (gnuplot would
    stop on it)."""
    ok = [r for r in rows if r["status"] == "ok"]
    strategies = " ".join(dict.fromkeys(r["strategy"] or "unknown" for r in ok if r["tokens_per_s"] is not None))
    bottom, left = _margins(rows)
    # The plot area keeps its size whatever the labels need: the canvas grows by the margins (sans 10 in pngcairo:
    # a character about 14 px high and 8 px wide).
    width = max(800, 90 * len(rows) + 300) + 8 * left
    height = 480 + 14 * bottom
    intra_col = 5 + len(MEMORY_CATEGORIES) + 1
    parts = [f"""# gnuplot script written by `hsdp-sweep collect`; run it in this directory: gnuplot plots.gp
set terminal pngcairo size {width},{height} noenhanced font "sans,10"
set datafile separator "\\t"
set datafile missing "NaN"
set style fill solid 0.85 border -1
set grid ytics
set xtics rotate by 30 right
set key outside top center horizontal
set yrange [0:*]
set bmargin {bottom}
set lmargin {left}
"""]
    pngs = []
    if strategies:
        pngs.append("throughput.png")
        parts.append(f"""
set output "throughput.png"
set title "{title}: throughput by point (bars coloured by strategy)"
set ylabel "tokens/s (all ranks)"
set boxwidth 0.7
set xrange [-0.6:{len(rows) - 0.4}]
strategies = "{strategies}"
plot for [s in strategies] "{data}" using 0:(strcol(3) eq s ? $4 : NaN):xtic(2) with boxes title s
set xrange [*:*]
""")
    categories = [(i, c) for i, c in enumerate(MEMORY_CATEGORIES) if _has(rows, f"memory_{c}_bytes")]
    if categories:
        pngs.append("memory.png")
        plot = ", ".join(f'"{data}" using {5 + i}{":xtic(2)" if n == 0 else ""} title "{c}"'
                         for n, (i, c) in enumerate(categories))
        parts.append(f"""
set output "memory.png"
set title "{title}: peak memory per rank by point (stacked by category)"
set ylabel "MiB per rank"
set style data histograms
set style histogram rowstacked
set boxwidth 0.7
plot {plot}
""")
    if _has(rows, "bytes_intra_per_step") or _has(rows, "bytes_inter_per_step"):
        pngs.append("bytes.png")
        parts.append(f"""
set output "bytes.png"
set title "{title}: bytes sent per step by all ranks together (job-wide), by link"
set ylabel "MiB per step, all ranks"
set style data histograms
set style histogram clustered gap 1
set boxwidth 0.9
plot "{data}" using {intra_col}:xtic(2) title "intra-node", "" using {intra_col + 1} title "inter-node"
""")
    return "".join(parts), pngs


def loss_script(title, labels, data="loss.dat"):
    """The loss curves: one line per point (the blocks of loss.dat, in the order of `labels`); "" if none."""
    if not labels:
        return ""
    names = ", ".join('"' + label.replace('"', "'") + '"' for label in labels)
    return f"""
set output "loss.png"
set terminal pngcairo size 1000,640 noenhanced font "sans,10"
set title "{title}: training loss by step, one line per point"
set xlabel "step"
set ylabel "training loss"
set autoscale
set xtics norotate
set bmargin 4
set lmargin 10
set key outside right top vertical
array labels[{len(labels)}] = [{names}]
plot for [i=1:{len(labels)}] "{data}" index (i - 1) using 1:2 with lines linewidth 1.5 title labels[i]
"""


LINK_AXIS = "launch.link_mbit"


def write_link_data(path, rows):
    """tokens/s against the link rate (a launch.link_mbit axis): one block per combination of the other axes, the
    points in the order of their rate; a rate of 0 (not capped) at four times the highest rate, where the axis says
    so.
    Returns the series' labels and that position (None without a link axis or a capped point)."""
    ok = [r for r in rows if r["status"] == "ok" and r["tokens_per_s"] is not None and LINK_AXIS in r["axes"]]
    rates = [int(r["axes"][LINK_AXIS]) for r in ok]
    if not ok or max(rates) == 0:
        return [], None
    uncapped_at = 4 * max(rates)
    series = {}
    for r in ok:
        others = " ".join(f"{k.split('.')[-1]}={v}" for k, v in r["axes"].items() if k != LINK_AXIS) or "all"
        rate = int(r["axes"][LINK_AXIS])
        series.setdefault(others, []).append((rate if rate > 0 else uncapped_at, r["tokens_per_s"]))
    with open(path, "w", encoding="utf-8") as f:
        for n, (label, points) in enumerate(series.items()):
            if n:
                f.write("\n\n")
            f.write(f"# {label}\n")
            f.writelines(f"{x}\t{y!r}\n" for x, y in sorted(points))
    return list(series), uncapped_at


def link_script(title, labels, uncapped_at, data="link.dat"):
    """The curve of the ZeRO++ paper's kind: tokens/s against the link rate, one line per series; "" if none."""
    if not labels:
        return ""
    names = ", ".join('"' + label.replace('"', "'") + '"' for label in labels)
    return f"""
set output "link.png"
set terminal pngcairo size 1000,640 noenhanced font "sans,10"
set title "{title}: tokens/s against the link rate per host (tc tbf), one line per series"
set xlabel "link rate per host, Mbit/s each way (log)"
set ylabel "tokens/s (all ranks, log)"
set logscale xy
set autoscale
set xrange [*:{uncapped_at * 1.5}]
set xtics norotate add ("not capped" {uncapped_at})
set bmargin 4
set lmargin 12
set key outside right top vertical
array labels[{len(labels)}] = [{names}]
plot for [i=1:{len(labels)}] "{data}" index (i - 1) using 1:2 with linespoints linewidth 1.5 title labels[i]
unset logscale
"""


def write_plots(study_dir, rows, title):
    """Writes results.dat, plots.gp and the PNGs; returns the PNG paths, or an explanation why none."""
    gnuplot = shutil.which("gnuplot")
    data = os.path.join(study_dir, "results.dat")
    script = os.path.join(study_dir, "plots.gp")
    write_data(data, rows)
    labels = write_losses(os.path.join(study_dir, "loss.dat"), rows)
    link_labels, uncapped_at = write_link_data(os.path.join(study_dir, "link.dat"), rows)
    for stale in PNG_FILES:
        if os.path.exists(os.path.join(study_dir, stale)):
            os.remove(os.path.join(study_dir, stale))
    text, pngs = gnuplot_script(rows, title)
    losses = loss_script(title, labels)
    if losses:
        text += losses
        pngs.append("loss.png")
    link = link_script(title, link_labels, uncapped_at)
    if link:
        text += link
        pngs.append("link.png")
    with open(script, "w", encoding="utf-8") as f:
        f.write(text)
    if not pngs:
        return None, "no point has results to plot"
    if not gnuplot:
        return None, "gnuplot not found (Debian: apt-get install gnuplot-nox); wrote plots.gp and results.dat"
    out = subprocess.run([gnuplot, "plots.gp"], cwd=study_dir, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        return None, f"gnuplot failed (exit {out.returncode}): {out.stderr.strip()}"
    return [os.path.join(study_dir, p) for p in pngs], None
