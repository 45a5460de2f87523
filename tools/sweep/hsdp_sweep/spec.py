"""Study specs: read one, check its keys against hsdp-train, expand it into one deck per point.

A spec is an INI file:

    [study]
    name = quickstart            # names the study (default: the spec's file name)
    base = input/quickstart.ini  # the deck every point starts from (relative to the current directory,
                                 # else to the spec's directory or one above it)
    np = 2                       # ranks per point for `run --local` (optional; --np overrides)

    [fixed]                      # optional: deck values every point gets
    train.steps = 50

    [axes]                       # one axis per line: deck key = comma-separated values
    parallel.sharding = no_shard,full_shard
    train.micro_batch = 2,4
    launch.nodes = 1,2           # optional, not a deck key: nodes per point (one Slurm array per value;
                                 # run --local emulates them with topology.ranks_per_node)
    launch.link_mbit = 0,100,30  # optional, not a deck key: each host's link capped at this rate, Mbit/s
                                 # each way (0: not capped); run --cluster only (the test cluster's tc tbf)

The points are the cartesian product of the axes, the last axis varying fastest, numbered from 0.
"""

import configparser
import difflib
import itertools
import os
import shutil
import subprocess
import sys

from .errors import InputError

LAUNCH_NODES = "launch.nodes"
LAUNCH_LINK = "launch.link_mbit"
LAUNCH_KEYS = {LAUNCH_NODES, LAUNCH_LINK}


class Spec:
    def __init__(self, path, name, base, np, fixed, axes, name_given=True):
        self.path = path
        self.name = name
        self.name_given = name_given  # False: the name is the spec's file name
        self.base = base  # absolute path of the base deck
        self.np = np  # ranks per point for local runs, or None
        self.fixed = fixed  # [(key, value)]
        self.axes = axes  # [(key, [values])]

    def points(self):
        """[(index, [(key, value)])] in array order."""
        keys = [key for key, _ in self.axes]
        combos = itertools.product(*[values for _, values in self.axes])
        return [(i, list(zip(keys, combo))) for i, combo in enumerate(combos)]


def _parser():
    parser = configparser.ConfigParser(inline_comment_prefixes=("#", ";"), interpolation=None, strict=True)
    parser.optionxform = str  # deck keys are case-sensitive
    return parser


def read_spec(path, need_base=True):
    """The spec at path. need_base=False: a study's copy of its spec (study.ini), read for its name and np only: its
    base deck may be relative to another directory than the current one, and the points' decks are resolved
    already."""
    parser = _parser()
    try:
        with open(path, encoding="utf-8") as f:
            parser.read_file(f)
    except OSError as e:
        raise InputError(f"cannot read spec '{path}': {e.strerror}") from e
    except configparser.Error as e:
        raise InputError(f"{path}: {e}") from e

    for section in parser.sections():
        if section not in ("study", "fixed", "axes"):
            raise InputError(f"{path}: unknown section [{section}] (allowed: [study] [fixed] [axes])")
    study = parser["study"] if parser.has_section("study") else {}
    for key in study:
        if key not in ("name", "base", "np"):
            raise InputError(f"{path}: unknown key '{key}' in [study] (allowed: name, base, np)")
    if "base" not in study or not study["base"].strip():
        raise InputError(f"{path}: [study] needs 'base = <deck path>'")
    name = study.get("name", "").strip() or os.path.splitext(os.path.basename(path))[0]
    if "/" in name:
        raise InputError(f"{path}: [study] name '{name}' has a '/': it names the directory runs/study_<name>")
    base = _resolve(study["base"].strip(), os.path.dirname(os.path.abspath(path)))
    if need_base and not os.path.isfile(base):
        raise InputError(f"{path}: [study] base deck '{study['base'].strip()}' does not exist")
    np = None
    if "np" in study:
        try:
            np = int(study["np"])
        except ValueError:
            np = 0
        if np < 1:
            raise InputError(f"{path}: [study] np must be a positive integer, not '{study['np']}'")

    fixed = list(parser["fixed"].items()) if parser.has_section("fixed") else []
    if not parser.has_section("axes") or not parser["axes"]:
        raise InputError(f"{path}: [axes] needs at least one 'section.key = v1,v2,...' line")
    axes = []
    for key, text in parser["axes"].items():
        values = [v.strip() for v in text.split(",")]
        if not text.strip() or any(not v for v in values):
            raise InputError(f"{path}: axis '{key}' has an empty value in '{text}'")
        if len(set(values)) != len(values):
            raise InputError(f"{path}: axis '{key}' repeats a value in '{text}'")
        axes.append((key, values))
    for key, value in axes:
        if key == LAUNCH_NODES and any(not v.isdigit() or int(v) < 1 for v in value):
            raise InputError(f"{path}: axis '{key}' takes positive integers, not '{','.join(value)}'")
        if key == LAUNCH_LINK and any(not v.isdigit() for v in value):
            raise InputError(f"{path}: axis '{key}' takes whole numbers of Mbit/s (0: not capped), "
                             f"not '{','.join(value)}'")
    axis_keys = {key for key, _ in axes}
    for key, _ in fixed:
        if key in axis_keys:
            raise InputError(f"{path}: '{key}' is both in [fixed] and in [axes]")
        if key in LAUNCH_KEYS:
            raise InputError(f"{path}: '{key}' belongs in [axes], not [fixed]")
    return Spec(os.path.abspath(path), name, base, np, fixed, axes, bool(study.get("name", "").strip()))


