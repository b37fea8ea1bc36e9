#!/bin/sh
# deploy/test/mariadb.Dockerfile's entrypoint: on an empty data directory, create it, set the root password
# (MARIADB_ROOT_PASSWORD), drop the anonymous accounts (they would shadow 'relay'@'%' from localhost) and run
# /docker-entrypoint-initdb.d/*.sh against a server listening on its socket only, as the official images do;
# then run mariadbd with the arguments given (the binlog settings) on every interface.
set -eu
: "${MARIADB_ROOT_PASSWORD:?set MARIADB_ROOT_PASSWORD}"
datadir=/var/lib/mysql
socket=/run/mysqld/mysqld.sock

if [ ! -d "$datadir/mysql" ]; then
    echo "mariadb-entrypoint: initialising $datadir"
    mariadb-install-db --user=mysql --datadir="$datadir" --auth-root-authentication-method=normal \
        --skip-test-db >/dev/null
    mariadbd --user=mysql --datadir="$datadir" --skip-networking --socket="$socket" "$@" &
    pid=$!
    tries=0
    until mariadb-admin --socket="$socket" -uroot ping >/dev/null 2>&1; do
        tries=$((tries + 1))
        [ "$tries" -lt 120 ] || { echo "mariadb-entrypoint: the server did not start" >&2; exit 1; }
        kill -0 "$pid" 2>/dev/null || { echo "mariadb-entrypoint: the server exited" >&2; exit 1; }
        sleep 0.5
    done
    # The root password as a hex literal: no text of it is pasted into SQL.
    hex=$(printf '%s' "$MARIADB_ROOT_PASSWORD" | od -An -v -tx1 | tr -d ' \n')
    mariadb --socket="$socket" -uroot <<SQL
SET SESSION sql_log_bin = 0;
DELETE FROM mysql.global_priv WHERE User = '';
SET @pw = CONVERT(X'$hex' USING utf8mb4);
SET @stmt = CONCAT('ALTER USER root@localhost IDENTIFIED BY ', QUOTE(@pw));
PREPARE s FROM @stmt; EXECUTE s; DEALLOCATE PREPARE s;
FLUSH PRIVILEGES;
SQL
    for f in /docker-entrypoint-initdb.d/*.sh; do
        [ -e "$f" ] || continue
        echo "mariadb-entrypoint: running $f"
        MYSQL_UNIX_PORT="$socket" "$f"
    done
    kill "$pid"  # SIGTERM: a clean shutdown
    wait "$pid" || true
    echo "mariadb-entrypoint: initialised"
fi
exec mariadbd --user=mysql --datadir="$datadir" --socket="$socket" --bind-address=0.0.0.0 --port=3306 "$@"
