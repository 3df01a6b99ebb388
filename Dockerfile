# The watcher image: the wheel installed into a virtual environment of its own (see DESIGN.md on our
# generic package names), run as an unprivileged user. Build: docker build -t crashwatch:0.1.0 .
FROM python:3.11-slim AS build
WORKDIR /src
COPY pyproject.toml README.md ./
COPY crashwatch crashwatch
COPY stream stream
COPY pipeline pipeline
COPY sinks sinks
RUN python -m venv /opt/crashwatch \
 && /opt/crashwatch/bin/pip install --no-cache-dir --upgrade pip \
 && /opt/crashwatch/bin/pip install --no-cache-dir .

FROM python:3.11-slim
COPY --from=build /opt/crashwatch /opt/crashwatch
ENV PATH=/opt/crashwatch/bin:$PATH PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
USER 10001:10001
EXPOSE 8080
ENTRYPOINT ["crashwatch"]
CMD ["run", "--all-namespaces", "--http-address", ":8080"]