def _resolve(path, spec_dir):
    """A relative base deck: from the current directory, else from the spec's directory or one above it
    (a spec in input/ may name its base as input/<deck>.ini, relative to the repository)."""
    if os.path.isabs(path) or os.path.exists(path):
        return os.path.abspath(path)
    directory = spec_dir
    while True:
        if os.path.exists(os.path.join(directory, path)):
            return os.path.join(directory, path)
        parent = os.path.dirname(directory)
        if parent == directory:
            return os.path.join(spec_dir, path)
        directory = parent


def train_env():
    """The environment for hsdp-train helper calls: without Slurm/PMI variables, so that a call made inside an
    allocation is not mistaken for a rank of a step."""
    return {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_", "PMIX_"))}


def deck_keys(train):
    """Every 'section.key' that hsdp-train accepts, read from its --print-config output."""
    try:
        out = subprocess.run([train, "--print-config"], capture_output=True, text=True, env=train_env(),
                             check=False)
    except OSError as e:
        raise InputError(f"cannot run '{train}': {e.strerror}") from e
    if out.returncode != 0:
        raise InputError(f"'{train} --print-config' failed (exit {out.returncode}): {out.stderr.strip()}")
    parser = _parser()
    parser.read_string(out.stdout)
    return {f"{s}.{k}" for s in parser.sections() for k in parser[s]}


def check_keys(spec, known):
    for section, pairs in (("fixed", spec.fixed), ("axes", spec.axes)):
        for key, _ in pairs:
            if key in LAUNCH_KEYS and section == "axes":
                continue
            if key not in known:
                close = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.75)
                hint = f"; did you mean '{close[0]}'?" if close else ""
                raise InputError(f"{spec.path}: unknown key '{key}' in [{section}] (not a key of hsdp-train's "
                                 f"--print-config{hint})")


def executable(path, option):
    """path, absolute, where it is a program that can run; else the InputError naming option and why not."""
    if not os.path.exists(path):
        why = "does not exist"
    elif os.path.isdir(path):
        why = "is a directory"
    elif not os.access(path, os.X_OK):
        why = "is not executable"
    else:
        return os.path.abspath(path)
    raise InputError(f"{option} '{path}' {why}")


def find_train(explicit=None):
    """hsdp-train: --train, else $HSDP_TRAIN, else next to this program, else build/bin, else PATH. A given one is the
    one used: where it cannot run, the error says so (another hsdp-train found instead would go unnoticed)."""
    for given, option in ((explicit, "--train"), (os.environ.get("HSDP_TRAIN"), "HSDP_TRAIN")):
        if given:
            return executable(given, option)
    candidates = [os.path.join(os.path.dirname(os.path.abspath(sys.argv[0])), "hsdp-train"),
                  os.path.join("build", "bin", "hsdp-train"), shutil.which("hsdp-train")]
    for c in candidates:
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return os.path.abspath(c)
    raise InputError("cannot find hsdp-train (give --train PATH or set HSDP_TRAIN)")


RESULT_FILES = ("summary.json", "metrics.jsonl", "exit_code")
# points.txt's first line: it marks a directory as a study of hsdp-sweep, the only kind expand writes into when it
# holds files.
POINTS_HEADER = "# index\tdeck\tpoint (key=value ...); read by jobscripts/study.sbatch and hsdp-sweep\n"
# What expand and collect write into a study directory (collect.py's tables; plots.py's data, script and PNGs):
# --clean deletes it with the points, and plots.py removes an earlier collect's PNGs.
PNG_FILES = ("throughput.png", "memory.png", "bytes.png", "loss.png", "link.png")
STUDY_FILES = ("points.txt", "study.ini", "results.csv", "results.md", "results.dat", "plots.gp", "loss.dat",
               "link.dat", *PNG_FILES)


