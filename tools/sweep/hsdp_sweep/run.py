"""Runs a study's points one after another with mpirun, on a machine without Slurm: here (run --local), or on the
test cluster of tools/cluster.sh, its links capped at each point's launch.link_mbit (run --cluster)."""

import fcntl
import json
import os
import shutil
import signal
import subprocess
import time

from .errors import InputError
from .spec import LAUNCH_LINK, LAUNCH_NODES, checkpoint_dir_of, deck_value, executable, recorded_exit_code, train_env

TIMEOUT_EXIT = 124  # recorded for a point stopped by --timeout, as timeout(1) does


def find_mpirun(explicit=None):
    """--mpirun (a path, or a name on PATH), else mpirun or mpiexec on PATH: found before any point's record is
    touched."""
    if explicit:
        return (shutil.which(explicit) if os.sep not in explicit else None) or executable(explicit, "--mpirun")
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        raise InputError("cannot find mpirun (give --mpirun PATH)")
    return mpirun


def _is_open_mpi(mpirun):
    try:
        out = subprocess.run([mpirun, "--version"], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return "Open MPI" in out.stdout or "OpenRTE" in out.stdout


def launcher_args(mpirun, ranks, user_args):
    """Open MPI refuses root without --allow-run-as-root and more ranks than cores without --oversubscribe;
    both are added when needed unless the user's --mpirun-args already say something about them."""
    args = []
    if _is_open_mpi(mpirun):
        if os.geteuid() == 0 and "--allow-run-as-root" not in user_args:
            args.append("--allow-run-as-root")
        if ranks > (os.cpu_count() or 1) and not any(a.startswith(("--oversubscribe", "--map-by", "--bind-to"))
                                                    for a in user_args):
            args.append("--oversubscribe")
    return args


def _run_one(cmd, log_path, timeout):
    with open(log_path, "w", encoding="utf-8") as log:
        log.write("# " + " ".join(cmd) + "\n")
        log.flush()
        # Its own process group, so that a timeout or Ctrl-C stops mpirun and every rank it started.
        try:
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                    env=train_env())
        except OSError as e:
            raise InputError(f"cannot run '{cmd[0]}': {e.strerror}") from e
        try:
            return proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            _stop(proc)
            return TIMEOUT_EXIT
        except KeyboardInterrupt:
            _stop(proc)
            raise


def _stop(proc):
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=grace)
            break
        except subprocess.TimeoutExpired:
            continue


def finished(point_dir):
    """Whether an earlier run of the point finished well: exit 0 recorded and its summary.json written."""
    return recorded_exit_code(point_dir) == 0 and os.path.isfile(os.path.join(point_dir, "summary.json"))


def point_ranks(values, np, cluster):
    """The ranks a point runs on: np per node on launch.nodes nodes; without launch.nodes, 2 nodes on the test cluster
    (run --cluster) and np ranks here (run --local)."""
    nodes = int(dict(values).get(LAUNCH_NODES, 2 if cluster else 0))
    return np * nodes if nodes else np


LAUNCH_RECORD = "launch.json"  # how hsdp-sweep run launched the point: {"np": N, "where": "local" | "cluster"}


def _where(cluster):
    return "cluster" if cluster else "local"


def _record_launch(point_dir, np, cluster):
    with open(os.path.join(point_dir, LAUNCH_RECORD), "w", encoding="utf-8") as f:
        json.dump({"np": np, "where": _where(cluster)}, f)
        f.write("\n")


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def earlier_run(deck):
    """How the earlier run of a point that this run keeps (finished) or resumes (checkpointed) was launched: a dict
    with "np" and "where" when hsdp-sweep run launched it (its launch.json), and "ranks" when hsdp-train recorded
    them (summary.json's world_size, else the last metrics.jsonl line's); None for any other point (it runs afresh)."""
    point_dir = os.path.dirname(deck)
    if not (finished(point_dir) or _checkpointed(deck)):
        return None
    record = {k: v for k, v in _read_json(os.path.join(point_dir, LAUNCH_RECORD)).items() if k in ("np", "where")}
    ranks = _read_json(os.path.join(point_dir, "summary.json")).get("world_size")
    if ranks is None:
        try:
            with open(os.path.join(point_dir, "metrics.jsonl"), encoding="utf-8") as f:
                lines = [line for line in f if line.strip()]
            ranks = json.loads(lines[-1]).get("world_size") if lines else None
        except (OSError, ValueError, AttributeError):
            ranks = None
    if isinstance(ranks, int):
        record["ranks"] = ranks
    return record


