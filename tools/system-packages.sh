#!/usr/bin/env bash
# Debian packages the test suite exercises for real: nvme-cli (the NVMe driver calls
# the real binary over a simulated controller, built with gcc against libnvme-dev's
# headers), libvirt's schemas plus xmllint (domain XML validation) and a
# PostgreSQL server (the tests start a throw-away cluster of their own).
# Needs root (CI runs as root); skipped when everything is already there.
set -euo pipefail
pkgs=(nvme-cli libnvme-dev gcc libc6-dev libvirt-clients libxml2-utils postgresql rabbitmq-server prometheus systemd)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing Debian packages: ${missing[*]} (run as root: apt-get install ${missing[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
