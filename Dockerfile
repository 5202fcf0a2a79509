# syntax=docker/dockerfile:1
# The Onceflight image: one static binary on distroless, running as nonroot.
#   make image                     (tags onceflight:<git describe> and onceflight:latest)
#   docker build -t onceflight .   (the same, without the version stamp)

# Build stage: the Go version must satisfy go.mod's go line
# (deploy/deploy_test.go checks it).
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=dev
ARG REVISION=
# CGO_ENABLED=0: a static binary that runs on distroless/static (no libc);
# os/user then reads /etc/passwd itself, which distroless provides.
RUN CGO_ENABLED=0 go build -trimpath \
      -ldflags "-s -w -X github.com/onceflight/onceflight/cli.version=${VERSION} -X github.com/onceflight/onceflight/cli.revision=${REVISION}" \
      -o /out/onceflight ./cmd/onceflight \
 && mkdir -p /out/data

# Run stage. distroless/static has CA certificates (TLS to Kafka and to
# connectors' HTTPS endpoints), /etc/passwd with the nonroot user, and
# nothing else: no shell, so health checks go through the HTTP endpoints.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/onceflight /usr/local/bin/onceflight
# /data is the conventional --data-dir; owned by nonroot (65532) so a fresh
# named volume mounted there inherits a directory the process can write.
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
# 8089: health, readiness and metrics (--metrics-http), open to probes and
# Prometheus. The records stay on 127.0.0.1:8080 unless serve is given
# --http 0.0.0.0:8080 with --http-token-file (docs/http.md#who-may-read-the-records).
EXPOSE 8089
ENTRYPOINT ["/usr/local/bin/onceflight"]
CMD ["serve", "--config", "/etc/onceflight/onceflight.yaml", "--data-dir", "/data", "--http", "127.0.0.1:8080", "--metrics-http", "0.0.0.0:8089", "--log-format", "json"]
