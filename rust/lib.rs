//! threadrecall's compiled core: filters, thread timelines, vector search.
//!
//! The core knows nothing of Python; `py` (behind the `python` feature) is the only binding.

pub mod context;
pub mod distance;
pub mod error;
pub mod filter;
pub mod hnsw;
pub mod index;
pub mod json;
pub mod lexical;
pub mod persist;
pub mod planner;
pub mod records;

#[cfg(feature = "python")]
mod py;

pub use context::{Bound, Include, PageQuery, Row, RowRef, Timeline};
pub use error::{CoreError, Result};
pub use filter::{Filter, Input, Record, Value};
pub use lexical::{LexicalIndex, Scope, Tokenizer};
