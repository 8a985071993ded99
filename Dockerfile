# Framecast bot image: non-root user, database on a volume.
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    DATABASE_PATH=/data/framecast.sqlite3 \
    SHUTDOWN_TIMEOUT=8

WORKDIR /app
# PyAV's wheel carries its own FFmpeg: no system packages are needed.
COPY requirements.txt ./
RUN pip install --no-cache-dir -r requirements.txt

COPY bot.py ./
COPY framecast ./framecast
COPY cogs ./cogs

RUN useradd --create-home --uid 10001 framecast \
    && mkdir -p /data && chown framecast:framecast /data && chmod 700 /data
USER framecast
VOLUME ["/data"]

# `docker stop` sends SIGTERM and waits 10 s: SHUTDOWN_TIMEOUT=8 keeps the clean shutdown inside it.
STOPSIGNAL SIGTERM
CMD ["python", "bot.py"]
