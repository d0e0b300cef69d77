//! A weight matrix in one of the block formats the kernels read, loaded from a GGUF tensor.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use half::f16;

use super::activations::quantize_block;
use super::BLOCK;
use crate::InferenceError;

/// How a matrix's 32-weight blocks are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlockFormat {
    /// GGUF's Q4_1, as the file ships it: 16 bytes of nibbles (weights 0..16 in the low nibbles,
    /// 16..32 in the high ones), weight = `scale * q + min` with `q` in `0..16`.
    Q4_1,
    /// GGUF's Q8_0: 32 signed bytes, weight = `scale * q`.
    Q8_0,
}

impl BlockFormat {
    /// Bytes of quants per block.
    pub fn quant_bytes(self) -> usize {
        match self {
            Self::Q4_1 => BLOCK / 2,
            Self::Q8_0 => BLOCK,
        }
    }
}

/// Outputs whose scales are stored side by side, so a kernel loads one block's four scales at once.
pub const QUAD: usize = 4;

/// `[outputs][inputs]` weights, as `y = x @ w^T` reads them, laid out by quad: the blocks of four
/// consecutive outputs interleaved. Outputs are padded with zero weights to a whole number of
/// [`QUAD`]s.
#[derive(Debug)]
pub struct QuantMatrix {
    format: BlockFormat,
    outputs: usize,
    inputs: usize,
    /// `[quad][block][QUAD][quant bytes]`: a block of four outputs is one contiguous run, so the
    /// kernels stream the weights front to back.
    quants: Vec<u8>,
    /// `[quad][block][QUAD]`, `f16` bits as the file stores them (half the bytes of `f32`).
    scales: Vec<u16>,
    /// `[quad][block][QUAD]`; empty for formats without an offset.
    mins: Vec<u16>,
}

