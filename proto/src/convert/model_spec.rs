//! A model's registry metadata on the wire and as [`shared::model_spec::ModelSpec`].

use shared::model_spec::{ModelApi, ModelSpec, PoolBackend, PoolBackendKind};

use crate::cache;

impl From<&ModelSpec> for cache::ModelSpec {
    fn from(spec: &ModelSpec) -> Self {
        cache::ModelSpec {
            context_length: spec.context_length,
            input_micro_usd_per_mtok: spec.input_micro_usd_per_mtok,
            output_micro_usd_per_mtok: spec.output_micro_usd_per_mtok,
            apis: spec.apis.iter().map(|api| api.as_str().to_owned()).collect(),
            backends: spec.backends.iter().map(Into::into).collect(),
        }
    }
}

impl From<&PoolBackend> for cache::PoolBackend {
    fn from(backend: &PoolBackend) -> Self {
        let kind = match backend.kind {
            PoolBackendKind::Pod => "pod",
            PoolBackendKind::Openai => "openai",
        };
        cache::PoolBackend {
            kind: kind.to_owned(),
            url: backend.url.clone(),
            capacity: backend.capacity,
            upstream_model: backend.upstream_model.clone(),
            key_file: backend.key_file.clone(),
            ca_file: backend.ca_file.clone(),
            version: backend.version,
        }
    }
}

impl TryFrom<cache::ModelSpec> for ModelSpec {
    type Error = String;

    /// The spec in its canonical form, or why it is refused (an unknown API or backend kind, a bad URL).
    fn try_from(wire: cache::ModelSpec) -> Result<Self, String> {
        let apis = wire.apis.iter().map(|api| api.parse::<ModelApi>()).collect::<Result<_, _>>()?;
        let backends = wire.backends.into_iter().map(PoolBackend::try_from).collect::<Result<_, _>>()?;
        ModelSpec {
            context_length: wire.context_length,
            input_micro_usd_per_mtok: wire.input_micro_usd_per_mtok,
            output_micro_usd_per_mtok: wire.output_micro_usd_per_mtok,
            apis,
            backends,
        }
        .validated()
    }
}

impl TryFrom<cache::PoolBackend> for PoolBackend {
    type Error = String;

    fn try_from(wire: cache::PoolBackend) -> Result<Self, String> {
        let kind = match wire.kind.as_str() {
            "pod" => PoolBackendKind::Pod,
            "openai" => PoolBackendKind::Openai,
            other => return Err(format!("unknown backend kind {other:?} (pod or openai)")),
        };
        let backend = PoolBackend {
            kind,
            url: wire.url.trim_end_matches('/').to_owned(),
            capacity: wire.capacity,
            upstream_model: wire.upstream_model,
            key_file: wire.key_file,
            ca_file: wire.ca_file,
            version: wire.version,
        };
        backend.validate()?;
        Ok(backend)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spec_crosses_the_wire_unchanged_and_a_bad_one_is_refused() {
        let spec = ModelSpec {
            context_length: 32_768,
            input_micro_usd_per_mtok: 150_000,
            output_micro_usd_per_mtok: 600_000,
            apis: vec![ModelApi::Chat, ModelApi::Completions],
            backends: vec!["openai=http://127.0.0.1:8080/v1;capacity=4;key_file=/k".parse().expect("valid")],
        };
        let wire = cache::ModelSpec::from(&spec);
        assert_eq!(ModelSpec::try_from(wire.clone()), Ok(spec));
        let mut bad = wire.clone();
        bad.apis.push("embeddings".into());
        assert!(ModelSpec::try_from(bad).is_err());
        let mut bad = wire;
        bad.backends[0].kind = "grpc".into();
        assert!(ModelSpec::try_from(bad).is_err());
    }
}
