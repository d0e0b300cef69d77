//! The served models and their current versions.
//!
//! Every tier is configured with the same table, written `name@version` separated by commas
//! (`smollm2-135m-instruct@1`). The version is part of every cache key, so bumping it makes every older
//! entry unreachable at once.

use crate::RequestError;

/// A model name and its current version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelRef {
    /// Canonical (lowercase) name.
    pub name: String,
    /// Current version.
    pub version: u64,
}

/// The table of served models.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelTable {
    models: Vec<ModelRef>,
}

/// The model table a local mesh serves by default.
pub const DEFAULT_MODELS: &str = "smollm2-135m-instruct@1";

impl ModelTable {
    /// Parses `name@version,name@version`.
    pub fn parse(table: &str) -> Result<Self, String> {
        let mut models = Vec::new();
        for item in table.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (name, version) =
                item.split_once('@').ok_or_else(|| format!("model {item:?} has no @version"))?;
            let version =
                version.trim().parse().map_err(|_| format!("model {item:?}: version is not an integer"))?;
            let name = name.trim().to_ascii_lowercase();
            if name.is_empty() {
                return Err(format!("model {item:?} has an empty name"));
            }
            models.push(ModelRef { name, version });
        }
        if models.is_empty() {
            return Err("the model table is empty".into());
        }
        Ok(Self { models })
    }

    /// Resolves a requested model name (case-insensitive) to the served model, or a 404.
    pub fn resolve(&self, requested: &str) -> Result<&ModelRef, RequestError> {
        let wanted = requested.trim();
        self.models
            .iter()
            .find(|m| m.name.eq_ignore_ascii_case(wanted))
            .ok_or_else(|| RequestError::model_not_found(wanted))
    }

    /// All served models.
    pub fn models(&self) -> &[ModelRef] {
        &self.models
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_resolves_case_insensitively() {
        let table = ModelTable::parse("SmolLM2-135M-Instruct@3, other@1").expect("valid");
        assert_eq!(table.resolve("smollm2-135m-instruct").map(|m| m.version), Ok(3));
        assert_eq!(table.resolve("OTHER").map(|m| m.name.as_str()), Ok("other"));
        assert_eq!(table.resolve("gpt-4").map_err(|e| e.status), Err(404));
        assert!(ModelTable::parse("x").is_err());
        assert!(ModelTable::parse("x@y").is_err());
        assert!(ModelTable::parse("").is_err());
    }
}
