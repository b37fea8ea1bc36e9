-- The least-privilege account canal-relay reads the binlog with, on MySQL 5.7/8.x or MariaDB:
--   REPLICATION SLAVE   the binlog dump (reading changes as a replica)
--   REPLICATION CLIENT  SHOW BINARY LOGS / SHOW BINARY LOG STATUS (position checks, lag, retention runway);
--                       on MariaDB >= 10.5 these need BINLOG MONITOR instead, which is granted there
--   SELECT              on the captured schemas only (snapshots, and table definitions when the binlog
--                       lacks them)
--
-- Nothing is substituted into this file: it reads its values from user variables, which the caller sets
-- first, and quotes them itself (QUOTE() for strings, doubled backticks for the schema pattern) in prepared
-- statements, so any character in a password or a pattern is taken as it is.
--   @relay_user       the account's name, e.g. 'relay'
--   @relay_password   its password
--   @relay_schemas    the GRANT database pattern the relay may SELECT from, e.g. 'shop\\_%' in a MySQL string
--                     literal (the pattern shop\_%: `_` and `%` are wildcards, `\_` a literal underscore)
--   @relay_host       the account's host part (NULL: '%')
-- Run by mysql/init/10-relay-user.sh (the compose mysql service, or by hand), or in a client session:
--   SET @relay_user = 'relay', @relay_password = '...', @relay_schemas = 'shop\\_%';
--   SOURCE deploy/mysql/relay-user.sql
-- Re-running it sets the password again and adds the grants (it revokes nothing).

SET NAMES utf8mb4;
-- QUOTE() escapes with backslashes: they must keep their meaning in this session.
SET SESSION sql_mode = REPLACE(@@SESSION.sql_mode, 'NO_BACKSLASH_ESCAPES', '');

-- A missing value stops here, before anything is created (SIGNAL names what to set).
SET @relay_stmt = IF(
  @relay_user IS NULL OR @relay_user = '' OR @relay_password IS NULL OR @relay_password = ''
    OR @relay_schemas IS NULL OR @relay_schemas = '',
  'SIGNAL SQLSTATE ''45000'' SET MESSAGE_TEXT = ''relay-user.sql: set @relay_user, @relay_password and @relay_schemas first (none may be empty)''',
  'DO 0');
PREPARE relay_stmt FROM @relay_stmt;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

SET @relay_account = CONCAT(QUOTE(@relay_user), '@', QUOTE(IFNULL(@relay_host, '%')));

SET @relay_stmt = CONCAT('CREATE USER IF NOT EXISTS ', @relay_account, ' IDENTIFIED BY ', QUOTE(@relay_password));
PREPARE relay_stmt FROM @relay_stmt;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

-- An account that already existed gets the password given now.
SET @relay_stmt = CONCAT('ALTER USER ', @relay_account, ' IDENTIFIED BY ', QUOTE(@relay_password));
PREPARE relay_stmt FROM @relay_stmt;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

-- MariaDB 10.5 moved SHOW BINARY LOGS / SHOW MASTER STATUS from REPLICATION CLIENT to BINLOG MONITOR.
SET @relay_version = SUBSTRING_INDEX(VERSION(), '-', 1);
SET @relay_monitor = IF(
  VERSION() LIKE '%MariaDB%'
    AND CAST(SUBSTRING_INDEX(@relay_version, '.', 1) AS UNSIGNED) * 1000
      + CAST(SUBSTRING_INDEX(SUBSTRING_INDEX(@relay_version, '.', 2), '.', -1) AS UNSIGNED) >= 10005,
  'BINLOG MONITOR',
  'REPLICATION CLIENT');
SET @relay_stmt = CONCAT('GRANT REPLICATION SLAVE, ', @relay_monitor, ' ON *.* TO ', @relay_account);
PREPARE relay_stmt FROM @relay_stmt;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

SET @relay_stmt = CONCAT(
  'GRANT SELECT ON `', REPLACE(@relay_schemas, '`', '``'), '`.* TO ', @relay_account);
PREPARE relay_stmt FROM @relay_stmt;
EXECUTE relay_stmt;
DEALLOCATE PREPARE relay_stmt;

-- With TLS on the server, refuse unencrypted logins for this account (the relay's source.tls.mode must then be
-- required or stricter):
-- SET @relay_stmt = CONCAT('ALTER USER ', @relay_account, ' REQUIRE SSL');
-- PREPARE relay_stmt FROM @relay_stmt; EXECUTE relay_stmt; DEALLOCATE PREPARE relay_stmt;

SET @relay_stmt = NULL, @relay_account = NULL, @relay_password = NULL;
