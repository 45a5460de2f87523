"""gnuplot PNGs of a collected study: throughput, memory per rank and bytes per link, one bar (group) per point.
The data file and the gnuplot script are kept next to the PNGs so that a person can restyle them."""

import os
import shutil
import subprocess

from .collect import MEMORY_CATEGORIES, MIB

def point_label(row):
    """'3: micro_batch=2 lr=3e-3': the point's index and axis values with their section dropped."""
    values = " ".join(f"{k.split('.')[-1]}={v}" for k, v in row["axes"].items())
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


def _has(rows, key):
    return any(r["status"] == "ok" and r[key] is not None for r in rows)


def gnuplot_script(rows, title, data="results.dat"):
    """The script, and the PNGs it draws: a plot whose every value is missing is left out (gnuplot would
    stop on it)."""
    ok = [r for r in rows if r["status"] == "ok"]
    strategies = " ".join(dict.fromkeys(r["strategy"] or "unknown" for r in ok if r["tokens_per_s"] is not None))
    width = max(800, 90 * len(rows) + 300)
    intra_col = 5 + len(MEMORY_CATEGORIES) + 1
    parts = [f"""# gnuplot script written by `hsdp-sweep collect`; run it in this directory: gnuplot plots.gp
set terminal pngcairo size {width},640 noenhanced font "sans,10"
set datafile separator "\\t"
set datafile missing "NaN"
set style fill solid 0.85 border -1
set grid ytics
set xtics rotate by 30 right
set key outside top center horizontal
set yrange [0:*]
set bmargin 10
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
set title "{title}: bytes sent per rank per step, by link"
set ylabel "MiB per step"
set style data histograms
set style histogram clustered gap 1
set boxwidth 0.9
plot "{data}" using {intra_col}:xtic(2) title "intra-node", "" using {intra_col + 1} title "inter-node"
""")
    return "".join(parts), pngs


def write_plots(study_dir, rows, title):
    """Writes results.dat, plots.gp and the PNGs; returns the PNG paths, or an explanation why none."""
    gnuplot = shutil.which("gnuplot")
    data = os.path.join(study_dir, "results.dat")
    script = os.path.join(study_dir, "plots.gp")
    write_data(data, rows)
    for stale in ("throughput.png", "memory.png", "bytes.png"):
        if os.path.exists(os.path.join(study_dir, stale)):
            os.remove(os.path.join(study_dir, stale))
    text, pngs = gnuplot_script(rows, title)
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
