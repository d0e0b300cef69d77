//! The model registry as a file (`--model-registry PATH`): models described declaratively, as an
//! operator keeps them in configuration management. Whichever node leads reads the file every
//! [`REREAD_INTERVAL`] and proposes what differs: a model the registry lacks is registered (at the
//! file's version, 1 by default), and a model whose description differs is described again. Models the
//! file does not name are left as they are, and versions move on only through `bump-model`, so the
//! file and `core-node admin` work side by side. The file is checked when the node starts: an
//! unreadable or invalid one stops it with the reason; an edit that breaks it later is logged and
//! skipped until it is fixed.
//!
//! ```toml
//! [models.my-base]
//! version = 1                       # when it is first registered
//! apis = ["completions"]            # chat, completions (chat when absent)
//! context_length = 32768
//! input_cost_per_mtok = "0.05"      # dollars per million tokens
//! output_cost_per_mtok = "0.2"
//! backends = ["openai=http://10.0.0.5:8000/v1;capacity=8;upstream_model=base"]
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use shared::model_spec::{parse_usd_per_mtok, ModelApi, ModelSpec, PoolBackend};

use crate::node::error::CoreError;
use crate::node::state_machine::StateMachineStore;
use crate::node::types::{Command, NodeId, Raft, Request};
use crate::node::writes::validate;
use crate::node::writes::writer::Writer;

/// How often the leader reads the file again.
pub const REREAD_INTERVAL: Duration = Duration::from_secs(5);

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct RegistryFile {
    #[serde(default)]
    models: BTreeMap<String, FileModel>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileModel {
    version: Option<u64>,
    #[serde(default)]
    apis: Vec<ModelApi>,
    context_length: Option<u32>,
    input_cost_per_mtok: Option<String>,
    output_cost_per_mtok: Option<String>,
    #[serde(default)]
    backends: Vec<String>,
}

/// One model as the file describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DescribedModel {
    /// Its name (lowercase).
    pub name: String,
    /// The version it is registered at when the registry lacks it.
    pub version: u64,
    /// Its description.
    pub spec: ModelSpec,
}

/// Reads and checks the file at `path`.
pub fn read(path: &Path) -> Result<Vec<DescribedModel>, CoreError> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| CoreError::Config(format!("--model-registry {}: {e}", path.display())))?;
    parse(&text).map_err(|e| CoreError::Config(format!("--model-registry {}: {e}", path.display())))
}

fn parse(text: &str) -> Result<Vec<DescribedModel>, String> {
    let file: RegistryFile = toml::from_str(text).map_err(|e| e.to_string())?;
    let mut described = file
        .models
        .into_iter()
        .map(|(name, model)| {
            let name = name.trim().to_ascii_lowercase();
            validate::name("model", &name).map_err(|e| e.to_string())?;
            let what = |e: String| format!("models.{name}: {e}");
            let cost =
                |value: &Option<String>| value.as_deref().map_or(Ok(0), parse_usd_per_mtok).map_err(what);
            let backends = model
                .backends
                .iter()
                .map(|b| b.parse::<PoolBackend>().map_err(what))
                .collect::<Result<Vec<_>, _>>()?;
            let spec = ModelSpec {
                context_length: model.context_length.unwrap_or(0),
                input_micro_usd_per_mtok: cost(&model.input_cost_per_mtok)?,
                output_micro_usd_per_mtok: cost(&model.output_cost_per_mtok)?,
                apis: model.apis,
                backends,
            }
            .validated()
            .map_err(what)?;
            let version = model.version.unwrap_or(1);
            if version == 0 {
                return Err(what("version must be at least 1".into()));
            }
            Ok(DescribedModel { name, version, spec })
        })
        .collect::<Result<Vec<_>, String>>()?;
    described.sort_by(|a, b| a.name.cmp(&b.name));
    if let Some(pair) = described.windows(2).find(|pair| pair[0].name == pair[1].name) {
        return Err(format!("model {} is described twice", pair[0].name));
    }
    Ok(described)
}

