//! The bytes of weights a decoder of a GGUF file reads per token, from the file's header: the tensor
//! table gives each tensor's offset in the data section, so a tensor's size is the distance to the next
//! one (alignment padding included: at most `general.alignment` bytes each, negligible).
//!
//! One decode step reads every tensor once, except the token-embedding table, of which it reads one row.
//! When the model ties its output projection to that table (SmolLM2 does: there is no `output.weight`),
//! the table is read in full as the output projection, so the figure is all of the file's tensor bytes;
//! otherwise it is all of them minus the embedding table.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use anyhow::{bail, Context as _};

/// `GGUF` in little-endian.
const MAGIC: u32 = 0x4655_4747;
/// The data section's alignment unless `general.alignment` says otherwise.
const DEFAULT_ALIGNMENT: u64 = 32;
/// Largest string or array the parser accepts (a guard against a corrupt header).
const MAX_LEN: u64 = 1 << 30;

/// The tensor bytes of a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GgufWeights {
    /// Bytes of every tensor together.
    pub tensor_bytes: u64,
    /// Bytes of `token_embd.weight`.
    pub token_embd_bytes: u64,
    /// Whether a separate `output.weight` exists (otherwise the output is tied to the embedding).
    pub has_output: bool,
    /// Number of tensors.
    pub tensors: usize,
}

impl GgufWeights {
    /// Reads the header of `path`.
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let file = File::open(path).with_context(|| format!("opening {}", path.display()))?;
        let file_len = file.metadata()?.len();
        parse(&mut BufReader::new(file), file_len)
            .with_context(|| format!("reading the GGUF header of {}", path.display()))
    }

    /// Bytes one decode step reads (see the module docs).
    pub fn bytes_per_token(&self) -> u64 {
        if self.has_output {
            self.tensor_bytes - self.token_embd_bytes
        } else {
            self.tensor_bytes
        }
    }
}

/// Parses a GGUF v2/v3 header from `reader`, the start of a file of `file_len` bytes.
fn parse(reader: &mut impl Read, file_len: u64) -> anyhow::Result<GgufWeights> {
    let mut r = Counting { inner: reader, read: 0 };
    if r.u32()? != MAGIC {
        bail!("not a GGUF file");
    }
    let version = r.u32()?;
    if version < 2 {
        bail!("GGUF version {version} is not supported");
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    let mut alignment = DEFAULT_ALIGNMENT;
    for _ in 0..kv_count {
        let key = r.string()?;
        let kind = r.u32()?;
        if key == "general.alignment" && kind == 4 {
            alignment = u64::from(r.u32()?).max(1);
        } else {
            r.skip_value(kind)?;
        }
    }
    let mut tensors = Vec::new();
    for _ in 0..tensor_count.min(MAX_LEN) {
        let name = r.string()?;
        let dims = r.u32()?;
        for _ in 0..dims {
            r.u64()?;
        }
        let _kind = r.u32()?;
        let offset = r.u64()?;
        tensors.push((offset, name));
    }
    let data_start = r.read.div_ceil(alignment) * alignment;
    let data_len = file_len.checked_sub(data_start).context("the file ends inside its header")?;
    tensors.sort();
    let mut weights =
        GgufWeights { tensor_bytes: 0, token_embd_bytes: 0, has_output: false, tensors: tensors.len() };
    for (i, (offset, name)) in tensors.iter().enumerate() {
        let end = tensors.get(i + 1).map_or(data_len, |(next, _)| *next);
        let size = end.checked_sub(*offset).context("tensor offsets out of order")?;
        weights.tensor_bytes += size;
        match name.as_str() {
            "token_embd.weight" => weights.token_embd_bytes = size,
            "output.weight" => weights.has_output = true,
            _ => {}
        }
    }
    Ok(weights)
}

/// A little-endian reader that counts the bytes it consumed.
struct Counting<'a, R> {
    inner: &'a mut R,
    read: u64,
}

