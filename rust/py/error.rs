//! The one mapping of core errors onto `threadrecall.errors`.

use pyo3::prelude::*;

use crate::error::CoreError;

pyo3::import_exception!(threadrecall.errors, InvalidFilterError);
pyo3::import_exception!(threadrecall.errors, FilterTypeError);
pyo3::import_exception!(threadrecall.errors, DimensionMismatchError);
pyo3::import_exception!(threadrecall.errors, IndexCorruptError);
pyo3::import_exception!(threadrecall.errors, InvalidArgumentError);
pyo3::import_exception!(threadrecall.errors, StorageError);

impl From<CoreError> for PyErr {
    fn from(err: CoreError) -> PyErr {
        let text = err.to_string();
        match err {
            CoreError::InvalidFilter(_) => InvalidFilterError::new_err(text),
            CoreError::FilterType(_) => FilterTypeError::new_err(text),
            CoreError::DimensionMismatch { .. } => DimensionMismatchError::new_err(text),
            CoreError::IndexCorrupt(_) => IndexCorruptError::new_err(text),
            CoreError::InvalidArgument(_) => InvalidArgumentError::new_err(text),
            CoreError::Io(_) => StorageError::new_err(text),
        }
    }
}
