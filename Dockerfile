# One image with every tflo binary: the pipeline worker, the simulator and
# the starter CLI, and the example pipeline specs under /etc/tflo/pipelines.
# docker-compose.yml tags it once (tflo/iot-portal:dev) and picks the
# command per service. .dockerignore keeps bin/, .git and the development
# .env out of the build context. Base images are pinned; the tags are
# checked by deploy/compose_test.go.
FROM golang:1.26.7 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# VERSION is what the binaries report (--version, tflo_build_info); the
# build context has no .git, so pass it:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) .
ARG VERSION=dev
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-X github.com/tflo-io/tflo/internal/version.Version=${VERSION}" \
    -o /out/ ./workers/cmd/worker ./workers/cmd/simulator ./starter
# State folders owned by the runtime user, so named volumes mounted there
# start writable.
RUN mkdir -p /data/edge /data/central /data/archive

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ /usr/local/bin/
COPY deploy/*.yaml /etc/tflo/
COPY workers/pipelines/*.yaml /etc/tflo/pipelines/
COPY --from=build --chown=65532:65532 /data/ /var/lib/tflo/
USER nonroot
ENTRYPOINT []