impl<R: Read> Counting<'_, R> {
    fn bytes<const N: usize>(&mut self) -> anyhow::Result<[u8; N]> {
        let mut buf = [0u8; N];
        self.inner.read_exact(&mut buf)?;
        self.read += N as u64;
        Ok(buf)
    }

    fn u32(&mut self) -> anyhow::Result<u32> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> anyhow::Result<u64> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn skip(&mut self, n: u64) -> anyhow::Result<()> {
        let skipped = std::io::copy(&mut self.inner.take(n), &mut std::io::sink())?;
        if skipped != n {
            bail!("the file ends inside its header");
        }
        self.read += n;
        Ok(())
    }

    fn string(&mut self) -> anyhow::Result<String> {
        let len = self.u64()?;
        if len > MAX_LEN {
            bail!("a string of {len} bytes");
        }
        let mut buf = vec![0u8; len as usize];
        self.inner.read_exact(&mut buf)?;
        self.read += len;
        Ok(String::from_utf8_lossy(&buf).into_owned())
    }

    /// Skips one metadata value of GGUF type `kind`.
    fn skip_value(&mut self, kind: u32) -> anyhow::Result<()> {
        match kind {
            0 | 1 | 7 => self.skip(1),
            2 | 3 => self.skip(2),
            4..=6 => self.skip(4),
            10..=12 => self.skip(8),
            8 => {
                let len = self.u64()?;
                self.skip(len)
            }
            9 => {
                let inner = self.u32()?;
                let len = self.u64()?;
                if len > MAX_LEN {
                    bail!("an array of {len} elements");
                }
                for _ in 0..len {
                    self.skip_value(inner)?;
                }
                Ok(())
            }
            other => bail!("unknown metadata type {other}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF v3 header with one string and one array of strings in its metadata and `tensors`
    /// (name, offset), followed by enough data bytes for `data_len`.
    fn file(tensors: &[(&str, u64)], data_len: u64) -> Vec<u8> {
        let mut out = Vec::new();
        let string = |out: &mut Vec<u8>, s: &str| {
            out.extend((s.len() as u64).to_le_bytes());
            out.extend(s.as_bytes());
        };
        out.extend(MAGIC.to_le_bytes());
        out.extend(3u32.to_le_bytes());
        out.extend((tensors.len() as u64).to_le_bytes());
        out.extend(2u64.to_le_bytes());
        string(&mut out, "general.name");
        out.extend(8u32.to_le_bytes());
        string(&mut out, "tiny");
        string(&mut out, "tokenizer.ggml.tokens");
        out.extend(9u32.to_le_bytes());
        out.extend(8u32.to_le_bytes());
        out.extend(2u64.to_le_bytes());
        string(&mut out, "a");
        string(&mut out, "bc");
        for (name, offset) in tensors {
            string(&mut out, name);
            out.extend(2u32.to_le_bytes());
            out.extend(4u64.to_le_bytes());
            out.extend(8u64.to_le_bytes());
            out.extend(8u32.to_le_bytes());
            out.extend(offset.to_le_bytes());
        }
        let start = (out.len() as u64).div_ceil(DEFAULT_ALIGNMENT) * DEFAULT_ALIGNMENT;
        out.resize((start + data_len) as usize, 0);
        out
    }

    #[test]
    fn sizes_come_from_the_offsets() {
        let bytes = file(&[("blk.0.attn_q.weight", 96), ("token_embd.weight", 0)], 160);
        let w = parse(&mut bytes.as_slice(), bytes.len() as u64).expect("parse");
        assert_eq!(w, GgufWeights { tensor_bytes: 160, token_embd_bytes: 96, has_output: false, tensors: 2 });
        assert_eq!(w.bytes_per_token(), 160, "a tied output projection reads the whole table");

        let bytes =
            file(&[("token_embd.weight", 0), ("output.weight", 96), ("blk.0.ffn_up.weight", 192)], 256);
        let w = parse(&mut bytes.as_slice(), bytes.len() as u64).expect("parse");
        assert!(w.has_output);
        assert_eq!(w.bytes_per_token(), 256 - 96);
    }

    #[test]
    fn rejects_other_files() {
        let bytes = b"PK\x03\x04 not a gguf file at all".to_vec();
        assert!(parse(&mut bytes.as_slice(), bytes.len() as u64).is_err());
        let truncated = &file(&[("token_embd.weight", 0)], 64)[..20];
        assert!(parse(&mut &truncated[..], 20).is_err());
    }

    #[test]
    fn reads_the_real_model_when_installed() {
        let path = crate::paths::smollm2_gguf();
        if !path.exists() {
            return;
        }
        let w = GgufWeights::read(&path).expect("read");
        // 30 blocks of 9 tensors, 2 norms... and no output.weight (tied to the embedding).
        assert!(!w.has_output);
        assert!(w.tensors > 200, "{w:?}");
        let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
        assert!(w.tensor_bytes > len * 9 / 10 && w.tensor_bytes < len, "{w:?} of {len}");
        // Q8_0 embedding: 49,152 x 576 values at 34 bytes per 32.
        assert_eq!(w.token_embd_bytes, 49_152 * 576 / 32 * 34);
    }
}
