#!/usr/bin/env bash
# Install linectl as systemd services from a wheel (docs/operations.md, "Install"):
#
#   sudo deploy/install.sh dist/linectl-*.whl [--database-url postgresql://…]
#
# Creates the system user `linectl`, the venv /opt/linectl/.venv with the wheel,
# /etc/linectl/linectl.env from deploy/systemd/linectl.env.example with freshly
# generated tokens (an existing env file is kept), installs the units and
# enables linectl.target. Run it again with a newer wheel to upgrade.
#
# For a test or a package build, LINECTL_INSTALL_ROOT=<dir> installs under that
# directory and skips the user, systemctl and the migration.
set -euo pipefail

usage() { echo "usage: $0 linectl-*.whl [--database-url URL] [--python python3]" >&2; exit 2; }
[ $# -ge 1 ] || usage
wheel=$1; shift
database_url=""
python=${PYTHON:-python3}
while [ $# -gt 0 ]; do
  case $1 in
    --database-url) database_url=${2:?}; shift 2 ;;
    --python) python=${2:?}; shift 2 ;;
    *) usage ;;
  esac
done
[ -f "$wheel" ] || { echo "$0: no wheel at $wheel" >&2; exit 2; }

here=$(cd "$(dirname "$0")" && pwd)
root=${LINECTL_INSTALL_ROOT:-}
venv=$root/opt/linectl/.venv
etc=$root/etc/linectl
units=$root/etc/systemd/system
state=$root/var/lib/linectl

if [ -z "$root" ]; then
  [ "$(id -u)" = 0 ] || { echo "$0: run as root (or set LINECTL_INSTALL_ROOT)" >&2; exit 2; }
  id linectl >/dev/null 2>&1 || useradd --system --home-dir /var/lib/linectl --shell /usr/sbin/nologin linectl
fi

echo "== venv $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --upgrade "$wheel"

echo "== $etc/linectl.env"
install -d -m 0755 "$etc"
if [ -e "$etc/linectl.env" ]; then
  echo "kept (it exists)"
else
  token() { "$venv/bin/python" -c 'import secrets; print(secrets.token_urlsafe(24))'; }
  tokens="operator:$(token),admin:$(token),runtime:$(token),platform:$(token)"
  umask 077
  sed -e "s|^LINECTL_TOKENS=.*|LINECTL_TOKENS=$tokens|" \
      ${database_url:+-e "s|^LINECTL_DATABASE_URL=.*|LINECTL_DATABASE_URL=$database_url|"} \
      "$here/systemd/linectl.env.example" > "$etc/linectl.env"
  [ -z "$root" ] && chown root:linectl "$etc/linectl.env" && chmod 0640 "$etc/linectl.env"
  echo "written with generated tokens${database_url:+ and the database URL}"
  [ -n "$database_url" ] || echo "edit LINECTL_DATABASE_URL and LINECTL_PLC in $etc/linectl.env before starting"
fi

echo "== units in $units"
install -d -m 0755 "$units" "$state"
install -m 0644 "$here"/systemd/*.service "$here"/systemd/*.timer "$here"/systemd/linectl.target "$units/"

if [ -z "$root" ]; then
  chown linectl:linectl "$state" && chmod 0700 "$state"
  systemctl daemon-reload
  systemctl enable linectl.target linectl-retention.timer
  echo "installed; start with: systemctl start linectl.target"
else
  echo "installed under $root (no user, no systemctl)"
fi
