//! Generates the tonic code from `proto/*.proto` with a vendored protoc (no system install needed).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc_bin_vendored::protoc_bin_path()?);
    let protos = [
        "proto/inference.proto",
        "proto/cache.proto",
        "proto/raft.proto",
        "proto/core.proto",
        "proto/replication.proto",
    ];
    tonic_prost_build::configure().compile_with_config(config, &protos, &["proto"])?;
    for p in protos {
        println!("cargo:rerun-if-changed={p}");
    }
    Ok(())
}
