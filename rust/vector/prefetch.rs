//! Memory hints: loading cache lines ahead of use, and huge pages for the large arrays.

/// Advises huge pages for the whole capacity of `buffer` (best before it is filled).
#[cfg(target_os = "linux")]
pub(crate) fn advise_huge_pages<T>(buffer: &Vec<T>) {
    const HUGE: usize = 2 << 20;
    let start = buffer.as_ptr() as usize;
    let end = start + buffer.capacity() * std::mem::size_of::<T>();
    let (from, to) = (start.next_multiple_of(HUGE), end / HUGE * HUGE);
    if to > from {
        // Advice only: failure leaves ordinary pages, which are correct, just slower.
        unsafe {
            libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_HUGEPAGE);
        }
    }
}

#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge_pages<T>(_buffer: &Vec<T>) {}

/// Cache lines of a vector requested ahead of its distance computation.
const PREFETCH_LINES: usize = 6;

#[inline(always)]
pub(crate) fn prefetch<T>(v: &[T]) {
    prefetch_lines(v, PREFETCH_LINES);
}

/// Requests the first `max_lines` cache lines of `v`.
#[inline(always)]
pub(crate) fn prefetch_lines<T>(v: &[T], max_lines: usize) {
    #[cfg(target_arch = "x86_64")]
    unsafe {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let lines = std::mem::size_of_val(v).div_ceil(64).min(max_lines);
        for line in 0..lines {
            _mm_prefetch((v.as_ptr() as *const i8).add(line * 64), _MM_HINT_T0);
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (v, max_lines);
}
