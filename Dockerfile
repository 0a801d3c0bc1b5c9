# One image for the API and the worker; docker-compose.yml picks the command.
FROM python:3.11-slim
WORKDIR /app
# bubblewrap confines the processes tools start.
RUN apt-get update && apt-get install -y --no-install-recommends bubblewrap \
    && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY longrun longrun
COPY api api
COPY workflows workflows
COPY activities activities
COPY worker.py .
RUN pip install --no-cache-dir . && useradd --create-home longrun && mkdir -p /data && chown longrun /data
USER longrun
ENV LONGRUN_DATA_DIR=/data
CMD ["longrun", "worker"]
