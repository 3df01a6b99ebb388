# The watcher image: the package installed into a virtual environment of its own (our import packages
# have generic names, so they stay out of the system's site-packages), run as an unprivileged user.
# Build: docker build -t crashwatch:$VERSION .
# VERSION is pyproject.toml's [project] version (tests/unit/test_packaging.py keeps the two equal); the
# build fails if the package it installs says another.
ARG VERSION=0.1.0

FROM python:3.11-slim AS build
ARG VERSION
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crashwatch crashwatch
COPY stream stream
COPY pipeline pipeline
COPY sinks sinks
RUN python -m venv /opt/crashwatch \
 && /opt/crashwatch/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/crashwatch/bin/pip install --no-cache-dir . \
 && test "$(/opt/crashwatch/bin/crashwatch --version)" = "crashwatch $VERSION"

FROM python:3.11-slim
ARG VERSION
LABEL org.opencontainers.image.title="crashwatch" \
      org.opencontainers.image.version="$VERSION"
COPY --from=build /opt/crashwatch /opt/crashwatch
ENV PATH=/opt/crashwatch/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["crashwatch"]
CMD ["run", "--all-namespaces", "--http-address", ":8080"]
