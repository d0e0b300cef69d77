//! Integer dot products of int8 vectors: the inner loop of the hot-set scan.
//!
//! On wasm32 the loop uses simd128 (16 lanes widened to i16, `i32x4.dot_i16x8_s`), enabled for this
//! one function with `#[target_feature]`: enabling it crate-wide miscompiled other code (see
//! `build.sh`). Because of that history, [`dot`] checks the SIMD path against the scalar one on fixed
//! vectors once per isolate and falls back to scalar if they ever disagree.

/// `sum(a[i] * b[i])` over the common length, in plain Rust.
pub fn dot_scalar(a: &[i8], b: &[i8]) -> i32 {
    a.iter().zip(b).map(|(&x, &y)| i32::from(x) * i32::from(y)).sum()
}

/// `sum(a[i] * b[i])` over the common length, with SIMD where the platform has been checked to get it
/// right.
pub fn dot(a: &[i8], b: &[i8]) -> i32 {
    #[cfg(target_arch = "wasm32")]
    {
        if simd::verified() {
            // SAFETY: workerd's V8 implements wasm simd128, and `verified` compared this very function
            // with the scalar loop.
            #[allow(unsafe_code)]
            return unsafe { simd::dot(a, b) };
        }
    }
    dot_scalar(a, b)
}

#[cfg(target_arch = "wasm32")]
#[allow(unsafe_code)]
mod simd {
    use core::arch::wasm32::{
        i16x8_extend_high_i8x16, i16x8_extend_low_i8x16, i32x4_add, i32x4_dot_i16x8, i32x4_extract_lane,
        i32x4_splat, v128, v128_load,
    };
    use std::cell::Cell;

    thread_local! {
        /// `None` until checked, then whether the SIMD loop agreed with the scalar one.
        static VERIFIED: Cell<Option<bool>> = const { Cell::new(None) };
    }

    /// Whether the SIMD loop gives the scalar loop's results (checked once, on awkward lengths and
    /// extreme values).
    pub fn verified() -> bool {
        VERIFIED.with(|cell| {
            if let Some(known) = cell.get() {
                return known;
            }
            let a: Vec<i8> = (0..83).map(|i| ((i * 37 + 11) % 256) as u8 as i8).collect();
            let b: Vec<i8> = (0..83).map(|i| ((i * 91 + 200) % 256) as u8 as i8).collect();
            let extremes = [i8::MIN; 48];
            let agree = [16, 17, 64, 83].iter().all(|&n| {
                // SAFETY: as in `super::dot`.
                unsafe { dot(&a[..n], &b[..n]) == super::dot_scalar(&a[..n], &b[..n]) }
            }) && unsafe { dot(&extremes, &extremes) } == super::dot_scalar(&extremes, &extremes);
            if !agree {
                worker::console_warn!("simd128 dot product disagreed with the scalar loop; using scalar");
            }
            cell.set(Some(agree));
            agree
        })
    }

    /// The SIMD dot product.
    ///
    /// # Safety
    /// The runtime must support simd128.
    #[target_feature(enable = "simd128")]
    pub unsafe fn dot(a: &[i8], b: &[i8]) -> i32 {
        let n = a.len().min(b.len());
        let mut sum = i32x4_splat(0);
        let mut i = 0;
        while i + 16 <= n {
            // SAFETY: `i + 16 <= n` bytes are in bounds of both slices; v128_load is unaligned.
            let (x, y) = unsafe {
                (v128_load(a.as_ptr().add(i).cast::<v128>()), v128_load(b.as_ptr().add(i).cast::<v128>()))
            };
            let low = i32x4_dot_i16x8(i16x8_extend_low_i8x16(x), i16x8_extend_low_i8x16(y));
            let high = i32x4_dot_i16x8(i16x8_extend_high_i8x16(x), i16x8_extend_high_i8x16(y));
            sum = i32x4_add(sum, i32x4_add(low, high));
            i += 16;
        }
        let lanes = i32x4_extract_lane::<0>(sum)
            + i32x4_extract_lane::<1>(sum)
            + i32x4_extract_lane::<2>(sum)
            + i32x4_extract_lane::<3>(sum);
        lanes + super::dot_scalar(&a[i..n], &b[i..n])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dot_products_cover_the_common_length() {
        assert_eq!(dot(&[1, 2, 3], &[4, 5, 6]), 32);
        assert_eq!(dot(&[127; 64], &[-128; 64]), 64 * 127 * -128);
        assert_eq!(dot(&[1, 2, 3], &[1]), 1);
        assert_eq!(dot(&[], &[]), 0);
    }
}
