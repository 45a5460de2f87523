#!/usr/bin/env bash
# The islands' quality study (issue 35, docs/islands.md): val loss at equal tokens of DiLoCo's islands against the
# synchronous run, on one machine (the loss does not depend on the links: emulated nodes here).
#
#   tools/bench/islands_quality.sh [--out DIR] [--spec SPEC]... [--sync input/study_islands_sync.ini] [--reuse]
#
# Runs the studies with hsdp-sweep (--local; 4 ranks as 4 emulated nodes of one rank): the synchronous one into
# DIR/sync, each island spec (default input/study_islands.ini, input/study_islands_ef.ini and
# input/study_islands_overlap.ini; --spec replaces them) into DIR/islands_<k>; with --reuse it takes their results as
# DIR holds them; without, DIR must be new, empty or an earlier islands_quality.sh's, which it replaces (any other: exit
# 2, untouched; tools/bench/own_dir.sh). Then it writes DIR/quality.jsonl (one line per point: islands, inner_steps,
# bits, fragments, overlap, error_feedback, final val loss and its ratio to the synchronous run's, tokens/s),
# DIR/quality.md (the table) and DIR/quality.png (val loss against tokens: the synchronous run and every island point of
# 2 islands, one fragment, int4, no overlap; DIR/quality.gp and .dat to restyle it). The default specs: 2 and 4 islands,
# H 8, 32, 128, bf16 and int4, 1 and 4 fragments, then int4 without error feedback at H 32, then 2 islands at H 32 with
# the exchange overlapped by 1 and 8 steps; 384 steps of the quickstart deck (about 18 minutes on 2 cores).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
out=$root/runs/islands_quality
specs=()
sync=$root/input/study_islands_sync.ini
reuse=0
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d' | sed 's/^# \{0,1\}//'; }
while (($#)); do
  case $1 in
    --out) out=$2; shift 2 ;;
    --spec) specs+=("$(readlink -f "$2")"); shift 2 ;;
    --sync) sync=$(readlink -f "$2"); shift 2 ;;
    --reuse) reuse=1; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "islands_quality.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
  esac
