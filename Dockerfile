# syntax=docker/dockerfile:1
#
# The controller image: `karpenter` built with the AWS cloud provider (`--features aws`) as a
# static musl binary, on an empty base with only CA certificates, running as a non-root user.
#
#   docker build -t ghcr.io/karpenter-rs/karpenter:0.1.0 .
#
# Not built in CI: the machines CI runs on have no container engine. tests/tests/deploy.rs checks
# what can be checked without one (toolchain version, features, base image, user).

# Rust on Alpine targets `<arch>-unknown-linux-musl`, whose binaries link the C runtime
# statically, so the result runs on `scratch` on any Linux (x86_64 or arm64 builders alike).
FROM docker.io/library/rust:1.95-alpine AS build
RUN apk add --no-cache musl-dev gcc ca-certificates
WORKDIR /src
COPY . .
# Small and fast enough for a controller: strip symbols, thin LTO.
ENV CARGO_PROFILE_RELEASE_STRIP=symbols \
    CARGO_PROFILE_RELEASE_LTO=thin
RUN --mount=type=cache,target=/usr/local/cargo/registry \
    --mount=type=cache,target=/src/target \
    cargo build --release --locked -p karpenter --features aws --bin karpenter \
    && cp target/release/karpenter /karpenter

FROM scratch
# rustls reads the system roots (rustls-native-certs) for AWS endpoints; the API server's CA
# comes from the service account mount.
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /karpenter /karpenter
ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt
# The distroless `nonroot` user; deploy/deployment.yaml runs as the same IDs.
USER 65532:65532
EXPOSE 8080 8081
ENTRYPOINT ["/karpenter"]
CMD ["run"]
