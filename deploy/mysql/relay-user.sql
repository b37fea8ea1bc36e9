-- The least-privilege MySQL account canal-relay reads the binlog with.
--   REPLICATION SLAVE   the binlog dump (reading changes as a replica)
--   REPLICATION CLIENT  SHOW BINARY LOGS / SHOW BINARY LOG STATUS (position checks, lag, retention runway);
--                       on MariaDB >= 10.5 this is BINLOG MONITOR
--   SELECT              on the captured schemas only (table metadata when the binlog lacks it)
-- Placeholders, replaced by mysql/init/10-relay-user.sh (or by hand): ${RELAY_MYSQL_USER},
-- ${RELAY_MYSQL_PASSWORD}, ${RELAY_CAPTURED_SCHEMAS} (a GRANT database pattern, e.g. shop\_%).
CREATE USER IF NOT EXISTS '${RELAY_MYSQL_USER}'@'%' IDENTIFIED BY '${RELAY_MYSQL_PASSWORD}';
GRANT REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO '${RELAY_MYSQL_USER}'@'%';
GRANT SELECT ON `${RELAY_CAPTURED_SCHEMAS}`.* TO '${RELAY_MYSQL_USER}'@'%';
-- With TLS on the server, refuse unencrypted logins for this account:
-- ALTER USER '${RELAY_MYSQL_USER}'@'%' REQUIRE SSL;
