//! Python objects made and filled in without their constructors: for results whose values
//! were checked once already (stored rows, search hits), where `__init__` would only redo it.

use pyo3::prelude::*;
use pyo3::types::{PyString, PyTuple, PyType};

use crate::error::CoreError;

/// Instances of one class as `object.__new__(class)` makes them, without its argument tuple
/// being built on every call.
pub(crate) struct Blank<'py> {
    class: Bound<'py, PyType>,
    construct: pyo3::ffi::newfunc,
    no_args: Bound<'py, PyTuple>,
}

impl<'py> Blank<'py> {
    pub(crate) fn of(class: &Bound<'py, PyType>) -> PyResult<Self> {
        // SAFETY: `class` is a live type; a slot read from it is null or its `tp_new` function.
        let slot = unsafe { pyo3::ffi::PyType_GetSlot(class.as_type_ptr(), pyo3::ffi::Py_tp_new) };
        if slot.is_null() {
            let name = class.name()?;
            return Err(
                CoreError::InvalidArgument(format!("{name} objects cannot be created")).into(),
            );
        }
        Ok(Blank {
            class: class.clone(),
            // SAFETY: a non-null `Py_tp_new` slot holds a `newfunc`.
            construct: unsafe {
                std::mem::transmute::<*mut std::ffi::c_void, pyo3::ffi::newfunc>(slot)
            },
            no_args: PyTuple::empty(class.py()),
        })
    }

    /// A new instance with no attributes set.
    pub(crate) fn make(&self) -> PyResult<Bound<'py, PyAny>> {
        // SAFETY: the type's own `tp_new` with an empty tuple returns a new reference, or null
        // with an exception set.
        unsafe {
            Bound::from_owned_ptr_or_err(
                self.class.py(),
                (self.construct)(
                    self.class.as_type_ptr(),
                    self.no_args.as_ptr(),
                    std::ptr::null_mut(),
                ),
            )
        }
    }
}

/// Stores `obj.key = value` the generic way (what `object.__setattr__` does, so a frozen
/// dataclass's own `__setattr__` guard is not run).
pub(crate) fn set_attr(
    obj: &Bound<'_, PyAny>,
    key: &Bound<'_, PyString>,
    value: &Bound<'_, PyAny>,
) -> PyResult<()> {
    // SAFETY: three live objects; the call returns -1 with an exception set on failure.
    let done =
        unsafe { pyo3::ffi::PyObject_GenericSetAttr(obj.as_ptr(), key.as_ptr(), value.as_ptr()) };
    if done < 0 {
        Err(PyErr::fetch(obj.py()))
    } else {
        Ok(())
    }
}
