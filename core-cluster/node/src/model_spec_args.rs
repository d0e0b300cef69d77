//! The registry spec of a model as `core-node admin register-model` takes it on the command line.

use clap::Args;
use shared::model_spec::{parse_usd_per_mtok, ModelApi, ModelSpec, PoolBackend};

use crate::node::CoreError;

/// A model's metadata; leaving every flag out leaves the registry's spec as it is.
#[derive(Clone, Debug, Default, Args)]
pub struct ModelSpecArgs {
    /// Longest prompt plus answer, in tokens.
    #[arg(long)]
    pub context_length: Option<u32>,
    /// Price of prompt tokens, dollars per million tokens (`0.15`).
    #[arg(long, value_parser = parse_usd_per_mtok)]
    pub input_cost_per_mtok: Option<u64>,
    /// Price of generated tokens, dollars per million tokens.
    #[arg(long, value_parser = parse_usd_per_mtok)]
    pub output_cost_per_mtok: Option<u64>,
    /// The APIs it answers, comma-separated: `chat`, `completions` (default: chat).
    #[arg(long, value_delimiter = ',')]
    pub apis: Vec<ModelApi>,
    /// A backend of its pool, repeated: `KIND=URL[;capacity=N][;upstream_model=NAME][;key_file=PATH][;ca=PATH]`
    /// with `KIND` `pod` (gRPC URL) or `openai` (an OpenAI-compatible API base); paths are on the
    /// core hosts.
    #[arg(long = "backend")]
    pub backends: Vec<PoolBackend>,
}

impl ModelSpecArgs {
    /// The spec the flags give, `None` when no flag was given.
    pub fn spec(self) -> Result<Option<ModelSpec>, CoreError> {
        let given = self.context_length.is_some()
            || self.input_cost_per_mtok.is_some()
            || self.output_cost_per_mtok.is_some()
            || !self.apis.is_empty()
            || !self.backends.is_empty();
        if !given {
            return Ok(None);
        }
        let spec = ModelSpec {
            context_length: self.context_length.unwrap_or(0),
            input_micro_usd_per_mtok: self.input_cost_per_mtok.unwrap_or(0),
            output_micro_usd_per_mtok: self.output_cost_per_mtok.unwrap_or(0),
            apis: self.apis,
            backends: self.backends,
        };
        spec.validated().map(Some).map_err(CoreError::InvalidArgument)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Line {
        #[command(flatten)]
        spec: ModelSpecArgs,
    }

    fn spec(args: &[&str]) -> Option<ModelSpec> {
        let line = Line::try_parse_from(std::iter::once("x").chain(args.iter().copied())).expect("parses");
        line.spec.spec().expect("valid")
    }

    #[test]
    fn flags_make_a_spec_and_none_keep_the_registrys() {
        assert_eq!(spec(&[]), None);
        let given = spec(&[
            "--context-length=8192",
            "--input-cost-per-mtok=0.1",
            "--apis=completions,chat",
            "--backend=pod=http://127.0.0.1:7301",
            "--backend=openai=http://127.0.0.1:8080/v1;capacity=2",
        ])
        .expect("a spec");
        assert_eq!((given.context_length, given.input_micro_usd_per_mtok), (8192, 100_000));
        assert_eq!(given.apis, [ModelApi::Chat, ModelApi::Completions]);
        assert_eq!(given.backends.len(), 2);
        assert!(Line::try_parse_from(["x", "--apis=embeddings"]).is_err());
        assert!(Line::try_parse_from(["x", "--input-cost-per-mtok=NaN"]).is_err());
    }
}