impl QuantMatrix {
    /// Takes a 2-D GGUF tensor: Q4_1 and Q8_0 as stored; any other type dequantized and
    /// quantized to Q8_0.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Self, InferenceError> {
        let (outputs, inputs) = tensor.shape().dims2()?;
        check_width(inputs)?;
        match tensor.dtype() {
            GgmlDType::Q4_1 => Self::from_ggml_blocks(BlockFormat::Q4_1, &tensor.data()?, outputs, inputs),
            GgmlDType::Q8_0 => Self::from_ggml_blocks(BlockFormat::Q8_0, &tensor.data()?, outputs, inputs),
            _ => {
                let values = tensor.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
                Self::q8_0_from_f32(&values, outputs, inputs)
            }
        }
    }

    /// Quantizes plain `[outputs][inputs]` floats to Q8_0.
    pub fn q8_0_from_f32(values: &[f32], outputs: usize, inputs: usize) -> Result<Self, InferenceError> {
        check_width(inputs)?;
        if values.len() != outputs * inputs {
            return Err(InferenceError::Metadata(format!(
                "{} values for a [{outputs}, {inputs}] matrix",
                values.len()
            )));
        }
        let blocks = values.len() / BLOCK;
        let (mut quants, mut scales) = (vec![0u8; blocks * BLOCK], vec![0u16; blocks]);
        let mut block = [0i8; BLOCK];
        for (b, chunk) in values.chunks_exact(BLOCK).enumerate() {
            let (scale, _) = quantize_block(chunk, &mut block);
            scales[b] = f16::from_f32(scale).to_bits();
            for (dst, &q) in quants[b * BLOCK..(b + 1) * BLOCK].iter_mut().zip(&block) {
                *dst = q as u8;
            }
        }
        Ok(Self::assemble(BlockFormat::Q8_0, outputs, inputs, quants, &scales, &[]))
    }

    /// Splits GGML block bytes (`f16` scale, `f16` min for Q4_1, then the quants) into the
    /// separate arrays the kernels stream.
    pub fn from_ggml_blocks(
        format: BlockFormat,
        bytes: &[u8],
        outputs: usize,
        inputs: usize,
    ) -> Result<Self, InferenceError> {
        check_width(inputs)?;
        let header = match format {
            BlockFormat::Q4_1 => 4,
            BlockFormat::Q8_0 => 2,
        };
        let block_bytes = header + format.quant_bytes();
        let blocks = outputs * inputs / BLOCK;
        if bytes.len() != blocks * block_bytes {
            return Err(InferenceError::Metadata(format!(
                "{format:?} tensor [{outputs}, {inputs}] holds {} bytes, expected {}",
                bytes.len(),
                blocks * block_bytes
            )));
        }
        let half_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let quant_bytes = format.quant_bytes();
        let mut quants = Vec::with_capacity(blocks * quant_bytes);
        let (mut scales, mut mins) = (Vec::with_capacity(blocks), Vec::new());
        for block in bytes.chunks_exact(block_bytes) {
            scales.push(half_at(block, 0));
            if format == BlockFormat::Q4_1 {
                mins.push(half_at(block, 2));
            }
            quants.extend_from_slice(&block[header..]);
        }
        Ok(Self::assemble(format, outputs, inputs, quants, &scales, &mins))
    }

    /// Stacks matrices of one format and input width, outputs after outputs (fusing Q/K/V).
    pub fn stack(parts: Vec<Self>) -> Result<Self, InferenceError> {
        let mut parts = parts.into_iter();
        let Some(first) = parts.next() else {
            return Err(InferenceError::Metadata("nothing to stack".into()));
        };
        let (format, inputs) = (first.format, first.inputs);
        let (mut outputs, mut quants, mut scales, mut mins) = (0, Vec::new(), Vec::new(), Vec::new());
        for part in std::iter::once(first).chain(parts) {
            if part.format != format || part.inputs != inputs {
                return Err(InferenceError::Metadata(format!(
                    "cannot stack {:?} [_, {}] under {format:?} [_, {inputs}]",
                    part.format, part.inputs
                )));
            }
            for output in 0..part.outputs {
                for block in 0..part.blocks() {
                    quants.extend_from_slice(part.quants(output, block));
                    scales.push(part.scale(output, block));
                    if format == BlockFormat::Q4_1 {
                        mins.push(part.min(output, block));
                    }
                }
            }
            outputs += part.outputs;
        }
        Ok(Self::assemble(format, outputs, inputs, quants, &scales, &mins))
    }

    /// The block format.
    pub fn format(&self) -> BlockFormat {
        self.format
    }

    /// Output width (rows of the weight).
    pub fn outputs(&self) -> usize {
        self.outputs
    }

    /// Input width (columns of the weight).
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Blocks per output.
    pub fn blocks(&self) -> usize {
        self.inputs / BLOCK
    }

    /// Bytes one pass over the weights reads.
    pub fn bytes(&self) -> usize {
        let per_block = self.format.quant_bytes() + if self.mins.is_empty() { 2 } else { 4 };
        self.outputs * self.blocks() * per_block
    }

    /// The quants of output `output`'s block `block`.
    #[inline(always)]
    pub fn quants(&self, output: usize, block: usize) -> &[u8] {
        let size = self.format.quant_bytes();
        let at = (((output / QUAD) * self.blocks() + block) * QUAD + output % QUAD) * size;
        &self.quants[at..at + size]
    }

    /// The quants of quad `quad`, `[block][QUAD][quant bytes]`.
    #[inline(always)]
    pub fn quad_quants(&self, quad: usize) -> &[u8] {
        let size = self.blocks() * QUAD * self.format.quant_bytes();
        &self.quants[quad * size..(quad + 1) * size]
    }

    /// Outputs rounded up to whole quads (the zero weights of the padding give zeros).
    pub fn padded_outputs(&self) -> usize {
        self.outputs.next_multiple_of(QUAD)
    }

    /// The scales of quad `quad` (outputs `4 * quad..`), `[block][QUAD]`, as `f16` bits.
    #[inline(always)]
    pub fn quad_scales(&self, quad: usize) -> &[u16] {
        &self.scales[quad * self.blocks() * QUAD..(quad + 1) * self.blocks() * QUAD]
    }

    /// The offsets of quad `quad`, `[block][QUAD]`, as `f16` bits (Q4_1 only).
    #[inline(always)]
    pub fn quad_mins(&self, quad: usize) -> &[u16] {
        &self.mins[quad * self.blocks() * QUAD..(quad + 1) * self.blocks() * QUAD]
    }

    /// The scale of output `output`'s block `block`, as `f16` bits.
    #[inline(always)]
    pub fn scale(&self, output: usize, block: usize) -> u16 {
        self.quad_scales(output / QUAD)[block * QUAD + output % QUAD]
    }

    /// The offset of output `output`'s block `block`, as `f16` bits (Q4_1 only).
    #[inline(always)]
    pub fn min(&self, output: usize, block: usize) -> u16 {
        self.quad_mins(output / QUAD)[block * QUAD + output % QUAD]
    }

    /// The weight at (`output`, `input`), dequantized: the definition the kernels must meet.
    pub fn weight(&self, output: usize, input: usize) -> f32 {
        let (block, i) = (input / BLOCK, input % BLOCK);
        let quants = self.quants(output, block);
        let scale = to_f32(self.scale(output, block));
        match self.format {
            BlockFormat::Q4_1 => {
                let byte = quants[i % (BLOCK / 2)];
                let q = if i < BLOCK / 2 { byte & 0x0F } else { byte >> 4 };
                scale * q as f32 + to_f32(self.min(output, block))
            }
            BlockFormat::Q8_0 => scale * quants[i] as i8 as f32,
        }
    }

    /// Pads `[output][block]` quants, scales and offsets to whole quads and lays them out by quad.
    fn assemble(
        format: BlockFormat,
        outputs: usize,
        inputs: usize,
        quants: Vec<u8>,
        scales: &[u16],
        mins: &[u16],
    ) -> Self {
        let (blocks, padded, size) = (inputs / BLOCK, outputs.next_multiple_of(QUAD), format.quant_bytes());
        let mut by_quad_quants = vec![0u8; padded * blocks * size];
        for (i, block) in quants.chunks_exact(size).enumerate() {
            let (output, b) = (i / blocks, i % blocks);
            let at = (((output / QUAD) * blocks + b) * QUAD + output % QUAD) * size;
            by_quad_quants[at..at + size].copy_from_slice(block);
        }
        let quants = by_quad_quants;
        let by_quad = |natural: &[u16]| {
            let mut laid_out = vec![0u16; padded * blocks];
            for (i, &bits) in natural.iter().enumerate() {
                let (output, block) = (i / blocks, i % blocks);
                laid_out[((output / QUAD) * blocks + block) * QUAD + output % QUAD] = bits;
            }
            laid_out
        };
        let mins = if format == BlockFormat::Q4_1 { by_quad(mins) } else { Vec::new() };
        Self { format, outputs, inputs, quants, scales: by_quad(scales), mins }
    }
}

/// Refuses a row width that is not a positive number of whole blocks.
fn check_width(inputs: usize) -> Result<(), InferenceError> {
    if inputs == 0 || !inputs.is_multiple_of(BLOCK) {
        return Err(InferenceError::Metadata(format!("a row of {inputs} weights is not whole blocks")));
    }
    Ok(())
}

/// An `f16`'s bits as `f32`.
pub fn to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}
