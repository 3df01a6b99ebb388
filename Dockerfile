# The watcher image: the package installed into a virtual environment of its own (our import packages
# have generic names, so they stay out of the system's site-packages), run as an unprivileged user.
# Build: docker build -t crashwatch:$VERSION .
# VERSION is pyproject.toml's [project] version (tests/unit/test_packaging.py keeps the two equal); the
# build fails if the package it installs says another.
#
# BASE is any image with python3 (>= 3.11) and its venv module; the default is the official slim one,
# pinned by digest so that a build takes the base that was reviewed, not whatever the tag names today. To
# move it on (a Python patch release, a Debian security update), read the tag's current digest and put it
# here, e.g. `skopeo inspect --format '{{.Digest}}' docker://python:3.11-slim` or
# `docker buildx imagetools inspect python:3.11-slim` (docs/running.md, "The image").
# The dependencies are those of requirements.lock, every file checked against its hash; crashwatch itself
# goes in after them, without dependencies of its own choosing.
# WHEELS, when set, names a folder of wheels (crashwatch's and its dependencies') mounted into the
# build: pip then installs from it alone (--no-index), with no network. scripts/build-image builds so,
# on a base made from Debian packages, for the tests (docs/running.md, "The image").
ARG VERSION=0.1.0
ARG BASE=python:3.11-slim@sha256:9c900dea9e8fb7e16277c179b555cc72d29a352dbc33cff48ad5a0412fd5bfc7

FROM ${BASE} AS build
ARG VERSION
ARG WHEELS=
WORKDIR /src
COPY pyproject.toml README.md requirements.lock ./
COPY crashwatch crashwatch
COPY stream stream
COPY pipeline pipeline
COPY sinks sinks
# Nothing installs at run time: pip and setuptools go once crashwatch is in, and so do the test
# suites some packages ship.
RUN python3 -m venv /opt/crashwatch \
 && if [ -n "$WHEELS" ]; then \
      /opt/crashwatch/bin/pip install --no-cache-dir --no-index --find-links "$WHEELS" \
        --require-hashes --requirement requirements.lock \
      && /opt/crashwatch/bin/pip install --no-cache-dir --no-index --find-links "$WHEELS" --no-deps "crashwatch==$VERSION"; \
    else \
      /opt/crashwatch/bin/pip install --no-cache-dir --require-hashes --requirement requirements.lock \
      && /opt/crashwatch/bin/pip install --no-cache-dir --no-deps .; \
    fi \
 && /opt/crashwatch/bin/pip check \
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
