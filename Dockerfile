# tockd in a container: a static binary on an empty base, run as a user that is not root, with
# its queue in the volume /data. See the README, "Running as a service".
#
#   docker build --build-arg TOCK_REVISION="$(git rev-parse HEAD)" -t tockd .
#   docker run -d -p 7070:7070 -v tock-data:/data -e TOCK_TOKEN=... tockd
#
# GO_IMAGE names the build stage's image: any with the go command of go.mod's version or later.
ARG GO_IMAGE=docker.io/library/golang:1.25-bookworm

FROM ${GO_IMAGE} AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN ["go", "mod", "download"]
COPY . .
# The context has no .git (.dockerignore): the revision comes in as TOCK_REVISION ("REV" or
# "REV-dirty"), which tockd -version prints. The RUN lines are exec form, with their settings in
# ENV, so that the build stage needs the go command and nothing else (not even a shell).
# cmd/tockd's TestDockerfileBuild runs this build with these settings.
ARG TOCK_REVISION=
ENV CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false -ldflags=-X=github.com/tockwheel/tock/internal/buildinfo.revision=${TOCK_REVISION}"
RUN ["go", "build", "-o", "/out/", "./cmd/tockd", "./cmd/tock"]
# The data directory of the final stage, made by a RUN in it (a WORKDIR alone leaves none behind
# under buildah): the image has no shell to mkdir with.
WORKDIR /out/data
RUN ["go", "version"]

FROM scratch
# Root certificates for rediss:// and for a Sentinel or Cluster over TLS; the time zones that
# schedules name are in the binary (time/tzdata).
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/
COPY --from=build /out/tockd /out/tock /usr/local/bin/
COPY --from=build --chown=65532:65532 /out/data /data
USER 65532:65532
ENV TOCK_ADDR=0.0.0.0:7070 TOCK_DATA=/data
VOLUME /data
EXPOSE 7070
HEALTHCHECK --interval=10s --timeout=6s --start-period=30s --retries=3 CMD ["/usr/local/bin/tockd", "-healthcheck"]
ENTRYPOINT ["/usr/local/bin/tockd"]
