# ILB's container image: the serving binary (`make build`'s bin/ilb:
# serve, validate, envoy-config, explain, ... without the simulators),
# static, on distroless as user 65532, for a read-only root filesystem
# (ILB writes nothing; its configuration and token are mounted).
#
#   docker build -t ilb .
#   docker run --rm ilb validate --config /etc/ilb/ilb.yaml   # with -v ...:/etc/ilb
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -tags serving -trimpath -ldflags "-s -w" -o /out/ilb ./cmd/ilb

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/ilb /usr/local/bin/ilb
USER 65532:65532
# xDS (ADS, LRS), ext_proc, admin (/healthz, /metrics, /ui/)
EXPOSE 18000 18001 18002
ENTRYPOINT ["/usr/local/bin/ilb"]
CMD ["serve", "--config", "/etc/ilb/ilb.yaml"]
