# A core node: Raft member and the authoritative cache state.
# Build from the repository root: docker build -f deploy/containers/core-node.Dockerfile -t mesh/core-node .
# Multi-stage: the release binary is built on the Rust image, then copied alone onto a small Debian
# base (glibc and libstdc++), run as a user without privileges. Configuration, certificates and
# models come in as mounts (deploy/kubernetes shows them); nothing is fetched when it runs.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p core-cluster --bin core-node \
    && cp target/release/core-node /usr/local/bin/core-node

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 mesh \
    && useradd --system --uid 10001 --gid mesh --home-dir /var/lib/mesh --create-home mesh
COPY --from=build /usr/local/bin/core-node /usr/local/bin/core-node
USER 10001:10001
EXPOSE 7101
ENTRYPOINT ["/usr/local/bin/core-node"]
