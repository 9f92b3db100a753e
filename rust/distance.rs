//! Vector metrics and the SIMD kernels behind them.
//!
//! Cosine vectors are normalised once at insert, so cosine similarity is a dot product. The
//! kernel (AVX-512, AVX2+FMA or scalar) is chosen once, on first use, by runtime detection.

use std::sync::OnceLock;

use crate::error::{CoreError, Result};

/// How closeness is measured; names follow the public API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    Cosine,
    Euclidean,
    DotProduct,
}

impl Metric {
    /// Parses `"cosine"`, `"euclidean"` or `"dotproduct"`.
    pub fn parse(name: &str) -> Result<Metric> {
        match name {
            "cosine" => Ok(Metric::Cosine),
            "euclidean" => Ok(Metric::Euclidean),
            "dotproduct" => Ok(Metric::DotProduct),
            other => Err(CoreError::InvalidArgument(format!(
                "unknown metric {other:?}; expected \"cosine\", \"euclidean\" or \"dotproduct\""
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Metric::Cosine => "cosine",
            Metric::Euclidean => "euclidean",
            Metric::DotProduct => "dotproduct",
        }
    }

    pub fn code(self) -> u8 {
        match self {
            Metric::Cosine => 0,
            Metric::Euclidean => 1,
            Metric::DotProduct => 2,
        }
    }

    pub fn from_code(code: u8) -> Option<Metric> {
        [Metric::Cosine, Metric::Euclidean, Metric::DotProduct]
            .into_iter()
            .find(|m| m.code() == code)
    }

    /// The graph's distance between two stored vectors: smaller is closer.
    #[inline]
    pub fn distance(self, a: &[f32], b: &[f32]) -> f32 {
        match self {
            Metric::Euclidean => l2_squared(a, b),
            Metric::Cosine | Metric::DotProduct => -dot(a, b),
        }
    }

    /// Turns a graph distance into the public score: larger is closer.
    pub fn score(self, distance: f32) -> f32 {
        match self {
            Metric::Euclidean => -distance.max(0.0).sqrt(),
            Metric::Cosine | Metric::DotProduct => -distance,
        }
    }

    /// Prepares a vector for storage or search (cosine: unit length).
    pub fn prepare(self, v: &mut [f32]) {
        if self == Metric::Cosine {
            normalize(v);
        }
    }
}

/// Scales `v` to unit length; a zero vector stays zero.
pub fn normalize(v: &mut [f32]) {
    let norm = dot(v, v).sqrt();
    if norm > 0.0 {
        let inv = 1.0 / norm;
        v.iter_mut().for_each(|x| *x *= inv);
    }
}

type Kernel = fn(&[f32], &[f32]) -> f32;
type CodeKernel = fn(&[i16], &[i8]) -> i32;

struct Kernels {
    dot: Kernel,
    l2: Kernel,
    dot_codes: CodeKernel,
}

fn kernels() -> &'static Kernels {
    static KERNELS: OnceLock<Kernels> = OnceLock::new();
    KERNELS.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> Kernels {
    if std::is_x86_feature_detected!("avx512f") {
        Kernels {
            dot: x86::dot_avx512_safe,
            l2: x86::l2_avx512_safe,
            dot_codes: code_kernel(),
        }
    } else if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
        Kernels {
            dot: x86::dot_avx2_safe,
            l2: x86::l2_avx2_safe,
            dot_codes: code_kernel(),
        }
    } else {
        scalar_kernels()
    }
}

/// The code kernel: integer AVX-512 where its BW and VL extensions (16-bit multiplies, byte
/// masks) are there, else integer AVX2.
#[cfg(target_arch = "x86_64")]
fn code_kernel() -> CodeKernel {
    if std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vl") {
        x86::dot_codes_avx512_safe
    } else if std::is_x86_feature_detected!("avx2") {
        x86::dot_codes_avx2_safe
    } else {
        dot_codes_scalar
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> Kernels {
    scalar_kernels()
}

fn scalar_kernels() -> Kernels {
    Kernels {
        dot: dot_scalar,
        l2: l2_squared_scalar,
        dot_codes: dot_codes_scalar,
    }
}

/// Dot product of two equal-length vectors.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    (kernels().dot)(a, b)
}

/// Squared Euclidean distance of two equal-length vectors.
#[inline]
pub fn l2_squared(a: &[f32], b: &[f32]) -> f32 {
    (kernels().l2)(a, b)
}

/// Dot product of a quantised query (16-bit, see `Query`) with int8 codes (see `Codes`),
/// before either scale: exact in integers while `127 * sum |q_i|` fits an `i32`.
#[inline]
pub fn dot_codes(q: &[i16], codes: &[i8]) -> i32 {
    (kernels().dot_codes)(q, codes)
}

/// The portable reference kernel (also the fallback).
pub fn dot_codes_scalar(q: &[i16], codes: &[i8]) -> i32 {
    q.iter()
        .zip(codes)
        .map(|(&a, &b)| a as i32 * b as i32)
        .fold(0i32, i32::wrapping_add)
}

/// The portable reference kernel (also the fallback).
pub fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8 * 8;
    for i in (0..chunks).step_by(8) {
        for j in 0..8 {
            acc[j] += a[i + j] * b[i + j];
        }
    }
    let tail: f32 = (chunks..a.len()).map(|i| a[i] * b[i]).sum();
    acc.iter().sum::<f32>() + tail
}

/// The portable reference kernel (also the fallback).
pub fn l2_squared_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0.0f32; 8];
    let chunks = a.len() / 8 * 8;
    for i in (0..chunks).step_by(8) {
        for j in 0..8 {
            let d = a[i + j] - b[i + j];
            acc[j] += d * d;
        }
    }
    let tail: f32 = (chunks..a.len())
        .map(|i| (a[i] - b[i]) * (a[i] - b[i]))
        .sum();
    acc.iter().sum::<f32>() + tail
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    // The safe wrappers are only installed after the features were detected at run time.
    pub fn dot_avx2_safe(a: &[f32], b: &[f32]) -> f32 {
        unsafe { dot_avx2(a, b) }
    }
    pub fn l2_avx2_safe(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l2_avx2(a, b) }
    }
    pub fn dot_avx512_safe(a: &[f32], b: &[f32]) -> f32 {
        unsafe { dot_avx512(a, b) }
    }
    pub fn l2_avx512_safe(a: &[f32], b: &[f32]) -> f32 {
        unsafe { l2_avx512(a, b) }
    }
    pub fn dot_codes_avx2_safe(q: &[i16], c: &[i8]) -> i32 {
        unsafe { dot_codes_avx2(q, c) }
    }
    pub fn dot_codes_avx512_safe(q: &[i16], c: &[i8]) -> i32 {
        unsafe { dot_codes_avx512(q, c) }
    }

    /// 32 products per multiply-add, summed in 32-bit lanes; the tail through masked loads.
    #[target_feature(enable = "avx512f,avx512bw,avx512vl")]
    unsafe fn dot_codes_avx512(q: &[i16], c: &[i8]) -> i32 {
        let n = q.len().min(c.len());
        let (pq, pc) = (q.as_ptr(), c.as_ptr());
        let mut s0 = _mm512_setzero_si512();
        let mut s1 = _mm512_setzero_si512();
        let mut i = 0;
        while i + 64 <= n {
            let c0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pc.add(i) as *const __m256i));
            let c1 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pc.add(i + 32) as *const __m256i));
            let q0 = _mm512_loadu_si512(pq.add(i) as *const __m512i);
            let q1 = _mm512_loadu_si512(pq.add(i + 32) as *const __m512i);
            s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(q0, c0));
            s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(q1, c1));
            i += 64;
        }
        if i + 32 <= n {
            let c0 = _mm512_cvtepi8_epi16(_mm256_loadu_si256(pc.add(i) as *const __m256i));
            let q0 = _mm512_loadu_si512(pq.add(i) as *const __m512i);
            s0 = _mm512_add_epi32(s0, _mm512_madd_epi16(q0, c0));
            i += 32;
        }
        if i < n {
            let mask: __mmask32 = (1u32 << (n - i)) - 1;
            let c0 = _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(mask, pc.add(i)));
            let q0 = _mm512_maskz_loadu_epi16(mask, pq.add(i));
            s1 = _mm512_add_epi32(s1, _mm512_madd_epi16(q0, c0));
        }
        _mm512_reduce_add_epi32(_mm512_add_epi32(s0, s1))
    }

    /// 16 products per multiply-add (`vpmaddwd`), summed in 32-bit lanes.
    #[target_feature(enable = "avx2")]
    unsafe fn dot_codes_avx2(q: &[i16], c: &[i8]) -> i32 {
        let n = q.len().min(c.len());
        let (pq, pc) = (q.as_ptr(), c.as_ptr());
        let mut s0 = _mm256_setzero_si256();
        let mut s1 = _mm256_setzero_si256();
        let mut i = 0;
        while i + 32 <= n {
            let c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pc.add(i) as *const __m128i));
            let c1 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pc.add(i + 16) as *const __m128i));
            let q0 = _mm256_loadu_si256(pq.add(i) as *const __m256i);
            let q1 = _mm256_loadu_si256(pq.add(i + 16) as *const __m256i);
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(q0, c0));
            s1 = _mm256_add_epi32(s1, _mm256_madd_epi16(q1, c1));
            i += 32;
        }
        if i + 16 <= n {
            let c0 = _mm256_cvtepi8_epi16(_mm_loadu_si128(pc.add(i) as *const __m128i));
            let q0 = _mm256_loadu_si256(pq.add(i) as *const __m256i);
            s0 = _mm256_add_epi32(s0, _mm256_madd_epi16(q0, c0));
            i += 16;
        }
        let s = _mm256_add_epi32(s0, s1);
        let x = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        let x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0b01_00_11_10));
        let x = _mm_add_epi32(x, _mm_shuffle_epi32(x, 0b10_11_00_01));
        let mut sum = _mm_cvtsi128_si32(x);
        while i < n {
            sum = sum.wrapping_add(*pq.add(i) as i32 * *pc.add(i) as i32);
            i += 1;
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn hsum256(v: __m256) -> f32 {
        let lo = _mm256_castps256_ps128(v);
        let hi = _mm256_extractf128_ps(v, 1);
        let s = _mm_add_ps(lo, hi);
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
        _mm_cvtss_f32(s)
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm256_setzero_ps();
        let mut s1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
            s1 = _mm256_fmadd_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
                s1,
            );
            i += 16;
        }
        if i + 8 <= n {
            s0 = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), s0);
            i += 8;
        }
        let mut sum = hsum256(_mm256_add_ps(s0, s1));
        while i < n {
            sum += *pa.add(i) * *pb.add(i);
            i += 1;
        }
        sum
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn l2_avx2(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm256_setzero_ps();
        let mut s1 = _mm256_setzero_ps();
        let mut i = 0;
        while i + 16 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            let d1 = _mm256_sub_ps(
                _mm256_loadu_ps(pa.add(i + 8)),
                _mm256_loadu_ps(pb.add(i + 8)),
            );
            s0 = _mm256_fmadd_ps(d0, d0, s0);
            s1 = _mm256_fmadd_ps(d1, d1, s1);
            i += 16;
        }
        if i + 8 <= n {
            let d0 = _mm256_sub_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)));
            s0 = _mm256_fmadd_ps(d0, d0, s0);
            i += 8;
        }
        let mut sum = hsum256(_mm256_add_ps(s0, s1));
        while i < n {
            let d = *pa.add(i) - *pb.add(i);
            sum += d * d;
            i += 1;
        }
        sum
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm512_setzero_ps();
        let mut s1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
            s1 = _mm512_fmadd_ps(
                _mm512_loadu_ps(pa.add(i + 16)),
                _mm512_loadu_ps(pb.add(i + 16)),
                s1,
            );
            i += 32;
        }
        if i + 16 <= n {
            s0 = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), s0);
            i += 16;
        }
        if i < n {
            let mask: __mmask16 = (1u32 << (n - i)) as u16 - 1;
            let x = _mm512_maskz_loadu_ps(mask, pa.add(i));
            let y = _mm512_maskz_loadu_ps(mask, pb.add(i));
            s1 = _mm512_fmadd_ps(x, y, s1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn l2_avx512(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        let mut s0 = _mm512_setzero_ps();
        let mut s1 = _mm512_setzero_ps();
        let mut i = 0;
        while i + 32 <= n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            let d1 = _mm512_sub_ps(
                _mm512_loadu_ps(pa.add(i + 16)),
                _mm512_loadu_ps(pb.add(i + 16)),
            );
            s0 = _mm512_fmadd_ps(d0, d0, s0);
            s1 = _mm512_fmadd_ps(d1, d1, s1);
            i += 32;
        }
        if i + 16 <= n {
            let d0 = _mm512_sub_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)));
            s0 = _mm512_fmadd_ps(d0, d0, s0);
            i += 16;
        }
        if i < n {
            let mask: __mmask16 = (1u32 << (n - i)) as u16 - 1;
            let d = _mm512_sub_ps(
                _mm512_maskz_loadu_ps(mask, pa.add(i)),
                _mm512_maskz_loadu_ps(mask, pb.add(i)),
            );
            s1 = _mm512_fmadd_ps(d, d, s1);
        }
        _mm512_reduce_add_ps(_mm512_add_ps(s0, s1))
    }

    #[cfg(test)]
    pub fn available() -> Vec<(&'static str, super::Kernel, super::Kernel)> {
        let mut out: Vec<(&'static str, super::Kernel, super::Kernel)> = Vec::new();
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            out.push(("avx2", dot_avx2_safe, l2_avx2_safe));
        }
        if std::is_x86_feature_detected!("avx512f") {
            out.push(("avx512", dot_avx512_safe, l2_avx512_safe));
        }
        out
    }

    #[cfg(test)]
    pub fn available_code_kernels() -> Vec<(&'static str, super::CodeKernel)> {
        let mut out: Vec<(&'static str, super::CodeKernel)> = Vec::new();
        if std::is_x86_feature_detected!("avx2") {
            out.push(("avx2", dot_codes_avx2_safe));
        }
        if std::is_x86_feature_detected!("avx512bw") && std::is_x86_feature_detected!("avx512vl") {
            out.push(("avx512", dot_codes_avx512_safe));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small deterministic generator so the tests need no dependency (seed stated per test).
    fn values(seed: u64, n: usize) -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }

    #[test]
    fn simd_matches_scalar_for_every_length() {
        // seed 7; lengths cover the vector body, the 8/16 steps and every tail size.
        let a = values(7, 131);
        let b = values(8, 131);
        let chosen = [("chosen", dot as Kernel, l2_squared as Kernel)];
        #[cfg(target_arch = "x86_64")]
        let all: Vec<_> = chosen.into_iter().chain(x86::available()).collect();
        #[cfg(not(target_arch = "x86_64"))]
        let all: Vec<_> = chosen.into_iter().collect();
        for (name, dk, lk) in all {
            for n in 0..=131 {
                let (x, y) = (&a[..n], &b[..n]);
                let (d0, d1) = (dot_scalar(x, y), dk(x, y));
                let (l0, l1) = (l2_squared_scalar(x, y), lk(x, y));
                assert!(
                    (d0 - d1).abs() <= 1e-5 * (1.0 + d0.abs()),
                    "{name} dot n={n}"
                );
                assert!(
                    (l0 - l1).abs() <= 1e-5 * (1.0 + l0.abs()),
                    "{name} l2 n={n}"
                );
            }
        }
    }

    #[test]
    fn code_kernels_match_scalar_for_every_length() {
        // seed 9 for the query, 10 for the codes; lengths cover every body step and tail, the
        // extremes (-32767 x -127) included.
        let mut q: Vec<i16> = values(9, 131)
            .iter()
            .map(|x| (x * 32767.0).round() as i16)
            .collect();
        let mut codes: Vec<i8> = values(10, 131)
            .iter()
            .map(|x| (x * 127.0).round() as i8)
            .collect();
        (q[5], codes[5], q[40], codes[40]) = (-32767, -127, 32767, -127);
        let chosen = [
            ("chosen", dot_codes as CodeKernel),
            ("scalar", dot_codes_scalar),
        ];
        #[cfg(target_arch = "x86_64")]
        let all: Vec<_> = chosen
            .into_iter()
            .chain(x86::available_code_kernels())
            .collect();
        #[cfg(not(target_arch = "x86_64"))]
        let all: Vec<_> = chosen.into_iter().collect();
        for (name, kernel) in all {
            for n in 0..=131 {
                let want: i64 = (0..n).map(|i| q[i] as i64 * codes[i] as i64).sum();
                assert_eq!(kernel(&q[..n], &codes[..n]) as i64, want, "{name} n={n}");
            }
        }
    }

    #[test]
    fn metric_scores_are_larger_when_closer() {
        let mut a = vec![1.0, 0.0, 0.0];
        let mut b = vec![2.0, 0.0, 0.0];
        Metric::Cosine.prepare(&mut a);
        Metric::Cosine.prepare(&mut b);
        let s = Metric::Cosine.score(Metric::Cosine.distance(&a, &b));
        assert!((s - 1.0).abs() < 1e-6);
        let e = Metric::Euclidean;
        assert_eq!(e.score(e.distance(&[0.0, 3.0], &[4.0, 0.0])), -5.0);
        let d = Metric::DotProduct;
        assert_eq!(d.score(d.distance(&[1.0, 2.0], &[3.0, 4.0])), 11.0);
    }

    #[test]
    fn metric_names_round_trip_and_unknown_is_an_error() {
        for m in [Metric::Cosine, Metric::Euclidean, Metric::DotProduct] {
            assert_eq!(Metric::parse(m.name()), Ok(m));
            assert_eq!(Metric::from_code(m.code()), Some(m));
        }
        assert!(matches!(
            Metric::parse("manhattan"),
            Err(CoreError::InvalidArgument(_))
        ));
    }

    #[test]
    fn normalize_gives_unit_length_and_keeps_zero() {
        let mut v = values(3, 384);
        normalize(&mut v);
        assert!((dot(&v, &v) - 1.0).abs() < 1e-5);
        let mut z = vec![0.0; 5];
        normalize(&mut z);
        assert_eq!(z, vec![0.0; 5]);
    }
}
