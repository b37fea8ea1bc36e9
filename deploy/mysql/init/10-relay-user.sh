#!/bin/sh
# Creates canal-relay's MySQL/MariaDB account by running mysql/relay-user.sql with values from the environment:
# the docker-entrypoint-initdb.d hook of the compose mysql service, and usable by hand against any server.
#
#   RELAY_MYSQL_PASSWORD    the account's password (required)
#   RELAY_MYSQL_USER        its name (default relay)
#   RELAY_MYSQL_HOST        its host part (default %)
#   RELAY_CAPTURED_SCHEMAS  the GRANT database pattern it may SELECT from (default shop\_%: shop_00, shop_01 …;
#                           `_` and `%` are wildcards, `\_` is a literal underscore)
#   RELAY_ADMIN_USER        the account that creates it (default root)
#   MYSQL_ROOT_PASSWORD     that account's password (MARIADB_ROOT_PASSWORD on MariaDB images; may be empty)
#   RELAY_USER_SQL          the SQL file (default: relay-user.sql one folder up, else /relay/relay-user.sql)
# The server: the client's own defaults (inside the database container: its socket), or the mysql client's
# MYSQL_HOST, MYSQL_TCP_PORT, MYSQL_UNIX_PORT.
#
# No value is pasted into SQL text and no password is put on a command line: each value reaches the server as
# a hex literal assigned to a user variable (hex digits only, whatever the value holds), and relay-user.sql
# quotes the variables itself inside prepared statements. The administrator's password reaches the client
# in an option file of mode 0600 (its value quoted and escaped as option files define), removed on exit.
set -eu

fail() { printf '10-relay-user.sh: %s\n' "$*" >&2; exit 1; }

[ -n "${RELAY_MYSQL_PASSWORD:-}" ] || fail "set RELAY_MYSQL_PASSWORD (the relay account's password)"
relay_user="${RELAY_MYSQL_USER:-relay}"
relay_host="${RELAY_MYSQL_HOST:-%}"
relay_schemas="${RELAY_CAPTURED_SCHEMAS:-shop\\_%}"
admin_user="${RELAY_ADMIN_USER:-root}"
admin_password="${MYSQL_ROOT_PASSWORD:-${MARIADB_ROOT_PASSWORD:-}}"

sql="${RELAY_USER_SQL:-}"
if [ -z "$sql" ]; then
    sql="$(dirname "$0")/../relay-user.sql"
    [ -r "$sql" ] || sql=/relay/relay-user.sql
fi
[ -r "$sql" ] || fail "cannot read $sql (set RELAY_USER_SQL)"

if command -v mysql >/dev/null 2>&1; then
    client=mysql
elif command -v mariadb >/dev/null 2>&1; then
    client=mariadb
else
    fail "no mysql or mariadb client on PATH"
fi

newline='
'
case "$admin_user$admin_password" in
    *"$newline"*) fail "the administrator's name or password holds a line break: an option file cannot carry it" ;;
esac

# A value as an option file's double-quoted string: backslash and double quote escaped (MySQL and MariaDB
# read \\ and \" back; a # inside the quotes is no comment).
option_value() {
    printf '"'
    printf '%s' "$1" | sed -e 's/\\/\\\\/g' -e 's/"/\\"/g'
    printf '"'
}

# A value as an SQL hex literal: X'…' holds hex digits only.
hex_literal() {
    printf "X'"
    printf '%s' "$1" | od -An -v -tx1 | tr -d ' \n'
    printf "'"
}

umask 077
options="$(mktemp)"
trap 'rm -f "$options"' EXIT
trap 'exit 1' HUP INT TERM
{
    printf '[client]\n'
    printf 'user=%s\n' "$(option_value "$admin_user")"
    printf 'password=%s\n' "$(option_value "$admin_password")"
} >"$options"

{
    printf 'SET @relay_user = CONVERT(%s USING utf8mb4);\n' "$(hex_literal "$relay_user")"
    printf 'SET @relay_host = CONVERT(%s USING utf8mb4);\n' "$(hex_literal "$relay_host")"
    printf 'SET @relay_password = CONVERT(%s USING utf8mb4);\n' "$(hex_literal "$RELAY_MYSQL_PASSWORD")"
    printf 'SET @relay_schemas = CONVERT(%s USING utf8mb4);\n' "$(hex_literal "$relay_schemas")"
    cat "$sql"
} | "$client" --defaults-extra-file="$options" --batch

printf '10-relay-user.sh: account %s@%s can read the binlog and SELECT on %s\n' \
    "$relay_user" "$relay_host" "$relay_schemas"
