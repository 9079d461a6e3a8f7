#!/usr/bin/env bash
# Build UEC's htsim_uec, the reference simulator `mrc-testbed crosscheck` runs beside
# the emulation (docs/crosscheck.md), from its source, and print the binary's path:
#   bash scripts/htsim.sh SOURCE      SOURCE: uet-htsim's tarball or its unpacked tree
# It builds into build/htsim/<source's name>/ and only the htsim_uec target (~2.5 min
# on 2 cores); a second call with the same source prints the path at once. cmake and
# g++ are installed when missing (as root). Nothing of htsim enters the repository.
set -euo pipefail

say() { printf '[htsim] %s\n' "$*" >&2; }

source=${1:-}
if [ -z "$source" ] || [ ! -e "$source" ]; then
  say "usage: bash scripts/htsim.sh SOURCE (uet-htsim's tarball or tree; got '${source}')"
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
source=$(cd "$(dirname "$source")" && pwd)/$(basename "$source")
name=$(basename "$source"); name=${name%.tar.gz}
dest="$repo/build/htsim/$name"
binary="$dest/cmake/datacenter/htsim_uec"
if [ -x "$binary" ]; then
  echo "$binary"
  exit 0
fi

missing=()
command -v cmake >/dev/null || missing+=(cmake)
command -v g++ >/dev/null || missing+=(g++)
if [ ${#missing[@]} -gt 0 ]; then
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null 2>&1 \
    || { apt-get update -q >/dev/null && \
         apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null; }
fi

rm -rf "$dest"
mkdir -p "$dest/src"
if [ -d "$source" ]; then
  tree=$source
else
  tar -C "$dest/src" -xzf "$source"
  tree="$dest/src"
fi
sim=$(find "$tree" -maxdepth 3 -type d -path '*htsim/sim' | head -1)
if [ -z "$sim" ]; then
  say "$source: no htsim/sim directory in it: is it uet-htsim?"
  exit 1
fi
say "building htsim_uec from $source"
cmake -S "$sim" -B "$dest/cmake" -DCMAKE_BUILD_TYPE=Release >"$dest/build.log" 2>&1 \
  && cmake --build "$dest/cmake" --parallel "$(nproc)" --target htsim_uec \
       >>"$dest/build.log" 2>&1 \
  || { tail -20 "$dest/build.log" >&2; say "build failed (log: $dest/build.log)"; exit 1; }
echo "$binary"
