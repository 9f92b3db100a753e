//! Little-endian encoding of the persisted files: a byte writer, a bounds-checked reader, and
//! the checksum that notices a damaged file.

use crate::error::{CoreError, Result};
use crate::filter::Scalar;

/// FNV-1a over 8-byte words: cheap, and enough to notice a damaged file.
pub(crate) fn checksum(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        h = (h ^ u64::from_le_bytes(c.try_into().unwrap_or_default()))
            .wrapping_mul(0x0100_0000_01b3);
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h ^ bytes.len() as u64
}

pub(crate) fn corrupt(why: &str) -> CoreError {
    CoreError::IndexCorrupt(why.to_string())
}

/// A plain four-byte value the files store as is.
pub(crate) trait Word: Copy {
    fn le(self) -> [u8; 4];
    fn from_le(bytes: [u8; 4]) -> Self;
}

impl Word for f32 {
    fn le(self) -> [u8; 4] {
        self.to_le_bytes()
    }
    fn from_le(bytes: [u8; 4]) -> Self {
        f32::from_le_bytes(bytes)
    }
}

impl Word for u32 {
    fn le(self) -> [u8; 4] {
        self.to_le_bytes()
    }
    fn from_le(bytes: [u8; 4]) -> Self {
        u32::from_le_bytes(bytes)
    }
}

#[derive(Default)]
pub(crate) struct Writer(Vec<u8>);

impl Writer {
    pub(crate) fn new() -> Writer {
        Writer(Vec::new())
    }
    pub(crate) fn with_capacity(n: usize) -> Writer {
        Writer(Vec::with_capacity(n))
    }
    pub(crate) fn as_bytes(&self) -> &[u8] {
        &self.0
    }
    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.0
    }
    pub(crate) fn len(&self) -> usize {
        self.0.len()
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.0.extend_from_slice(b);
    }
    pub(crate) fn u8(&mut self, x: u8) {
        self.0.push(x);
    }
    pub(crate) fn u32(&mut self, x: u32) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, x: u64) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    pub(crate) fn u128(&mut self, x: u128) {
        self.0.extend_from_slice(&x.to_le_bytes());
    }
    /// Overwrites the eight bytes at `at` (a length written before what it counts).
    pub(crate) fn put_u64(&mut self, at: usize, x: u64) {
        self.0[at..at + 8].copy_from_slice(&x.to_le_bytes());
    }
    /// Four-byte words, little-endian: one copy on a little-endian machine.
    pub(crate) fn words<T: Word>(&mut self, xs: &[T]) {
        if cfg!(target_endian = "little") {
            // SAFETY: `Word` is only f32 and u32, four initialised bytes each; u8 needs no alignment.
            let bytes = unsafe {
                std::slice::from_raw_parts(xs.as_ptr().cast::<u8>(), std::mem::size_of_val(xs))
            };
            self.0.extend_from_slice(bytes);
        } else {
            xs.iter().for_each(|&x| self.0.extend_from_slice(&x.le()));
        }
    }
    pub(crate) fn i8s(&mut self, xs: &[i8]) {
        // SAFETY: i8 and u8 have the same size and alignment.
        self.0
            .extend_from_slice(unsafe { &*(xs as *const [i8] as *const [u8]) });
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.u32(s.len() as u32);
        self.0.extend_from_slice(s.as_bytes());
    }
    pub(crate) fn value(&mut self, v: Scalar<'_>) {
        match v {
            Scalar::Null => self.0.push(0),
            Scalar::Bool(b) => self.0.extend_from_slice(&[1, b as u8]),
            Scalar::Int(i) => {
                self.0.push(2);
                self.0.extend_from_slice(&i.to_le_bytes());
            }
            Scalar::Float(f) => {
                self.0.push(3);
                self.0.extend_from_slice(&f.to_le_bytes());
            }
            Scalar::Str(s) => {
                self.0.push(4);
                self.str(s);
            }
            Scalar::Other => self.0.push(5),
        }
    }
}

