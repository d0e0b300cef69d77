//! The edge's small embedding: a static int8 table with one row per WordPiece token, distilled from
//! all-MiniLM-L6-v2 (`distill-edge-table` in the regional crate builds it from the real model files).
//!
//! A text's small embedding is the sum of its tokens' rows (each row already carries its token's
//! weight), scaled to unit length; [`quantize`] turns it into int8 for the hot set, and [`cosine_i8`]
//! compares two such vectors with integer dot products (what the edge's simd128 scan computes). The
//! edge and the regional node load the same table file, so both tiers embed a question identically.
//!
//! # File format (little-endian)
//! `MESHSE01`, dims `u32`, rows `u32`, the SHA-256 of the model files it was distilled from (32 bytes),
//! the vocabulary (`u32` length, then `vocab.txt`), a `f32` scale per row, then `rows * dims` int8
//! values, row after row. A truncated or inconsistent file is refused with the reason.

use sha2::{Digest as _, Sha256};

use crate::wordpiece::WordPiece;

const MAGIC: &[u8; 8] = b"MESHSE01";
/// Largest dimension a table may have.
pub const MAX_DIMS: usize = 384;

/// A loaded table and its tokenizer.
#[derive(Clone, Debug)]
pub struct SmallEmbedder {
    dims: usize,
    scales: Vec<f32>,
    rows: Vec<i8>,
    wordpiece: WordPiece,
    source: [u8; 32],
    id: String,
}

impl SmallEmbedder {
    /// Parses a table file.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self, String> {
        let mut reader = Reader { bytes, at: 0 };
        if reader.take(8)? != MAGIC {
            return Err("not a small-embedding table (bad magic)".into());
        }
        let dims = reader.u32()? as usize;
        let rows = reader.u32()? as usize;
        if dims == 0 || dims > MAX_DIMS {
            return Err(format!("a table's dimension must be 1..={MAX_DIMS}, not {dims}"));
        }
        let mut source = [0u8; 32];
        source.copy_from_slice(reader.take(32)?);
        let vocab_len = reader.u32()? as usize;
        let vocab = std::str::from_utf8(reader.take(vocab_len)?).map_err(|e| format!("vocabulary: {e}"))?;
        let wordpiece = WordPiece::from_vocab(vocab)?;
        if wordpiece.len() != rows {
            return Err(format!("{rows} rows for a vocabulary of {} tokens", wordpiece.len()));
        }
        let scales: Vec<f32> = reader
            .take(rows.checked_mul(4).ok_or("table too large")?)?
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        if scales.iter().any(|s| !s.is_finite()) {
            return Err("a row scale is not finite".into());
        }
        let rows =
            reader.take(rows.checked_mul(dims).ok_or("table too large")?)?.iter().map(|&b| b as i8).collect();
        if reader.at != bytes.len() {
            return Err(format!("{} trailing bytes after the table", bytes.len() - reader.at));
        }
        let id = crate::hex::encode(&Sha256::digest(bytes)[..8]);
        Ok(Self { dims, scales, rows, wordpiece, source, id })
    }

    /// Builds a table file from unquantized rows (`dims` wide, one per token of `vocab`, weights
    /// applied), recording `source`, the SHA-256 of the model files.
    pub fn build(
        dims: usize,
        vocab: &str,
        source: [u8; 32],
        weighted_rows: &[f32],
    ) -> Result<Vec<u8>, String> {
        let tokens = vocab.lines().count();
        if dims == 0 || dims > MAX_DIMS || weighted_rows.len() != tokens * dims {
            return Err(format!("{} values are not {tokens} rows of {dims}", weighted_rows.len()));
        }
        let mut out = Vec::with_capacity(48 + vocab.len() + tokens * (4 + dims));
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&(dims as u32).to_le_bytes());
        out.extend_from_slice(&(tokens as u32).to_le_bytes());
        out.extend_from_slice(&source);
        out.extend_from_slice(&(vocab.len() as u32).to_le_bytes());
        out.extend_from_slice(vocab.as_bytes());
        let mut quantized = Vec::with_capacity(tokens * dims);
        for row in weighted_rows.chunks(dims) {
            let peak = row.iter().fold(0f32, |m, x| m.max(x.abs()));
            let scale = if peak > 0.0 && peak.is_finite() { peak / 127.0 } else { 0.0 };
            out.extend_from_slice(&scale.to_le_bytes());
            quantized
                .extend(row.iter().map(|x| if scale > 0.0 { (x / scale).round() as i8 as u8 } else { 0 }));
        }
        out.extend_from_slice(&quantized);
        Ok(out)
    }

    /// Dimensions of an embedding.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// A short id of this exact table (the first 8 bytes of the file's SHA-256, in hex): two tiers'
    /// embeddings compare only when their ids are equal.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The SHA-256 of the model files the table was distilled from.
    pub fn source(&self) -> [u8; 32] {
        self.source
    }

    /// The tokenizer of the table's vocabulary.
    pub fn wordpiece(&self) -> &WordPiece {
        &self.wordpiece
    }

    /// The unit-length small embedding of `text`; `None` when no token of it has a non-zero row.
    pub fn embed(&self, text: &str) -> Option<Vec<f32>> {
        let mut sum = vec![0f32; self.dims];
        for id in self.wordpiece.encode(text) {
            let id = id as usize;
            let (Some(scale), Some(row)) =
                (self.scales.get(id), self.rows.get(id * self.dims..(id + 1) * self.dims))
            else {
                continue;
            };
            sum.iter_mut().zip(row).for_each(|(s, &q)| *s += f32::from(q) * scale);
        }
        let norm = sum.iter().map(|x| x * x).sum::<f32>().sqrt();
        (norm > 0.0 && norm.is_finite()).then(|| sum.iter().map(|x| x / norm).collect())
    }

    /// [`Self::embed`], quantized.
    pub fn embed_i8(&self, text: &str) -> Option<Vec<i8>> {
        self.embed(text).map(|v| quantize(&v))
    }
}