/// The commands that bring the registry (`versions`, `specs`) to what `described` says.
pub fn differences(
    described: &[DescribedModel],
    versions: &[(String, u64)],
    specs: &[(String, ModelSpec)],
) -> Vec<Command> {
    described
        .iter()
        .filter_map(|model| {
            let registered = versions.iter().any(|(name, _)| *name == model.name);
            let current = specs.iter().find(|(name, _)| *name == model.name).map(|(_, spec)| spec);
            let (version, spec) = match (registered, current) {
                (false, _) => (model.version, model.spec.clone()),
                (true, Some(spec)) if *spec == model.spec => return None,
                (true, _) => (0, model.spec.clone()),
            };
            Some(Command::RegisterModel { model: model.name.clone(), version, spec: Some(spec) })
        })
        .collect()
}

/// Runs forever: while this node leads, reads `path` and proposes what differs.
pub async fn run(id: NodeId, path: PathBuf, raft: Raft, state: StateMachineStore, writer: Writer) {
    let mut tick = tokio::time::interval(REREAD_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_error = None;
    loop {
        tick.tick().await;
        if crate::node::context::known_leader(id, &raft.metrics().borrow()) != Some(id) {
            continue;
        }
        let described = match read(&path) {
            Ok(described) => {
                last_error = None;
                described
            }
            Err(e) => {
                let said = e.to_string();
                if last_error.as_ref() != Some(&said) {
                    tracing::warn!(error = %said, "the model registry file is unreadable; keeping the registry as it is");
                    last_error = Some(said);
                }
                continue;
            }
        };
        let Ok(versions) = state.model_versions() else { continue };
        for command in differences(&described, &versions, &state.model_specs()) {
            let model = match &command {
                Command::RegisterModel { model, .. } => model.clone(),
                _ => String::new(),
            };
            match writer.write(Request { id: String::new(), command }).await {
                Ok(_) => tracing::info!(%model, "model registered from the registry file"),
                Err(e) => {
                    tracing::warn!(%model, error = %e, "registering a model from the registry file failed")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = r#"
[models.My-Base]
apis = ["completions"]
context_length = 32768
input_cost_per_mtok = "0.05"
backends = ["openai=http://127.0.0.1:8000/v1;capacity=8;upstream_model=base"]

[models.chatty]
version = 3
"#;

    #[test]
    fn a_file_describes_models_and_only_what_differs_is_proposed() {
        let described = parse(FILE).expect("valid");
        assert_eq!(described.len(), 2);
        let base = &described[1];
        assert_eq!(described[0].name, "chatty");
        assert_eq!((base.name.as_str(), base.version), ("my-base", 1));
        assert_eq!((base.spec.context_length, base.spec.input_micro_usd_per_mtok), (32768, 50_000));
        assert_eq!(base.spec.backends[0].capacity, 8);
        // Neither registered: both are, at their versions.
        let all = differences(&described, &[], &[]);
        assert!(matches!(
            &all[..],
            [Command::RegisterModel { version: 3, .. }, Command::RegisterModel { version: 1, .. }]
        ));
        // Registered and described as the file says: nothing; described otherwise: described again.
        let versions = vec![("chatty".to_owned(), 5), ("my-base".to_owned(), 2)];
        let same =
            vec![("chatty".to_owned(), described[0].spec.clone()), ("my-base".to_owned(), base.spec.clone())];
        assert!(differences(&described, &versions, &same).is_empty());
        let other = vec![("chatty".to_owned(), described[0].spec.clone())];
        match &differences(&described, &versions, &other)[..] {
            [Command::RegisterModel { model, version: 0, spec: Some(spec) }] => {
                assert_eq!((model.as_str(), spec), ("my-base", &base.spec))
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_bad_file_is_refused_with_the_reason() {
        for (text, said) in [
            ("[models.m]\napis = [\"embeddings\"]\n", "embeddings"),
            ("[models.m]\ncolour = 1\n", "colour"),
            ("[models.m]\nbackends = [\"grpc=x\"]\n", "models.m"),
            ("[models.m]\nversion = 0\n", "version"),
            ("[models.m]\ninput_cost_per_mtok = \"-1\"\n", "models.m"),
            ("[models.m]\n[models.M]\n", "twice"),
        ] {
            let error = parse(text).expect_err(text);
            assert!(error.contains(said), "{text}: {error}");
        }
    }
}