def recorded_exit_code(point_dir):
    """The exit status a run of the point recorded in <point>/exit_code (hsdp-sweep run, study.sbatch); None where it
    recorded none or the file holds no number."""
    try:
        with open(os.path.join(point_dir, "exit_code"), encoding="utf-8") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def _is_point_dir(out_dir, name):
    """Whether out_dir/name is a point's directory, point_<i>/ (a point_photos/ is someone else's)."""
    return name.startswith("point_") and name[len("point_"):].isdigit() and os.path.isdir(os.path.join(out_dir, name))


def earlier_results(out_dir):
    """The result files of an earlier study in out_dir (its points' summaries, metrics and exit codes)."""
    found = []
    if os.path.isdir(out_dir):
        for name in sorted(os.listdir(out_dir)):
            if _is_point_dir(out_dir, name):
                found += [os.path.join(name, f) for f in RESULT_FILES if os.path.exists(os.path.join(out_dir, name, f))]
    return found


def _is_study(out_dir):
    """Whether out_dir is a study directory of hsdp-sweep: its points.txt begins with the line expand writes."""
    try:
        with open(os.path.join(out_dir, "points.txt"), encoding="utf-8") as f:
            return f.readline() == POINTS_HEADER
    except (OSError, UnicodeDecodeError):
        return False


def _check_out(out_dir):
    """Refuses an --out that cannot be a directory, or one that holds files but no study (expand would overwrite
    points.txt or study.ini there, and --clean delete what is not its own)."""
    existing = out_dir
    while not os.path.exists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise InputError(f"--out '{out_dir}' cannot be a directory: '{existing}' exists and is not one")
    try:
        entries = os.listdir(out_dir) if existing == out_dir else []
    except OSError as e:
        raise InputError(f"--out '{out_dir}': {e.strerror}") from e
    if entries and not _is_study(out_dir):
        raise InputError(f"--out '{out_dir}' holds files but no study of hsdp-sweep (no points.txt written by "
                         "expand): give a new or empty directory")


def clean_study(out_dir):
    """Deletes what expand, run and collect wrote into out_dir: point_<i>/ directories and the study files."""
    for name in os.listdir(out_dir):
        path = os.path.join(out_dir, name)
        if _is_point_dir(out_dir, name):
            shutil.rmtree(path)
        elif name in STUDY_FILES:
            os.remove(path)


def _write_file(path, text):
    """Writes path whole or not at all (a temporary file renamed over it): an interrupted expand leaves each file
    as it was or as it should be."""
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


def _point_deck(spec, index, values, point_dir, train):
    """The point's deck as hsdp-train resolves and checks it (base + [fixed] + the point's values); an InputError
    where hsdp-train refuses it."""
    overrides = [f"--{k}={v}" for k, v in spec.fixed + values if k not in LAUNCH_KEYS]
    # hsdp-train resolves the deck (base + overrides) and checks it as a run would (every value, and the checks
    # across keys: ZeRO++ with the strategy, islands): a point every run would refuse fails here.
    cmd = [train, "--config", spec.base, *overrides, f"--log.dir={point_dir}", "--check-config"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=train_env(), check=False)
    # Points run at the same time (a job array): each gets its own checkpoint directory, unless the spec says.
    spec_keys = {k for k, _ in spec.fixed + values}
    if out.returncode == 0 and "checkpoint.dir" not in spec_keys and checkpoint_dir_of(out.stdout):
        cmd = cmd[:-1] + [f"--checkpoint.dir={os.path.join(point_dir, 'checkpoints')}", "--check-config"]
        out = subprocess.run(cmd, capture_output=True, text=True, env=train_env(), check=False)
    if out.returncode != 0:
        point = " ".join(f"{k}={v}" for k, v in values)
        raise InputError(f"point {index} ({point}): hsdp-train rejects it: {out.stderr.strip()}")
    return (f"# study '{spec.name}' point {index}: {' '.join(f'{k}={v}' for k, v in values)}\n"
            f"# from {spec.path}, base deck {spec.base}\n{out.stdout}")


def _check_checkpoint_dirs(spec, decks):
    """Two points with one checkpoint.dir would mix their runs: the later one resumes the earlier one's checkpoint
    (checkpoint.resume = auto), or two array tasks write into it at once."""
    owner = {}
    for index, _, text in decks:
        folder = checkpoint_dir_of(text)
        if folder and folder in owner:
            raise InputError(f"{spec.path}: points {owner[folder]} and {index} share checkpoint.dir '{folder}' (one "
                             "would resume the other's checkpoint): leave checkpoint.dir out of the spec (each point "
                             "gets its own, <point_dir>/checkpoints), or set it empty in [fixed] (no checkpoints)")
        owner.setdefault(folder, index)


