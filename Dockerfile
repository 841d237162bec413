# One image with every tflo binary: the pipeline worker, the simulator and
# the starter CLI, and the example pipeline specs under
# /etc/tflo/pipelines. docker-compose.yml picks the command per service.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -o /out/ ./workers/cmd/worker ./workers/cmd/simulator ./starter
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
