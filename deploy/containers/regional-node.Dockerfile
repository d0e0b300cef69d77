# A regional node: the region's hot set, semantic hits and replication.
# Build from the repository root: docker build -f deploy/containers/regional-node.Dockerfile -t mesh/regional-node .
# Multi-stage: the release binary is built on the Rust image, then copied alone onto a small Debian
# base (glibc and libstdc++), run as a user without privileges. Configuration, certificates and
# models come in as mounts (deploy/kubernetes shows them); nothing is fetched when it runs.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p regional-node --bin regional-node \
    && cp target/release/regional-node /usr/local/bin/regional-node

FROM debian:bookworm-slim
RUN groupadd --system --gid 10001 mesh \
    && useradd --system --uid 10001 --gid mesh --home-dir /var/lib/mesh --create-home mesh
COPY --from=build /usr/local/bin/regional-node /usr/local/bin/regional-node
USER 10001:10001
EXPOSE 8081 8091
ENTRYPOINT ["/usr/local/bin/regional-node"]
