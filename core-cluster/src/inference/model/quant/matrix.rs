//! A weight matrix in one of the block formats the kernels read, loaded from a GGUF tensor.

use candle_core::quantized::{GgmlDType, QTensor};
use candle_core::Device;
use half::f16;

use super::activations::quantize_block;
use super::BLOCK;
use crate::inference::InferenceError;

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

/// `[outputs][inputs]` weights, each output's blocks contiguous, as `y = x @ w^T` reads them.
#[derive(Debug)]
pub struct QuantMatrix {
    format: BlockFormat,
    outputs: usize,
    inputs: usize,
    /// `[output][block][quant bytes]`.
    quants: Vec<u8>,
    /// `[output][block]`, `f16` bits as the file stores them (half the bytes a step streams).
    scales: Vec<u16>,
    /// `[output][block]`; empty for formats without an offset.
    mins: Vec<u16>,
}

impl QuantMatrix {
    /// Takes a 2-D GGUF tensor: Q4_1 and Q8_0 as stored; any other type dequantized and
    /// quantized to Q8_0.
    pub fn from_qtensor(tensor: &QTensor) -> Result<Self, InferenceError> {
        let (outputs, inputs) = tensor.shape().dims2()?;
        if inputs % BLOCK != 0 {
            return Err(InferenceError::Metadata(format!("a row of {inputs} weights is not whole blocks")));
        }
        match tensor.dtype() {
            GgmlDType::Q4_1 => Self::from_ggml_blocks(BlockFormat::Q4_1, &tensor.data()?, outputs, inputs),
            GgmlDType::Q8_0 => Self::from_ggml_blocks(BlockFormat::Q8_0, &tensor.data()?, outputs, inputs),
            _ => {
                let values = tensor.dequantize(&Device::Cpu)?.flatten_all()?.to_vec1::<f32>()?;
                Ok(Self::q8_0_from_f32(&values, outputs, inputs))
            }
        }
    }

    /// Quantizes plain `[outputs][inputs]` floats to Q8_0.
    pub fn q8_0_from_f32(values: &[f32], outputs: usize, inputs: usize) -> Self {
        let mut matrix = Self::zeroed(BlockFormat::Q8_0, outputs, inputs);
        let mut block = [0i8; BLOCK];
        for (b, chunk) in values.chunks_exact(BLOCK).enumerate() {
            let (scale, _) = quantize_block(chunk, &mut block);
            matrix.scales[b] = f16::from_f32(scale).to_bits();
            for (dst, &q) in matrix.quants[b * BLOCK..(b + 1) * BLOCK].iter_mut().zip(&block) {
                *dst = q as u8;
            }
        }
        matrix
    }

    /// Splits GGML block bytes (`f16` scale, `f16` min for Q4_1, then the quants) into the
    /// separate arrays the kernels stream.
    pub fn from_ggml_blocks(
        format: BlockFormat,
        bytes: &[u8],
        outputs: usize,
        inputs: usize,
    ) -> Result<Self, InferenceError> {
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
        let mut matrix = Self::zeroed(format, outputs, inputs);
        let half_at = |b: &[u8], at: usize| u16::from_le_bytes([b[at], b[at + 1]]);
        let quant_bytes = format.quant_bytes();
        for (b, block) in bytes.chunks_exact(block_bytes).enumerate() {
            matrix.scales[b] = half_at(block, 0);
            if format == BlockFormat::Q4_1 {
                matrix.mins[b] = half_at(block, 2);
            }
            matrix.quants[b * quant_bytes..(b + 1) * quant_bytes].copy_from_slice(&block[header..]);
        }
        Ok(matrix)
    }

    /// Stacks matrices of one format and input width, outputs after outputs (fusing Q/K/V).
    pub fn stack(parts: Vec<Self>) -> Result<Self, InferenceError> {
        let mut parts = parts.into_iter();
        let Some(first) = parts.next() else {
            return Err(InferenceError::Metadata("nothing to stack".into()));
        };
        let mut stacked = first;
        for part in parts {
            if part.format != stacked.format || part.inputs != stacked.inputs {
                return Err(InferenceError::Metadata(format!(
                    "cannot stack {:?} [_, {}] under {:?} [_, {}]",
                    part.format, part.inputs, stacked.format, stacked.inputs
                )));
            }
            stacked.outputs += part.outputs;
            stacked.quants.extend_from_slice(&part.quants);
            stacked.scales.extend_from_slice(&part.scales);
            stacked.mins.extend_from_slice(&part.mins);
        }
        Ok(stacked)
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

    /// The quants of every block of output `output`, `[block][quant bytes]`.
    #[inline(always)]
    pub fn output_quants(&self, output: usize) -> &[u8] {
        let size = self.blocks() * self.format.quant_bytes();
        &self.quants[output * size..(output + 1) * size]
    }

    /// The quants of output `output`'s block `block`.
    pub fn quants(&self, output: usize, block: usize) -> &[u8] {
        let size = self.format.quant_bytes();
        &self.output_quants(output)[block * size..(block + 1) * size]
    }

    /// Output `output`'s block scales, as `f16` bits.
    #[inline(always)]
    pub fn scales(&self, output: usize) -> &[u16] {
        &self.scales[output * self.blocks()..(output + 1) * self.blocks()]
    }

    /// Output `output`'s block offsets (Q4_1 only), as `f16` bits.
    #[inline(always)]
    pub fn mins(&self, output: usize) -> &[u16] {
        &self.mins[output * self.blocks()..(output + 1) * self.blocks()]
    }

    /// The weight at (`output`, `input`), dequantized: the definition the kernels must meet.
    pub fn weight(&self, output: usize, input: usize) -> f32 {
        let (block, i) = (input / BLOCK, input % BLOCK);
        let quants = self.quants(output, block);
        let scale = to_f32(self.scales(output)[block]);
        match self.format {
            BlockFormat::Q4_1 => {
                let byte = quants[i % (BLOCK / 2)];
                let q = if i < BLOCK / 2 { byte & 0x0F } else { byte >> 4 };
                scale * q as f32 + to_f32(self.mins(output)[block])
            }
            BlockFormat::Q8_0 => scale * quants[i] as i8 as f32,
        }
    }

    /// A matrix of zero weights.
    fn zeroed(format: BlockFormat, outputs: usize, inputs: usize) -> Self {
        let blocks = outputs * inputs / BLOCK;
        Self {
            format,
            outputs,
            inputs,
            quants: vec![0; blocks * format.quant_bytes()],
            scales: vec![0; blocks],
            mins: if format == BlockFormat::Q4_1 { vec![0; blocks] } else { Vec::new() },
        }
    }
}

/// An `f16`'s bits as `f32`.
pub fn to_f32(bits: u16) -> f32 {
    f16::from_bits(bits).to_f32()
}