def launch_conflict(record, values, np, cluster):
    """Why running a point with this record on np ranks per node (run --cluster or --local) would mix it with its
    earlier run, or None."""
    if "np" in record and (record["np"], record.get("where")) != (np, _where(cluster)):
        return f"ran with --np {record['np']} --{record.get('where')}"
    if "ranks" in record and record["ranks"] != point_ranks(values, np, cluster):
        return f"ran on {record['ranks']} rank(s), where this run would use {point_ranks(values, np, cluster)}"
    return None


def _checkpointed(deck):
    """Whether the point resumes: its deck names a checkpoint.dir that holds a checkpoint (its `latest` pointer) and
    does not set checkpoint.resume = none."""
    try:
        with open(deck, encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return False
    folder = checkpoint_dir_of(text)
    resumes = deck_value(text, "checkpoint", "resume") != "none"
    return resumes and bool(folder) and os.path.isfile(os.path.join(folder, "latest"))


def _clear(point_dir, deck):
    """What an earlier run of the point left, so that collect never reads it as this run's; but a point with a
    checkpoint resumes from it, and hsdp-train continues its metrics.jsonl (kept through the resumed step)."""
    stale = ["summary.json", "exit_code"] + ([] if _checkpointed(deck) else ["metrics.jsonl"])
    for name in stale:
        if os.path.exists(os.path.join(point_dir, name)):
            os.remove(os.path.join(point_dir, name))


def _run_point(cmd, point_dir, timeout):
    """Runs one point's command; records its exit status in <point>/exit_code. Returns (status, seconds, what to
    say of it)."""
    start = time.monotonic()
    status = _run_one(cmd, os.path.join(point_dir, "train.log"), timeout)
    seconds = time.monotonic() - start
    with open(os.path.join(point_dir, "exit_code"), "w", encoding="utf-8") as f:
        f.write(f"{status}\n")
    result = _final_loss(point_dir) if status == 0 else f"FAILED, see {point_dir}/train.log"
    return status, seconds, result


def run_local(points, train, np, mpirun, mpirun_args, timeout=None, out=print):
    """Runs every point; returns the indices of the points that failed. Each point's output goes to
    <point>/train.log and its exit status to <point>/exit_code."""
    capped = [index for index, values, _ in points if int(dict(values).get(LAUNCH_LINK, 0)) > 0]
    if capped:
        which, them = ((f"point {capped[0]} caps", "it") if len(capped) == 1 else
                       (f"points {', '.join(map(str, capped))} cap", "them"))
        raise InputError(f"{which} the link (launch.link_mbit): run {them} with run --cluster (the test cluster of "
                         "tools/cluster.sh, as root)")
    failed = []
    for n, (index, values, deck) in enumerate(points, 1):
        point_dir = os.path.dirname(deck)
        _clear(point_dir, deck)
        _record_launch(point_dir, np, cluster=False)
        ranks = point_ranks(values, np, cluster=False)
        # A launch.nodes point on one machine: nodes of `np` emulated ranks each.
        emulate = [f"--topology.ranks_per_node={np}"] if int(dict(values).get(LAUNCH_NODES, 0)) else []
        cmd = [mpirun, *launcher_args(mpirun, ranks, mpirun_args), "-np", str(ranks), *mpirun_args,
               train, "--config", deck, *emulate]
        label = " ".join(f"{k}={v}" for k, v in values)
        status, seconds, result = _run_point(cmd, point_dir, timeout)
        if status != 0:
            failed.append(index)
        out(f"point {index} ({n}/{len(points)}) [{label}] {ranks} rank(s): exit {status} in {seconds:.1f} s; {result}")
    return failed


def _cluster(cluster_sh, *args, check=True):
    out = subprocess.run([cluster_sh, *args], capture_output=True, text=True, check=False)
    if check and out.returncode != 0:
        raise InputError(f"tools/cluster.sh {' '.join(args)} failed (exit {out.returncode}): "
                         f"{(out.stderr or out.stdout).strip()}")
    return out.stdout


def run_cluster(points, train, np, cluster_sh, mpirun_args, timeout=None, out=print):
    """Runs every point on the test cluster (tools/cluster.sh: network namespaces as hosts, root only): a point of
    launch.nodes n (default 2) on the first n hosts, np ranks each, every host's link capped with tc tbf at its
    launch.link_mbit (0 or none: not capped). The cluster is made once, for the most hosts a point needs, and
    removed at the end. Returns the indices of the points that failed."""
    env_name = os.environ.setdefault("HSDP_CLUSTER", "hsdpsweep")
    os.environ.setdefault("HSDP_CLUSTER_NET", "91")
    # A sweep killed outright (SIGKILL) runs no `finally`: cluster.sh's watchdog takes the cluster down after it.
    os.environ["HSDP_CLUSTER_OWNER"] = str(os.getpid())
    # The lock first: even `cluster.sh check` makes and removes namespaces named after the cluster.
    lock, why_not = _hold_cluster(env_name)
    try:
        check = subprocess.run([cluster_sh, "check"], capture_output=True, text=True, check=False)
        if check.returncode != 0:
            raise InputError(f"run --cluster needs the test cluster of tools/cluster.sh: {check.stdout.strip()}")
        if lock is None:
            raise InputError(f"run --cluster: {why_not}")
        return _run_on_cluster(points, train, np, cluster_sh, mpirun_args, timeout, out, env_name)
    finally:
        if lock is not None:
            lock.close()


def _run_on_cluster(points, train, np, cluster_sh, mpirun_args, timeout, out, env_name):
    hosts_needed = max(int(dict(values).get(LAUNCH_NODES, 2)) for _, values, _ in points)
    failed = []
    try:
        _cluster(cluster_sh, "down", check=False)
        _cluster(cluster_sh, "up", str(hosts_needed))
        hosts = _cluster(cluster_sh, "hosts").split()
        out(f"hsdp-sweep: test cluster '{env_name}' up: {' '.join(hosts)}")
        for n, (index, values, deck) in enumerate(points, 1):
            point_dir = os.path.dirname(deck)
            _clear(point_dir, deck)
            _record_launch(point_dir, np, cluster=True)
            nodes = int(dict(values).get(LAUNCH_NODES, 2))
            rate = int(dict(values).get(LAUNCH_LINK, 0))
            for host in hosts:
                _cluster(cluster_sh, "rate", host, str(rate) if rate > 0 else "off")
            ranks = point_ranks(values, np, cluster=True)
            root = ["--allow-run-as-root"] if os.geteuid() == 0 and "--allow-run-as-root" not in mpirun_args else []
            cmd = [cluster_sh, "mpirun", *root, "--oversubscribe", "--map-by", f"ppr:{np}:node", "-np", str(ranks),
                   *mpirun_args, train, "--config", deck]
            label = " ".join(f"{k}={v}" for k, v in values)
            status, seconds, result = _run_point(cmd, point_dir, timeout)
            if status != 0:
                failed.append(index)
            link = f"{rate} Mbit/s" if rate > 0 else "not capped"
            out(f"point {index} ({n}/{len(points)}) [{label}] {nodes} host(s) x {np} rank(s), links {link}: "
                f"exit {status} in {seconds:.1f} s; {result}")
    finally:
        _cluster(cluster_sh, "down", check=False)
    return failed


def _hold_cluster(name):
    """Takes the cluster for this sweep: an exclusive lock on /run/hsdp-cluster/<name>.sweep.lock, held until the
    sweep ends (the kernel drops it when the process dies, however it dies). tools/cluster.sh up first removes a
    cluster of the same name and kills what runs in it, so a second sweep must not start while one holds it; a
    cluster left by a sweep that was killed holds no lock and is replaced. Returns (the open lock file, None), or
    (None, why) where the file cannot be made (not root: cluster.sh check then says so)."""
    path = f"/run/hsdp-cluster/{name}.sweep.lock"
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        lock = open(path, "a", encoding="utf-8")  # held until the sweep ends
    except OSError as e:
        return None, f"cannot make the lock {path}: {e.strerror}"
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise InputError(f"the test cluster '{name}' is in use by another hsdp-sweep run --cluster ({path} is "
                         "locked): wait for it, or give this one its own with HSDP_CLUSTER=<name, at most 10 "
                         "characters> and HSDP_CLUSTER_NET=<N, its first host's address being 192.0.2.N, "
                         "clear of the other cluster's addresses>") from None
    return lock, None


def _final_loss(point_dir):
    try:
        with open(os.path.join(point_dir, "summary.json"), encoding="utf-8") as f:
            summary = json.load(f)
        return f"final loss {summary['final_loss']:.4f}, {summary['tokens_per_s']:.0f} tokens/s"
    except (OSError, ValueError, KeyError, TypeError):
        return "no summary.json"
