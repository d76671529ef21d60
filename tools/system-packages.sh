#!/usr/bin/env bash
# Debian packages the test suite exercises for real: nvme-cli (the NVMe driver calls
# the real binary over a simulated controller, built with gcc against libnvme-dev's
# headers), libvirt's schemas plus xmllint (domain XML validation), libvirt-dev and
# pkg-config (pip builds libvirt-python, the test extra, against them), a
# PostgreSQL server and RabbitMQ (the tests start throw-away ones of their own),
# and iproute2 (`ip netns`: multi-host agents in network namespaces).
# mariadb-server (its client comes with it): upstream Cyborg's database in the
# switch-from-Cyborg test (tests/fixtures/mariadb_fixture.py starts a server of its own).
# galera-4, mariadb-backup, rsync, socat and haproxy: the three-node Galera cluster
# behind HAProxy of tests/multihost/galera.py (state transfers by mariabackup and
# rsync, socat streaming them and serving the clustercheck).
# python3-venv and python3-dev: Debian's python3 makes no venv without the first, and
# pip builds uwsgi (the Keystone side venv) against the headers of the second.
# libmariadb-dev: pip builds mysqlclient (the mysql extra's driver, the test extra's
# too) against it, with gcc, pkg-config and python3-dev.
# `tools/system-packages.sh mysql` installs only what that build needs (what
# `tools/bootstrap.sh mysql` runs on an API or conductor host on MariaDB).
# Needs root (CI runs as root); skipped when everything is already there.
set -euo pipefail
pkgs=(nvme-cli libnvme-dev gcc libc6-dev libvirt-clients libvirt-dev pkg-config libxml2-utils postgresql rabbitmq-server prometheus systemd iproute2 mariadb-server galera-4 mariadb-backup rsync socat haproxy python3-venv python3-dev libmariadb-dev)
mysql_pkgs=(libmariadb-dev gcc libc6-dev pkg-config python3-dev)
[ "${1:-}" = mysql ] && pkgs=("${mysql_pkgs[@]}")
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
