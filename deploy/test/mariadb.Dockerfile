# MariaDB from Debian's packages for deploy/test/compose.yml (no registry image can be pulled here): the server
# the relay reads, with a ROW binlog and full row metadata, and the docker-entrypoint-initdb.d convention of the
# official images, so that deploy/mysql/init/10-relay-user.sh runs in it exactly as in the mysql service.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends mariadb-server mariadb-client \
 && rm -rf /var/lib/apt/lists/* /var/lib/mysql/* \
 && install -d -o mysql -g mysql /run/mysqld /docker-entrypoint-initdb.d
COPY deploy/test/mariadb-entrypoint.sh /usr/local/bin/mariadb-entrypoint.sh
VOLUME ["/var/lib/mysql"]
EXPOSE 3306
ENTRYPOINT ["/usr/local/bin/mariadb-entrypoint.sh"]
CMD ["--log-bin=mysql-bin", "--binlog-format=ROW", "--binlog-row-image=FULL", "--binlog-row-metadata=FULL", \
     "--server-id=1", "--binlog-expire-logs-seconds=604800"]
