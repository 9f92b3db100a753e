//! threadrecall's compiled core: filters, thread timelines, vector search.
//!
//! The core knows nothing of Python; `py` (behind the `python` feature) is the only binding.

pub mod error;

#[cfg(feature = "python")]
mod py;

pub use error::{CoreError, Result};
pub mod distance;
pub mod hnsw;
