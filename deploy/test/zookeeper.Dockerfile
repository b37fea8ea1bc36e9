# ZooKeeper from Debian's package for deploy/test/compose.yml: a standalone server on port 2181, its admin HTTP
# server off, data in /var/lib/zookeeper (a volume).
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends zookeeper libslf4j-java \
 && rm -rf /var/lib/apt/lists/* \
 && install -d -o zookeeper -g zookeeper /var/lib/zookeeper/data \
 && printf '%s\n' 'tickTime=2000' 'dataDir=/var/lib/zookeeper/data' 'clientPort=2181' \
      'admin.enableServer=false' '4lw.commands.whitelist=ruok,srvr' 'maxClientCnxns=0' >/etc/zookeeper/zoo-test.cfg
USER zookeeper
VOLUME ["/var/lib/zookeeper/data"]
EXPOSE 2181
CMD ["java", "-Xms16m", "-Xmx256m", "-XX:+UseSerialGC", \
     "-cp", "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar", \
     "org.apache.zookeeper.server.ZooKeeperServerMain", "/etc/zookeeper/zoo-test.cfg"]
