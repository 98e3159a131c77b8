#!/usr/bin/env bash
# The system tools the test suite drives for real: nsys (Nsight Systems CLI, from Debian's non-free
# component), Chromium (HTML report rendering) and procps (pgrep, to check no browser is left behind).
# Installs only what is missing, so a machine that has them pays nothing. Called by `make test`.
set -euo pipefail

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

need=()
command -v nsys >/dev/null 2>&1 || need+=(nsight-systems)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v pgrep >/dev/null 2>&1 || need+=(procps)
[ ${#need[@]} -eq 0 ] && exit 0

if ! command -v apt-get >/dev/null 2>&1; then
    echo "tests need ${need[*]}: install them (no apt-get here to do it)" >&2
    exit 1
fi
echo "installing what the tests need: ${need[*]}" >&2
# nsight-systems lives in Debian's non-free component and its CUDA driver stub needs contrib.
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    as_root sed -i -E 's/^Components: main$/Components: main contrib non-free/' \
        /etc/apt/sources.list.d/debian.sources
elif [ -f /etc/apt/sources.list ]; then
    as_root sed -i -E '/^deb /{/contrib/!s/ main( |$)/ main contrib non-free\1/}' /etc/apt/sources.list
fi
as_root timeout 600 apt-get update -q
as_root env DEBIAN_FRONTEND=noninteractive timeout 1200 \
    apt-get install -y -q --no-install-recommends "${need[@]}"
