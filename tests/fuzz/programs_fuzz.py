#!/usr/bin/env python3
"""The fuzz suite's end-to-end part: hsdp-train and hsdp-ckpt run on mutated command lines, decks, token files,
checkpoints and `latest` pointers generated from a fixed seed (stdlib only).

Every run must end with a documented exit code (0 done, 2 bad input, 3 stopped by a signal, 4 communication failure;
DIVERGENCE_EXIT for a non-finite loss or gradient norm, whose code is still to be decided), never 1, never a signal
or the time limit; a run that exits 2 prints exactly one line on stderr; and the good checkpoint directory (every
file, `latest` included) is byte-identical afterwards. Prints every failure (the command, the exit code, stderr) and
the counts as one JSON line; exit 1 on any failure.

  programs_fuzz.py --train HSDP_TRAIN --ckpt HSDP_CKPT --fixtures DIR --deck TINY_DECK --out DIR [--seed S]
                   [--runs N] [--mpi-runs M] [--jobs J] [--timeout-s T] [--only CASE] --mpiexec MPIEXEC...
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import random
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

DIVERGENCE_EXIT = 5  # the code a diverged run (non-finite gradient norm) is to exit with: one place to change it
ALLOWED_EXITS = {0, 2, 3, 4, DIVERGENCE_EXIT}

# Keys whose valid values set the run's size or length: they only get small or invalid values (a valid huge value is
# a slow run, not a bug); the memory pre-check has its own explicit cases below.
SIZE_KEYS = {"model.n_layer", "model.n_head", "model.n_embd", "model.block_size", "model.vocab_size",
             "model.padded_vocab_size", "train.steps", "train.micro_batch", "train.seq_len", "train.grad_accum",
             "train.eval_tokens", "train.eval_every", "device.threads", "zeropp.block", "parallel.bucket_mb",
             "comm.timeout_s", "checkpoint.every", "train.stop_at_step", "log.every"}
SMALL = ["0", "1", "2", "3", "4", "16", "64"]
BAD = ["", "-1", "-0", "nan", "inf", "1e308", "-1e308", "1e-320", "abc", "99999999999999999999",
       "-9223372036854775809", "1.5", "0x10", " 3", "3 ", "1e3", "2 2", "\u00e9", "3#4"]
BOOLEANS = ["true", "false", "yes", "off", "1", "0", "2", "maybe", "", "TRUE"]
DICT_VALUES = ["1e3", "1e9", "10", "1e308"]  # real keys that are not sizes (lr, eps, weight decay, grad_clip, ...)


class Fixture:
    def __init__(self, a):
        self.a = a
        self.good = os.path.join(a.fixtures, "good")
        self.good_step = os.path.join(self.good, "step_2.h5")
        self.train_bin = os.path.join(a.fixtures, "data", "train.bin")
        self.val_bin = os.path.join(a.fixtures, "data", "val.bin")
        self.keys, self.choices = read_option_table(a.train)
        self.a_file = os.path.join(a.out, "a_file")
        self.a_dir = os.path.join(a.out, "a_dir")

    def paths(self, case_dir):
        # A file and a directory of the case's own (a run may write into the directory).
        return ["", "/nonexistent/x", os.path.join(case_dir, "a_file"), os.path.join(case_dir, "a_dir"), "/dev/null", "/proc/self/status", self.good_step,
                self.train_bin, "x" * 5000, os.path.join(case_dir, "new", "deep"), "with\nnewline", "~/x"]

    def value_for(self, key, kind, rng, case_dir):
        if kind == "path":
            return rng.choice(self.paths(case_dir))
        if kind == "bool":
            return rng.choice(BOOLEANS)
        if key in self.choices:
            return rng.choice(self.choices[key] + ["", "bogus", self.choices[key][0].upper()])
        if key in SIZE_KEYS:
            return rng.choice(SMALL + BAD)
        return rng.choice(SMALL + BAD + DICT_VALUES)


def read_option_table(train):
    """Every deck key with its kind, from hsdp-train --print-config and --help (so the table stays the source)."""
    printed = subprocess.run([train, "--print-config"], capture_output=True, text=True, check=True).stdout
    helptext = subprocess.run([train, "--help"], capture_output=True, text=True, check=True).stdout
    keys, section = {}, ""
    for line in printed.splitlines():
        if m := re.match(r"\[(\w+)\]", line):
            section = m.group(1)
        elif m := re.match(r"(\w+) = ", line):
            keys[section + "." + m.group(1)] = "text"
    choices = {}
    for m in re.finditer(r"--([\w.]+) \[[^\]]*\]\n(?:      .*\n)*?      allowed: (\S+)", helptext):
        key, allowed = m.group(1), m.group(2)
        if allowed.startswith("true|false"):
            keys[key] = "bool"
        elif "|" in allowed:
            choices[key] = allowed.split("|")
    for key in keys:
        if key.startswith(("data.", "log.dir")) or key in ("checkpoint.dir", "checkpoint.resume"):
            keys[key] = "path"
    return keys, choices


def mutate_words(words, fx, rng, case_dir):
    """1 to 3 mutations of a command line."""
    words = list(words)
    keys = sorted(fx.keys)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        i = rng.randrange(len(words))
        if op <= 3:
            key = rng.choice(keys)
            words.append("--%s=%s" % (key, fx.value_for(key, fx.keys[key], rng, case_dir)))
        elif op == 4:
            words[i] = words[i].lstrip("-") if rng.random() < 0.5 else "-" + words[i].lstrip("-")
        elif op == 5:
            words[i] = words[i].replace("=", " ", 1) if rng.random() < 0.5 else words[i][: rng.randrange(len(words[i]) + 1)]
        elif op == 6:
            words.insert(i, rng.choice(["--print-config", "--print-mesh", "--help", "--version", "--config", "-c",
                                        "--bogus", "--model.n_layr=2", "--", "-", "stray", "--train.steps"]))
        elif op == 7:
            w = bytearray(words[i].encode())
            if w:
                w[rng.randrange(len(w))] = rng.choice(b"=.-_ #\tA9z")
            words[i] = w.decode(errors="replace")
        else:
            words.append(words[i])
    return words


def mutate_bytes(data, rng, front=1024):
    """1 to 3 mutations of a binary file: flips, header integers, truncation, insertion, zeroed or repeated ranges."""
    b = bytearray(data)
    recipe = []
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        n = len(b)
        at = rng.randrange(min(n, front)) if rng.random() < 0.5 and n else rng.randrange(max(n, 1))
        if op == 0 and n:
            b[at] ^= 1 << rng.randrange(8)
        elif op == 1 and n >= 4:
            at -= at % 4
            at = min(at, n - 4)
            b[at:at + 4] = rng.choice([0, 1, 0xFFFFFFFF, 0x7FFFFFFF, 0x80000000, 0xFFFF, 64, 20240520]).to_bytes(4, "little")
        elif op == 2:
            del b[rng.randrange(n + 1):]
        elif op == 3:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif op == 4:
            length = rng.randint(1, 4096)
            b[at:at + length] = bytes(len(b[at:at + length]))
        elif op == 5:
            b += b[at:at + rng.randint(1, 4096)]
        else:
            b[at:at + 2] = rng.choice([64, 65, 0xFFFF, 0x8000]).to_bytes(2, "little")  # a token id at or past V
        recipe.append("%s@%d" % ("flip set_int32 truncate insert zero append set_token".split()[op], at))
    return bytes(b), " ".join(recipe)


def mutate_text(text, fx, rng, case_dir):
    lines = text.split("\n")
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        op = rng.randrange(6)
        if op <= 1 and " = " in lines[i]:
            name = lines[i].split(" = ")[0].strip()
            section = next((l[1:-1] for l in reversed(lines[:i]) if l.startswith("[")), "")
            key = section + "." + name
            lines[i] = name + " = " + fx.value_for(key, fx.keys.get(key, "text"), rng, case_dir).replace("\n", " ")
        elif op == 2:
            del lines[i]
        elif op == 3:
            lines.insert(i, lines[rng.randrange(len(lines))])
        elif op == 4:
            lines.insert(i, rng.choice(["[bogus]", "bogus = 1", "n_layr = 2", "= 3", "[model", "steps", "[]",
                                        "\u00ef\u00bb\u00bf", "# comment", "key = value = more", "  [train]  "]))
        elif lines[i]:
            j = rng.randrange(len(lines[i]))
            lines[i] = lines[i][:j] + rng.choice("=[]# .-09aZ\t") + lines[i][j + 1:]
    return "\n".join(lines)


class Case:
    def __init__(self, name, kind, program, words, mpi=False, expect=None, stop_after_s=None):
        self.name, self.kind, self.program, self.words = name, kind, program, words
        self.mpi, self.expect, self.stop_after_s = mpi, expect, stop_after_s
        self.dir = None


def make_cases(fx, a):
    """Every case, its files written, from the seed alone (the runs may then go in any order)."""
    rng = random.Random(a.seed)
    cases = []

    def new(kind, make, count, mpi=False):
        for n in range(count):
            name = "%s%s_%03d" % ("mpi_" if mpi else "", kind, n)
            case_dir = os.path.join(a.out, name)
            os.makedirs(os.path.join(case_dir, "a_dir"))
            open(os.path.join(case_dir, "a_file"), "w").write("not a directory\n")
            for case in make(case_dir, rng):
                case.name = name + (case.name or "")
                case.mpi = mpi
                case.dir = case_dir
                cases.append(case)

    base_deck = open(a.deck).read()
    base_deck = re.sub(r"(?m)^train = .*$", "train = " + fx.train_bin, base_deck)
    base_deck = re.sub(r"(?m)^val = .*$", "val = " + fx.val_bin, base_deck)
    base_deck = re.sub(r"(?m)^eval_every = .*$", "eval_every = 2", base_deck)
    base_ini = os.path.join(a.out, "base.ini")
    open(base_ini, "w").write(base_deck)

    def common(case_dir, steps="2"):
        return ["--config", base_ini, "--log.dir=" + os.path.join(case_dir, "log"),
                "--checkpoint.dir=" + os.path.join(case_dir, "ckpt"), "--train.steps=" + steps]

    def cmdline(case_dir, rng):
        return [Case("", "command_line", a.train, mutate_words(common(case_dir), fx, rng, case_dir))]

    def deck(case_dir, rng):
        path = os.path.join(case_dir, "deck.ini")
        open(path, "w").write(mutate_text(base_deck, fx, rng, case_dir))
        return [Case("", "deck", a.train, ["--config", path, "--log.dir=" + os.path.join(case_dir, "log"),
                                            "--checkpoint.dir=" + os.path.join(case_dir, "ckpt")])]

    def token_file(case_dir, rng):
        which = rng.choice(["train", "train", "val"])
        source = fx.train_bin if which == "train" else fx.val_bin
        data, recipe = mutate_bytes(open(source, "rb").read(), rng)
        path = os.path.join(case_dir, which + ".bin")
        open(path, "wb").write(data)
        return [Case(" " + recipe, "token_file", a.train, common(case_dir) + ["--data.%s=%s" % (which, path)])]

    def checkpoint(case_dir, rng):
        data, recipe = mutate_bytes(open(fx.good_step, "rb").read(), rng, front=16384)
        path = os.path.join(case_dir, "step_2.h5")
        open(path, "wb").write(data)
        resume = Case(" train " + recipe, "checkpoint", a.train,
                      common(case_dir, "3") + ["--checkpoint.resume=" + path])
        if a.mpi_phase:
            return [resume]
        return [resume, Case(" verify " + recipe, "checkpoint", a.ckpt, ["verify", path]),
                Case(" inspect " + recipe, "checkpoint", a.ckpt, ["inspect", path])]

    def latest(case_dir, rng):
        copy = os.path.join(case_dir, "ckpt")
        shutil.copytree(fx.good, copy)
        text = rng.choice(["", "garbage", "step_9.h5", "../../../etc/passwd", fx.good_step, "step_2.h5\nstep_1.h5",
                           "\x00\xff", "step_1.h5", "x" * 5000, "/dev/null", "."])
        open(os.path.join(copy, "latest"), "w").write(text)
        if rng.random() < 0.4:
            victim = os.path.join(copy, rng.choice(["step_1.h5", "step_2.h5"]))
            data, _ = mutate_bytes(open(victim, "rb").read(), rng, front=16384)
            open(victim, "wb").write(data)
        return [Case(" latest=%r" % text[:40], "latest", a.train,
                     common(case_dir, "3") + ["--checkpoint.resume=auto",
                                              "--checkpoint.fallback=" + rng.choice(["true", "false"])])]

    a.mpi_phase = False
    new("command_line", cmdline, a.runs * 35 // 100)
    new("deck", deck, a.runs * 20 // 100)
    new("token_file", token_file, a.runs * 12 // 100)
    new("checkpoint", checkpoint, a.runs * 7 // 100)
    new("latest", latest, a.runs * 5 // 100)
    tools = [["verify"], ["verify", fx.good_step, "extra"], ["inspect", fx.good_step, "--summary"],
             ["inspect", "--bogus"], ["bogus"], ["verify", fx.a_dir], ["verify", "/dev/null"],
             ["export", fx.good_step, "--format", "bogus", "--output", "x"],
             ["export", fx.good_step, "--format", "safetensors", "--output", "/nonexistent/dir/x"],
             ["consolidate", fx.good_step, "--output", "c.h5"], ["import", "--format", "llmc", fx.train_bin,
                                                                 "--output", "i.h5"]]
    new("ckpt_cli", lambda d, r: [Case("", "ckpt_cli", a.ckpt, tools.pop(0))], len(tools))
    # Explicit cases: the memory pre-check (a model that cannot fit is bad input), divergence, a stop by signal.
    new("too_big", lambda d, r: [Case("", "too_big", a.train, common(d) + ["--model.n_embd=65536"], expect=2),
                                 Case("_vocab", "too_big", a.train, common(d) + [
                                     "--model.vocab_size=16777216", "--model.padded_vocab_size=0",
                                     "--model.n_embd=4096", "--train.seq_len=16"], expect=2)], 1)
    new("diverge", lambda d, r: [Case("", "diverge", a.train, common(d, "5") + ["--train.lr=1e30",
                                                                              "--train.weight_decay=0",
                                                                              "--train.grad_clip=0"],
                                      expect=DIVERGENCE_EXIT)], 1)
    new("signal", lambda d, r: [Case("", "signal", a.train, common(d, "100000") + ["--train.eval_every=0"],
                                     expect=3, stop_after_s=3)], 1)
    # A checkpoint rewritten with chunked, compressed datasets (h5repack): read (exit 0) or refused, never hung on.
    def chunked(case_dir, rng, extra=()):
        path = os.path.join(case_dir, "step_2.h5")
        subprocess.run(["h5repack", "-l", "CHUNK=16", "-f", "GZIP=1", fx.good_step, path], check=True)
        return [Case("", "chunked_checkpoint", a.train, common(case_dir, "3") + ["--checkpoint.resume=" + path] +
                     list(extra))]
    have_h5repack = shutil.which("h5repack") is not None
    if have_h5repack:
        new("chunked_checkpoint", chunked, 1)
    a.mpi_phase = True
    mpi_words = ["--topology.ranks_per_node=2"]
    if have_h5repack:
        new("chunked_checkpoint", lambda d, r: chunked(d, r, mpi_words), 1, mpi=True)
    wrap = lambda make: lambda d, r: [Case(c.name, c.kind, c.program, c.words + mpi_words, expect=c.expect,
                                           stop_after_s=c.stop_after_s) for c in make(d, r)]
    new("command_line", wrap(cmdline), a.mpi_runs * 4 // 10, mpi=True)
    new("token_file", wrap(token_file), a.mpi_runs * 2 // 10, mpi=True)
    new("checkpoint", wrap(checkpoint), a.mpi_runs * 2 // 10, mpi=True)
    new("checkpoint_dir_is_a_file", lambda d, r: [Case("", "checkpoint_dir_is_a_file", a.train, common(d) + [
        "--checkpoint.dir=" + fx.a_file] + mpi_words, expect=2)], 1, mpi=True)
    new("signal", lambda d, r: [Case("", "signal", a.train, common(d, "100000") + ["--train.eval_every=0"] + mpi_words,
                                     expect=3, stop_after_s=5)], 1, mpi=True)
    return cases


def limit_memory():
    # A safety net for a shared machine: a run that allocates more than this fails instead of swapping.
    resource.setrlimit(resource.RLIMIT_AS, (16 << 30, 16 << 30))
    os.setsid()


def hsdp_lines(stderr):
    """The lines hsdp wrote on stderr: without mpirun's own notices (blocks between lines of dashes, and lines
    prefixed [host:pid]) that follow any job whose ranks exit non-zero. hsdp's lines from ranks other than 0 say
    [rank N@host]."""
    lines, in_banner = [], False
    for line in stderr.splitlines():
        if re.fullmatch(r"-{20,}", line.strip()):
            in_banner = not in_banner
        elif not in_banner and line.strip() and not re.match(r"\[[\w.-]+:\d+\] ", line):
            lines.append(line)
    return lines


def run_case(case, a):
    command = ([*a.mpiexec] if case.mpi else []) + [case.program] + case.words
    started = time.monotonic()
    p = subprocess.Popen(command, cwd=case.dir, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=subprocess.DEVNULL, preexec_fn=limit_memory)
    timed_out = False
    try:
        if case.stop_after_s:
            try:
                p.wait(case.stop_after_s)
            except subprocess.TimeoutExpired:
                # Slurm's warning before the time limit; mpirun forwards SIGUSR1 to every rank.
                p.send_signal(signal.SIGUSR1 if case.mpi else signal.SIGTERM)
        out, err = p.communicate(timeout=a.timeout_s)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
    seconds = time.monotonic() - started
    lines = hsdp_lines(err.decode(errors="replace"))
    code = p.returncode
    problem = None
    if timed_out:
        problem = "hang (no exit within %g s)" % a.timeout_s
    elif code < 0:
        problem = "signal %s" % signal.Signals(-code).name
    elif case.expect is not None and code != case.expect:
        problem = "exit %d, expected %d" % (code, case.expect)
    elif code not in ALLOWED_EXITS:
        problem = "exit %d" % code
    elif code == 2 and len(lines) != 1:
        problem = "exit 2 with %d lines on stderr" % len(lines)
    elif case.kind == "signal" and not os.path.exists(os.path.join(case.dir, "ckpt", "latest")):
        problem = "stopped by a signal without a checkpoint"
    return {"case": case, "command": command, "code": code, "stderr": lines, "problem": problem,
            "seconds": seconds}


def tree_digest(path):
    digest = {}
    for root, _, files in os.walk(path):
        for f in sorted(files):
            full = os.path.join(root, f)
            digest[os.path.relpath(full, path)] = hashlib.sha256(open(full, "rb").read()).hexdigest()
    return digest


def main():
    p = argparse.ArgumentParser()
    for name in ("--train", "--ckpt", "--fixtures", "--deck", "--out"):
        p.add_argument(name, required=True)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--runs", type=int, default=100, help="single-rank cases")
    p.add_argument("--mpi-runs", type=int, default=10, help="4-rank cases")
    p.add_argument("--jobs", type=int, default=3)
    p.add_argument("--timeout-s", type=float, default=60)
    p.add_argument("--only", help="run only the cases whose name starts with this")
    p.add_argument("--mpiexec", nargs=argparse.REMAINDER, required=True)
    a = p.parse_args()
    for name in ("train", "ckpt", "fixtures", "deck", "out"):  # the runs start in their case directories
        setattr(a, name, os.path.abspath(getattr(a, name)))
    started = time.monotonic()
    shutil.rmtree(a.out, ignore_errors=True)
    os.makedirs(os.path.join(a.out, "a_dir"))
    open(os.path.join(a.out, "a_file"), "w").write("not a directory\n")
    fx = Fixture(a)
    good_before = tree_digest(fx.good)
    cases = [c for c in make_cases(fx, a) if not a.only or c.name.startswith(a.only)]
    single = [c for c in cases if not c.mpi]
    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool:
        results = list(pool.map(lambda c: run_case(c, a), single))
    results += [run_case(c, a) for c in cases if c.mpi]  # one mpirun at a time: 4 ranks on 2 cores already
    good_after = tree_digest(fx.good)

    failures = [r for r in results if r["problem"]]
    by_category = {}
    for r in failures:
        category = r["case"].kind + ": " + re.sub(r"\d+ lines", "N lines", r["problem"])
        by_category[category] = by_category.get(category, 0) + 1
        print("FAILURE %s: %s\n  command: %s\n  stderr (%d lines): %s" % (
            r["case"].name, r["problem"], shlex.join(r["command"])[:3000], len(r["stderr"]),
            "\n    ".join(l[:400] for l in r["stderr"][:6])), file=sys.stderr)
    if good_after != good_before:
        by_category["good checkpoint changed"] = 1
        print("FAILURE: the good checkpoint directory %s changed: %s" % (fx.good, sorted(
            k for k in set(good_before) | set(good_after) if good_before.get(k) != good_after.get(k))), file=sys.stderr)
    count = lambda f: {k: sum(1 for r in results if f(r) == k) for k in sorted({f(r) for r in results}, key=str)}
    summary = {"seed": a.seed, "runs": len(results), "mpi_runs": sum(1 for r in results if r["case"].mpi),
               "by_kind": count(lambda r: r["case"].kind), "by_exit": count(lambda r: str(r["code"])),
               "failures": sum(by_category.values()), "failures_by_category": by_category,
               "good_checkpoint_unchanged": good_after == good_before,
               "slowest_s": round(max((r["seconds"] for r in results), default=0), 2),
               "seconds": round(time.monotonic() - started, 1)}
    print(json.dumps(summary))
    return 1 if summary["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
