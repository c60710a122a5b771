#!/usr/bin/env bash
# A veth pair between two network namespaces, for the AF_XDP and DPDK smoke tests and
# benchmarks. Idempotent; never fails the caller: prints SKIP and exits 0 when it cannot work.
#
#   scripts/netns.sh up [--install]   create (or re-create) the pair; --install first runs
#                                     scripts/prepare-optional.sh
#   scripts/netns.sh down             remove namespaces and veths
#   scripts/netns.sh status           show them
#
# Names and addresses come from the environment (defaults shown):
#   NS_A=dta-a  IF_A=dta-va  ADDR_A=10.77.0.1  MAC_A=02:00:00:77:00:01   (the sender side)
#   NS_B=dta-b  IF_B=dta-vb  ADDR_B=10.77.0.2  MAC_B=02:00:00:77:00:02   (the backend side)
#   PREFIX_LEN=24   NEIGH=1 (static neighbour entries; NEIGH=0 leaves ARP to do its job)
#   OFFLOAD=0   (0 turns off TX checksum offload and GRO on both veths with ethtool, so frames
#                seen by raw backends carry complete UDP checksums; 1 leaves the defaults)
#   THREADED=0  (1 receives on veth A in a NAPI kernel thread (GRO on, threaded NAPI), not in
#                the context of whoever sends to it: a benchmark of namespace B's sender, e.g.
#                the translator, is then not charged for namespace A's receive)
# On success the last lines are KEY=VALUE pairs describing the topology, and the exit code
# is 0; with SKIP the topology is absent. CSUM=complete|partial says whether frames between the
# namespaces carry complete UDP checksums (partial: offload is on, e.g. ethtool is missing).
set -u

NS_A=${NS_A:-dta-a}
NS_B=${NS_B:-dta-b}
IF_A=${IF_A:-dta-va}
IF_B=${IF_B:-dta-vb}
ADDR_A=${ADDR_A:-10.77.0.1}
ADDR_B=${ADDR_B:-10.77.0.2}
MAC_A=${MAC_A:-02:00:00:77:00:01}
MAC_B=${MAC_B:-02:00:00:77:00:02}
PREFIX_LEN=${PREFIX_LEN:-24}
NEIGH=${NEIGH:-1}
OFFLOAD=${OFFLOAD:-0}
THREADED=${THREADED:-0}

skip() {
    echo "SKIP: netns: $*"
    exit 0
}

down() {
    ip netns del "$NS_A" 2>/dev/null || true
    ip netns del "$NS_B" 2>/dev/null || true
    # A veth left in the root namespace by an interrupted run.
    ip link del "$IF_A" 2>/dev/null || true
    ip link del "$IF_B" 2>/dev/null || true
}

up() {
    [ "$(id -u)" = 0 ] || skip "not root"
    command -v ip >/dev/null 2>&1 || skip "no ip(8) (iproute2)"
    down
    ip netns add "$NS_A" || { down; skip "cannot create network namespaces"; }
    ip netns add "$NS_B" || { down; skip "cannot create network namespaces"; }
    ip link add "$IF_A" netns "$NS_A" address "$MAC_A" type veth \
        peer name "$IF_B" netns "$NS_B" address "$MAC_B" || { down; skip "cannot create veth pair"; }
    ip -n "$NS_A" addr add "$ADDR_A/$PREFIX_LEN" dev "$IF_A" &&
        ip -n "$NS_B" addr add "$ADDR_B/$PREFIX_LEN" dev "$IF_B" &&
        ip -n "$NS_A" link set lo up &&
        ip -n "$NS_B" link set lo up &&
        ip -n "$NS_A" link set "$IF_A" up &&
        ip -n "$NS_B" link set "$IF_B" up || { down; skip "cannot configure the veth pair"; }
    if [ "$NEIGH" = 1 ]; then
        ip -n "$NS_A" neigh replace "$ADDR_B" lladdr "$MAC_B" dev "$IF_A" nud permanent
        ip -n "$NS_B" neigh replace "$ADDR_A" lladdr "$MAC_A" dev "$IF_B" nud permanent
    fi
    # With TX checksum offload on (the veth default), a UDP socket's datagrams cross the pair
    # with a partial checksum (pseudo-header only; the receiving stack trusts the skb's
    # CHECKSUM_PARTIAL), so a raw backend that verifies UDP checksums drops every one of them.
    # CSUM says what frames carry: "complete", or "partial" when offload could not be turned off.
    csum=partial
    if [ "$OFFLOAD" = 0 ]; then
        if command -v ethtool >/dev/null 2>&1; then
            ip netns exec "$NS_A" ethtool -K "$IF_A" tx off gro off >/dev/null 2>&1 &&
                ip netns exec "$NS_B" ethtool -K "$IF_B" tx off gro off >/dev/null 2>&1 &&
                csum=complete
        fi
        [ "$csum" = complete ] ||
            echo "netns: cannot turn off TX checksum offload (needs ethtool: scripts/backend-deps.sh installs it); UDP checksums stay partial"
    fi
    if [ "$THREADED" = 1 ]; then
        # veth has NAPI instances only with GRO or an XDP program: GRO stays on for veth A
        # (it merges nothing for sockets without UDP_GRO, and XDP runs before it), so every
        # frame to namespace A is received by A's NAPI kernel thread, not by its sender.
        ip netns exec "$NS_A" sh -c "ethtool -K $IF_A gro on >/dev/null &&
            echo 1 > /sys/class/net/$IF_A/threaded" ||
            echo "netns: cannot enable threaded NAPI on $IF_A"
    fi
    echo "NS_A=$NS_A"
    echo "NS_B=$NS_B"
    echo "IF_A=$IF_A"
    echo "IF_B=$IF_B"
    echo "ADDR_A=$ADDR_A"
    echo "ADDR_B=$ADDR_B"
    echo "MAC_A=$MAC_A"
    echo "MAC_B=$MAC_B"
    echo "CSUM=$csum"
}

case "${1:-up}" in
up)
    if [ "${2:-}" = "--install" ]; then
        bash "$(dirname "$0")/prepare-optional.sh"
    fi
    up
    ;;
down)
    [ "$(id -u)" = 0 ] || skip "not root"
    down
    echo "netns: removed $NS_A $NS_B"
    ;;
status)
    ip netns list 2>/dev/null | grep -E "^($NS_A|$NS_B)( |$)" || echo "netns: absent"
    ip -n "$NS_A" -br addr 2>/dev/null
    ip -n "$NS_B" -br addr 2>/dev/null
    ;;
*)
    echo "usage: $0 up [--install] | down | status"
    ;;
esac
exit 0
