# Framecast bot image: non-root user, database on a volume, health check on the ops port.
#
# Order matters for rebuilds: everything that rarely changes (user, image settings, dependencies) comes
# first; the code is one COPY at the very end, so a code change rebuilds a single layer. The settings
# that only describe the image (VOLUME ... CMD) come before the dependencies: a builder that copies the
# whole file system for each step (Docker's legacy builder on vfs storage) then copies the small base
# for them, not the base plus every installed package.
FROM python:3.11-slim

# HTTP_PORT: the ops server (/healthz, /readyz, /metrics); the HEALTHCHECK below depends on it.
# HTTP_HOST: every interface of the container (the bot's default is loopback), so a published port
# and a scraper on the compose network reach it; publish it on the host's loopback only.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    DATABASE_PATH=/data/framecast.sqlite3 \
    HTTP_PORT=8080 \
    HTTP_HOST=0.0.0.0 \
    SHUTDOWN_TIMEOUT=8

# The bot's user owns /data only; the code stays root-owned (read-only for the bot).
RUN useradd --create-home --uid 10001 framecast \
    && mkdir -p /data && chown framecast:framecast /data && chmod 700 /data

WORKDIR /app
VOLUME ["/data"]
EXPOSE 8080

# The slim image has no curl: ask /healthz with the standard library. Proxies are bypassed on purpose
# (an HTTP_PROXY meant for outgoing traffic must not swallow a loopback probe). Without HTTP_PORT the bot
# serves no ops endpoints and the container reports unhealthy, saying so.
HEALTHCHECK --interval=30s --timeout=5s --start-period=60s --retries=3 \
    CMD ["python", "-c", "import os, sys, urllib.request as u\nport = os.environ.get('HTTP_PORT') or sys.exit('HTTP_PORT is not set: no /healthz')\ntry:\n    u.build_opener(u.ProxyHandler({})).open(f'http://127.0.0.1:{port}/healthz', timeout=4).close()\nexcept Exception as exc:\n    sys.exit(f'/healthz: {exc}')"]

# `docker stop` sends SIGTERM and waits 10 s (the README's `docker run --stop-timeout 30` and compose's
# stop_grace_period give 30 s): SHUTDOWN_TIMEOUT=8 keeps the clean shutdown inside even the default.
# Exec-form CMD: python is PID 1 and receives the signal itself (no shell in between).
STOPSIGNAL SIGTERM
CMD ["python", "bot.py"]

# PyAV's wheel carries its own FFmpeg: no system packages are needed. pip uses whatever index the build
# environment configures (no extra index), and installs the lock: every package at its pinned version,
# each file checked against its hash, so two builds a week apart install the same bytes.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes -r requirements.lock

USER framecast
# .dockerignore lets in only bot.py, framecast/, cogs/ and web/ (and requirements.lock, copied above).
COPY . ./
