#!/usr/bin/env bash
# A test cluster on one machine: N hosts, each a network + UTS + mount namespace with its own hostname, joined
# through a bridge, so that MPI and Slurm see separate nodes that talk over real TCP links. For the `cluster` tests,
# and for anyone who wants to try multi-node hsdp without a cluster. Needs root (and namespaces; gVisor and most
# kernels have them).
#
#   tools/cluster.sh up [N]               make N hosts (default 2): <name>-n1 .. <name>-nN, 192.0.2.11 ..
#   tools/cluster.sh down                 kill every process left in the hosts, remove everything (idempotent)
#   tools/cluster.sh exec HOST CMD...     run CMD on HOST (working directory kept: the file system is shared)
#   tools/cluster.sh rsh HOST CMD...      the same, for mpirun's rsh agent: CMD is one shell string
#   tools/cluster.sh hosts                the host names, one a line
#   tools/cluster.sh hostfile [SLOTS]     an Open MPI hostfile, SLOTS (default 2) per host
#   tools/cluster.sh link HOST up|down    cut or restore HOST's link to the bridge
#   tools/cluster.sh rate HOST MBIT|off   cap HOST's link both ways with tc tbf (netem is not in every kernel)
#   tools/cluster.sh pids HOST            the processes running on HOST (but the one holding its namespaces)
#   tools/cluster.sh mpirun ARGS...       mpirun on the first host, across all of them (the rsh agent is this
#                                         script; a host silent for HSDP_LOST_HOST_S, default 30, ends the job: exit 4;
#                                         one silent for less than two thirds of it never does)
#   tools/cluster.sh check                exit 0 if a cluster can be made here, else print why and exit 77
#
# Environment: HSDP_CLUSTER (default hsdp) names the cluster: namespaces, bridge and veths start with it, so two
# differently named clusters can coexist (they then need HSDP_CLUSTER_NET, the first address's last octet, default
# 11, apart). State lives in /run/hsdp-cluster/<name>. HSDP_CLUSTER_OWNER=PID at `up`: a watchdog takes the cluster
# down once that process has gone, also when it was killed without running its own teardown (SIGKILL, a test's
# timeout).
#
# What it is: each host has its own network stack (its own loopback, address, routes: MPI's TCP transports and
# Slurm's daemons really go over the veth and the bridge), its own hostname (what the mesh groups ranks by, what
# Open MPI and Slurm call the node) and its own /etc/hosts listing the cluster. What it is not: the hosts share the
# file system (like a cluster's shared home; /tmp too, so per-node temporary directories must be told apart, e.g.
# Slurm's TmpFS per node), the PID space, /dev/shm and the CPUs; memory bandwidth between them is shared memory's,
# so only a capped link (`rate`) makes the network the bottleneck.
# Traffic: only 192.0.2.0/24 (TEST-NET-1) inside the namespaces; the bridge has no address, nothing is routed
# to or from the machine's own network.
set -euo pipefail

cluster=${HSDP_CLUSTER:-hsdp}
first_octet=${HSDP_CLUSTER_NET:-11}
state=/run/hsdp-cluster/$cluster
bridge=${cluster}-br
script=$(readlink -f "${BASH_SOURCE[0]}")

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

usage() { sed -n '2,/^set -euo/p' "$script" | sed '$d' | sed 's/^# \{0,1\}//'; }

host_count() { [[ -f $state/hosts.list ]] && wc -l <"$state/hosts.list" || echo 0; }

host_index() {
  local i=0 h
  [[ -f $state/hosts.list ]] || die "no cluster '$cluster' is up (tools/cluster.sh up)"
  while read -r h _; do
    i=$((i + 1))
    [[ $h == "$1" ]] && { echo "$i"; return 0; }
  done <"$state/hosts.list"
  die "no host '$1' in cluster '$cluster' (hosts: $(cut -d' ' -f1 "$state/hosts.list" | tr '\n' ' '))"
}

enter() {
  local host=$1
  shift
  host_index "$host" >/dev/null
  local holder
  holder=$(cat "$state/$host.pid")
  exec nsenter --target "$holder" --net --uts --mount --wd="$PWD" -- "$@"
}

