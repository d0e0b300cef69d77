use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
use candle_core::{Device, Module, Tensor};

use super::activations::QuantizedRows;
use super::kernel::{self, PORTABLE};
use super::*;
use crate::rng::Rng;

fn random(len: usize, seed: u64) -> Vec<f32> {
    let mut rng = Rng::seed_from_u64(seed);
    (0..len).map(|_| rng.uniform_f32() * 2.0 - 1.0).collect()
}

fn quantized(tensor: &[f32], outputs: usize, inputs: usize, dtype: GgmlDType) -> QTensor {
    let t = Tensor::from_slice(tensor, (outputs, inputs), &Device::Cpu).expect("tensor");
    QTensor::quantize(&t, dtype).expect("quantize")
}

/// `x @ w^T` in `f64` over the dequantized weights and the dequantized 8-bit activations: what
/// every kernel must produce up to `f32` rounding.
fn exact(w: &QuantMatrix, x: &QuantizedRows, rows: usize) -> Vec<f32> {
    let inputs = w.inputs();
    let mut out = vec![0.0; rows * w.outputs()];
    for r in 0..rows {
        for o in 0..w.outputs() {
            let mut total = 0.0f64;
            for k in 0..inputs {
                total += x.value(r, k) as f64 * w.weight(o, k) as f64;
            }
            out[r * w.outputs() + o] = total as f32;
        }
    }
    out
}

fn assert_close(got: &[f32], want: &[f32], tolerance: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tolerance * (1.0 + w.abs()), "{what}: element {i}: {g} vs {w}");
    }
}

#[test]
fn every_kernel_meets_the_dequantized_definition_for_every_row_count() {
    let (outputs, inputs) = (37, 96);
    let weights = random(outputs * inputs, 1);
    for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
        let w = QuantMatrix::from_qtensor(&quantized(&weights, outputs, inputs, dtype)).expect("matrix");
        for rows in [1, 2, 4, 5, 7, 8, 9, 13, 17] {
            let x = random(rows * inputs, 2 + rows as u64);
            let mut q = QuantizedRows::default();
            q.quantize(&x, rows);
            let want = exact(&w, &q, rows);
            let detected = w.matmul_quantized(&q, kernel::kernels());
            assert_close(&detected, &want, 1e-4, &format!("{dtype:?} detected kernel, {rows} rows"));
            let portable = w.matmul_quantized(&q, PORTABLE);
            assert_close(&portable, &want, 1e-4, &format!("{dtype:?} portable kernel, {rows} rows"));
            assert_close(&w.matmul(&x, rows), &detected, 0.0, "matmul quantizes as the test does");
        }
    }
}

#[test]
fn agrees_with_candle_quantized_matmul() {
    let (outputs, inputs, rows) = (48, 128, 5);
    let weights = random(outputs * inputs, 3);
    let x = random(rows * inputs, 4);
    for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
        let tensor = quantized(&weights, outputs, inputs, dtype);
        let ours = QuantMatrix::from_qtensor(&tensor).expect("matrix").matmul(&x, rows);
        let input = Tensor::from_slice(&x, (rows, inputs), &Device::Cpu).expect("input");
        let theirs = QMatMul::from_qtensor(tensor).expect("qmatmul").forward(&input).expect("forward");
        let theirs = theirs.flatten_all().and_then(|t| t.to_vec1::<f32>()).expect("values");
        // candle keeps each activation block's scale (and Q8_1's sum) in f16, we keep f32.
        assert_close(&ours, &theirs, 5e-3, &format!("{dtype:?} against candle"));
    }
}

#[test]
fn other_types_are_requantized_to_q8_0() {
    let (outputs, inputs) = (4, 64);
    let weights = random(outputs * inputs, 5);
    let w = QuantMatrix::from_qtensor(&quantized(&weights, outputs, inputs, GgmlDType::F32)).expect("matrix");
    assert_eq!(w.format(), BlockFormat::Q8_0);
    for (i, &v) in weights.iter().enumerate() {
        assert!((w.weight(i / inputs, i % inputs) - v).abs() < 1.0 / 127.0, "weight {i}");
    }
}

