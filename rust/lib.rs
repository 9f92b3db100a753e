//! threadrecall's compiled core: filters, thread timelines, vector search.
//!
//! The core knows nothing of Python; `py` (behind the `python` feature) is the only binding.

pub mod distance;
pub mod error;
pub mod filter;
pub mod json;
pub mod lexical;
pub mod timeline;
pub mod vector;

#[cfg(feature = "python")]
mod py;

pub use error::{CoreError, Result};
pub use filter::{Filter, Input, Record, Value};
pub use lexical::{LexicalIndex, Scope, Tokenizer};
pub use timeline::{Bound, Include, PageQuery, Row, RowRef, Timeline};
