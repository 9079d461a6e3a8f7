#!/usr/bin/env bash
# Set up everything mrc-testbed needs on Debian 12 / Ubuntu 24.04 (as root),
# then optionally run something:
#   bash scripts/setup.sh          set up only
#   bash scripts/setup.sh run      set up, then run the main job
#   bash scripts/setup.sh test     set up, then run the test suite
#   bash scripts/setup.sh bench    set up, then run the benchmarks
# Idempotent, and quick when everything is already in place.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
venv="$repo/.venv"
apt_packages=(mininet openvswitch-switch iproute2 nftables ethtool tcpdump
              iputils-ping procps psmisc kmod python3-venv python3-pip
              python3-setuptools python3-wheel python3-yaml python3-openvswitch
              util-linux clang llvm libbpf-dev linux-libc-dev tshark gcc python3-dev)
# python3-setuptools: distutils for Mininet on Python >= 3.12 (see the Mininet check below),
# and with python3-wheel the backend that installs this checkout; python3-yaml and
# python3-openvswitch: PyYAML and ovs, the two dependencies constraints.txt leaves to the
# distribution (scripts/constraints.py says why).
# clang, llvm, libbpf-dev, linux-libc-dev: the switch-port eBPF program
# (testbed/fabric/switch_port.c) and its headers; util-linux: nsenter, mount;
# gcc, python3-dev: the compiled endpoint core (testbed/native_build.py).

say() { printf '[setup] %s\n' "$*" >&2; }

if [ "$(id -u)" -ne 0 ]; then
  say "run as root: the testbed creates namespaces, veths and OVS bridges"
  exit 2
fi

missing=()
for pkg in "${apt_packages[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
    || missing+=("$pkg")
done
updated=
apt_update() { [ -n "$updated" ] || { apt-get update -q >/dev/null; updated=1; }; }