#[test]
fn stacking_puts_outputs_after_outputs() {
    let inputs = 64;
    let (a, b) = (random(3 * inputs, 6), random(5 * inputs, 7));
    let load =
        |v: &[f32], n| QuantMatrix::from_qtensor(&quantized(v, n, inputs, GgmlDType::Q4_1)).expect("matrix");
    let x = random(2 * inputs, 8);
    let (ya, yb) = (load(&a, 3).matmul(&x, 2), load(&b, 5).matmul(&x, 2));
    let stacked = QuantMatrix::stack(vec![load(&a, 3), load(&b, 5)]).expect("stack");
    assert_eq!(stacked.outputs(), 8);
    let y = stacked.matmul(&x, 2);
    for r in 0..2 {
        assert_eq!(&y[r * 8..r * 8 + 3], &ya[r * 3..r * 3 + 3]);
        assert_eq!(&y[r * 8 + 3..r * 8 + 8], &yb[r * 5..r * 5 + 5]);
    }
    let q8 = QuantMatrix::from_qtensor(&quantized(&a, 3, inputs, GgmlDType::Q8_0)).expect("matrix");
    assert!(QuantMatrix::stack(vec![load(&a, 3), q8]).is_err(), "formats must match");
}

#[test]
fn malformed_tensors_are_refused() {
    assert!(QuantMatrix::from_ggml_blocks(BlockFormat::Q4_1, &[0; 19], 1, 32).is_err());
    assert!(QuantMatrix::from_ggml_blocks(BlockFormat::Q8_0, &[0; 34], 2, 32).is_err());
    let odd = quantized(&random(2 * 48, 9), 2, 48, GgmlDType::F32);
    assert!(QuantMatrix::from_qtensor(&odd).is_err(), "rows must be whole blocks");
}

#[test]
fn a_row_gets_the_same_bits_alone_and_in_any_tile() {
    let (outputs, inputs) = (19, 160);
    let weights = random(outputs * inputs, 10);
    let x = random(13 * inputs, 11);
    for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
        let w = QuantMatrix::from_qtensor(&quantized(&weights, outputs, inputs, dtype)).expect("matrix");
        // 13 rows: one full tile (tile kernel) and a tail of 5 (tile kernel on a padded tile).
        let batched = w.matmul(&x, 13);
        for (r, row) in x.chunks_exact(inputs).enumerate() {
            let alone = w.matmul(row, 1);
            assert_eq!(&batched[r * outputs..(r + 1) * outputs], alone.as_slice(), "{dtype:?} row {r}");
        }
        // 3 rows: the row kernel, four outputs at a time and one by one.
        let few = w.matmul(&x[..3 * inputs], 3);
        assert_eq!(&few[..], &batched[..3 * outputs], "{dtype:?} row kernel on 3 rows");
    }
}

#[test]
fn q8_0_weights_of_minus_128_are_multiplied_exactly() {
    // The file format allows -128 (0x80) though llama.cpp's quantizer never writes it.
    let (outputs, inputs) = (4, 64);
    let mut bytes = Vec::new();
    for block in 0..outputs * inputs / BLOCK {
        bytes.extend_from_slice(&half::f16::from_f32(0.01).to_bits().to_le_bytes());
        bytes.extend((0..BLOCK).map(|i| if (i + block) % 3 == 0 { 0x80 } else { (i * 7) as u8 }));
    }
    let w = QuantMatrix::from_ggml_blocks(BlockFormat::Q8_0, &bytes, outputs, inputs).expect("matrix");
    let x: Vec<f32> = (0..2 * inputs).map(|i| if i % 2 == 0 { -1.0 } else { 0.5 }).collect();
    let mut q = QuantizedRows::default();
    q.quantize(&x, 2);
    assert_close(&w.matmul(&x, 2), &exact(&w, &q, 2), 1e-4, "-128 weights");
}