done
((${#specs[@]})) ||
  specs=("$root/input/study_islands.ini" "$root/input/study_islands_ef.ini" "$root/input/study_islands_overlap.ini")
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
cd "$root"
# The data the decks read, made as tools/quickstart.sh makes it where it is missing.
[[ -f data/quickstart/train.bin ]] || build/bin/hsdp-data synth --out-dir data/quickstart >/dev/null
if [[ ! -f data/text/train.bin ]]; then
  mkdir -p data/text
  corpus=(README.md docs/*.md)
  [[ -d /usr/share/common-licenses ]] && corpus+=(/usr/share/common-licenses/*)
  cat "${corpus[@]}" >data/text/corpus.txt
  build/bin/hsdp-data encode --input data/text/corpus.txt --output data/text/train.bin --val-output data/text/val.bin \
    --val-fraction 0.05 >/dev/null
fi
if ((reuse == 0)); then
  # shellcheck source=tools/bench/own_dir.sh
  source "$root/tools/bench/own_dir.sh"
  own_dir "$out" --out islands_quality.sh
  tools/sweep/hsdp-sweep run --local "$sync" --out "$out/sync" >/dev/null
  for k in "${!specs[@]}"; do  # a failed point is said in the table
    tools/sweep/hsdp-sweep run --local "${specs[$k]}" --out "$out/islands_$k" || true
  done
fi
python3 - "$out" <<'PY'
import configparser, glob, json, os, sys
out = sys.argv[1]

def points(study):
    for d in sorted(glob.glob(f"{out}/{study}/point_*"), key=lambda p: (p.rsplit("/", 2)[-2], int(p.rsplit("_", 1)[1]))):
        deck = configparser.ConfigParser(inline_comment_prefixes=("#", ";"))
        deck.read(f"{d}/deck.ini")
        get = lambda s, k, default: deck.get(s, k, fallback=default)
        m = f"{d}/metrics.jsonl"
        lines = [json.loads(l) for l in open(m)] if os.path.exists(m) else []
        yield {"point": "/".join(d.rsplit("/", 2)[-2:]), "islands": int(get("parallel", "islands", "1")),
               "inner_steps": int(get("outer", "inner_steps", "32")), "bits": int(get("outer", "bits", "4")),
               "fragments": int(get("outer", "fragments", "1")), "overlap": int(get("outer", "overlap", "0")),
               "error_feedback": get("outer", "error_feedback", "true") == "true", "lines": lines}

sync = next(points("sync"))
def val_curve(p):
    return [(l["step"] * l["tokens"], l["val_loss"]) for l in p["lines"] if "val_loss" in l]
base = val_curve(sync)
if not base:
    sys.exit("islands_quality.sh: the synchronous run has no val loss")
ref = base[-1][1]
rows = []
for p in points("islands_*"):
    curve = val_curve(p)
    ok = bool(p["lines"]) and p["lines"][-1]["step"] == sync["lines"][-1]["step"] and curve
    row = {k: p[k] for k in ("point", "islands", "inner_steps", "bits", "fragments", "overlap", "error_feedback")}
    if ok:
        steps = p["lines"][1:]
        row.update(val_loss=round(curve[-1][1], 5), vs_sync=round(curve[-1][1] / ref - 1, 4),
                   tokens=curve[-1][0],
                   tokens_per_s=round(sum(l["tokens"] for l in steps) / (sum(l["step_ms"] for l in steps) / 1e3), 1))
    else:
        row.update(val_loss=None, vs_sync=None)
    rows.append(row)
with open(f"{out}/quality.jsonl", "w") as f:
    f.write(json.dumps({"point": "sync", "islands": 1, "val_loss": round(ref, 5), "tokens": base[-1][0]}) + "\n")
    for r in rows:
        f.write(json.dumps(r) + "\n")
with open(f"{out}/quality.md", "w") as f:
    f.write(f"synchronous run: val loss {ref:.4f} after {base[-1][0]} tokens\n\n")
    f.write("| islands | H | bits | fragments | overlap | error feedback | val loss | vs synchronous |\n"
            "|---|---|---|---|---|---|---|---|\n")
    for r in rows:
        val = "failed" if r["val_loss"] is None else f"{r['val_loss']:.4f}"
        vs = "-" if r["vs_sync"] is None else f"{r['vs_sync']:+.1%}"
        f.write(f"| {r['islands']} | {r['inner_steps']} | {r['bits']} | {r['fragments']} | {r['overlap']} | "
                f"{'yes' if r['error_feedback'] else 'no'} | {val} | {vs} |\n")
# The curves: the synchronous run and 2 islands, one fragment, int4, every H.
chosen = [p for p in points("islands_*") if p["islands"] == 2 and p["fragments"] == 1 and p["bits"] == 4
          and p["error_feedback"] and p["overlap"] == 0]
with open(f"{out}/quality.dat", "w") as f:
    for name, curve in [("synchronous", base)] + [(f"2 islands, H = {p['inner_steps']}", val_curve(p)) for p in chosen]:
        f.write(f"# {name}\n" + "".join(f"{t}\t{v}\n" for t, v in curve) + "\n\n")
names = ["synchronous"] + [f"2 islands, H = {p['inner_steps']}" for p in chosen]
with open(f"{out}/quality.gp", "w") as f:
    f.write(f'''set terminal pngcairo size 900,600 noenhanced font "sans,10"
set output "{out}/quality.png"
set title "val loss against tokens: synchronous against 2 islands (int4 pseudo-gradients, one fragment)"
set xlabel "tokens"
set ylabel "val loss (nats per token)"
set key top right
set grid
plot ''' + ", ".join(f'"{out}/quality.dat" index {i} with linespoints title "{n}"' for i, n in enumerate(names)) + "\n")
print(open(f"{out}/quality.md").read())
PY
gnuplot "$out/quality.gp" 2>/dev/null || echo "islands_quality.sh: gnuplot failed; the table is in $out/quality.md" >&2
echo "islands_quality.sh: wrote $out/quality.jsonl, quality.md, quality.png"
