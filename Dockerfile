# linectl's container image: `docker build -t linectl .` (see docs/operations.md,
# "Install"). Multi-stage: the wheel is built in the first stage; the image holds
# only Python, the installed wheel and a non-root user.
FROM python:3.11-slim AS build
WORKDIR /src
COPY . .
RUN pip install --no-cache-dir build==1.3.0 \
 && python -m build --wheel --outdir /dist

FROM python:3.11-slim
RUN useradd --system --create-home --home-dir /var/lib/linectl --shell /usr/sbin/nologin linectl
COPY --from=build /dist/*.whl /tmp/
RUN pip install --no-cache-dir /tmp/*.whl && rm /tmp/*.whl
USER linectl
WORKDIR /var/lib/linectl
# Tokens, the AI credential key and (without LINECTL_DATABASE_URL) the embedded
# PostgreSQL live here: mount a volume to keep them across a recreate.
# The container's port is published in clear unless LINECTL_TLS_CERT/KEY name a
# mounted certificate or a TLS proxy fronts it (docs/operations.md, "People").
ENV LINECTL_DATA_DIR=/var/lib/linectl \
    LINECTL_HTTP_HOST=0.0.0.0 \
    LINECTL_ALLOW_PLAIN_HTTP=1 \
    LINECTL_LOG_FORMAT=json
VOLUME ["/var/lib/linectl"]
EXPOSE 8000
# Meaningful for the gateway (and `linectl up`); compose turns it off for the others.
HEALTHCHECK --interval=10s --timeout=3s --start-period=60s --retries=3 \
  CMD python -c "import sys, urllib.request; sys.exit(urllib.request.urlopen('http://127.0.0.1:8000/readyz', timeout=2).status != 200)"
# The whole stack on the embedded PostgreSQL; compose runs one service per container instead.
CMD ["linectl", "up"]
