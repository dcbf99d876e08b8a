# A stand-in for python:3.11-slim-bookworm when no registry answers: Debian bookworm's
# Python 3.11 with venv, on the base bin/compose makes with debootstrap.
ARG BASE
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && ln -s /usr/bin/python3 /usr/local/bin/python
CMD ["python3"]