# bpftool loads, pins and reads the switch-port program. Debian 12 packages it on its
# own (bpftool); Ubuntu 24.04 puts it in linux-tools-<kernel> under /usr/lib/linux-tools/,
# and its /usr/sbin/bpftool (linux-tools-common) is a wrapper that only finds the running
# kernel's copy. switch_port.bpftool() takes any copy that runs, so the generic kernel's
# tools do on any kernel.
working_bpftool() {
  local tool
  for tool in "$(command -v bpftool)" /usr/lib/linux-tools/*/bpftool; do
    [ -x "$tool" ] && "$tool" version >/dev/null 2>&1 && return 0
  done
  return 1
}
if ! working_bpftool; then
  apt_update
  if apt-cache show bpftool >/dev/null 2>&1; then
    missing+=(bpftool)
  else
    missing+=(linux-tools-common linux-tools-generic)
  fi
fi

if [ ${#missing[@]} -gt 0 ]; then
  say "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  # wireshark-common asks whether non-root users may capture; the testbed captures as root.
  echo "wireshark-common wireshark-common/install-setuid boolean false" | debconf-set-selections
  apt_update
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# Debian's mininet imports only under the system python, so the venv sees
# the system site-packages and takes everything else from PyPI at the exact versions
# of constraints.txt (transitive dependencies included; scripts/constraints.py writes it).
if [ ! -x "$venv/bin/python" ]; then
  say "creating $venv"
  /usr/bin/python3 -m venv --system-site-packages "$venv"
fi
pip_install() {
  "$venv/bin/pip" install -q --disable-pip-version-check "$@" 2>&1 \
    | { grep -v "is ignored: it is neither a file nor a directory" || true; }
  return "${PIPESTATUS[0]}"
}
stamp="$venv/.requirements.sha256"
want=$(cat "$repo/requirements.txt" "$repo/requirements-test.txt" \
  "$repo/requirements-build.txt" "$repo/constraints.txt" "$repo/pyproject.toml" \
  | sha256sum | cut -d' ' -f1)
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  say "installing Python dependencies"
  pip_install -c "$repo/constraints.txt" -r "$repo/requirements.txt" \
    -r "$repo/requirements-test.txt" -r "$repo/requirements-build.txt"
  # Editable from pyproject.toml (PEP 660: setuptools >= 64), built by the distribution's
  # setuptools and wheel (Debian 12: 66.1, Ubuntu 24.04: 68.1) rather than whatever
  # setuptools PyPI has on the day: no build isolation.
  pip_install --no-deps --no-build-isolation -e "$repo"
  echo "$want" > "$stamp"
fi

# Prove that the venv's interpreter imports the distribution's Mininet, every time (a
# fraction of a second). Mininet 2.3.0 (Debian 12, Ubuntu 24.04) imports distutils, which
# Python 3.12 (Ubuntu 24.04) no longer ships. setuptools provides it: its
# distutils-precedence.pth, installed by python3-setuptools into /usr/lib/python3/dist-packages,
# which a --system-site-packages venv reads, puts setuptools' copy of distutils behind
# `import distutils`. Should that not work, setuptools in the venv itself (the same .pth, in
# the venv's site-packages) is tried once, at the version below; then the check fails and
# says why.
venv_setuptools=setuptools==84.2.1
mininet_imports() { mininet_err=$("$venv/bin/python" -c 'import mininet.net' 2>&1); }
if ! mininet_imports; then
  if [[ $mininet_err == *distutils* ]] && [ "${SETUPTOOLS_USE_DISTUTILS:-local}" = local ]
  then
    say "Mininet cannot import distutils; installing $venv_setuptools into $venv"
    pip_install "$venv_setuptools" || true
  fi
  if ! mininet_imports; then
    say "$venv/bin/python ($("$venv/bin/python" -V 2>&1)) cannot import Mininet:"
    printf '%s\n' "$mininet_err" | tail -n 3 >&2
    case $mininet_err in
      *distutils*)
        if [ "${SETUPTOOLS_USE_DISTUTILS:-local}" != local ]; then
          say "SETUPTOOLS_USE_DISTUTILS=$SETUPTOOLS_USE_DISTUTILS turns setuptools'" \
              "distutils off; unset it (Python >= 3.12 has no distutils of its own)"
        else
          say "Mininet imports distutils, which Python >= 3.12 lacks, and neither" \
              "python3-setuptools nor $venv_setuptools in $venv provided it"
        fi ;;
      *"No module named 'mininet'"*)
        say "the mininet package is not installed, or $venv does not see the system" \
            "site-packages (remove $venv and run this again)" ;;
    esac
    exit 1
  fi
fi

# No systemd on minimal machines and containers: start OVS ourselves, but
# only when its daemons are not running. Daemons that are alive but slow to
# answer (a busy machine) are waited for: starting them again would pull the
# datapath from under a fabric that is up.
ovs_alive() {
  local daemon pid
  for daemon in ovsdb-server ovs-vswitchd; do
    pid=$(cat "/var/run/openvswitch/$daemon.pid" 2>/dev/null) || return 1
    kill -0 "$pid" 2>/dev/null || return 1
  done
}
if ! ovs_alive; then
  say "starting Open vSwitch"
  ovs_log=$(mktemp)
  ovs_rc=0
  /usr/share/openvswitch/scripts/ovs-ctl start --system-id=random >"$ovs_log" 2>&1 \
    || ovs_rc=$?
  if [ "$ovs_rc" -ne 0 ]; then
    say "ovs-ctl start failed (exit $ovs_rc); its output:"; cat "$ovs_log" >&2
    rm -f "$ovs_log"; exit 1
  fi
  # A daemon can exit right after ovs-ctl saw it detach: check both pidfiles again.
  if ! ovs_alive; then
    say "ovs-ctl start succeeded, but ovsdb-server or ovs-vswitchd is not running; its output:"
    cat "$ovs_log" >&2; rm -f "$ovs_log"
    say "see /var/log/openvswitch/ovsdb-server.log and ovs-vswitchd.log"
    exit 1
  fi
  rm -f "$ovs_log"
fi
if ! ovs-vsctl --timeout=60 show >/dev/null; then
  say "Open vSwitch does not answer (ovs-vsctl show timed out after 60 s)"; exit 1
fi

# The switch-port eBPF object, built once per source and wire format (build/bpf/, cached
# by hash). A machine that cannot build it still runs everything else: doctor says what
# is missing.
(cd "$repo" && "$venv/bin/python" -m testbed.fabric.switch_port build >/dev/null) \
  || say "warning: the switch-port eBPF program did not build (see mrc-testbed doctor)"
# The hosts' SRv6 decapsulation where the kernel has no seg6local (testbed/fabric/host_decap.c);
# without it, and without seg6local, no fabric can be built.
(cd "$repo" && "$venv/bin/python" -m testbed.fabric.host_decap >/dev/null) \
  || say "warning: the host decapsulation eBPF program did not build (see mrc-testbed doctor)"
# The run-queue wait program the health gate reads (testbed/workload/run_queue_waits.c);
# without it the gate reads the kernel's sums of waits, which count harmless wake-ups too.
(cd "$repo" && "$venv/bin/python" -m testbed.workload.run_queue_waits >/dev/null) \
  || say "warning: the run-queue wait eBPF program did not build; the health gate reads sums"

# The compiled endpoint core (docs/endpoint-core.md), built once per state of testbed/nic
# (build/native/, about a minute). Without it the Python sources run, at half the speed.
(cd "$repo" && "$venv/bin/python" -m testbed.native_build >/dev/null) \
  || say "warning: the compiled endpoint core did not build; the endpoints run as Python (see mrc-testbed doctor)"

# The MRC dissector, linked into Wireshark's global Lua plugins folder so that every
# user's Wireshark and tshark on this machine dissect MRC (docs/wire-format.md).
lua_plugins=$(tshark -G folders 2>/dev/null | sed -n 's/^Global Lua Plugins:[[:space:]]*//p')
if [ -n "$lua_plugins" ]; then
  mkdir -p "$lua_plugins" && ln -sfn "$repo/wireshark/mrc.lua" "$lua_plugins/mrc.lua"
else
  say "warning: no Wireshark Lua plugins folder found; use tshark -X lua_script:wireshark/mrc.lua"
fi

cd "$repo"
case "${1:-}" in
  "") ;;
  run)   shift; exec "$venv/bin/mrc-testbed" run scenarios/link_failure_allreduce.yaml "$@" ;;
  # The unit tests first (pytest.ini's testpaths): a broken one is reported
  # in the first minute, not after the fabrics.
  test)  shift; exec "$venv/bin/python" -m pytest tests/unit tests/integration "$@" ;;
  bench) shift; exec "$venv/bin/mrc-testbed" bench "$@" ;;
  *) say "unknown action '$1' (run, test or bench)"; exit 2 ;;
esac
