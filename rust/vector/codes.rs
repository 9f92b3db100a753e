//! The vectors as int8 codes, one scale per vector, with what bounds each code distance's
//! error: graph walks measure codes (a quarter of the bytes of the float vectors), and the
//! bounds tell a re-rank which float vectors can still matter.

use crate::distance::Metric;

/// A query with what the code distances need of it: its norm, and itself quantised to 16
/// bits (`v ≈ step * quantised`), so a code distance is an integer dot product; `error`,
/// `|v - step * quantised|`, bounds what that quantisation moves it.
pub(crate) struct Query<'a> {
    /// The float vector, for exact distances; empty for a query made of codes.
    pub(crate) v: &'a [f32],
    pub(crate) norm: f32,
    quantised: Vec<i16>,
    step: f32,
    error: f32,
}

impl<'a> Query<'a> {
    pub(crate) fn new(v: &'a [f32]) -> Query<'a> {
        let top = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        // The integer sum must fit an i32: |sum| <= 127 * dim * limit.
        let limit = (i32::MAX as usize / (127 * v.len().max(1))).clamp(1, i16::MAX as usize);
        let limit = limit as f32;
        let (step, inv) = if top > 0.0 {
            (top / limit, limit / top)
        } else {
            (0.0, 0.0)
        };
        let quantised: Vec<i16> = v
            .iter()
            .map(|x| {
                let y = (x * inv).clamp(-limit, limit);
                (y + 0.5f32.copysign(y)) as i16
            })
            .collect();
        let error: f64 = v
            .iter()
            .zip(&quantised)
            .map(|(&x, &c)| (x as f64 - step as f64 * c as f64).powi(2))
            .sum();
        Query {
            norm: crate::distance::dot(v, v).sqrt(),
            v,
            quantised,
            step,
            error: error.sqrt() as f32,
        }
    }
}

/// Scalar quantisation, one scale per vector: `v ≈ v̂ = scale * codes`, `codes` in -127..=127,
/// `scale = max |v_i| / 127`. Per-vector scales need no training, so vectors can arrive one
/// at a time; a query stays in floats (asymmetric distance). Each vector also keeps what
/// bounds the error, so an exact scan can skip the float vectors that cannot matter.
#[derive(Default)]
pub(crate) struct Codes {
    pub(crate) codes: Vec<i8>,
    pub(crate) scales: Vec<f32>,
    /// `|v̂|²`, for Euclidean distances.
    pub(crate) norms: Vec<f32>,
    /// `|v - v̂| + ROUNDING |v̂|`: by Cauchy-Schwarz `|q·v - q·v̂| <= |q| |v - v̂|`, and float
    /// rounding of a dot product grows with `|q| |v̂|`.
    pub(crate) residuals: Vec<f32>,
    /// `||v|² - |v̂|²| + ROUNDING |v̂|²`, the rest of a Euclidean distance's error.
    pub(crate) norm_gaps: Vec<f32>,
}

/// Slack for float rounding in a distance, relative to the size of the terms it sums.
const ROUNDING: f32 = 1e-5;

impl Codes {
    /// Code bytes held.
    pub(crate) fn len(&self) -> usize {
        self.codes.len()
    }

    /// Bytes of codes allocated.
    pub(crate) fn bytes(&self) -> usize {
        self.codes.capacity()
    }

    /// The codes from byte `from` on.
    pub(crate) fn runs_from(&self, from: usize) -> [&[i8]; 1] {
        [&self.codes[from..]]
    }

    pub(crate) fn reserve(&mut self, additional: usize, dim: usize, exact: bool) {
        let per_slot = [
            &mut self.scales,
            &mut self.norms,
            &mut self.residuals,
            &mut self.norm_gaps,
        ];
        if exact {
            self.codes.reserve_exact(additional * dim);
            per_slot
                .into_iter()
                .for_each(|v| v.reserve_exact(additional));
        } else {
            self.codes.reserve(additional * dim);
            per_slot.into_iter().for_each(|v| v.reserve(additional));
        }
    }

    pub(crate) fn push(&mut self, v: &[f32]) {
        let top = v.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let scale = if top > 0.0 { top / 127.0 } else { 0.0 };
        let inv = if top > 0.0 { 127.0 / top } else { 0.0 };
        let start = self.codes.len();
        // Rounded half away from zero by hand: `f32::round` is a library call per element,
        // this vectorises.
        self.codes.extend(v.iter().map(|x| {
            let y = (x * inv).clamp(-127.0, 127.0);
            (y + 0.5f32.copysign(y)) as i8
        }));
        let c = &self.codes[start..];
        let (mut norm, mut exact_norm, mut residual) = (0.0f64, 0.0f64, 0.0f64);
        for (&x, &code) in v.iter().zip(c) {
            let approx = scale as f64 * code as f64;
            norm += approx * approx;
            exact_norm += x as f64 * x as f64;
            residual += (x as f64 - approx).powi(2);
        }
        self.scales.push(scale);
        self.norms.push(norm as f32);
        let rounding = ROUNDING as f64;
        self.residuals
            .push((residual.sqrt() + rounding * norm.sqrt()) as f32);
        self.norm_gaps
            .push(((exact_norm - norm).abs() + rounding * norm) as f32);
    }

    /// The vector the codes of `slot` stand for: `scale * codes`.
    pub(crate) fn decode(&self, slot: usize, dim: usize) -> Vec<f32> {
        let scale = self.scales[slot];
        self.of(slot, dim)
            .iter()
            .map(|&c| c as f32 * scale)
            .collect()
    }

    #[inline]
    pub(crate) fn of(&self, slot: usize, dim: usize) -> &[i8] {
        &self.codes[slot * dim..(slot + 1) * dim]
    }

    #[inline]
    pub(crate) fn distance(&self, metric: Metric, q: &Query, slot: usize, dim: usize) -> f32 {
        let d = crate::distance::dot_codes(&q.quantised, self.of(slot, dim)) as f32
            * (q.step * self.scales[slot]);
        match metric {
            Metric::Euclidean => q.norm * q.norm + self.norms[slot] - 2.0 * d,
            Metric::Cosine | Metric::DotProduct => -d,
        }
    }

    /// The vector `slot`'s codes stand for, `v̂ = scale * codes`, as a query: its codes
    /// widened to 16 bits at its own scale represent it exactly, so nothing is rounded again
    /// (`error` 0). It holds no float vector: it measures codes only (linking does), never
    /// floats (a re-rank does).
    pub(crate) fn query(&self, slot: usize, dim: usize) -> Query<'static> {
        Query {
            v: &[],
            norm: self.norms[slot].sqrt(),
            quantised: self.of(slot, dim).iter().map(|&c| c as i16).collect(),
            step: self.scales[slot],
            error: 0.0,
        }
    }

    /// How far [`Codes::distance`] can be from the float distance, float rounding included
    /// (the per-vector part of it is folded into `residuals` and `norm_gaps`): the codes'
    /// error `|q| |v - v̂|`, and the query's quantisation error `|q - q̂| |v̂|`.
    #[inline]
    pub(crate) fn bound(&self, metric: Metric, q: &Query, slot: usize) -> f32 {
        let dot = q.norm * self.residuals[slot] + q.error * self.norms[slot].sqrt();
        match metric {
            Metric::Euclidean => {
                2.0 * dot + self.norm_gaps[slot] + ROUNDING * (1.0 + q.norm * q.norm)
            }
            Metric::Cosine | Metric::DotProduct => dot + ROUNDING,
        }
    }
}
