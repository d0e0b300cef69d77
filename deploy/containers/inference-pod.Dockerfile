# An inference pod: the quantized model behind the core.
# Build from the repository root: docker build -f deploy/containers/inference-pod.Dockerfile -t mesh/inference-pod .
# Multi-stage: the release binary is built on the Rust image, then copied alone onto a small Debian
# base (glibc and libstdc++), run as a user without privileges. Configuration, certificates and
# models come in as mounts (deploy/kubernetes shows them); nothing is fetched when it runs.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p inference-pod --bin inference-pod \
    && cp target/release/inference-pod /usr/local/bin/inference-pod

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 mesh \
    && useradd --system --uid 10001 --gid mesh --home-dir /var/lib/mesh --create-home mesh
COPY --from=build /usr/local/bin/inference-pod /usr/local/bin/inference-pod
USER 10001:10001
EXPOSE 7400
ENTRYPOINT ["/usr/local/bin/inference-pod"]
