#!/bin/sh
# docker-entrypoint-initdb.d hook of the mysql service: creates the relay's account from relay-user.sql,
# substituting the placeholders from the environment (the password never lands in a file).
set -eu
: "${RELAY_MYSQL_PASSWORD:?set RELAY_MYSQL_PASSWORD}"
RELAY_MYSQL_USER="${RELAY_MYSQL_USER:-relay}"
RELAY_CAPTURED_SCHEMAS="${RELAY_CAPTURED_SCHEMAS:-shop\\_%}"
sed -e "s|\${RELAY_MYSQL_USER}|${RELAY_MYSQL_USER}|g" \
    -e "s|\${RELAY_MYSQL_PASSWORD}|${RELAY_MYSQL_PASSWORD}|g" \
    -e "s|\${RELAY_CAPTURED_SCHEMAS}|${RELAY_CAPTURED_SCHEMAS}|g" \
    /relay/relay-user.sql \
  | mysql --protocol=socket -uroot -p"${MYSQL_ROOT_PASSWORD}"
