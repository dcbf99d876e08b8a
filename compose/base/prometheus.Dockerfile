# A stand-in for prom/prometheus:v2.42.0 when no registry answers: Debian bookworm's
# Prometheus 2.42, laid out like the official image (its entrypoint, arguments, user and
# data directory), so compose.yaml's monitoring profile reads the same either way.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends prometheus \
 && rm -rf /var/lib/apt/lists/* \
 && mkdir -p /prometheus /etc/prometheus \
 && chown -R nobody:nogroup /prometheus /etc/prometheus
USER nobody
WORKDIR /prometheus
VOLUME /prometheus
EXPOSE 9090
ENTRYPOINT ["/usr/bin/prometheus"]
CMD ["--config.file=/etc/prometheus/prometheus.yml", "--storage.tsdb.path=/prometheus"]
