//! The similarity a cached question needs, per content class, before the near-miss verifier is asked.

use super::ContentClass;

/// Similarity a cached question needs, per content class, before the near-miss verifier is asked (the
/// regional tier's defaults; the edge's opt-in matching uses its own). The similarity only narrows the
/// candidates: the verifier decides. On the development sets, lowering the stable threshold from 0.92
/// to 0.80 raised recall (0.391 -> 0.433 and 0.125 -> 0.188) at the same precision.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SemanticThresholds {
    /// Prices, schedules, "this week".
    pub volatile: f32,
    /// Nothing says how fast it changes.
    pub default: f32,
    /// Definitions, math, code, history.
    pub stable: f32,
}

impl SemanticThresholds {
    /// The thresholds of the small (distilled) embedding, which scores paraphrases lower than MiniLM:
    /// on the 596 labelled pairs, small embedding + verifier gave precision 0.992 / recall 0.433 at
    /// 0.85, 0.991 / 0.388 at 0.90 (`distill-edge-table --evaluate`).
    pub const SMALL_EMBEDDING: SemanticThresholds =
        SemanticThresholds { volatile: 0.90, default: 0.88, stable: 0.85 };

    /// The thresholds of the small embedding when it is the only one searched (a regional node with
    /// the table and without `--semantic-minilm-lookups`). The verifier decides; the similarity only
    /// picks the candidates, so these sit low. `semantic-eval` measures both sides of the choice:
    /// - on the development sets, the verifier's precision is the same from a gate of 0.40 to 0.80,
    ///   and recall rises as the gate falls (written-b: 0.190 at 0.75, 0.207 at 0.70, 0.227 at 0.60);
    /// - on real traffic (`--neighbours`: each ShareGPT first turn looked up among 6,525 others), the
    ///   verifier accepted none of the 338 lookups whose best candidate scored 0.70 to 0.75, and one
    ///   of the 162 from 0.65 to 0.70 (a one-word prompt), so the stable class stops at 0.70.
    pub const SMALL_ONLY: SemanticThresholds =
        SemanticThresholds { volatile: 0.75, default: 0.72, stable: 0.70 };
}

impl Default for SemanticThresholds {
    fn default() -> Self {
        Self { volatile: 0.88, default: 0.84, stable: 0.80 }
    }
}

impl SemanticThresholds {
    /// The threshold of `class`; `None` for realtime, which never hits.
    pub fn of(&self, class: ContentClass) -> Option<f32> {
        match class {
            ContentClass::Realtime => None,
            ContentClass::Volatile => Some(self.volatile),
            ContentClass::Default => Some(self.default),
            ContentClass::Stable => Some(self.stable),
        }
    }

    /// The small embedding's gate for a question of `class`: [`Self::of`], lowered to
    /// [`Self::CONVERSION`] when the question asks a unit conversion (`near_miss::asks_conversion`).
    pub fn gate(&self, class: ContentClass, asks_conversion: bool) -> Option<f32> {
        let gate = self.of(class)?;
        Some(if asks_conversion { gate.min(Self::CONVERSION) } else { gate })
    }

    /// The small embedding's gate for a unit conversion. The verifier reads a conversion whole (the
    /// amount, both units, the direction and every other word), and the small embedding scores one
    /// conversion in two frames low (`10 mi in km` / `how many kilometers is 10 miles`: 0.69; `what is
    /// half an hour in seconds` / `how many seconds are in 30 minutes`: 0.59), so the gate stops only
    /// unrelated questions.
    pub const CONVERSION: f32 = 0.50;

    /// Reads `volatile,default,stable` (three similarities in 0..=1).
    pub fn parse(text: &str) -> Result<Self, String> {
        let values: Vec<f32> = text
            .split(',')
            .map(|v| v.trim().parse::<f32>().map_err(|_| format!("{v:?} is not a number")))
            .collect::<Result<_, _>>()?;
        match values[..] {
            [volatile, default, stable] if values.iter().all(|v| (0.0..=1.0).contains(v)) => {
                Ok(Self { volatile, default, stable })
            }
            _ => Err(format!("want three similarities in 0..=1 (volatile,default,stable), not {text:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn semantic_thresholds_parse_three_similarities() {
        let t = SemanticThresholds::parse(" 0.97, 0.95,0.9 ").expect("valid");
        assert_eq!((t.of(ContentClass::Volatile), t.of(ContentClass::Stable)), (Some(0.97), Some(0.9)));
        assert_eq!(t.of(ContentClass::Realtime), None);
        for bad in ["", "0.9,0.9", "0.9,0.9,1.5", "a,b,c", "0.9,0.9,0.9,0.9"] {
            assert!(SemanticThresholds::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(SemanticThresholds::default().of(ContentClass::Default), Some(0.84));
    }

    #[test]
    fn a_unit_conversion_is_gated_lower() {
        let small = SemanticThresholds::SMALL_ONLY;
        assert_eq!(small.gate(ContentClass::Stable, true), Some(SemanticThresholds::CONVERSION));
        assert_eq!(small.gate(ContentClass::Stable, false), Some(small.stable));
        assert_eq!(small.gate(ContentClass::Realtime, true), None);
    }
}