cmd_check() {
  local why=
  if [[ $(id -u) -ne 0 ]]; then
    why="needs root (network namespaces)"
  elif ! command -v ip >/dev/null || ! command -v nsenter >/dev/null || ! command -v unshare >/dev/null; then
    why="needs ip (iproute2), nsenter and unshare (util-linux)"
  elif ! ip netns add "${cluster}-probe" 2>/dev/null; then
    why="cannot create a network namespace here"
  else
    ip netns del "${cluster}-probe"
    if ! ip link add "${cluster}-pbr" type bridge 2>/dev/null; then
      why="cannot create a bridge here"
    else
      ip link del "${cluster}-pbr"
    fi
  fi
  if [[ -n $why ]]; then
    echo "SKIP: a test cluster cannot be made here: $why"
    exit 77
  fi
  echo "cluster.sh: namespaces, veth and bridges work here"
}

cmd_down() {
  local h pid pids watchdog
  # The owner's watchdog (not when it is the one running this: it execs `down`, keeping its PID).
  watchdog=$(cat "$state/watchdog.pid" 2>/dev/null || true)
  if [[ -n $watchdog && $watchdog != "$$" ]]; then kill "$watchdog" 2>/dev/null || true; fi
  if [[ -f $state/hosts.list ]]; then
    # Every process still inside a host's network namespace: TERM, then KILL after 2 s.
    for sig in TERM KILL; do
      pids=
      while read -r h _; do
        [[ -e /run/netns/$h ]] && pids+=" $(ip netns pids "$h" 2>/dev/null | tr '\n' ' ')"
      done <"$state/hosts.list"
      [[ -z ${pids// /} ]] && break
      # shellcheck disable=SC2086 # a list of PIDs
      kill -s "$sig" $pids 2>/dev/null || true
      [[ $sig == TERM ]] && for _ in $(seq 20); do
        for pid in $pids; do kill -0 "$pid" 2>/dev/null && break; pid=; done
        [[ -z ${pid:-} ]] && break
        sleep 0.1
      done
    done
    while read -r h _; do
      ip netns del "$h" 2>/dev/null || true
    done <"$state/hosts.list"
  fi
  # Leftovers of a cluster whose list was lost, and of an interrupted `check`: namespaces and links by name.
  for h in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^${cluster}-(n[0-9]+|probe)$" || true); do
    ip netns pids "$h" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
    ip netns del "$h" 2>/dev/null || true
  done
  for l in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^${cluster}-(br|pbr|v[0-9]+)$" || true); do
    ip link del "$l" 2>/dev/null || true
  done
  rm -rf "$state"
  rmdir /run/hsdp-cluster 2>/dev/null || true # the last cluster's (a sweep's lock file keeps it)
  return 0
}

cmd_up() {
  local n=${1:-2} i h addr
  [[ $n =~ ^[1-9][0-9]?$ ]] || die "up: the number of hosts must be 1 to 99, not '$n'"
  ((first_octet + n - 1 <= 254)) || die "up: HSDP_CLUSTER_NET=$first_octet leaves no room for $n hosts"
  ((${#cluster} <= 10)) || die "HSDP_CLUSTER '$cluster' is longer than 10 characters (interface names are short)"
  if [[ -n ${HSDP_CLUSTER_OWNER:-} ]] &&
    ! { [[ $HSDP_CLUSTER_OWNER =~ ^[0-9]+$ ]] && kill -0 "$HSDP_CLUSTER_OWNER" 2>/dev/null; }; then
    die "HSDP_CLUSTER_OWNER='$HSDP_CLUSTER_OWNER' is not a running process"
  fi
  (cmd_check) >/dev/null || { cmd_check; }
  cmd_down
  # A failure or a signal half-way (a host that does not come up, Ctrl-C) takes down what was made.
  trap 'cmd_down' EXIT
  trap 'exit 130' INT TERM
  mkdir -p "$state"
  cp /etc/hosts "$state/etc-hosts"
  : >"$state/hosts.list"
  for ((i = 1; i <= n; i++)); do
    h=${cluster}-n$i
    addr=192.0.2.$((first_octet + i - 1))
    echo "$h $addr" >>"$state/hosts.list"
    echo "$addr $h" >>"$state/etc-hosts"
  done
  # IPv4 in 192.0.2.0/24 only: no IPv6 link-local address on the links either (addrgenmode none, set before up).
  ip link add "$bridge" type bridge
  ip link set "$bridge" addrgenmode none
  ip link set "$bridge" up
  while read -r h addr; do
    i=$(host_index "$h")
    ip netns add "$h"
    ip link add "${cluster}-v$i" type veth peer name eth0 netns "$h"
    ip link set "${cluster}-v$i" addrgenmode none
    ip -n "$h" link set eth0 addrgenmode none
    ip link set "${cluster}-v$i" master "$bridge" up
    ip -n "$h" link set lo up
    ip -n "$h" addr add "$addr/24" dev eth0
    ip -n "$h" link set eth0 up
    # The host's UTS and mount namespaces are held by one sleeping process (entered through /proc/PID/ns, which
    # every host sees, unlike bind-mounted namespace files, which a mount namespace made earlier would not).
    setsid nsenter --net="/run/netns/$h" unshare --uts --mount --propagation private \
      sh -c "hostname '$h' && mount --bind '$state/etc-hosts' /etc/hosts && echo \$\$ >'$state/$h.pid' &&
             exec sleep infinity" \
      </dev/null >/dev/null 2>&1 &
    for _ in $(seq 200); do [[ -s $state/$h.pid ]] && break; sleep 0.05; done
    [[ -s $state/$h.pid ]] || die "up: the namespaces of $h could not be made"
  done <"$state/hosts.list"
  wait_reachable
  if [[ -n ${HSDP_CLUSTER_OWNER:-} ]]; then
    # shellcheck disable=SC2016 # the watchdog's own script: $1 and $2 are its arguments
    setsid bash -c 'while kill -0 "$1" 2>/dev/null; do sleep 1; done; exec "$2" down' watchdog \
      "$HSDP_CLUSTER_OWNER" "$script" </dev/null >/dev/null 2>&1 &
    echo $! >"$state/watchdog.pid"
  fi
  trap - EXIT INT TERM
  echo "cluster.sh: $cluster up: $(tr '\n' ' ' <"$state/hosts.list")(bridge $bridge)"
}

# Waits (at most 10 s) until every host reaches every other: a TCP connection to port 9 of each address is refused
# at once when the address is reachable (nobody listens there), and fails otherwise (no ARP answer yet after a link
# came up: a daemon started then would fail to call back).
wait_reachable() {
  local a b addr ok out
  for _ in $(seq 100); do
    ok=1
    while read -r a _; do
      while read -r b addr; do
        [[ $a == "$b" ]] && continue
        out=$(ip netns exec "$a" timeout 1 bash -c "exec 3<>/dev/tcp/$addr/9" 2>&1 || true)
        [[ $out == *"Connection refused"* ]] || ok=0
      done <"$state/hosts.list"
    done <"$state/hosts.list"
    ((ok)) && return 0
    sleep 0.1
  done
  die "the hosts do not reach each other after 10 s"
}

cmd_link() {
  local host=$1 what=${2:-}
  local dev
  dev=${cluster}-v$(host_index "$host")
  case $what in
  up)
    ip link set "$dev" up
    wait_reachable
    ;;
  down) ip link set "$dev" down ;;
  *) die "link: say up or down, not '$what'" ;;
  esac
}

# tbf on both ends of the veth: the bridge side shapes what HOST receives, the namespace side what it sends.
cmd_rate() {
  local host=$1 rate=${2:-} i burst
  i=$(host_index "$host")
  tc qdisc del dev "${cluster}-v$i" root 2>/dev/null || true
  ip netns exec "$host" tc qdisc del dev eth0 root 2>/dev/null || true
  [[ $rate == off ]] && return 0
  [[ $rate =~ ^[0-9]+$ && $rate -gt 0 ]] || die "rate: a whole number of Mbit/s or 'off', not '$rate'"
  # A bucket of at least 1 ms of traffic and never under 32 KiB (a 64 KiB TSO segment must fit in practice).
  burst=$((rate * 1000000 / 8 / 1000))
  ((burst < 32768)) && burst=32768
  tc qdisc add dev "${cluster}-v$i" root tbf rate "${rate}mbit" burst "$burst" latency 50ms
  ip netns exec "$host" tc qdisc add dev eth0 root tbf rate "${rate}mbit" burst "$burst" latency 50ms
}

cmd_hostfile() {
  local slots=${1:-2}
  [[ -f $state/hosts.list ]] || die "no cluster '$cluster' is up (tools/cluster.sh up)"
  awk -v s="$slots" '{print $1 " slots=" s}' "$state/hosts.list"
}

# mpirun on the first host. Open MPI's daemons find a lost host only by TCP keepalive on their own connections, and
# only while those are idle: once mpirun has sent a lost host anything (the kill after an MPI_Abort), it waits for
# TCP's retransmission limit (about 15 minutes). So the keepalive must fire first: HSDP_LOST_HOST_S (default 30) is
# how long a host may be silent, and must stay below hsdp-train's comm.timeout_s. Open MPI then ends the job (its
# exit code 205 and a message); this wrapper says which host was lost in one line and exits 4, hsdp's code for a
# communication failure. A daemon that never calls back fails the launch after 60 s (orte_startup_timeout) instead
# of hanging it.
cmd_mpirun() {
  local first hostfile lost_s=${HSDP_LOST_HOST_S:-30} status=0 lost
  [[ -f $state/hosts.list ]] || die "no cluster '$cluster' is up (tools/cluster.sh up)"
  [[ $lost_s =~ ^[0-9]+$ && $lost_s -ge 3 ]] || die "HSDP_LOST_HOST_S must be a whole number of seconds >= 3"
  first=$(head -n 1 "$state/hosts.list" | cut -d' ' -f1)
  hostfile=$state/hostfile
  [[ -f $hostfile ]] || cmd_hostfile >"$hostfile"
  log=$(mktemp "${TMPDIR:-/tmp}/hsdp-cluster-mpirun.XXXXXX") # global: the EXIT trap removes it
  trap 'rm -f "$log"' EXIT                                      # also when a timeout's SIGTERM ends this script
  trap 'exit 143' TERM
  # The rsh agent is this script; orted is found on the PATH this shell has (shared file system).
  HSDP_CLUSTER=$cluster HSDP_CLUSTER_NET=$first_octet OMPI_MCA_plm_rsh_agent="$script rsh" \
    OMPI_MCA_plm_rsh_no_tree_spawn=1 OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0 \
    OMPI_MCA_oob_tcp_keepalive_time=$((lost_s / 3)) OMPI_MCA_oob_tcp_keepalive_intvl=$((lost_s / 6 > 0 ? lost_s / 6 : 1)) \
    OMPI_MCA_oob_tcp_keepalive_probes=4 OMPI_MCA_orte_startup_timeout=60 \
    nsenter --target "$(cat "$state/$first.pid")" --net --uts --mount --wd="$PWD" -- \
    mpirun --hostfile "$hostfile" "$@" 2> >(tee "$log" >&2) || status=$?
  wait # for tee
  if ((status != 0)) && grep -q "lost communication with a remote daemon" "$log"; then
    lost=$(awk '/Remote daemon:/ {print $NF}' "$log" | sort -u | tr '\n' ' ')
    echo "cluster.sh: host ${lost% } stopped answering (Open MPI lost its daemon there: a cut link or a dead host); the job ended (exit 4)" >&2
    status=4
  fi
  rm -f "$log"
  return "$status"
}

cmd=${1:-}
[[ -n $cmd ]] || { usage; exit 2; }
shift
case $cmd in
-h | --help | help) usage ;;
check) cmd_check ;;
up) cmd_up "$@" ;;
down) cmd_down ;;
hosts) [[ -f $state/hosts.list ]] && cut -d' ' -f1 "$state/hosts.list" ;;
hostfile) cmd_hostfile "$@" ;;
exec)
  (($# >= 2)) || die "exec: HOST CMD..."
  enter "$@"
  ;;
rsh)
  # Open MPI calls the agent as `AGENT HOST COMMAND-STRING...` (ssh's form); the string is shell syntax.
  (($# >= 2)) || die "rsh: HOST CMD..."
  host=$1
  shift
  enter "$host" /bin/sh -c "$*"
  ;;
link) cmd_link "$@" ;;
rate) cmd_rate "$@" ;;
pids)
  # Every process on the host but the one that holds its namespaces.
  host_index "${1:-}" >/dev/null
  ip netns pids "$1" | grep -vx "$(cat "$state/$1.pid")" || true
  ;;
mpirun) cmd_mpirun "$@" ;;
*) die "unknown command '$cmd' (tools/cluster.sh --help)" ;;
esac
