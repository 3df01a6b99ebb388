# The watcher image: the package installed into a virtual environment of its own (our import packages
# have generic names, so they stay out of the system's site-packages), run as an unprivileged user.
# Build: docker build -t crashwatch:$VERSION .
# VERSION is pyproject.toml's [project] version (tests/unit/test_packaging.py keeps the two equal); the
# build fails if the package it installs says another.
#
# BASE is any image with python3 (>= 3.11) and its venv module; the default is the official slim one.
# WHEELS, when set, names a folder of wheels (crashwatch's and its dependencies') mounted into the
# build: pip then installs from it alone (--no-index), with no network. scripts/build-image builds so,
# on a base made from Debian packages, for the tests (docs/running.md, "The image").
ARG VERSION=0.1.0
ARG BASE=python:3.11-slim

FROM ${BASE} AS build
ARG VERSION
ARG WHEELS=
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crashwatch crashwatch
COPY stream stream
COPY pipeline pipeline
COPY sinks sinks
# Nothing installs at run time: pip and setuptools go once crashwatch is in, and so do the test
# suites some packages ship.
RUN python3 -m venv /opt/crashwatch \
 && if [ -n "$WHEELS" ]; then \
      /opt/crashwatch/bin/pip install --no-cache-dir --no-index --find-links "$WHEELS" "crashwatch==$VERSION"; \
    else \
      /opt/crashwatch/bin/pip install --no-cache-dir --upgrade pip \
      && /opt/crashwatch/bin/pip install --no-cache-dir .; \
    fi \
 && test "$(/opt/crashwatch/bin/crashwatch --version)" = "crashwatch $VERSION" \
 && /opt/crashwatch/bin/python -m pip uninstall --quiet --yes pip setuptools \
 && find /opt/crashwatch -depth -type d \( -name tests -o -name test \) -exec rm -rf {} +

FROM ${BASE}
ARG VERSION
LABEL org.opencontainers.image.title="crashwatch" \
      org.opencontainers.image.version="$VERSION"
COPY --from=build /opt/crashwatch /opt/crashwatch
ENV PATH=/opt/crashwatch/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["crashwatch"]
CMD ["run", "--all-namespaces", "--http-address", ":8080"]