def expand(spec, out_dir, train, clean=False):
    """Writes out_dir/point_<i>/deck.ini for every point and out_dir/points.txt; returns the points as
    [(index, values, deck path)]. A directory holding an earlier study's results is refused (collect would label them
    with the new points), unless clean: then the earlier study's files are deleted first."""
    out_dir = os.path.abspath(out_dir)
    _check_out(out_dir)
    check_keys(spec, deck_keys(train))
    results = earlier_results(out_dir)
    if results and not clean:
        shown = ", ".join(results[:3]) + (", ..." if len(results) > 3 else "")
        raise InputError(f"'{out_dir}' holds the results of an earlier study ({shown}): collect would label them with "
                         f"this study's points; use another --out, or --clean to delete them first")
    # Every point is checked before anything is written: a point hsdp-train refuses leaves out_dir as it was.
    decks = [(index, values, _point_deck(spec, index, values, os.path.join(out_dir, f"point_{index}"), train))
             for index, values in spec.points()]
    _check_checkpoint_dirs(spec, decks)
    try:
        if os.path.isdir(out_dir) and clean:
            clean_study(out_dir)
        expanded = []
        for index, values, text in decks:
            point_dir = os.path.join(out_dir, f"point_{index}")
            os.makedirs(point_dir, exist_ok=True)
            _write_file(os.path.join(point_dir, "deck.ini"), text)
            expanded.append((index, values, os.path.join(point_dir, "deck.ini")))
        with open(spec.path, encoding="utf-8", newline="") as f:  # a copy, line ends and all
            _write_file(os.path.join(out_dir, "study.ini"), f.read())
        # Last: points.txt names the decks, which are in place by now.
        write_points(out_dir, expanded)
    except OSError as e:
        raise InputError(f"--out '{out_dir}': cannot write '{e.filename or out_dir}': {e.strerror}") from e
    return expanded


def deck_value(printed_deck, section, key):
    """The value of [section] key in a deck printed by `hsdp-train --print-config` (a point's deck.ini), or None."""
    current = None
    for line in printed_deck.splitlines():
        line = line.strip()
        if line.startswith("[") and line.endswith("]"):
            current = line[1:-1]
        elif current == section and "=" in line and line.split("=", 1)[0].strip() == key:
            return line.split("=", 1)[1].strip()
    return None


def checkpoint_dir_of(printed_deck):
    """The checkpoint.dir value of a deck printed by `hsdp-train --print-config` ('' when off)."""
    return deck_value(printed_deck, "checkpoint", "dir") or ""


def write_points(out_dir, expanded):
    _write_file(os.path.join(out_dir, "points.txt"), POINTS_HEADER + "".join(
        f"{index}\t{deck}\t{' '.join(f'{k}={v}' for k, v in values)}\n" for index, values, deck in expanded))


def read_points(study_dir):
    """[(index, [(key, value)], deck path)] from study_dir/points.txt."""
    path = os.path.join(study_dir, "points.txt")
    try:
        lines = open(path, encoding="utf-8").read().splitlines()
    except OSError as e:
        raise InputError(f"cannot read '{path}' (run `hsdp-sweep expand` first): {e.strerror}") from e
    points = []
    for n, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("\t")
        if len(fields) < 2 or not fields[0].isdigit():
            raise InputError(f"{path}:{n}: expected 'index<TAB>deck<TAB>key=value ...'")
        values = [tuple(kv.split("=", 1)) for kv in (fields[2].split() if len(fields) > 2 else [])]
        deck = fields[1] if os.path.isabs(fields[1]) else os.path.join(study_dir, fields[1])
        points.append((int(fields[0]), values, deck))
    return points


def sbatch_lines(out_dir, expanded, script="jobscripts/study.sbatch"):
    """The sbatch command(s) that run the study as job arrays: one per node count."""
    by_nodes = {}
    for index, values, _ in expanded:
        nodes = dict(values).get(LAUNCH_NODES)
        by_nodes.setdefault(nodes, []).append(index)
    lines = []
    for nodes, indices in by_nodes.items():
        opt = f"--nodes={nodes} " if nodes else ""
        lines.append(f"sbatch {opt}--array={_ranges(indices)} {script} {out_dir}")
    return lines


def _ranges(indices):
    parts, start = [], None
    for i, x in enumerate(indices):
        if start is None:
            start = x
        if i + 1 == len(indices) or indices[i + 1] != x + 1:
            parts.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ",".join(parts)