pub(crate) struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(bytes: &'a [u8], at: usize) -> Reader<'a> {
        Reader { bytes, at }
    }
    pub(crate) fn at(&self) -> usize {
        self.at
    }
    pub(crate) fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self
            .at
            .checked_add(n)
            .filter(|&e| e <= self.bytes.len())
            .ok_or_else(|| corrupt("truncated"))?;
        let out = &self.bytes[self.at..end];
        self.at = end;
        Ok(out)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    pub(crate) fn u128(&mut self) -> Result<u128> {
        Ok(u128::from_le_bytes(
            self.take(16)?.try_into().unwrap_or_default(),
        ))
    }
    /// A count that must fit in memory.
    pub(crate) fn count(&mut self) -> Result<usize> {
        usize::try_from(self.u64()?).map_err(|_| corrupt("bad count"))
    }
    /// `n` four-byte words appended to `out`: one copy on a little-endian machine.
    pub(crate) fn words_into<T: Word>(&mut self, n: usize, out: &mut Vec<T>) -> Result<()> {
        let raw = self.take(n.checked_mul(4).ok_or_else(|| corrupt("bad count"))?)?;
        if cfg!(target_endian = "little") {
            out.reserve(n);
            let len = out.len();
            // SAFETY: `Word` is only f32 and u32, for which any four bytes are a value; the
            // room was reserved, and the `n` words are written before the length covers them.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    raw.as_ptr(),
                    out.as_mut_ptr().add(len).cast::<u8>(),
                    raw.len(),
                );
                out.set_len(len + n);
            }
        } else {
            out.extend(
                raw.chunks_exact(4)
                    .map(|c| T::from_le([c[0], c[1], c[2], c[3]])),
            );
        }
        Ok(())
    }
    /// As many four-byte words as `out` holds, over what it held.
    pub(crate) fn words_over<T: Word>(&mut self, out: &mut [T]) -> Result<()> {
        let raw = self.take(std::mem::size_of_val(out))?;
        if cfg!(target_endian = "little") {
            // SAFETY: `Word` is only f32 and u32, for which any four bytes are a value, and
            // `raw` is exactly as long as `out`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    raw.as_ptr(),
                    out.as_mut_ptr().cast::<u8>(),
                    raw.len(),
                );
            }
        } else {
            for (x, c) in out.iter_mut().zip(raw.chunks_exact(4)) {
                *x = T::from_le([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(())
    }
    pub(crate) fn words<T: Word>(&mut self, n: usize) -> Result<Vec<T>> {
        let mut out = Vec::new(); // reserved once the bytes are there: `n` may be damaged
        self.words_into(n, &mut out)?;
        Ok(out)
    }
    pub(crate) fn i8s_into(&mut self, n: usize, out: &mut Vec<i8>) -> Result<()> {
        let raw = self.take(n)?;
        // SAFETY: i8 and u8 have the same size and alignment, and every byte is an i8.
        out.extend_from_slice(unsafe { &*(raw as *const [u8] as *const [i8]) });
        Ok(())
    }
    pub(crate) fn str(&mut self) -> Result<Box<str>> {
        self.str_ref().map(Into::into)
    }
    pub(crate) fn str_ref(&mut self) -> Result<&'a str> {
        let n = self.u32()? as usize;
        let raw = self.take(n)?;
        std::str::from_utf8(raw).map_err(|_| corrupt("bad text"))
    }
    /// A value as [`Writer::value`] wrote it, its text borrowed from the bytes.
    pub(crate) fn scalar(&mut self) -> Result<Scalar<'a>> {
        Ok(match self.u8()? {
            0 => Scalar::Null,
            1 => Scalar::Bool(self.u8()? != 0),
            2 => Scalar::Int(i64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or_default(),
            )),
            3 => Scalar::Float(f64::from_le_bytes(
                self.take(8)?.try_into().unwrap_or_default(),
            )),
            4 => Scalar::Str(self.str_ref()?),
            5 => Scalar::Other,
            _ => return Err(corrupt("bad value tag")),
        })
    }
}
