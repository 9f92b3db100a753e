//! The one error type of the core. Every message a caller can see from Rust is written here.

use thiserror::Error;

pub type Result<T> = std::result::Result<T, CoreError>;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum CoreError {
    /// A filter whose shape or values are not allowed (names the key when there is one).
    #[error("{0}")]
    InvalidFilter(String),
    /// A filter that is not a mapping at all.
    #[error("{0}")]
    FilterType(String),
    /// A vector whose length differs from the index's dimension.
    #[error("vector dimension {got} does not match the index dimension {expected}")]
    DimensionMismatch { expected: usize, got: usize },
    /// An index file that cannot be read back.
    #[error("index file is unreadable ({0}); delete it and it will be rebuilt from the database")]
    IndexCorrupt(String),
    /// A file the index could not be written to or read from.
    #[error("{0}")]
    Io(String),
    /// Any other bad argument.
    #[error("{0}")]
    InvalidArgument(String),
}
