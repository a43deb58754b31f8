#!/usr/bin/env bash
# Install linectl as systemd services from a wheel (docs/operations.md, "Install"):
#
#   sudo deploy/install.sh dist/linectl-*.whl [--database-url postgresql://…]
#
# Creates the system user `linectl`, the venv /opt/linectl/.venv with the wheel,
# /etc/linectl/tokens with freshly generated tokens (mode 0600, owner linectl;
# the gateway re-reads it on a change or `systemctl reload linectl-gateway`),
# /etc/linectl/linectl.env from deploy/systemd/linectl.env.example pointing
# LINECTL_TOKENS_FILE at it (existing files are kept), installs the units and
# enables linectl.target. Run it again with a newer wheel to upgrade.
#
#   deploy/install.sh --config-only [--database-url URL]
#
# writes only /etc/linectl (the user must exist, unless under a scratch root).
# For a test or a package build, LINECTL_INSTALL_ROOT=<dir> installs under that
# directory and skips the user, the ownership, systemctl and the migration.
set -euo pipefail

usage() { echo "usage: $0 {linectl-*.whl | --config-only} [--database-url URL] [--python python3]" >&2; exit 2; }
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
[ "$wheel" = --config-only ] || [ -f "$wheel" ] || { echo "$0: no wheel at $wheel" >&2; exit 2; }

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

write_config() {
  install -d -m 0755 "$etc"
  echo "== $etc/tokens"
  if [ -e "$etc/tokens" ]; then
    echo "kept (it exists)"
  else
    token() { "$python" -c 'import secrets; print(secrets.token_urlsafe(24))'; }
    # Created 0600 before a token is written; then given to the gateway's user, who alone reads it.
    (umask 077 && {
      echo "# role:token or role:name:token, one a line (docs/operations.md, \"Tokens\")"
      for role in operator admin runtime platform; do echo "$role:$(token)"; done
    } > "$etc/tokens")
    chmod 0600 "$etc/tokens"
    [ -n "$root" ] || chown linectl:linectl "$etc/tokens"
    echo "written with generated tokens"
  fi

  echo "== $etc/linectl.env"
  if [ -e "$etc/linectl.env" ]; then
    echo "kept (it exists)"
  else
    (umask 077 && sed -e "s|^LINECTL_TOKENS_FILE=.*|LINECTL_TOKENS_FILE=/etc/linectl/tokens|" \
        ${database_url:+-e "s|^LINECTL_DATABASE_URL=.*|LINECTL_DATABASE_URL=$database_url|"} \
        "$here/systemd/linectl.env.example" > "$etc/linectl.env")
    [ -n "$root" ] || { chown root:linectl "$etc/linectl.env" && chmod 0640 "$etc/linectl.env"; }
    echo "written${database_url:+ with the database URL}; tokens in /etc/linectl/tokens"
    [ -n "$database_url" ] || echo "edit LINECTL_DATABASE_URL and LINECTL_PLC in $etc/linectl.env before starting"
  fi
}

if [ "$wheel" = --config-only ]; then
  write_config
  exit 0
fi

echo "== venv $venv"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet --upgrade "$wheel"

write_config

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