/// A unit vector as int8 (each component times 127, rounded).
pub fn quantize(unit: &[f32]) -> Vec<i8> {
    unit.iter().map(|x| (x.clamp(-1.0, 1.0) * 127.0).round() as i8).collect()
}

/// Cosine of two int8 vectors of equal length (0 when either is all zeros or the lengths differ).
pub fn cosine_i8(a: &[i8], b: &[i8]) -> f32 {
    if a.len() != b.len() {
        return 0.0;
    }
    let (mut dot, mut na, mut nb) = (0i32, 0i32, 0i32);
    for (&x, &y) in a.iter().zip(b) {
        let (x, y) = (i32::from(x), i32::from(y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    if na == 0 || nb == 0 {
        return 0.0;
    }
    dot as f32 / ((na as f32).sqrt() * (nb as f32).sqrt())
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len()).ok_or_else(|| {
            format!("the table is truncated: {} bytes, needed {} more at {}", self.bytes.len(), n, self.at)
        })?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VOCAB: &str = "[PAD]\n[UNK]\n[CLS]\n[SEP]\ncopy\nfile\nserver\nlaptop\n";

    fn table() -> Vec<u8> {
        let dims = 3;
        let mut rows = vec![0f32; 8 * dims];
        rows[4 * dims..5 * dims].copy_from_slice(&[1.0, 0.0, 0.0]);
        rows[5 * dims..6 * dims].copy_from_slice(&[0.0, 2.0, 0.0]);
        rows[6 * dims..7 * dims].copy_from_slice(&[0.0, 0.0, 0.5]);
        rows[7 * dims..8 * dims].copy_from_slice(&[0.0, 0.1, 0.5]);
        SmallEmbedder::build(dims, VOCAB, [7; 32], &rows).expect("build")
    }

    #[test]
    fn a_built_table_loads_and_embeds_by_weighted_rows() {
        let embedder = SmallEmbedder::from_bytes(&table()).expect("load");
        assert_eq!((embedder.dims(), embedder.source()), (3, [7; 32]));
        let e = embedder.embed("copy file").expect("embedding");
        // (1, 2, 0) / sqrt(5), within int8 rounding.
        assert!((e[0] - 0.447).abs() < 0.01 && (e[1] - 0.894).abs() < 0.01 && e[2].abs() < 0.01, "{e:?}");
        assert!(embedder.embed("[PAD] unknownword").is_none());
        let (a, b) =
            (embedder.embed_i8("copy server").expect("a"), embedder.embed_i8("copy laptop").expect("b"));
        let similar = cosine_i8(&a, &b);
        assert!(similar > 0.5 && similar < 1.0, "{similar}");
        assert!((cosine_i8(&a, &a) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn truncated_or_inconsistent_tables_are_refused() {
        let bytes = table();
        for cut in [0, 7, 20, 60, bytes.len() - 1] {
            let error = SmallEmbedder::from_bytes(&bytes[..cut]).expect_err("truncated");
            assert!(error.contains("truncated") || error.contains("magic"), "{cut}: {error}");
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(SmallEmbedder::from_bytes(&longer).expect_err("trailing").contains("trailing"));
        assert!(SmallEmbedder::build(3, VOCAB, [0; 32], &[0.0; 5]).is_err());
        assert_ne!(SmallEmbedder::from_bytes(&bytes).expect("load").id(), "");
    }

    #[test]
    fn int8_cosine_handles_zero_and_mismatched_vectors() {
        assert_eq!(cosine_i8(&[0, 0], &[1, 2]), 0.0);
        assert_eq!(cosine_i8(&[1], &[1, 2]), 0.0);
        assert_eq!(quantize(&[1.0, -1.0, 0.5, 2.0]), [127, -127, 64, 127]);
    }
}
